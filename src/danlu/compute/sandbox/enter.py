"""Joins a running sandbox and runs one command in it: the process behind every exec, shell and
(later) SSH session of a rental. A standalone script: the server runs it as
``python3 -I -S enter.py FD`` (the spec, JSON, in a memfd) (no danlu import, nothing from the server's environment),
so it starts in a few tens of milliseconds.

Why entering from the host, not an agent inside the sandbox (docs/security.md "Sessions"): no
process of the platform lives where the renter can reach it, nothing listens anywhere, and a
rental needs nothing extra to be entered (any command, any image).

The order is the whole security argument:

1. As root, on the host: open the sandbox's namespaces through ``/proc/INIT/ns/*`` and check that
   INIT is still the process the platform started (its start time, so a recycled pid is refused).
2. Wait on the block pipe (``block_fd``) until the server has put this process into the run's cgroup:
   everything the session starts counts against the rental's CPU, memory and process limits.
3. Still root: the rental's rlimits; then join its network, UTS, IPC, cgroup, PID (for children)
   and mount namespaces. These are owned by the sandbox's outer user namespace, which root may enter
   and the renter's uid alone may not. Nothing is executed from the sandbox's files yet.
4. Become the renter on the host (groups cleared, gid, uid): every capability in the host's user
   namespace is gone. Join a session keyring of its own; set no_new_privs.
5. Join the sandbox's user namespace (the renter's uid owns its ancestor, so it may). That gives
   capabilities *in the sandbox's namespace* only; the bounding and ambient sets are emptied, so
   the command execs with none, exactly like the rental's own processes.
   Nothing is imported after step 3: an import would read the sandbox's files.
6. fork (the child is inside the PID namespace), new session (and the terminal as controlling
   terminal for a shell), chdir, exec. The parent waits and exits with the child's status,
   passing SIGHUP, SIGINT and SIGTERM on to the child's process group.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import resource
import signal
import socket
import sys
import termios

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
TIOCSPTLCK = 0x40045431
TIOCGPTPEER = 0x5441
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SYS_KEYCTL = {"x86_64": 250, "aarch64": 219}
KEYCTL_JOIN_SESSION_KEYRING = 1
# Joined as root, in this order; the user namespace comes after the uid is dropped.
ROOT_NAMESPACES = (("net", CLONE_NEWNET), ("uts", CLONE_NEWUTS), ("ipc", CLONE_NEWIPC),
                   ("cgroup", CLONE_NEWCGROUP), ("pid", CLONE_NEWPID), ("mnt", CLONE_NEWNS))  # fmt: skip

libc = ctypes.CDLL(None, use_errno=True)


def fail(message: str, code: int = 125) -> None:
    os.write(2, f"danlu: cannot enter the sandbox: {message}\n".encode())
    os._exit(code)


def check(result: int, what: str) -> None:
    if result != 0:
        fail(f"{what}: {os.strerror(ctypes.get_errno())}")


def start_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    return int(stat[stat.rindex(b")") + 2 :].split()[19])  # field 22, after the command's name


def main() -> None:
    with os.fdopen(int(sys.argv[1]), "rb") as f:  # a memfd: the renter's environment is no command line
        spec = json.loads(f.read())
    init, uid = int(spec["init"]), int(spec["uid"])
    try:
        fds = {name: os.open(f"/proc/{init}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC) for name in ("user", "net",
               "uts", "ipc", "cgroup", "pid", "mnt")}  # fmt: skip
        if start_ticks(init) != int(spec["init_ticks"]):
            fail("the rental's sandbox has ended", 126)
    except (OSError, ValueError):
        fail("the rental's sandbox has ended", 126)
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last_cap = int(f.read())
    block = int(spec["block_fd"])
    if os.read(block, 3) != b"go\n":  # the server put us into the run's cgroup (or gave up)
        os._exit(125)
    os.close(block)
    for name, (soft, hard) in spec.get("rlimits", {}).items():
        resource.setrlimit(getattr(resource, name), (soft, hard))
    for name, flag in ROOT_NAMESPACES:
        check(libc.setns(fds.pop(name), flag), f"joining its {name} namespace")
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)  # from root to a plain uid: every host capability is dropped here
    if spec.get("parent"):  # a Slurm node's session: it ends with the process Slurm runs for it
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # (after setresuid, which clears it)
        if os.getppid() != int(spec["parent"]):
            os._exit(125)
    if spec.get("keyring") and os.uname().machine in SYS_KEYCTL:
        libc.syscall(SYS_KEYCTL[os.uname().machine], KEYCTL_JOIN_SESSION_KEYRING, None)
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    check(libc.setns(fds.pop("user"), CLONE_NEWUSER), "joining its user namespace")
    for cap in range(last_cap + 1):  # nothing a file capability could bring back on exec
        check(libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), "dropping capabilities")
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    inner = _inner_terminal(int(spec["terminal_back"])) if spec.get("tty") and spec.get("terminal_back") else None
    child = os.fork()
    if child == 0:
        if inner is not None:  # the sandbox's own pty as the command's terminal
            for fd in (0, 1, 2):
                os.dup2(inner, fd)
            os.close(inner)
        run_child(spec)
    if inner is not None:
        os.close(inner)
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda s, _f: _pass_on(child, s))
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except ChildProcessError:
            os._exit(125)
        except InterruptedError:
            continue
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


def _inner_terminal(back: int) -> int:
    """A pty of the sandbox's own devpts (bubblewrap's ``--dev``), opened as the renter: the command's
    terminal is one the sandbox can name (``tty`` says /dev/pts/N; tmux and screen work), where the
    host's pty has no name inside. Its master goes back to the caller over ``back`` (and is closed
    here), which then holds the command's terminal itself: no relay, nothing between the keystroke
    and the sandbox's line discipline. Returns the slave."""
    master = os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    fcntl.ioctl(master, TIOCSPTLCK, b"\0\0\0\0")  # unlock
    slave = fcntl.ioctl(master, TIOCGPTPEER, os.O_RDWR | os.O_NOCTTY)  # the peer without a path lookup
    try:  # the size the caller gave its own terminal (fd 0)
        fcntl.ioctl(master, termios.TIOCSWINSZ, fcntl.ioctl(0, termios.TIOCGWINSZ, b"\0" * 8))
    except OSError:
        pass
    with socket.socket(fileno=back) as sock:
        socket.send_fds(sock, [b"t"], [master])
    os.close(master)
    return slave


def _pass_on(child: int, sig: int) -> None:
    try:
        os.killpg(child, sig)
    except OSError:
        pass


def run_child(spec: dict[str, object]) -> None:
    try:
        os.setsid()
        if spec.get("tty"):
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # (its parent is outside its PID namespace)
        for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        os.chdir(str(spec.get("cwd") or "/"))
    except OSError as exc:
        fail(str(exc))
    argv = [str(a) for a in spec["argv"]]  # type: ignore[attr-defined]
    env = {str(k): str(v) for k, v in spec["env"].items()}  # type: ignore[attr-defined]
    try:
        exec_on_path(argv, env)
    except FileNotFoundError:
        os.write(2, f"danlu exec: {argv[0]}: command not found in the rental\n".encode())
        os._exit(127)
    except OSError as exc:
        os.write(2, f"danlu exec: {argv[0]}: {exc.strerror}\n".encode())
        os._exit(126)


def exec_on_path(argv: list[str], env: dict[str, str]) -> None:
    """execvpe without os.execvpe, which imports a module on its way: after the mount namespace is
    joined, an import would read the sandbox's files, so this script imports nothing after step 3."""
    name = argv[0]
    folders = [""] if "/" in name else env.get("PATH", "/usr/bin:/bin").split(":")
    denied: OSError | None = None
    for folder in folders:
        try:
            os.execve(f"{folder}/{name}" if folder else name, argv, env)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except PermissionError as exc:
            denied = exc
    raise denied or FileNotFoundError(name)


if __name__ == "__main__":
    try:
        main()
    except (OSError, ValueError, KeyError) as exc:
        fail(str(exc))
