"""The advisor's commands on hostile or absurd input (issue 11, "Bad input"): every one is a clear
error with a stable code and a non-zero exit, never a traceback, a division by zero, a negative
memory figure or an empty table that exits 0."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app as cli_app

WORK = ["advise", "--params", "7e9", "--tokens", "1e9"]


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["compare", "--gpu", "A100", "--hours", "inf"], "invalid_compare_input"),
        (["compare", "--gpu", "A100", "--hours", "nan"], "invalid_compare_input"),
        (["compare", "--gpu", "A100", "--hours", "1e30"], "invalid_compare_input"),
        (["advise", "--params", "7e9", "--tokens", "inf"], "invalid_tokens"),
        (["advise", "--params", "7e9", "--tokens", "1e30"], "invalid_tokens"),
        (["advise", "--params", "7e9", "--samples", "1e6", "--epochs", "nan"], "invalid_epochs"),
        ([*WORK, "--measured", "1e-30", "--measured-on", "A100-80GB"], "invalid_measured"),
        ([*WORK, "--measured", "inf", "--measured-on", "A100-80GB"], "invalid_measured"),
        ([*WORK, "--measured", "100", "--measured-on", "A100-80GB", "--measured-count", "0"], "invalid_measured_count"),
        ([*WORK, "--seq-len", "-5"], "invalid_seq_len"),
        ([*WORK, "--image-size", "0"], "invalid_image_size"),
        ([*WORK, "--deadline", "-1"], "invalid_deadline"),
        ([*WORK, "--deadline", "0.0001"], "no_option_meets_deadline"),
        ([*WORK, "--top", "0"], "invalid_top"),
        ([*WORK, "--preemption-overhead", "inf"], "invalid_preemption_overhead"),
        (["advise", "buy", "--gpu", "A100", "--purchase-price", "10000"], "ambiguous_gpu_model"),
        ([*WORK, "--gpu", "GH200"], "no_priced_option"),  # known (144 GB part), no price anywhere: not an empty table
    ],
)
def test_bad_input_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, args: list[str], code: str) -> None:
    monkeypatch.delenv("DANLU_URL", raising=False)
    res = CliRunner().invoke(cli_app, args)
    assert res.exit_code != 0, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert f"[{code}]" in res.stderr, res.stderr


def test_a_deadline_nothing_meets_names_the_fastest_option(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DANLU_URL", raising=False)
    res = CliRunner().invoke(cli_app, [*WORK, "--deadline", "0.0001"])
    assert "the fastest option" in res.stderr and "relax --deadline" in res.stderr


def test_a_model_name_in_any_case_or_separator_resolves_for_buy_advice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DANLU_URL", raising=False)
    res = CliRunner().invoke(cli_app, ["advise", "buy", "--gpu", "a100_80gb", "--purchase-price", "10000", "--json"])
    assert res.exit_code == 0, res.output


def test_a_fit_with_under_three_percent_left_is_flagged_tight_and_shown_in_the_cards_unit() -> None:
    from danlu.advisor.memory import GB, MemoryBreakdown
    from danlu.advisor.ranking import Option

    def option(total_gb: float) -> Option:
        mem = MemoryBreakdown(total_gb * GB, 0, 0, 0, 0)
        return Option("A100-80GB", 1, True, "ddp", mem, 80 * 2**30 / GB, 1.0, 100, "USD", "p", "r", "on-demand", "",
                      None, ())  # fmt: skip

    tight = option(85.1).to_dict()  # 85.1 GB "fits" 80 GiB (85.9 GB) with 0.9 % left
    assert tight["tight"] and tight["headroom_pct"] == 0.9
    assert (tight["memory_gib"], tight["capacity_gib"]) == (79.26, 80.0)
    roomy = option(60.0).to_dict()
    assert not roomy["tight"] and roomy["headroom_pct"] == 30.2


def test_the_advice_table_says_yes_no_or_tight_not_python_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DANLU_URL", raising=False)
    res = CliRunner().invoke(cli_app, [*WORK, "--top", "40"])
    assert res.exit_code == 0, res.output
    assert "True" not in res.stdout and "False" not in res.stdout
    assert "GiB/" in res.stdout  # the header, wrapped or not at the console's width


def test_bf16_on_a_gpu_without_it_is_priced_and_labelled_as_fp16(monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    monkeypatch.delenv("DANLU_URL", raising=False)
    res = CliRunner().invoke(cli_app, [*WORK, "--gpu", "V100", "--json"])
    options = json.loads(res.stdout)
    assert options and all("has no bf16: priced as fp16" in o["note"] for o in options if o["gpu_model"] == "V100")
    a100 = json.loads(CliRunner().invoke(cli_app, [*WORK, "--gpu", "A100-80GB", "--json"]).stdout)
    assert a100 and not any("bf16" in o["note"] for o in a100)


def test_compare_puts_n_gpus_on_one_machine_unless_asked_otherwise() -> None:
    from danlu.advisor import service

    one = service.compare("A100-80GB", hours=1, count=4)
    assert one and all(r["machines"] == 1 and r["gpus_billed"] >= 4 for r in one)
    several = service.compare("A100-80GB", hours=1, count=4, multi_machine=True)
    assert any(r["machines"] == 4 and r["gpus_billed"] == 4 for r in several)  # four 1-GPU machines: only if asked
    assert len(several) > len(one)


@pytest.mark.parametrize(
    ("nvml_name", "model", "vram_gb"),
    [
        ("NVIDIA B200", "B200", 180),
        ("NVIDIA GH200 480GB", "GH200", 144),  # not the H200 row, whose pattern it also contains
        ("NVIDIA H200", "H200", 141),
        ("NVIDIA RTX A6000", "RTX-A6000", 48),
    ],
)
def test_newer_and_workstation_gpus_are_known(nvml_name: str, model: str, vram_gb: int) -> None:
    from danlu.catalog.gpu_models import model_for_nvml_name, resolve_model

    found = model_for_nvml_name(nvml_name)
    assert found is not None and (found.name, found.vram_gb) == (model, vram_gb)
    assert resolve_model(model.lower()).name == model
