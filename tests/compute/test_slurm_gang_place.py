"""A gang's node runner: its rank is Slurm's node order (rank 0 runs the batch script, the rendezvous
master), its GPUs the platform's part for its own node — which need not be listed in Slurm's order (pure)."""

from __future__ import annotations

from pathlib import Path

from danlu.backend import Device, RunSpec
from danlu.compute.backends.slurm_node import gang_place, node_spec


def _spec() -> RunSpec:
    devices = tuple(Device(Path(f"/sim/{n}-gpu{i}"), f"/dev/nvidia{i}", True) for n in ("dev1", "dev0") for i in (0, 1))
    return RunSpec(
        run_id="i-ab-1",
        log_key="j-ab",
        command=["train"],
        env={"DANLU_JOB_ID": "j-ab", "CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b,GPU-c,GPU-d"},
        workspace=Path("/w"),
        control_dir=Path("/c"),
        devices=devices,
        host="dev1",
        gpu_model="A100-80GB",
        gpu_count=4,
        nodes=("dev1", "dev0"),  # the platform's order: its allocation's own host first
        node_env=({"CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b"}, {"CUDA_VISIBLE_DEVICES": "GPU-c,GPU-d"}),
    )


def test_rank_follows_slurm_and_gpus_follow_the_node() -> None:
    spec = _spec()
    rank, part = gang_place(spec, {"SLURM_NODEID": "0", "SLURMD_NODENAME": "dev0"})
    assert (rank, part) == (0, 1)  # Slurm's first node is dev0: rank 0, with dev0's GPUs (the platform's part 1)
    mine = node_spec(spec, rank, part, "1234", "10.0.0.5")
    assert mine.host == "dev0" and mine.run_id == "i-ab-1" and mine.gpu_count == 2 and not mine.nodes
    assert [d.host_path.name for d in mine.devices] == ["dev0-gpu0", "dev0-gpu1"]
    assert mine.env["CUDA_VISIBLE_DEVICES"] == "GPU-c,GPU-d"
    assert (mine.env["NODE_RANK"], mine.env["MASTER_ADDR"], mine.env["MASTER_PORT"]) == ("0", "10.0.0.5", "21234")
    assert (mine.env["WORLD_SIZE"], mine.env["LOCAL_WORLD_SIZE"], mine.env["PET_NNODES"]) == ("4", "2", "2")
    other = node_spec(spec, *gang_place(spec, {"SLURM_NODEID": "1", "SLURMD_NODENAME": "dev1"}), "1234", "10.0.0.5")
    assert other.host == "dev1" and other.run_id == "i-ab-1-node1" and other.env["NODE_RANK"] == "1"
    assert other.env["CUDA_VISIBLE_DEVICES"] == "GPU-a,GPU-b"


def test_a_single_host_run_is_left_as_it_is() -> None:
    spec = RunSpec("i-x", "i-x", ["x"], {}, Path("/w"), Path("/c"))
    assert node_spec(spec, 0, 0, "7", "h") is spec
