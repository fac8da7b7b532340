"""tools/build_price_catalog.py regenerates the shipped prices.csv byte for byte from shared/data
(per-row FSDL dates from the dated history, FSDL Lambda rows matched to SkyPilot's instances)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "data"
PRICES = REPO / "src" / "danlu" / "catalog" / "prices.csv"

pytestmark = pytest.mark.skipif(
    not (SHARED / "prices" / "fsdl_cloud_gpus_history").is_dir(), reason="no shared/data here"
)


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_price_catalog", REPO / "tools" / "build_price_catalog.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_tool_rebuilds_the_shipped_catalog_exactly() -> None:
    assert _tool().build(SHARED) == PRICES.read_text(encoding="utf-8")


def test_fsdl_lambda_rows_take_skypilots_instance_and_variant() -> None:
    rows = [r for r in _tool().fsdl(SHARED) if r[0] == "Lambda"]
    by_type = {r[7]: r for r in rows}
    assert by_type["gpu_1x_h100_pcie"][2] == "H100-PCIE"  # 26 vCPUs, 200 GB: the PCIe instance
    assert by_type["gpu_1x_a10"][2] == "A10"  # FSDL says A10G; SkyPilot's shape is the A10
    assert all("E" not in r[4] and "E" not in r[5] for r in rows)  # no exponent notation
