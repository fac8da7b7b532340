"""Races with real concurrent HTTP requests, on SQLite and PostgreSQL."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from tests.conftest import LiveServer


def test_renters_racing_for_the_last_gpu_exactly_one_wins(live: LiveServer) -> None:
    clients = [live.new_user(f"racer{i}") for i in range(8)]
    first = clients[0].post("/instances", json={"gpu_model": "A100-80GB", "command": ["sleep", "60"]})
    assert first.status_code == 201  # one A100 left now

    def rent(i: int) -> int:
        r = clients[i].post("/instances", json={"gpu_model": "A100-80GB", "command": ["sleep", "60"]})
        return r.status_code

    for _ in range(2):  # two rounds: the race for the last GPU, then for none
        with ThreadPoolExecutor(max_workers=8) as pool:
            codes = list(pool.map(rent, range(1, 8)))
        wins = codes.count(201)
        assert wins == (1 if _ == 0 else 0), codes
        assert all(code in (201, 409) for code in codes), codes
    with live.admin() as a:
        offer = a.get("/offers", params={"gpu": "A100-80GB"}).json()[0]
        assert offer["free"] == 0 and offer["total"] == 2
    for c in clients:
        for inst in c.get("/instances").json():
            c.delete(f"/instances/{inst['id']}")
        c.close()


def test_concurrent_topups_with_one_key_pay_once(live: LiveServer) -> None:
    with live.new_user("payee", topup=None) as c, live.admin() as a:

        def pay(_: int) -> int:
            r = a.post("/admin/users/payee/topup", json={"amount": "5.00"}, headers={"Idempotency-Key": "once"})
            return r.status_code

        with ThreadPoolExecutor(max_workers=8) as pool:
            codes = list(pool.map(pay, range(8)))
        assert set(codes) == {200}
        assert c.get("/balance").json()["balance"] == "5.00"
