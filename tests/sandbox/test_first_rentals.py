"""A new renter's first rentals at once (issue 28, finding 5): on PostgreSQL, 8 parallel first
rentals answered 7 × 500 DeadlockDetected. Each rental's transaction took a key-share lock on the
renter's ``users`` row (the instance's foreign key), then the payer's lock, then updated
``users.sandbox_uid`` (a unique column: that update waits for every other key-share lock), so two
first rentals each waited for the other. The uid is now given in a transaction of its own before."""

from __future__ import annotations

import threading

import httpx
import pytest

from tests.conftest import LiveServer
from tests.sandbox.conftest import sbx  # noqa: F401 - the sandboxed live server

pytestmark = pytest.mark.slow(seconds=20)


@pytest.mark.parametrize("attempt", range(3))
def test_a_new_renters_first_rentals_at_once_all_succeed(sbx: LiveServer, attempt: int) -> None:  # noqa: F811
    with sbx.admin() as a:
        made = a.post("/admin/users", json={"name": f"eager{attempt}"})
        assert made.status_code == 201, made.text
        token = made.json()["token"]
        assert a.post(f"/admin/users/eager{attempt}/topup", json={"amount": "500.00"}).status_code == 200
    answers: list[httpx.Response] = []
    start = threading.Barrier(4)

    def rent(gpu: str) -> None:
        with sbx.client(token) as c:
            start.wait()
            answers.append(c.post("/instances", json={"gpu_model": gpu, "command": ["sleep", "600"]}))

    threads = [threading.Thread(target=rent, args=(gpu,)) for gpu in ("T4", "T4", "A100-80GB", "A100-80GB")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.status_code for r in answers) == [201] * 4, [r.text[:300] for r in answers]
    with sbx.client(token) as c:
        uids = {c.get(f"/instances/{r.json()['id']}").json().get("sandbox", {}).get("uid") for r in answers}
        for r in answers:
            c.delete(f"/instances/{r.json()['id']}")
    assert len(uids) == 1 and isinstance(next(iter(uids)), int), uids  # one renter, one uid
