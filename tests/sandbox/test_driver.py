"""The host's NVIDIA driver in a registered image's sandbox (issue 26, item 2; danlu.compute.sandbox.driver):
found with ``ldconfig -p``, bound read-only under /run/nvidia/driver into runs that have GPUs, its libraries
first on ``LD_LIBRARY_PATH`` for the run and its sessions. This machine has no NVIDIA driver, so the real-sandbox
test binds stand-in files the way the real ones are bound; with a real GPU the same binds carry the host's
``libcuda``/``libnvidia-ml`` and ``nvidia-smi`` (not run here: no GPU)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from danlu.backend import EnterRequest, RunSpec
from danlu.compute.sandbox import bwrap, driver
from danlu.db.models import Instance
from tests.conftest import LiveServer, sandbox_folder, wait_for
from tests.sandbox.conftest import finished, log_of, rent, sandboxed_server, tiny_rootfs

LDCONFIG = """\
1234 libs found in cache `/etc/ld.so.cache'
\tlibnvidia-ml.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libnvidia-ml.so.1
\tlibnvidia-ml.so.1 (libc6) => /lib/i386-linux-gnu/libnvidia-ml.so.1
\tlibnvidia-ml.so (libc6,x86-64) => /lib/x86_64-linux-gnu/libnvidia-ml.so
\tlibcuda.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libcuda.so.1
\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1
\tlibcudart.so.12 (libc6,x86-64) => /usr/local/cuda/lib64/libcudart.so.12
\tlibnvidia-glcore.so.535.129.03 (libc6,x86-64) => /lib/x86_64-linux-gnu/libnvidia-glcore.so.535.129.03
\tlibcudaxyz.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libcudaxyz.so.1
"""


def test_the_driver_libraries_are_read_from_ldconfig_for_this_architecture_only() -> None:
    found = driver.parse_ldconfig(LDCONFIG, "x86_64")
    assert found == [
        ("/lib/x86_64-linux-gnu/libcuda.so.1", "/run/nvidia/driver/lib/libcuda.so.1"),  # the first of two
        ("/lib/x86_64-linux-gnu/libnvidia-ml.so", "/run/nvidia/driver/lib/libnvidia-ml.so"),
        ("/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "/run/nvidia/driver/lib/libnvidia-ml.so.1"),
    ]  # not the i386 copy, the CUDA runtime (the image's own), graphics, nor a name that only starts alike
    assert driver.parse_ldconfig(LDCONFIG, "aarch64") == []
    assert driver.discover() == ()  # this machine has no NVIDIA driver: nothing is bound


def test_its_folders_come_first_for_libraries_and_last_for_tools() -> None:
    env = driver.environment({"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/opt/mine"})
    assert env["PATH"] == "/usr/bin:/bin:/run/nvidia/driver/bin"
    assert env["LD_LIBRARY_PATH"] == "/run/nvidia/driver/lib:/opt/mine"
    assert driver.environment({"PATH": "/bin"})["LD_LIBRARY_PATH"] == "/run/nvidia/driver/lib"


@pytest.fixture
def with_driver(db_url: str, tmp_path: Path) -> Iterator[tuple[LiveServer, Path]]:
    """A sandboxed server whose host 'has' a driver: two stand-in files where ``discover`` would find the
    real ones (a folder the renter's uid can reach, as /usr/lib is)."""
    fake = sandbox_folder()
    (fake / "libnvidia-ml.so.535").write_text("the host's NVML, version 535\n")
    smi = fake / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI 535 from the host'\n")
    smi.chmod(0o755)
    with sandboxed_server(db_url, tmp_path / "data") as srv:
        assert srv.platform.backend.sandbox is not None
        srv.platform.backend.sandbox.driver = (
            (str(fake / "libnvidia-ml.so.535"), f"{driver.ROOT}/lib/libnvidia-ml.so.1"),
            (str(smi), f"{driver.ROOT}/bin/nvidia-smi"),
        )
        with srv.admin() as a:
            assert a.put("/admin/prices/T4", json={"price_per_hour": "3.60"}).status_code == 200
            root = tiny_rootfs(tmp_path / "tiny")
            r = a.post("/admin/images", json={"name": "tiny", "source": str(root), "description": "busybox"})
            assert r.status_code == 201, r.text
        yield srv, fake
    srv.platform.db.engine.dispose()


def test_a_registered_image_with_gpus_sees_the_hosts_driver_read_only(with_driver: tuple[LiveServer, Path]) -> None:
    srv, _ = with_driver
    script = (
        "nvidia-smi; cat /run/nvidia/driver/lib/libnvidia-ml.so.1; echo LD=$LD_LIBRARY_PATH; "
        "(echo x > /run/nvidia/driver/lib/libnvidia-ml.so.1) 2>/dev/null || echo read-only; "
        "(echo x > /run/nvidia/driver/lib/libcuda.so.1) 2>/dev/null || echo no-new-files; echo ready; sleep 60"
    )
    with srv.new_user("gpu-user") as c:
        iid = rent(c, ["sh", "-c", script], image="tiny")
        wait_for(lambda: "ready" in log_of(c, iid), timeout=60)
        out = log_of(c, iid)
        assert "NVIDIA-SMI 535 from the host" in out and "the host's NVML, version 535" in out, out
        assert "LD=/run/nvidia/driver/lib\n" in out and "read-only" in out and "no-new-files" in out, out
        # a session (exec, shell, SSH) has the same folders
        with srv.platform.db.read() as s:
            inst = s.get(Instance, iid)
            assert inst is not None and inst.run_handle is not None
            handle = inst.run_handle
        assert json.loads(handle)["drv"] is True
        r, w = os.pipe()
        proc = srv.platform.backend.enter(
            handle, EnterRequest(["sh", "-c", "echo $LD_LIBRARY_PATH; nvidia-smi"], env={}, stdio=(w, w, w))
        )
        os.close(w)
        with os.fdopen(r) as f:
            said = f.read()
        proc.wait(timeout=30)
        assert said == "/run/nvidia/driver/lib\nNVIDIA-SMI 535 from the host\n", said
        c.delete(f"/instances/{iid}")


def test_the_host_image_gets_nothing_bound_it_is_the_hosts_own(with_driver: tuple[LiveServer, Path]) -> None:
    srv, _ = with_driver
    with srv.new_user("host-user") as c:
        iid = rent(c, ["sh", "-c", "ls /run/nvidia 2>&1; echo LD=$LD_LIBRARY_PATH"])
        finished(c, iid)
        out = log_of(c, iid)
        assert "No such file or directory" in out and "LD=\n" in out, out


def test_the_bwrap_arguments_bind_each_file_read_only_after_the_devices(tmp_path: Path) -> None:
    argv = subprocess.list2cmdline(
        bwrap.bwrap_args(
            _spec(tmp_path), [], binds=[("/lib/libcuda.so.535", "/run/nvidia/driver/lib/libcuda.so.1")],
            info_fd=3, block_fd=4, tmp_bytes=1 << 20,
        )
    )  # fmt: skip
    assert "--ro-bind /lib/libcuda.so.535 /run/nvidia/driver/lib/libcuda.so.1 --remount-ro /dev" in argv


def _spec(tmp_path: Path) -> RunSpec:
    return RunSpec(run_id="r", log_key="i-x", command=["true"], env={}, workspace=tmp_path, control_dir=tmp_path)
