from __future__ import annotations

import pytest

from danlu.catalog.gpu_models import model_for_nvml_name, resolve_model
from danlu.compute.gpus import parse_simulated_spec
from danlu.compute.lifecycle import TRANSITIONS, Status, check_transition
from danlu.core.errors import Conflict, InvalidInput


def test_destroyed_is_terminal_and_every_state_can_be_destroyed() -> None:
    assert TRANSITIONS[Status.DESTROYED] == frozenset()
    for st in Status:
        if st is not Status.DESTROYED:
            assert Status.DESTROYED in TRANSITIONS[st]


def test_illegal_transition_says_what_to_do() -> None:
    with pytest.raises(Conflict) as err:
        check_transition(Status.STOPPED, Status.STOPPING, "stop")
    assert err.value.code == "invalid_state"
    assert "danlu start" in err.value.message


def test_simulated_spec() -> None:
    gpus = parse_simulated_spec("a100-80gb:2, T4:1", "h")
    assert [(g.index, g.model, g.simulated) for g in gpus] == [
        (0, "A100-80GB", True),
        (1, "A100-80GB", True),
        (2, "T4", True),
    ]
    assert gpus[0].vram_mb == 80 * 1024
    for bad in ["", "NOPE:1", "T4:0", "T4:x"]:
        with pytest.raises(InvalidInput):
            parse_simulated_spec(bad, "h")


@pytest.mark.parametrize(
    ("nvml", "model"),
    [
        ("NVIDIA H200", "H200"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA A100-PCIE-40GB", "A100-40GB"),
        ("NVIDIA H100 80GB HBM3", "H100-80GB"),
        ("NVIDIA H100 PCIe", "H100-PCIE"),
        ("Tesla T4", "T4"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA A10G", "A10G"),
        ("Tesla V100-SXM2-32GB", "V100-32GB"),
        ("NVIDIA GeForce RTX 4090", "RTX-4090"),
    ],
)
def test_nvml_names_map_onto_the_table(nvml: str, model: str) -> None:
    found = model_for_nvml_name(nvml)
    assert found is not None and found.name == model


def test_unknown_model_lists_known_ones() -> None:
    with pytest.raises(InvalidInput) as err:
        resolve_model("Z9000")
    assert err.value.code == "unknown_gpu_model" and "A100-80GB" in err.value.message
