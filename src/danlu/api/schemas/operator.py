"""The operator's controls: images, hosts and their sandbox, prices, GPUs, top-ups and quotas."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field

from danlu.api.schemas.accounts import BalanceOut
from danlu.api.schemas.common import (
    MAX_QUOTA,
    NETWORK_POLICY,
    NO_CONTROL,
    Amount,
    ImageName,
    PositiveAmount,
    Strict,
    limited,
)
from danlu.compute.sandbox.network import POLICIES

IMAGE_SOURCE = r"^(/|(/[^\x00/]{1,63}){1,64}/?)$"


class ImageIn(Strict):
    name: ImageName
    source: Annotated[
        str,
        Field(
            max_length=1000,
            pattern=IMAGE_SOURCE,
            description="Absolute path on the server's host: an existing root filesystem folder or a tarball, "
            "owned by root; names in it at most 63 characters",
        ),
        limited(
            "invalid_image_source",
            "{value} is not an absolute path (names in it at most 63 characters, no NUL bytes)",
            pattern=IMAGE_SOURCE,
        ),
    ]
    description: Annotated[
        str,
        Field(max_length=500, pattern=NO_CONTROL),
        limited(
            "invalid_description", "an image description is at most 500 characters, no control characters", text=500
        ),
    ] = ""


class ImageContents(BaseModel):
    suite: str | None = Field(description="the Debian suite it was built from")
    apt: list[str] = Field(description="the Debian packages the recipe asked for")
    pip: list[str] = Field(description="the pip requirements the recipe asked for")
    debian_packages: int = Field(description="how many Debian packages are installed (/etc/danlu-image.packages)")
    pip_installed: list[str] = Field(description="pip freeze of what pip installed (/etc/danlu-image.pip)")


class ImageOut(BaseModel):
    name: str
    kind: str
    description: str
    size_bytes: int | None
    created_at: str | None
    contents: ImageContents | None = Field(
        None, description="what an image built by `danlu admin image build` holds; null for others"
    )


def _host_limit(lo: float, hi: float, what: str) -> Any:
    def num(x: float) -> str:
        return str(int(x)) if float(x).is_integer() else f"{x:g}"

    return limited("invalid_host_limit", f"{what} is between {num(lo)} and {num(hi)}", lo=lo, hi=hi)


class HostIn(Strict):
    cpus_per_gpu: (
        Annotated[float, Field(ge=0.1, le=1000, allow_inf_nan=False), _host_limit(0.1, 1000, "vCPUs per GPU")] | None
    ) = Field(None, description="vCPUs per GPU")
    memory_per_gpu_mb: (
        Annotated[int, Field(ge=64, le=1 << 30), _host_limit(64, 1 << 30, "memory per GPU (MiB)")] | None
    ) = None
    disk_per_gpu_mb: Annotated[int, Field(ge=16, le=1 << 40), _host_limit(16, 1 << 40, "disk per GPU (MiB)")] | None = (
        None
    )
    pids_per_gpu: Annotated[int, Field(ge=16, le=1 << 22), _host_limit(16, 1 << 22, "processes per GPU")] | None = None
    network_policy: (
        Annotated[
            str,
            Field(pattern=f"^({NETWORK_POLICY})$"),
            limited(
                "invalid_network_policy",
                "the network policy is one of " + ", ".join(POLICIES),
                pattern=f"^({NETWORK_POLICY})$",
            ),
        ]
        | None
    ) = None


class HostOut(BaseModel):
    name: str
    gpus: int
    vcpus_per_gpu: str
    memory_per_gpu_mb: int
    disk_per_gpu_mb: int
    pids_per_gpu: int
    network_policy: str
    sandbox: str
    limits_enforced_by: str
    identity: str
    detail: str


class SandboxOut(BaseModel):
    instance_id: str
    user: str
    job_id: str | None
    host: str
    status: str
    image: str
    uid: int | None
    network: str
    limits: dict[str, Any]


class AmountIn(Strict):
    amount: Amount


class TopupIn(Strict):
    amount: PositiveAmount


class PriceIn(Strict):
    price_per_hour: PositiveAmount
    interruptible_price_per_hour: PositiveAmount | None = Field(None, description="At most the on-demand price")


class PriceOut(BaseModel):
    gpu_model: str
    price_per_hour: str
    interruptible_price_per_hour: str | None
    currency: str


class TopupOut(BalanceOut):
    created: bool


class GpuOut(BaseModel):
    host: str
    index: int
    uuid: str
    model: str
    nvml_name: str
    vram_mb: int
    simulated: bool
    present: bool
    instance_id: str | None
    hold_id: str | None = None


class QuotaIn(Strict):
    gpus: (
        Annotated[
            int,
            Field(ge=0, le=MAX_QUOTA),
            limited(
                "invalid_quota",
                f"a GPU quota is a whole number of GPUs, 0 to {MAX_QUOTA} (or null for none)",
                lo=0,
                hi=MAX_QUOTA,
            ),
        ]
        | None
    )


class QuotaOut(BaseModel):
    name: str
    gpus: int | None
