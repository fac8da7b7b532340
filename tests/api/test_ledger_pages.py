"""The ledger pages back with a cursor (issue 12: it answered at most 1,000 entries, with no way on)."""

from __future__ import annotations

from tests.conftest import LiveServer


def test_the_ledger_pages_back_by_cursor_without_gaps_or_repeats(live: LiveServer) -> None:
    with live.new_user("pia", topup=None) as c, live.admin() as a:
        for i in range(5):
            assert a.post("/admin/users/pia/topup", json={"amount": f"1.0{i}"}).status_code == 200
        seen: list[int] = []
        params: dict[str, int] = {"limit": 2}
        pages = 0
        while True:
            r = c.get("/ledger", params=params)
            assert r.status_code == 200, r.text
            lines = r.json()
            seen += [line["transaction_id"] for line in lines]
            pages += 1
            cursor = r.headers.get("X-Next-Before")
            if cursor is None:
                break
            assert int(cursor) == lines[-1]["transaction_id"]
            params = {"limit": 2, "before": int(cursor)}
        assert pages == 3 and len(seen) == 5 == len(set(seen))
        assert seen == sorted(seen, reverse=True)  # newest first, each once
        amounts = [line["amount"] for line in c.get("/ledger").json()]
        assert amounts == ["1.04", "1.03", "1.02", "1.01", "1.00"]
        bad = c.get("/ledger", params={"before": 0})
        assert bad.status_code == 422 and bad.json()["error"]["code"]
