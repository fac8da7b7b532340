"""The Slurm backend's pure parts: what squeue, sacct, scontrol and sinfo print, and how a job's
record becomes a run's state. The real cluster is exercised by tests/slurm."""

from __future__ import annotations

from pathlib import Path

import pytest

from danlu.backend import Device, ImageRoot, Limits, RunSpec, spec_from_json, spec_to_json
from danlu.compute.backends.slurm_node import slurm_devices
from danlu.compute.backends.slurm_parse import (
    JobRecord,
    judge,
    node_usable,
    parse_exit_codes,
    parse_gpu_models,
    parse_sacct,
    parse_sinfo_gres,
    parse_squeue,
    unusable_gpus,
)
from danlu.core.errors import InvalidInput


def test_squeue_lines_give_epoch_times_and_unset_times_are_none() -> None:
    out = "41|danlu-i-1|RUNNING|1764870000|1764873600|None|dev0|spot\n42|danlu-i-2|PENDING|N/A|N/A|Resources||gpu\n"
    jobs = parse_squeue(out)
    want = JobRecord("41", "danlu-i-1", "RUNNING", 1764870000, 1764873600, "None", "dev0", partition="spot")
    assert jobs["41"] == want
    assert jobs["42"].start_s is None and jobs["42"].reason == "Resources"


def test_sacct_and_scontrol_exit_codes_read_signals_like_a_shell() -> None:
    jobs = parse_sacct("7|danlu-i-7|COMPLETED|100|160|3:0\n8|danlu-i-8|CANCELLED by 0|100|130|0:15\n")
    assert (jobs["7"].exit_code, jobs["7"].end_s) == (3, 160)
    assert jobs["8"].state == "CANCELLED" and jobs["8"].exit_code == 128 + 15
    assert parse_exit_codes("JobId=9 JobName=danlu-x ExitCode=2:0 JobState=FAILED\n") == {"9": 2}


def test_sinfo_gres_counts_each_node_once_across_partitions_and_names_types() -> None:
    out = "dev0|gpu:a100:4\ndev0|gpu:a100:4\ndev1|gpu:h100:8(S:0-1),gpu:t4:2\ncpu0|(null)\n"
    found = [(g.node, g.gres_type, g.count) for g in parse_sinfo_gres(out)]
    assert found == [("dev0", "a100", 4), ("dev1", "h100", 8), ("dev1", "t4", 2)]


@pytest.mark.parametrize(
    ("state", "usable"),
    [
        ("idle", True),
        ("mixed", True),
        ("allocated", True),
        ("completing", True),
        ("mixed+completing", True),
        ("IDLE", True),
        ("drained", False),
        ("draining", False),
        ("idle+drain", False),
        ("mixed+drain", False),
        ("down", False),
        ("down*", False),
        ("idle*", False),  # not responding
        ("idle~", False),  # powered off
        ("idle#", False),  # powering up
        ("idle@", False),  # reboot pending
        ("maint", False),
        ("idle+maint", False),
        ("reserved", False),
        ("fail", False),
        ("failing", False),
        ("unknown", False),
        ("future", False),
        ("inval", False),
        ("", False),
    ],
)
def test_a_node_is_offered_only_in_a_state_a_new_run_can_start_in(state: str, usable: bool) -> None:
    assert node_usable(state) is usable


def test_every_gpu_of_a_node_no_run_can_start_on_is_unavailable() -> None:
    out = "dev0|drained|gpu:a100:4\ndev0|drained|gpu:a100:4\ndev1|mixed|gpu:a100:4\n"
    out += "dev2|down*|gpu:h100:8(S:0-1),gpu:t4:2\n"
    assert unusable_gpus(out) == {("dev0", "a100"): 4, ("dev2", "h100"): 8, ("dev2", "t4"): 2}
    assert unusable_gpus("dev1|idle|gpu:a100:4\ncpu0|down|(null)\n") == {}


@pytest.mark.parametrize(
    ("state", "kind", "code"),
    [
        ("RUNNING", "running", None),
        ("COMPLETING", "running", None),
        ("COMPLETED", "exited", 0),
        ("FAILED", "exited", 0),
        ("CANCELLED", "exited", 0),
        ("TIMEOUT", "exited", 0),
        ("NODE_FAIL", "lost", None),
        ("PREEMPTED", "lost", None),
    ],
)
def test_job_states_map_to_run_states_with_slurms_end_time(state: str, kind: str, code: int | None) -> None:
    got = judge(JobRecord("5", "danlu-i", state, 100, 160, "", "dev0", exit_code=0), seen_started=True)
    assert got.kind == kind
    if kind == "exited":
        assert got.ended_ms == 160_000 and got.code == code
    if kind == "lost":  # a dead node's run is billed until last seen, never past Slurm's own end
        assert got.ended_ms == 160_000


def test_a_held_job_never_released_is_never_started_and_a_requeued_one_is_lost() -> None:
    held = JobRecord("5", "danlu-i", "PENDING", None, None, "JobHeldUser")
    assert judge(held, seen_started=False).kind == "never_started"
    assert judge(held, seen_started=True).kind == "lost"
    assert "no longer knows" in judge(None, seen_started=True).reason


def test_gpu_model_flags_resolve_to_catalog_names_and_reject_bad_pairs() -> None:
    assert parse_gpu_models(["a100=a100-80gb"]) == {"a100": "A100-80GB"}
    with pytest.raises(InvalidInput) as err:
        parse_gpu_models(["a100"])
    assert err.value.code == "invalid_slurm_gpu_model"


def _spec(devices: tuple[Device, ...]) -> RunSpec:
    return RunSpec(
        run_id="i-1",
        log_key="i-1",
        command=["echo", "hi"],
        env={"A": "1"},
        workspace=Path("/w"),
        control_dir=Path("/c"),
        checkpoints=None,
        devices=devices,
        limits=Limits(1000, 1 << 30, 64, 1 << 30),
        image=ImageRoot("host", "host"),
        host="dev0",
        gpu_model="A100-80GB",
        gpu_count=len(devices),
    )


def test_a_spec_survives_its_trip_to_the_node_as_json() -> None:
    spec = _spec((Device(Path("/d/gpu0"), "/dev/nvidia0", True),))
    assert spec_from_json(spec_to_json(spec)) == spec


def test_real_gpus_are_the_ones_slurm_gave_and_simulated_ones_stay() -> None:
    real = _spec((Device(Path("/dev/nvidia0"), "/dev/nvidia0", False),))
    got = slurm_devices(real, "2,3")
    assert [d.sandbox_path for d in got][:2] == ["/dev/nvidia2", "/dev/nvidia3"]
    simulated = _spec((Device(Path("/d/gpu0"), "/dev/nvidia0", True),))
    assert slurm_devices(simulated, "3") == simulated.devices


def test_gpus_other_users_jobs_hold_are_counted_per_node_and_model() -> None:
    from danlu.compute.backends.slurm_parse import gres_gpus, held_by_others

    assert gres_gpus("gres:gpu:a100:2") == [("a100", 2)]
    assert gres_gpus("gres/gpu:4,gres:tmpdisk:100") == [("", 4)]
    assert gres_gpus("N/A") == []
    jobs = [
        JobRecord("1", "someone", "RUNNING", 1, None, "", "dev0", gres="gres:gpu:a100:2"),
        JobRecord("2", "danlu-i-1", "RUNNING", 1, None, "", "dev0", gres="gres:gpu:a100:1"),  # ours
        JobRecord("3", "other", "PENDING", None, None, "Resources", "", gres="gres:gpu:a100:4"),  # holds nothing yet
        JobRecord("4", "other", "RUNNING", 1, None, "", "dev1", gres="gres:gpu:1"),  # no type: the only one
        JobRecord("5", "cpu", "RUNNING", 1, None, "", "dev0", gres="N/A"),
    ]
    assert held_by_others(jobs, {"a100": "A100-80GB"}) == {("dev0", "A100-80GB"): 2, ("dev1", "A100-80GB"): 1}


def test_a_slurm_node_runner_never_sweeps_another_runs_cgroup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runners of concurrent Slurm jobs on one node share the cgroup tree, each knowing only its own
    run. The local backend's sweep (empty groups no run here knows) removed a group another runner had
    just created, before it attached: that rental exited with code 1 at once (the twenty-concurrent
    Slurm test failed about one run in eight). The runner's backend does not sweep."""
    import json as _json
    from types import SimpleNamespace

    from danlu.compute.backends import slurm_node
    from danlu.compute.backends.local import LocalBackend
    from danlu.compute.sandbox import probe

    removed: list[str] = []
    cgroups = SimpleNamespace(
        names=lambda: ["someone-elses-run"], procs=lambda name: [], remove=lambda name: removed.append(name) or True
    )
    sandbox = SimpleNamespace(cgroups=cgroups, disk_check_s=15.0)
    server_side = LocalBackend(tmp_path, sandbox)  # type: ignore[arg-type]
    server_side.poll([])
    assert removed == ["someone-elses-run"]  # where one process owns every run, leftovers are swept

    made: list[LocalBackend] = []

    def fake_make(data_dir: Path, **kw: object) -> tuple[LocalBackend, None]:
        backend = LocalBackend(data_dir, sandbox)  # type: ignore[arg-type]
        made.append(backend)
        backend.launch = lambda spec: (_ for _ in ()).throw(RuntimeError("stop here"))  # type: ignore[method-assign]
        return backend, None

    monkeypatch.setattr(probe, "make_local_backend", fake_make)
    spec = tmp_path / "run.spec.json"
    node = {"spec": _json.loads(spec_to_json(_spec(()))), "data_dir": str(tmp_path), "sandboxed": True}
    spec.write_text(_json.dumps(node))
    with pytest.raises(RuntimeError, match="stop here"):
        slurm_node.main(["slurm_node", str(spec)])
    assert made and made[0].sweeps is False
    removed.clear()
    made[0].poll([])
    assert removed == []


def test_a_run_whose_node_runner_failed_says_so(tmp_path: Path) -> None:
    """The runner's own errors go to RUN.node-err (not /dev/null); a run that failed there reads "the
    node could not start the run's sandbox", not "command exited with code 1"."""
    from danlu.backend import RunState
    from danlu.compute.backends.slurm import SlurmBackend, SlurmConfig

    backend = SlurmBackend(tmp_path, SlurmConfig(partition="gpu"))
    args = backend.sbatch_args(_spec(()), tmp_path / "runs" / "i-1" / "i-1.sbatch")
    assert f"--error={tmp_path / 'runs' / 'i-1' / 'i-1.node-err'}" in args
    h = {"run": "i-1", "log": "i-1", "job": 7}
    path = tmp_path / "runs" / "i-1" / "i-1.node-err"
    path.parent.mkdir(parents=True)
    exited = RunState("exited", 1, 1_000, "")
    assert backend._node_failure(h, exited) == exited  # no file: as Slurm says
    path.write_text("Traceback (most recent call last):\n  ...\nFileNotFoundError: [Errno 2] /sys/fs/cgroup/x\n")
    told = backend._node_failure(h, exited)
    assert told.reason == "the node could not start the run's sandbox" and "/sys" not in told.reason
    path.write_text("slurmstepd-dev0: error: *** JOB 7 ON dev0 CANCELLED AT 2026-12-05T10:36:40 ***\n")
    assert backend._node_failure(h, exited) == exited
