from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response
from pydantic import TypeAdapter

from danlu.api import hot
from danlu.api.deps import CurrentUser, PlatformDep
from danlu.api.paging import ListRoute, paged
from danlu.api.schemas.common import Amount, GpuModel, errors
from danlu.api.schemas.instances import OfferOut
from danlu.compute.offers import Offer, render_offers

router = APIRouter(route_class=ListRoute, tags=["offers"], responses=errors(401))
OFFERS = TypeAdapter(list[OfferOut])


def _json(offers: list[Offer]) -> bytes:
    return OFFERS.dump_json([OfferOut.of(o) for o in offers])


@router.get("/offers", response_model=list[OfferOut], **paged("gpu_model"))
async def get_offers(  # a memo hit on the event loop, a miss in the thread pool
    p: PlatformDep,
    _user: CurrentUser,
    gpu: Annotated[GpuModel | None, Query()] = None,
    min_vram: Annotated[int | None, Query(ge=0, le=1_000_000, description="minimum VRAM in GB")] = None,
    max_price: Annotated[Amount | None, Query(description="maximum price per GPU-hour, e.g. 12.50")] = None,
) -> Response:
    """The JSON bytes are rendered again only when the offers were read again (offers.render_offers)."""
    return Response(
        await hot.once(
            hot.offers_memo(p, gpu, min_vram, max_price),
            lambda: render_offers(p, _json, gpu, min_vram, max_price, "json"),
        ),
        media_type="application/json",
    )
