"""What the renter wants to run: a model (by size or preset) and how it is trained or served."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from danlu.core.errors import InvalidInput

TASKS = ("train", "finetune", "inference")
PRECISIONS = ("fp32", "bf16", "fp16", "int8", "int4")
OPTIMIZERS = ("adamw", "adam", "sgd", "adam8bit")
SHARDINGS = ("auto", "ddp", "zero1", "zero2", "zero3", "fsdp")
ADAPTERS = ("none", "lora", "qlora")


@dataclass(frozen=True, slots=True)
class Architecture:
    """Shape used by the activation model. ``kind`` is "transformer" or "conv" (CNN, U-Net)."""

    kind: str
    layers: int
    hidden: int
    vocab: int = 32000
    # conv nets only: forward FLOPs and 16-bit activation bytes per sample at ``ref_image``
    fwd_flops_per_sample: float = 0.0
    act_bytes_per_sample: float = 0.0
    ref_image: int = 224


@dataclass(frozen=True, slots=True)
class Preset:
    params: float
    arch: Architecture
    seq_len: int | None = None
    image_size: int | None = None
    source: str = ""


# Shapes from each model's paper or model card; conv activation sizes are our calibration (docs/advisor.md).
PRESETS: dict[str, Preset] = {
    "llama-7b": Preset(6.74e9, Architecture("transformer", 32, 4096), 2048, None, "Touvron et al. 2023"),
    "llama-13b": Preset(13.0e9, Architecture("transformer", 40, 5120), 2048, None, "Touvron et al. 2023"),
    "llama-33b": Preset(32.5e9, Architecture("transformer", 60, 6656), 2048, None, "Touvron et al. 2023"),
    "llama-65b": Preset(65.2e9, Architecture("transformer", 80, 8192), 2048, None, "Touvron et al. 2023"),
    "bert-base": Preset(110e6, Architecture("transformer", 12, 768, 30522), 512, None, "Devlin et al. 2019"),
    "bert-large": Preset(335e6, Architecture("transformer", 24, 1024, 30522), 512, None, "Devlin et al. 2019"),
    "resnet50": Preset(25.6e6, Architecture("conv", 50, 0, 0, 8.2e9, 55e6, 224), None, 224, "He et al. 2016"),
    "sdxl-unet": Preset(2.57e9, Architecture("conv", 0, 0, 0, 5.5e12, 6.0e9, 1024), None, 1024, "Podell et al. 2023"),
}


def generic_transformer(params: float) -> Architecture:
    """A decoder-only shape for a bare parameter count: params ≈ 12·L·h², with h/L ≈ 128 (LLaMA-like)."""
    hidden = (params * 128 / 12) ** (1 / 3)
    hidden = max(256, round(hidden / 128) * 128)
    layers = max(1, round(params / (12 * hidden * hidden)))
    return Architecture("transformer", layers, int(hidden))


@dataclass(frozen=True, slots=True)
class Workload:
    params: float
    arch: Architecture
    task: str = "finetune"
    precision: str = "bf16"
    optimizer: str = "adamw"
    micro_batch: int = 1
    seq_len: int = 2048
    image_size: int = 224
    grad_accum: int = 1
    checkpointing: bool = False
    adapter: str = "none"
    lora_rank: int = 16
    sharding: str = "auto"
    tokens: float | None = None
    samples: float | None = None
    epochs: float = 1.0

    @property
    def training(self) -> bool:
        return self.task != "inference"

    @property
    def mixed(self) -> bool:
        return self.precision in ("bf16", "fp16")

    def with_(self, **changes: object) -> Workload:
        return replace(self, **changes)  # type: ignore[arg-type]

    def work_tokens(self) -> float:
        """Tokens processed (transformers) or samples processed (conv nets), epochs included."""
        if self.tokens is not None:
            return self.tokens * (self.epochs if self.samples is None else 1.0)
        assert self.samples is not None
        per_sample = self.seq_len if self.arch.kind == "transformer" else 1
        return self.samples * self.epochs * per_sample


def _choice(value: str, allowed: tuple[str, ...], field: str) -> str:
    v = value.strip().lower().replace("-", "").replace("_", "")
    for a in allowed:
        if a.replace("-", "") == v:
            return a
    raise InvalidInput(f"invalid_{field}", f"{field} {value!r} is not one of: {', '.join(allowed)}")


def within(
    name: str, value: float | None, lo: float, hi: float, *, code: str | None = None, lo_open: bool = True
) -> None:
    """``value`` (when given) is a finite number above ``lo`` (or from it) up to ``hi``; else a clear
    ``invalid_<name>`` (inf, nan and 1e30 are input mistakes, not workloads)."""
    if value is None:
        return
    above = value > lo if lo_open else value >= lo
    if not (isinstance(value, int | float) and math.isfinite(value) and above and value <= hi):
        bound = f"above {lo:g}" if lo_open else f"at least {lo:g}"
        raise InvalidInput(
            code or f"invalid_{name}", f"{name} must be a number {bound} and at most {hi:g} (got {value!r})"
        )


def build_workload(
    *,
    params: float | None = None,
    model: str | None = None,
    task: str = "finetune",
    precision: str = "bf16",
    optimizer: str = "adamw",
    micro_batch: int = 1,
    seq_len: int | None = None,
    image_size: int | None = None,
    grad_accum: int = 1,
    checkpointing: bool = False,
    adapter: str = "none",
    lora_rank: int = 16,
    sharding: str = "auto",
    tokens: float | None = None,
    samples: float | None = None,
    epochs: float = 1.0,
) -> Workload:
    """Validate user input into a :class:`Workload`; every mistake is an InvalidInput saying what to do."""
    task = _choice(task, TASKS, "task")
    precision = _choice(precision, PRECISIONS, "precision")
    optimizer = _choice(optimizer, OPTIMIZERS, "optimizer")
    sharding = _choice(sharding, SHARDINGS, "sharding")
    adapter = _choice(adapter, ADAPTERS, "adapter")
    if sharding == "fsdp":
        sharding = "zero3"  # FSDP full sharding partitions the same three states as ZeRO-3
    preset: Preset | None = None
    if model:
        preset = PRESETS.get(model.strip().lower())
        if preset is None:
            raise InvalidInput(
                "unknown_model_preset",
                f"unknown model {model!r}; use --params or one of: {', '.join(PRESETS)}",
            )
    if params is None and preset is None:
        raise InvalidInput("missing_params", "give the model size with --params (e.g. 7e9) or a --model preset")
    p = params if params is not None else preset.params  # type: ignore[union-attr]
    if not (1e5 <= p <= 5e12):
        raise InvalidInput("invalid_params", f"params must be between 1e5 and 5e12 (got {p:g})")
    if precision in ("int8", "int4") and task != "inference":
        raise InvalidInput(
            "int_precision_training",
            "int8/int4 apply to inference; for training use --adapter qlora with --precision bf16",
        )
    if adapter != "none" and task == "inference":
        raise InvalidInput("adapter_inference", "LoRA/QLoRA are fine-tuning methods; drop --adapter for inference")
    for name, value in (("micro_batch", micro_batch), ("grad_accum", grad_accum), ("lora_rank", lora_rank)):
        if value < 1:
            raise InvalidInput(f"invalid_{name}", f"{name} must be a positive integer (got {value})")
    if tokens is None and samples is None:
        raise InvalidInput("missing_work", "say how much work: --tokens (e.g. 1e9) or --samples with --epochs")
    within("tokens", tokens, 0, 1e16)
    within("samples", samples, 0, 1e13)
    within("epochs", epochs, 0, 1e5)
    within("seq_len", seq_len, 1, 1 << 20, lo_open=False)
    within("image_size", image_size, 1, 1 << 16, lo_open=False)
    arch = preset.arch if preset else generic_transformer(p)
    return Workload(
        params=p,
        arch=arch,
        task=task,
        precision=precision,
        optimizer=optimizer,
        micro_batch=micro_batch,
        seq_len=seq_len or (preset.seq_len if preset and preset.seq_len else 2048),
        image_size=image_size or (preset.image_size if preset and preset.image_size else 224),
        grad_accum=grad_accum,
        checkpointing=checkpointing,
        adapter=adapter,
        lora_rank=lora_rank,
        sharding=sharding,
        tokens=tokens,
        samples=samples,
        epochs=epochs,
    )
