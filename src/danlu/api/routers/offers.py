from __future__ import annotations

from fastapi import APIRouter, Query

from danlu.api.deps import CurrentUser, PlatformDep
from danlu.api.schemas import OfferOut
from danlu.compute.offers import list_offers

router = APIRouter(tags=["offers"])


@router.get("/offers", response_model=list[OfferOut])
async def get_offers(  # reads only: served on the event loop (see api/deps.py)
    p: PlatformDep,
    _user: CurrentUser,
    gpu: str | None = None,
    min_vram: int | None = Query(default=None, description="minimum VRAM in GB"),
    max_price: str | None = Query(default=None, description="maximum price per GPU-hour, e.g. 12.50"),
) -> list[OfferOut]:
    return [OfferOut.of(o) for o in list_offers(p, gpu, min_vram, max_price)]
