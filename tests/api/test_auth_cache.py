"""The current user is served from a cache (api/deps.py get_current_user, compute/views.py
ReadCache): any write to ``users`` in this process must be seen by the very next request —
a revoked or rotated token is refused at once, a suspension refuses new work at once."""

from __future__ import annotations

from sqlalchemy import update

from danlu.accounts.service import revoke_token
from danlu.compute.views import ReadCache
from danlu.context import Platform
from danlu.db.models import User
from tests.conftest import LiveServer

SLEEP = ["sleep", "60"]


def err(r: object) -> tuple[int, str]:
    import httpx

    assert isinstance(r, httpx.Response)
    return r.status_code, str(r.json()["error"]["code"])


def test_revoked_and_rotated_tokens_are_refused_on_the_next_request(live: LiveServer) -> None:
    with live.new_user("rita") as c, live.admin() as a:
        for _ in range(3):  # cached now
            assert c.get("/offers").status_code == 200
        assert a.post("/admin/users/rita/token/revoke").status_code == 200
        assert err(c.get("/offers")) == (401, "invalid_token")

        r = a.post("/admin/users/rita/token/rotate")
        assert r.status_code == 200, r.text
        new = r.json()["token"]
        assert err(c.get("/offers")) == (401, "invalid_token")  # the revoked one stays refused
        with live.client(new) as c2:
            assert c2.get("/offers").status_code == 200
            assert c2.get("/offers").status_code == 200  # cached
            assert a.post("/admin/users/rita/token/rotate").status_code == 200
            assert err(c2.get("/offers")) == (401, "invalid_token")


def test_a_suspension_refuses_new_work_on_the_next_request(live: LiveServer) -> None:
    with live.new_user("sue") as c, live.admin() as a:
        assert c.get("/instances").json() == []  # the user is cached, not suspended
        assert a.post("/admin/users/sue/suspend", json={"reason": "audit"}).status_code == 200
        r = c.post("/instances", json={"gpu_model": "T4", "command": SLEEP})
        assert err(r) == (403, "account_suspended")
        assert a.post("/admin/users/sue/resume").status_code == 200
        r = c.post("/instances", json={"gpu_model": "T4", "command": SLEEP})
        assert r.status_code == 201, r.text
        assert c.delete(f"/instances/{r.json()['id']}").status_code == 204


def test_a_write_to_users_outside_the_api_is_seen_too(live: LiveServer) -> None:
    """Invalidation follows the SQL, not a call site: a service called directly (here: revoke
    in the test's own transaction) is seen by the next request as well."""
    with live.new_user("walt") as c:
        assert c.get("/offers").status_code == 200
        with live.platform.db.write() as s:
            revoke_token(s, "walt")
        assert err(c.get("/offers")) == (401, "invalid_token")


def test_a_value_loaded_while_its_table_was_written_is_read_again(platform: Platform) -> None:
    """The load may have read the rows from before the write: it is used once, then read again."""
    cache: ReadCache[str, int] = ReadCache(("users",), ttl_s=60.0)
    loads = 0

    def load_while_writing() -> int:
        nonlocal loads
        loads += 1
        with platform.db.write() as s:
            s.execute(update(User).where(User.name == "nobody").values(gpu_quota=1))
        return loads

    assert cache.get(platform.db.engine, "k", load_while_writing) == 1
    assert cache.get(platform.db.engine, "k", lambda: 99) == 99  # loaded again: nothing was stored
    assert cache.get(platform.db.engine, "k", lambda: 100) == 99  # now kept
    with platform.db.write() as s:
        s.execute(update(User).where(User.name == "nobody").values(gpu_quota=2))
    assert cache.get(platform.db.engine, "k", lambda: 101) == 101  # any write to users: read again
    with platform.db.write() as s:
        s.execute(update(User).where(User.name == "nobody").values(gpu_quota=3))
        s.rollback()
    assert cache.get(platform.db.engine, "k", lambda: 102) == 102  # a rolled-back write: read again too


def test_offers_and_the_listing_follow_every_write_at_once(live: LiveServer) -> None:
    """The same mechanism serves offers and ``ps`` (compute/offers.py, compute/views.py): a price
    change, a claimed GPU, a new or stopped instance shows on the very next read."""
    with live.new_user("olga") as c, live.admin() as a:

        def t4() -> dict[str, object]:
            return dict(next(o for o in c.get("/offers").json() if o["gpu_model"] == "T4"))

        before = t4()
        assert c.get("/instances").json() == []  # both cached now
        assert a.put("/admin/prices/T4", json={"price_per_hour": "7.20"}).status_code == 200
        assert t4()["price_per_hour"] == "7.20"
        r = c.post("/instances", json={"gpu_model": "T4", "command": SLEEP})
        assert r.status_code == 201, r.text
        iid = r.json()["id"]
        assert t4()["free"] == int(str(before["free"])) - 1
        assert [i["id"] for i in c.get("/instances").json()] == [iid]
        assert c.post(f"/instances/{iid}/stop").status_code == 200
        assert c.get("/instances").json()[0]["status"] in ("stopping", "stopped")
        assert c.delete(f"/instances/{iid}").status_code == 204
        assert c.get("/instances").json() == []
