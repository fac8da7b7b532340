"""The sandbox's bubblewrap options, pure: built from a RunSpec without running anything."""

from __future__ import annotations

from pathlib import Path

from danlu.backend import Device, ImageRoot, Limits, RunSpec
from danlu.compute.sandbox.bwrap import Entry, bwrap_args, environment, host_image_entries, passwd_files

LIMITS = Limits(1000, 1 << 30, 64, 1 << 30)


def spec(**kw: object) -> RunSpec:
    base: dict[str, object] = {
        "run_id": "i-1",
        "log_key": "i-1",
        "command": ["python", "train.py"],
        "env": {"DANLU_INSTANCE_ID": "i-1", "WANDB_API_KEY": "k"},
        "workspace": Path("/sb/workspaces/i-1"),
        "control_dir": Path("/sb/control/i-1"),
        "limits": LIMITS,
    }
    base.update(kw)
    return RunSpec(**base)  # type: ignore[arg-type]


def args(s: RunSpec, entries: list[Entry] | None = None) -> list[str]:
    return bwrap_args(s, entries or [], info_fd=7, block_fd=8, tmp_bytes=1 << 20)


def binds(a: list[str]) -> list[tuple[str, str, str]]:
    return [(a[i], a[i + 1], a[i + 2]) for i, x in enumerate(a) if x in ("--bind", "--ro-bind", "--dev-bind")]


def test_only_the_allocated_devices_are_bound_simulated_read_only() -> None:
    devices = (
        Device(Path("/sb/devices/SIM-0"), "/dev/nvidia0", True),
        Device(Path("/dev/nvidia3"), "/dev/nvidia3", False),
        Device(Path("/dev/nvidiactl"), "/dev/nvidiactl", False),
    )
    b = binds(args(spec(devices=devices)))
    assert [x for x in b if "nvidia" in x[2]] == [
        ("--ro-bind", "/sb/devices/SIM-0", "/dev/nvidia0"),
        ("--dev-bind", "/dev/nvidia3", "/dev/nvidia3"),
        ("--dev-bind", "/dev/nvidiactl", "/dev/nvidiactl"),
    ]


def test_workspace_rw_control_ro_and_the_root_read_only_last() -> None:
    a = args(spec(checkpoints=Path("/sb/jobs/j-1/checkpoints")))
    b = binds(a)
    assert ("--bind", "/sb/workspaces/i-1", "/workspace") in b
    assert ("--bind", "/sb/jobs/j-1/checkpoints", "/checkpoints") in b
    assert ("--ro-bind", "/sb/control/i-1", "/run/danlu") in b
    last_mount = max(i for i, x in enumerate(a) if x in ("--bind", "--ro-bind", "--dev-bind", "--tmpfs", "--proc"))
    assert a.index("--remount-ro") > last_mount and a[a.index("--remount-ro") :][:4] == [
        "--remount-ro", "/dev", "--remount-ro", "/",
    ]  # fmt: skip
    assert "--" not in a and "python" not in a  # the command is the backend's, after `--`


def test_namespaces_by_network_policy() -> None:
    for policy, unshared in (("none", True), ("outbound", False), ("host", False)):
        a = args(spec(network=policy))
        assert ("--unshare-net" in a) is unshared, policy
        for flag in ("--unshare-user", "--unshare-pid", "--unshare-ipc", "--disable-userns", "--new-session"):
            assert flag in a


def test_the_environment_is_an_allow_list_plus_the_renters() -> None:
    env = environment(spec())
    assert set(env) == {"PATH", "HOME", "LANG", "USER", "DANLU_INSTANCE_ID", "WANDB_API_KEY"}
    assert env["HOME"] == "/workspace"


def test_image_entries_bind_read_only_and_recreate_symlinks(tmp_path: Path) -> None:
    from danlu.compute.sandbox.bwrap import image_entries

    (tmp_path / "usr").mkdir()
    (tmp_path / "bin").symlink_to("usr/bin")
    (tmp_path / "proc").mkdir()  # reserved: the sandbox's own
    a = args(spec(image=ImageRoot("x", "rootfs", tmp_path)), image_entries(tmp_path))
    assert ("--ro-bind", str(tmp_path / "usr"), "/usr") in binds(a)
    assert a[a.index("--symlink") : a.index("--symlink") + 3] == ["--symlink", "usr/bin", "/bin"]
    assert str(tmp_path / "proc") not in a


def test_host_etc_is_curated_and_passwd_names_the_renter() -> None:
    names = {e.name for e in host_image_entries()}
    assert "etc/ld.so.cache" in names and "usr" in names
    assert not {"etc", "etc/shadow", "etc/postgresql", "etc/sudoers", "opt"} & names
    assert "renter:x:2000005:2000005:" in passwd_files(2_000_005)["passwd"]
