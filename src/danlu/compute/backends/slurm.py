"""The Slurm backend: each run is a Slurm batch job on the operator's cluster, with the same sandbox
inside it as on a single host (docs/slurm.md).

danlu decides who gets which GPU type when, and on which node (the pure scheduling core, prices,
quotas, notice); Slurm places the job on that node's GRES and runs it. A run is

``sbatch --hold --job-name danlu-RUN --nodelist NODE --gres gpu:TYPE:N … script`` (launch) →
``scontrol release`` and wait until Slurm says RUNNING (start: returns Slurm's StartTime, where
billing starts) → every tick one ``squeue`` for all jobs (poll) → ``scancel`` (stop: Slurm's
EndTime ends billing) or ``scancel --signal=TERM --batch`` (the preemption notice).

The batch script runs ``python -m danlu.compute.backends.slurm_node SPEC``: the local backend's
supervisor and bubblewrap sandbox on the node, writing the output log and usage readings into the
data folder (which a real cluster shares between the server and its nodes, as it shares homes).

The handle is JSON naming the job id, the run and its log key. Times come from Slurm as epoch
seconds (``SLURM_TIME_FORMAT=%s``), so the billed seconds are Slurm's elapsed seconds.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import socket
import subprocess
import sys
import termios
import threading
import time
import tty
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from danlu.backend import (
    EnterError,
    EnterRequest,
    LaunchError,
    RunSpec,
    RunState,
    RunUsage,
    read_log,
    run_dir,
    run_file,
    spec_to_json,
)
from danlu.compute.backends.netns import PortClosed
from danlu.compute.backends.slurm_parse import (
    EXITED_STATES,
    JOB_PREFIX,
    NODE_EXCEPTION,
    RUNNING_STATES,
    SINFO_NODES_FORMAT,
    SQUEUE_FORMAT,
    JobRecord,
    SlurmUnreachable,
    held_by_others,
    judge,
    parse_exit_codes,
    parse_sacct,
    parse_sinfo_gres,
    parse_squeue,
    ranks,
    sum_usage,
    unusable_gpus,
)
from danlu.compute.gpus import DiscoveredGpu
from danlu.compute.sandbox.helpers import helper
from danlu.core.errors import InvalidInput

log = logging.getLogger(__name__)


@dataclass
class SlurmConfig:
    conf: Path | None = None  # SLURM_CONF for every command (None: Slurm's default)
    partition: str = ""  # on-demand runs ("" = the cluster's default)
    spot_partition: str = ""  # interruptible runs ("" = the same as on-demand)
    gres_types: dict[str, str] = field(default_factory=dict)  # catalog model → GRES type
    start_timeout_s: float = 15.0  # a released job Slurm has not started by then is cancelled
    command_timeout_s: float = 20.0
    python: str = sys.executable  # the interpreter the batch script runs on the node


class SlurmCli:
    """Runs Slurm's commands with the cluster's config and epoch-second times."""

    def __init__(self, config: SlurmConfig) -> None:
        self.config = config
        self.env = {**os.environ, "SLURM_TIME_FORMAT": "%s"}
        if config.conf is not None:
            self.env["SLURM_CONF"] = str(config.conf)
        self.env.pop("SLURM_JOB_ID", None)  # never act as if inside some other job

    def run(self, *args: str, check: bool = True, timeout: float | None = None) -> str:
        try:
            done = subprocess.run(
                list(args),
                env=self.env,
                capture_output=True,
                text=True,
                timeout=timeout or self.config.command_timeout_s,
                check=False,
            )
        except FileNotFoundError as exc:
            raise SlurmUnreachable(f"{args[0]} is not installed on this server") from exc
        except subprocess.TimeoutExpired as exc:
            raise SlurmUnreachable(f"{args[0]} did not answer within {exc.timeout:.0f} s") from exc
        if check and done.returncode != 0:
            err = (done.stderr or done.stdout).strip().splitlines()
            message = err[-1] if err else f"exit code {done.returncode}"
            if "Unable to contact slurm controller" in done.stderr or "Socket timed out" in done.stderr:
                raise SlurmUnreachable(f"the Slurm controller does not answer ({message})")
            raise subprocess.CalledProcessError(done.returncode, args, done.stdout, message)
        return done.stdout

    def squeue(self) -> dict[str, JobRecord]:
        args = ["squeue", "-h", "-t", "all", "-o", SQUEUE_FORMAT]
        return parse_squeue(self.run(*args))

    def sacct(self, job_ids: Sequence[str]) -> dict[str, JobRecord] | None:
        """Jobs the controller has forgotten, from the accounting database; None where the site
        keeps none (``accounting_storage/none``)."""
        fields = "JobIDRaw,JobName,State,Start,End,ExitCode"
        try:
            out = self.run("sacct", "-X", "-n", "-P", "-o", fields, "-j", ",".join(job_ids))
        except (subprocess.CalledProcessError, SlurmUnreachable):
            return None
        return parse_sacct(out)

    def exit_codes(self, job_ids: Sequence[str]) -> dict[str, int | None]:
        try:
            return parse_exit_codes(self.run("scontrol", "show", "job", "-o", ",".join(job_ids)))
        except subprocess.CalledProcessError:
            return {}


def _line(sock: socket.socket, limit: int = 4096) -> bytes:
    """The rest of one status line from the node (up to ``limit`` bytes)."""
    out = b""
    while len(out) < limit and not out.endswith(b"\n"):
        chunk = sock.recv(1)
        if not chunk:
            break
        out += chunk
    return out


class SlurmBackend:
    name = "slurm"
    starts_before_record = True
    spans_hosts = True

    def __init__(self, data_dir: Path, config: SlurmConfig, *, sandboxed: bool = True) -> None:
        self.data_dir = data_dir
        self.config = config
        self.sandboxed = sandboxed
        self.cli = SlurmCli(config)
        self._lock = threading.Lock()
        self._launching: set[str] = set()
        self._down: str | None = None  # why the controller did not answer at the last poll
        self.strangers: set[str] = set()  # danlu-named jobs no run of ours knows (reported once each)
        self._held: dict[tuple[str, str], int] | None = None  # by other users' jobs, at the last poll
        self._node_errors_told: set[Path] = set()

    # -- files --------------------------------------------------------------------------------
    def _run_dir(self, log_key: str) -> Path:
        return run_dir(self.data_dir, log_key)

    def _file(self, h: dict[str, Any], suffix: str) -> Path:
        return run_file(self.data_dir, h, suffix)

    # -- launch -------------------------------------------------------------------------------
    def sbatch_args(self, spec: RunSpec, script: Path) -> list[str]:
        count = spec.gpu_count
        partition = self.config.spot_partition if spec.interruptible else self.config.partition
        args = ["sbatch", "--parsable", "--hold", f"--job-name={JOB_PREFIX}{spec.run_id}", "--no-requeue"]
        args.append("--export=NONE")  # the server's environment stays on the server
        # the command's own output goes to the run's log (the node runner writes it); the runner's own
        # errors (a sandbox that could not be built) to a file beside it, for the operator
        args += ["--output=/dev/null", f"--error={script.parent / spec.run_id}.node-err", f"--chdir={script.parent}"]
        if partition or self.config.partition:
            args.append(f"--partition={partition or self.config.partition}")
        if spec.nodes:  # a gang: one allocation over these nodes, the same GPUs on each, one runner per node
            count //= len(spec.nodes)
            args += [f"--nodes={len(spec.nodes)}", "--ntasks-per-node=1", f"--nodelist={','.join(spec.nodes)}"]
        elif spec.host:
            args.append(f"--nodelist={spec.host}")
        if count:
            gres_type = self.config.gres_types.get(spec.gpu_model, "")
            args.append(f"--gres=gpu:{gres_type}:{count}" if gres_type else f"--gres=gpu:{count}")
        if spec.limits is not None:
            args.append(f"--cpus-per-task={max(1, math.ceil(spec.limits.cpus_milli / 1000))}")
        return [*args, str(script)]

    def launch(self, spec: RunSpec) -> str:
        run_dir = self._run_dir(spec.log_key)
        spec_path = run_dir / f"{spec.run_id}.spec.json"
        script = run_dir / f"{spec.run_id}.sbatch"
        for suffix in ("exit", "started", "reason", "usage", "notice"):
            (run_dir / f"{spec.run_id}.{suffix}").unlink(missing_ok=True)
        node_spec = {
            "spec": json.loads(spec_to_json(spec)),
            "data_dir": str(self.data_dir),
            "sandboxed": self.sandboxed,
        }
        spec_path.write_text(json.dumps(node_spec))
        os.chmod(spec_path, 0o600)
        runner = f"{self.config.python} -m danlu.compute.backends.slurm_node {spec_path}"
        if spec.nodes:  # one runner on every node of the gang (srun forwards the notice's SIGTERM to each);
            # one that fails ends the others (--kill-on-bad-exit); the job's exit code is the highest
            runner = f"srun -QQ --ntasks-per-node=1 --kill-on-bad-exit=1 {runner}"
        script.write_text(f"#!/bin/sh\nexec {runner}\n")
        os.chmod(script, 0o700)
        with self._lock:
            self._launching.add(spec.run_id)
        try:
            job_id = self.cli.run(*self.sbatch_args(spec, script)).strip().split(";")[0]
        except SlurmUnreachable as exc:
            self._done_launching(spec.run_id)
            raise LaunchError(f"the Slurm cluster cannot take the run: {exc}") from exc
        except subprocess.CalledProcessError as exc:
            self._done_launching(spec.run_id)
            raise LaunchError(f"Slurm refused the job: {exc.stderr}") from exc
        h: dict[str, Any] = {"job": job_id, "run": spec.run_id, "log": spec.log_key}
        if spec.nodes:
            h["nodes"] = list(spec.nodes)  # sessions go to the first (rank 0); every node beats and reports
        return json.dumps(h, sort_keys=True)

    def _done_launching(self, run_id: str) -> None:
        with self._lock:
            self._launching.discard(run_id)

    def start(self, handle: str) -> int:
        """Release the held job and wait until Slurm runs it; returns Slurm's StartTime (ms)."""
        h = json.loads(handle)
        try:
            self.cli.run("scontrol", "release", h["job"])
            deadline = time.monotonic() + self.config.start_timeout_s
            job: JobRecord | None = None
            while True:
                job = self.cli.squeue().get(h["job"])
                if job is not None and job.start_s is not None and job.state != "PENDING":
                    return job.start_s * 1000
                if job is None or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            why = f"({job.reason})" if job is not None else "(the job vanished)"
            self.cli.run("scancel", h["job"], check=False)
            raise LaunchError(
                f"Slurm did not start job {h['job']} within {self.config.start_timeout_s:.0f} s {why}: the "
                "cluster's own jobs may hold these GPUs; try again later or another GPU model"
            )
        except SlurmUnreachable as exc:
            if "not installed" not in str(exc):
                self._quietly("scancel", h["job"])
            raise LaunchError(f"the Slurm cluster cannot start the run: {exc}") from exc
        except subprocess.CalledProcessError as exc:
            raise LaunchError(f"Slurm could not release job {h['job']}: {exc.stderr}") from exc
        finally:
            self._done_launching(h["run"])

    # -- sessions: srun --overlap into the job, the node runner's own module there ---------------
    def _srun(self, h: dict[str, Any], opts: Sequence[str], what: str, *args: str) -> list[str]:
        """``srun`` of one more step in the run's job beside the batch step (``--overlap``: no
        resources of its own), running the node runner's module on the job's node. ``-QQ``: srun
        says nothing of its own, so a session's stderr is the command's alone (an exit code is not
        an error line)."""
        spec = self._file(h, "spec.json")
        node = [self.config.python, "-m", "danlu.compute.backends.slurm_node"]
        first = [f"--nodelist={self._rank0(h)}"] if h.get("nodes") else []  # a gang's sessions: on its rank 0
        srun = ["srun", "--overlap", f"--jobid={h['job']}", "-N1", "-n1", *first, "-QQ"]
        return [*srun, *opts, *node, what, str(spec), *args]

    def _rank0(self, h: dict[str, Any]) -> str:
        """The node of a gang's rank 0 (the one that runs the batch script and keeps ``RUN.local``), as its
        runner wrote it: Slurm orders a job's nodes its own way."""
        try:
            return self._file(h, "node").read_text().strip() or str(h["nodes"][0])
        except FileNotFoundError:
            return str(h["nodes"][0])

    def _entered(self, h: dict[str, Any]) -> None:
        if not self._file(h, "local").exists():  # the runner writes it once the run is in its sandbox
            raise EnterError("the run is not running on its node (yet, or any more)")

    def enter(self, handle: str, request: EnterRequest) -> subprocess.Popen[bytes]:
        """``request`` in the run's sandbox on its node: srun runs the node runner's ``enter``, which
        joins the sandbox as the local backend does. The request (the renter's environment) travels
        in srun's environment, exported to that step only; a terminal is srun's ``--pty``, made the
        controlling terminal of srun here so a resize reaches it (SIGWINCH) and goes on to the node."""
        h = json.loads(handle)
        self._entered(h)
        env = {**self.cli.env, "DANLU_ENTER": json.dumps({"argv": request.command, "env": request.env,
                                                          "tty": request.tty})}  # fmt: skip
        args = self._srun(h, ["--export=DANLU_ENTER", "--pty" if request.tty else "-u"], "enter")
        if request.tty:  # raw from the start: srun makes it raw once started, and keys typed before
            tty.setraw(request.stdio[0], termios.TCSANOW)  # must not be echoed here a second time
            args = [helper("setsid") or "setsid", "--ctty", *args]
        try:
            return subprocess.Popen(
                args,
                stdin=request.stdio[0],
                stdout=request.stdio[1],
                stderr=request.stdio[2],
                env=env,
                cwd="/",
                start_new_session=not request.tty,
            )
        except OSError as exc:
            raise EnterError(f"could not start srun: {exc.strerror}") from exc

    def connect(self, handle: str, port: int) -> socket.socket:
        """A connection to ``port`` on the run's loopback, made inside its namespace on the node and
        carried by one srun step's stdin and stdout (a socket pair here); the step ends with it."""
        h = json.loads(handle)
        self._entered(h)
        ours, theirs = socket.socketpair()
        try:
            proc = subprocess.Popen(
                self._srun(h, ["-u"], "connect", str(port)),
                stdin=theirs.fileno(), stdout=theirs.fileno(), stderr=subprocess.PIPE, env=self.cli.env, cwd="/",
                start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            ours.close()
            raise EnterError(f"could not start srun: {exc.strerror}") from exc
        finally:
            theirs.close()
        threading.Thread(target=proc.communicate, daemon=True).start()  # reaps it when the step ends
        ours.settimeout(self.config.command_timeout_s)
        try:
            first = ours.recv(1)
            status = b"" if first in (b"", b"+") else first + _line(ours)
        except OSError as exc:
            ours.close()
            proc.kill()
            raise EnterError(f"the run's node did not answer: {exc}") from exc
        if first != b"+":
            ours.close()
            code, _, message = status.decode(errors="replace").strip().lstrip("-").partition(" ")
            if code == "port_closed":
                raise PortClosed(message)
            raise EnterError(message or "the run's node could not be reached (srun failed)")
        ours.settimeout(None)
        return ours

    async def dial(self, handle: str, port: int) -> socket.socket:
        return await asyncio.to_thread(self.connect, handle, port)

    def listening(self, handle: str) -> list[int]:
        h = json.loads(handle)
        try:
            self._entered(h)
            out = self.cli.run(*self._srun(h, [], "listening"))
        except (EnterError, SlurmUnreachable, subprocess.CalledProcessError):
            return []
        try:
            return [int(p) for p in json.loads(out)]
        except (ValueError, TypeError):
            return []

    def ref(self, handle: str) -> str:
        return f"slurm:{json.loads(handle)['job']}"

    def held_elsewhere(self) -> dict[tuple[str, str], int] | None:
        return self._held

    def launching(self, run_id: str) -> bool:
        with self._lock:
            return run_id in self._launching

    def unavailable(self) -> str | None:
        """``scontrol ping`` (milliseconds either way; squeue would wait seconds for a dead controller)."""
        try:
            self.ping()
        except SlurmUnreachable as exc:
            return str(exc)
        return None

    def ping(self) -> None:
        try:
            self.cli.run("scontrol", "ping")
        except subprocess.CalledProcessError as exc:
            said = " ".join((exc.output or "").split()[:6]) or "no answer"
            raise SlurmUnreachable(f"the Slurm controller does not answer (scontrol ping: {said})") from exc

    # -- state --------------------------------------------------------------------------------
    def poll(self, handles: Sequence[str]) -> dict[str, RunState]:
        parsed = {handle: json.loads(handle) for handle in handles}
        try:
            self.ping()
            jobs = self.cli.squeue()
        except (SlurmUnreachable, subprocess.CalledProcessError) as exc:
            if self._down is None:
                log.warning("Slurm does not answer (%s): runs keep their state until it does", exc)
            self._down = str(exc)
            self._held = None  # not known: the GPUs keep what the last answer said
            return {handle: RunState("unknown", reason=str(exc)) for handle in handles}
        if self._down is not None:
            log.warning("Slurm answers again; reconciling every run")
        self._down = None
        self._report_strangers(jobs, {str(h["run"]) for h in parsed.values()})
        self._held = self._unavailable_gpus(jobs)
        missing = [str(h["job"]) for h in parsed.values() if str(h["job"]) not in jobs]
        if missing:  # forgotten by the controller: the accounting database, where the site keeps one
            jobs.update(self.cli.sacct(missing) or {})
        ended = [
            job_id
            for job_id, job in jobs.items()
            if job.state in EXITED_STATES
            and job.exit_code is None
            and job.job_id in {str(h["job"]) for h in parsed.values()}
        ]
        codes = self.cli.exit_codes(ended) if ended else {}
        out: dict[str, RunState] = {}
        for handle, h in parsed.items():
            job = jobs.get(str(h["job"]))
            if job is not None and job.job_id in codes:
                job = JobRecord(**{**asdict(job), "exit_code": codes[job.job_id]})
            state = judge(job, seen_started=not self.launching(str(h["run"])))
            if state.kind == "exited" and state.code not in (0, None) and not state.reason:
                state = self._node_failure(h, state)
            out[handle] = state
        return out

    def _unavailable_gpus(self, jobs: dict[str, JobRecord]) -> dict[tuple[str, str], int]:
        """(node, model) → GPUs no new run may take: those the cluster's own jobs hold, and every
        GPU of a node that cannot start a run (drained, down, not responding …; issue 28, finding 8:
        they were offered, and a rental there failed 15 s later with a misleading reason)."""
        models = {t: m for m, t in self.config.gres_types.items()}
        held = held_by_others(jobs.values(), models)
        try:
            out = self.cli.run("sinfo", "-h", "-N", "-o", SINFO_NODES_FORMAT)
        except (SlurmUnreachable, subprocess.CalledProcessError) as exc:
            log.warning("sinfo failed (%s): nodes' states unknown this tick", exc)
            return held
        whole: dict[tuple[str, str], int] = {}
        for (node, gres_type), count in unusable_gpus(out).items():
            model = models.get(gres_type) or (next(iter(models.values())) if len(models) == 1 else None)
            if model is not None:
                whole[(node, model)] = whole.get((node, model), 0) + count
        return held | whole  # a node no run can start on is unavailable whole, its jobs' GPUs included

    def _node_failure(self, h: dict[str, Any], state: RunState) -> RunState:
        """A run whose node runner failed before the command ran (its own error file ends with a
        Python exception) says so instead of "exited with code 1"; the detail is the operator's."""
        path = self._file(h, "node-err")
        try:
            lines = [ln for ln in path.read_text(errors="replace")[-4096:].splitlines() if ln.strip()]
        except OSError:
            return state
        if not lines or not NODE_EXCEPTION.match(lines[-1]):
            return state
        if path not in self._node_errors_told:
            self._node_errors_told.add(path)
            log.warning("run %s: the Slurm node could not start it: %s (%s)", h["run"], lines[-1], path)
        return RunState(state.kind, state.code, state.ended_ms, "the node could not start the run's sandbox")

    def _report_strangers(self, jobs: dict[str, JobRecord], ours: set[str]) -> None:
        """A danlu-named job no run knows of is reported (never billed: no instance is made for it)."""
        for job in jobs.values():
            if not job.name.startswith(JOB_PREFIX) or job.state not in RUNNING_STATES | {"PENDING"}:
                continue
            run_id = job.name[len(JOB_PREFIX) :]
            if run_id in ours or self.launching(run_id) or job.job_id in self.strangers:
                continue
            self.strangers.add(job.job_id)
            log.warning(
                "Slurm job %s (%s, %s) is named like a danlu run but no run of this server knows it: "
                "not billed to anyone; cancel it with scancel if it is not yours",
                job.job_id,
                job.name,
                job.state,
            )

    # -- signals ------------------------------------------------------------------------------
    def terminate(self, handle: str) -> None:
        """The notice: SIGTERM to the batch script, which passes it into the sandbox. A gang's is a file
        beside the run's (``RUN.notice``) that every node's runner looks for: its batch script is srun, which
        takes a SIGTERM as "cancel the step", and a signal to the step reaches every process of it, the
        sandbox's own init among them (the sandboxes died before the command could checkpoint)."""
        h = json.loads(handle)
        if h.get("nodes"):
            self._file(h, "notice").touch()
            return
        self._quietly("scancel", "--signal=TERM", "--batch", h["job"])

    def kill(self, handle: str) -> None:
        self._quietly("scancel", json.loads(handle)["job"])

    def cancel(self, handle: str) -> int | None:
        """``scancel`` (Slurm sends SIGTERM, waits its KillWait, then SIGKILL) and Slurm's EndTime."""
        job_id = str(json.loads(handle)["job"])
        self._quietly("scancel", job_id)
        try:
            job = self.cli.squeue().get(job_id)
        except (SlurmUnreachable, subprocess.CalledProcessError):
            return None
        return job.end_s * 1000 if job is not None and job.end_s is not None else None

    def _quietly(self, *args: str) -> None:
        try:
            self.cli.run(*args, check=False)
        except SlurmUnreachable as exc:
            log.warning("%s: %s (retried at the next tick)", " ".join(args), exc)

    def release(self, handle: str) -> None:
        for h in ranks(json.loads(handle)):
            for suffix in ("spec.json", "sbatch", "usage", "alive", "exit", "started", "reason", "node-err", "notice",
                           "node", "gangenv"):  # fmt: skip
                self._file(h, suffix).unlink(missing_ok=True)

    def discard(self, run_id: str) -> None:
        self._quietly("scancel", f"--name={JOB_PREFIX}{run_id}")

    # -- usage and output ---------------------------------------------------------------------
    def alive_until(self, handles: Sequence[str]) -> dict[str, int]:
        """The node runner's last heartbeat of each run (written every few seconds beside its log; the node's
        clock, which must agree with the server's as Slurm's own StartTime and EndTime must)."""
        out: dict[str, int] = {}
        for handle in handles:
            beats = []
            for h in ranks(json.loads(handle)):
                try:
                    beats.append(int(self._file(h, "alive").read_text()))
                except (FileNotFoundError, ValueError):
                    continue  # no heartbeat yet: known alive by Slurm's record alone
            if beats:  # a gang is alive as far as its last node to beat: one dead node ends it
                out[handle] = min(beats)
        return out

    def usage(self, handles: Sequence[str]) -> dict[str, RunUsage]:
        """What the node's runner last wrote (every few seconds) beside the run's log."""
        out: dict[str, RunUsage] = {}
        for handle in handles:
            readings = []
            for h in ranks(json.loads(handle)):
                try:
                    readings.append(RunUsage(**json.loads(self._file(h, "usage").read_text())))
                except (FileNotFoundError, ValueError):
                    continue
            if readings:  # a gang's: its nodes' together
                out[handle] = readings[0] if len(readings) == 1 else sum_usage(readings)
        return out

    def read_output(self, log_key: str, offset: int, limit: int = 1 << 20) -> tuple[str, int]:
        return read_log(self.data_dir, log_key, offset, limit)


def discover(cli: SlurmCli, models: dict[str, str], *, simulated: bool) -> tuple[list[DiscoveredGpu], dict[str, str]]:
    """The cluster's GPUs, one row per GRES unit of every node (``sinfo``), each named by its node
    and its catalog model (``--slurm-gpu-model``, else the GRES type itself if the catalog knows it);
    and catalog model → GRES type, for ``--gres`` at launch."""
    from danlu.catalog.gpu_models import resolve_model

    try:
        found = parse_sinfo_gres(cli.run("sinfo", "-h", "-N", "-o", "%N|%G"))
    except (SlurmUnreachable, subprocess.CalledProcessError) as exc:
        raise InvalidInput("slurm_unreachable", f"cannot read the cluster's nodes with sinfo: {exc}") from exc
    gpus: list[DiscoveredGpu] = []
    gres_types: dict[str, str] = {}
    for item in found:
        try:
            model = resolve_model(models.get(item.gres_type) or item.gres_type)
        except InvalidInput as exc:
            raise InvalidInput(
                "unknown_gpu_model",
                f"node {item.node} has GRES gpu:{item.gres_type}, not a GPU model danlu knows ({exc.message}); "
                f"name it with --slurm-gpu-model {item.gres_type or 'TYPE'}=MODEL",
            ) from exc
        gres_types[model.name] = item.gres_type
        for i in range(item.count):
            gpus.append(
                DiscoveredGpu(
                    index=sum(1 for g in gpus if g.host == item.node),
                    uuid=f"SLURM-{item.node}-{item.gres_type}-{i}",
                    model=model.name,
                    nvml_name=f"{'simulated ' if simulated else ''}slurm gpu:{item.gres_type}",
                    vram_mb=model.vram_gb * 1024,
                    simulated=simulated,
                    minor=i,
                    host=item.node,
                )
            )
    if not gpus:
        raise InvalidInput("no_slurm_gpus", "sinfo lists no node with GPU GRES (gpu:TYPE:N); nothing to rent out")
    return gpus, gres_types
