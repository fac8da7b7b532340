"""The bubblewrap command line of a sandbox. Pure: a :class:`~danlu.backend.RunSpec`
and the image's top-level entries in, argument lists out (tested without running anything).

What the sandbox sees (docs/security.md):

* the image read-only (each top-level entry bound on its own, so the image tree is never written
  and never needs mount points of ours); ``/workspace`` read-write (also ``HOME``); a job's
  ``/checkpoints`` read-write; ``/run/danlu`` read-only (the preemption deadline); a private
  ``/tmp`` and ``/dev/shm`` (tmpfs, size-capped); its own ``/proc`` and a minimal ``/dev``; the
  root and ``/dev`` themselves read-only, so nothing else takes a write;
* only its allocated GPU device nodes (plus the NVIDIA control nodes for real GPUs);
* new user, PID, IPC, UTS and cgroup namespaces; a network namespace of its own (``none``), the
  platform's filtered one (``outbound``, joined before bubblewrap starts) or the host's (``host``);
  no further user namespaces inside (``--disable-userns``), a new session (no TIOCSTI into a
  terminal), and it dies with its supervisor (``--die-with-parent``). bubblewrap mounts every bind
  ``nosuid`` and the sandbox runs with ``no_new_privs``: a setuid binary in the image gains nothing.

The options and the environment go through ``--args FD`` rather than the command line, so renter
secrets passed with ``--env`` never show in a process list, and the sandbox's own /proc/1/cmdline
says only ``bwrap --args N -- COMMAND``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from danlu.backend import RunSpec

WORKSPACE = "/workspace"
CHECKPOINTS = "/checkpoints"
CONTROL = "/run/danlu"
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Where an image's own tree must not shadow what the sandbox provides.
RESERVED = frozenset({"proc", "dev", "tmp", "sys", "run", "workspace", "checkpoints"})


@dataclass(frozen=True)
class Entry:
    """A top-level entry of an image root: a directory/file to bind, or a symlink to recreate."""

    name: str
    source: Path
    symlink_target: str | None = None


def image_entries(root: Path, only: Sequence[str] | None = None) -> list[Entry]:
    """The entries of ``root`` a sandbox binds (``only``: a subset, as for the host image)."""
    out = []
    names = only if only is not None else sorted(p.name for p in root.iterdir())
    for name in names:
        path = root / name
        if name in RESERVED or not (path.exists() or path.is_symlink()):
            continue
        if path.is_symlink():
            out.append(Entry(name, path, str(path.readlink())))
        else:
            out.append(Entry(name, path))
    return out


HOST_IMAGE_ENTRIES = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
# Of the host's /etc, only what programs need to run (libraries, certificates, locales, time
# zone, name service): never service configs (databases, the platform's, systemd units) that may
# hold secrets. passwd/group are generated per run (the renter's uid), resolv.conf for outbound.
HOST_ETC = (
    "alternatives", "bash.bashrc", "ca-certificates", "ca-certificates.conf", "debian_version", "fonts",
    "gai.conf", "host.conf", "hosts", "inputrc", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "locale.alias",
    "locale.gen", "localtime", "magic", "magic.mime", "mime.types", "networks", "nsswitch.conf", "os-release",
    "profile", "profile.d", "protocols", "python3", "python3.11", "resolv.conf", "services", "shells", "ssl",
    "terminfo", "timezone", "xdg", "passwd", "group",
)  # fmt: skip


def host_image_entries() -> list[Entry]:
    """This host's /usr, /bin, /lib* … and a curated /etc."""
    etc = Path("/etc")
    return image_entries(Path("/"), HOST_IMAGE_ENTRIES) + [
        replace(e, name=f"etc/{e.name}") for e in image_entries(etc, HOST_ETC)
    ]


def passwd_files(uid: int | None) -> dict[str, str]:
    """/etc/passwd and /etc/group a run sees: root, the renter (uid = gid), nobody."""
    me = uid if uid is not None else 1000
    return {
        "passwd": f"root:x:0:0:root:/root:/usr/sbin/nologin\nrenter:x:{me}:{me}:renter:{WORKSPACE}:/bin/sh\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
        "group": f"root:x:0:\nrenter:x:{me}:\nnogroup:x:65534:\n",
    }


def environment(spec: RunSpec, workspace: str = WORKSPACE) -> dict[str, str]:
    """The whole environment of the sandboxed command: an allow-list, never the server's."""
    env = {"PATH": SANDBOX_PATH, "HOME": workspace, "LANG": "C.UTF-8", "USER": "renter"}
    env.update(spec.env)
    return env


def env_args(env: dict[str, str]) -> list[str]:
    args = ["--clearenv"]
    for key, value in env.items():
        args += ["--setenv", key, value]
    return args


def bwrap_args(
    spec: RunSpec,
    entries: Sequence[Entry],
    *,
    overlays: Sequence[tuple[Path, str]] = (),
    binds: Sequence[tuple[str, str]] = (),
    info_fd: int,
    block_fd: int,
    tmp_bytes: int,
) -> list[str]:
    """bubblewrap's options for ``spec`` (everything but the command). The backend hands them,
    with the environment, through ``--args FD``, so neither they nor renter secrets show in any
    command line (not even to the sandbox, whose pid 1 is bubblewrap). Every bind source must be
    reachable by the renter's uid (bubblewrap mounts by path inside the renter's user namespace):
    the platform keeps them in a sandbox folder whose ancestors are traversable
    (danlu.compute.sandbox.probe.sandbox_dir_for)."""

    def bind(kind: str, source: Path, dest: str) -> list[str]:
        return [kind, str(source), dest]

    a = ["--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if spec.network == "none":
        a.append("--unshare-net")  # only a loopback; ``outbound`` joins the platform's namespace before bwrap
    a += ["--disable-userns", "--die-with-parent", "--new-session", "--hostname", "danlu"]
    for e in entries:
        if e.symlink_target is not None:
            a += ["--symlink", e.symlink_target, f"/{e.name}"]
        else:
            a += bind("--ro-bind", e.source, f"/{e.name}")
    for source, dest in overlays:  # platform-written files over the image's (passwd, group, resolv.conf)
        a += bind("--ro-bind", source, dest)
    a += ["--proc", "/proc", "--dev", "/dev"]
    for mount in ("/tmp", "/dev/shm"):
        a += ["--size", str(tmp_bytes), "--perms", "1777", "--tmpfs", mount]
    a += bind("--bind", spec.workspace, WORKSPACE)
    if spec.checkpoints is not None:
        a += bind("--bind", spec.checkpoints, CHECKPOINTS)
    a += bind("--ro-bind", spec.control_dir, CONTROL)
    for d in spec.devices:  # only what was allocated (plus NVIDIA's control nodes, danlu.compute.devices)
        a += (
            bind("--ro-bind", d.host_path, d.sandbox_path)
            if d.simulated
            else ["--dev-bind", str(d.host_path), d.sandbox_path]
        )
    for path, inside in binds:  # the host's GPU driver files (danlu.compute.sandbox.driver), read-only
        a += ["--ro-bind", path, inside]
    # bubblewrap builds the root (and /dev) on a tmpfs the renter's uid owns: make both read-only
    # once everything is mounted, so only /workspace, /tmp, /dev/shm (and /checkpoints) take writes.
    a += ["--remount-ro", "/dev", "--remount-ro", "/"]
    return [*a, "--chdir", WORKSPACE, "--info-fd", str(info_fd), "--block-fd", str(block_fd)]
