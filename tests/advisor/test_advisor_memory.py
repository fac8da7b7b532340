"""The memory model pinned to published figures. Each test names its source."""

from __future__ import annotations

import pytest

from danlu.advisor import memory
from danlu.advisor.workload import build_workload
from danlu.catalog.gpu_models import resolve_model
from danlu.core.errors import InvalidInput


def _w(**kw: object) -> object:
    base: dict[str, object] = {"params": 7e9, "tokens": 1e9}
    base.update(kw)
    return build_workload(**base)  # type: ignore[arg-type]


def test_mixed_precision_adamw_is_16_bytes_per_param_before_activations() -> None:
    # ZeRO (Rajbhandari et al. 2020, §3.1): mixed-precision Adam needs 2Ψ + 2Ψ + KΨ with K = 12, i.e. 16Ψ bytes.
    w = _w(precision="bf16", optimizer="adamw", sharding="ddp")
    weights, grads, opt = memory.model_states(w, 1)  # type: ignore[arg-type]
    assert weights + grads + opt == pytest.approx(16 * 7e9)
    assert (weights, grads, opt) == pytest.approx((2 * 7e9, 2 * 7e9, 12 * 7e9))


def test_zero_stages_match_the_zero_paper_figure_1() -> None:
    # ZeRO Figure 1: Ψ = 7.5B, K = 12, Nd = 64: baseline 120 GB, P_os 31.4 GB, P_os+g 16.6 GB, P_os+g+p 1.9 GB.
    expected = {"ddp": 120.0, "zero1": 31.4, "zero2": 16.6, "zero3": 1.9}
    for stage, gb in expected.items():
        w = _w(params=7.5e9, sharding=stage)
        total = sum(memory.model_states(w, 64)) / memory.GB  # type: ignore[arg-type]
        assert total == pytest.approx(gb, abs=0.1), stage


def test_full_finetune_7b_adamw_does_not_fit_one_80gb_gpu_but_fits_eight_with_zero3() -> None:
    # Follows from 16 bytes/param (ZeRO): 112 GB of states > 80 GiB; ZeRO-3 over 8 GPUs leaves 14 GB each.
    w = _w(sharding="zero3")
    a100 = resolve_model("A100-80GB")
    assert not memory.fits(w, a100, 1)  # type: ignore[arg-type]
    assert memory.fits(w, a100, 8)  # type: ignore[arg-type]


def test_qlora_65b_fits_one_48gb_gpu_and_not_a_40gb_one() -> None:
    # QLoRA (Dettmers et al. 2023, abstract): "finetune a 65B parameter model on a single 48GB GPU";
    # setup as in the paper: NF4 + double quantisation, LoRA r = 64 on all linear layers, gradient
    # checkpointing, micro-batch 1, sequences of 512 tokens.
    w = build_workload(model="llama-65b", adapter="qlora", lora_rank=64, checkpointing=True, seq_len=512, tokens=1e6)
    assert memory.fits(w, resolve_model("L40S"), 1)  # 48 GB
    assert not memory.fits(w, resolve_model("A100-40GB"), 1)


def test_16bit_full_finetune_65b_needs_more_than_780gb() -> None:
    # QLoRA (Dettmers et al. 2023, §1): regular 16-bit fine-tuning of LLaMA 65B "requires more than 780 GB".
    w = build_workload(model="llama-65b", tokens=1e6, sharding="ddp")
    assert memory.estimate(w, 1).total / memory.GB > 780


def test_int8_inference_of_175b_fits_eight_24gb_consumer_gpus_but_fp16_does_not() -> None:
    # LLM.int8() (Dettmers et al. 2022, abstract): int8 weights make OPT-175B/BLOOM inference possible
    # "on a single server with consumer GPUs" (8 × 24 GB); fp16 weights alone are 350 GB, more than 8 × 24.
    w8 = build_workload(params=175e9, task="inference", precision="int8", tokens=1e6, seq_len=512)
    w16 = build_workload(params=175e9, task="inference", precision="fp16", tokens=1e6, seq_len=512)
    rtx = resolve_model("RTX-3090")
    assert memory.fits(w8, rtx, 8)
    assert not memory.fits(w16, rtx, 8)


def test_7b_fp16_inference_needs_about_14gb_of_weights() -> None:
    # 2 bytes per parameter in fp16 (e.g. Touvron et al. 2023 release notes): 7B → ~14 GB, so a 16 GB T4 fits
    # int8 comfortably and fp16 does not leave room for the CUDA context and cache at 4k tokens.
    w = build_workload(params=7e9, task="inference", precision="fp16", tokens=1e6, seq_len=4096)
    assert memory.estimate(w, 1).weights / memory.GB == pytest.approx(14.0)
    assert memory.fits(w.with_(precision="int8"), resolve_model("T4"), 1)


def test_activation_checkpointing_cuts_activations_per_korthikanti() -> None:
    # Korthikanti et al. 2022: 34·s·b·h per layer without recomputation; 2·s·b·h per layer with full recomputation.
    w = build_workload(model="llama-7b", tokens=1e6, seq_len=2048)
    full, ckpt = memory.activation_bytes(w), memory.activation_bytes(w.with_(checkpointing=True))
    s, h, layers = 2048, 4096, 32
    assert full - 6 * s * 32000 == pytest.approx(34 * s * h * layers)
    assert ckpt < full / 5


def test_fixes_suggest_changes_that_really_fit() -> None:
    w = _w(sharding="ddp")
    gpu = resolve_model("A100-80GB")
    fixes = memory.fixes(w, gpu, 1)  # type: ignore[arg-type]
    assert any("QLoRA" in f for f in fixes)
    assert any("LoRA adapters" in f for f in fixes)
    assert memory.fits(w.with_(adapter="lora"), gpu, 1)  # type: ignore[attr-defined]
    assert any(f.startswith("use ") and "GPUs" in f for f in fixes)
    # with a micro-batch of 8 at 2048 tokens activations dominate: LoRA alone no longer fits, QLoRA
    # (which also turns on checkpointing) still does, and the suggestion list says so
    big = _w(sharding="ddp", micro_batch=8)
    big_fixes = memory.fixes(big, gpu, 1)  # type: ignore[arg-type]
    assert not any("LoRA adapters" in f for f in big_fixes)
    assert any("QLoRA" in f for f in big_fixes)


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"tokens": None}, "missing_work"),
        ({"params": None}, "missing_params"),
        ({"precision": "fp8"}, "invalid_precision"),
        ({"precision": "int4"}, "int_precision_training"),
        ({"model": "gpt-99"}, "unknown_model_preset"),
        ({"micro_batch": 0}, "invalid_micro_batch"),
        ({"params": 10.0}, "invalid_params"),
    ],
)
def test_bad_input_is_invalid_input_with_stable_code(kwargs: dict[str, object], code: str) -> None:
    base: dict[str, object] = {"params": 7e9, "tokens": 1e9, **kwargs}
    with pytest.raises(InvalidInput) as err:
        build_workload(**base)  # type: ignore[arg-type]
    assert err.value.code == code
