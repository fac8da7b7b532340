"""Resize on start (issue 26, item 3): a stopped rental starts again on another GPU model or count,
its workspace with it, as a new allocation at the new shape's price, shown and confirmed first.
Every refusal changes nothing. Real HTTP, real sandbox, SQLite and PostgreSQL."""

from __future__ import annotations

import httpx

from tests.conftest import LiveServer, wait_for

KEEP = ["sh", "-c", "cat state.txt 2>/dev/null; echo kept > state.txt; echo gpus=$CUDA_VISIBLE_DEVICES; sleep 60"]


def _stopped(c: httpx.Client, body: dict[str, object]) -> str:
    r = c.post("/instances", json=body)
    assert r.status_code == 201, r.text
    iid = str(r.json()["id"])
    wait_for(lambda: "gpus=" in c.get(f"/instances/{iid}/logs").json()["text"])
    assert c.post(f"/instances/{iid}/stop").status_code == 200
    wait_for(lambda: c.get(f"/instances/{iid}").json()["status"] == "stopped")
    return iid


def test_a_stopped_rental_starts_again_on_another_model_and_count_with_its_workspace(live: LiveServer) -> None:
    with live.new_user("rhea", topup="500.00") as c:
        iid = _stopped(c, {"gpu_model": "T4", "command": KEEP})
        r = c.post(
            f"/instances/{iid}/start", json={"gpu_model": "A100-80GB", "gpu_count": 2, "expected_price": "72.00"}
        )
        assert r.status_code == 200, r.text
        v = r.json()
        assert v["status"] == "running", (v["status_reason"], c.get(f"/instances/{iid}/logs").json()["text"][-2000:])
        assert (v["gpu_model"], v["gpu_count"], v["price_per_hour"]) == ("A100-80GB", 2, "36.00")
        wait_for(lambda: "kept" in c.get(f"/instances/{iid}/logs").json()["text"])  # the same workspace
        reasons = [e["reason"] for e in c.get(f"/instances/{iid}/events").json()]
        assert "start requested; resized from 1× T4 to 2× A100-80GB" in reasons
        assert c.get("/offers", params={"gpu": "A100-80GB"}).json()[0]["free"] == 0
        assert c.get("/offers", params={"gpu": "T4"}).json()[0]["free"] == 2  # the old GPUs are free
        with live.platform.db.read() as s:
            from sqlalchemy import select

            from danlu.db.models import AllocationRow

            shapes = [
                (a.gpu_model, a.gpu_count, a.price_per_hour_minor, a.ended_at_ms is not None)
                for a in s.scalars(
                    select(AllocationRow).where(AllocationRow.instance_id == iid).order_by(AllocationRow.id)
                )
            ]
        assert shapes == [("T4", 1, 360, True), ("A100-80GB", 2, 3600, False)]  # billing sees a new allocation
        # no body: as it is now (2x A100-80GB), as before
        assert c.post(f"/instances/{iid}/stop").status_code == 200
        wait_for(lambda: c.get(f"/instances/{iid}").json()["status"] == "stopped")
        again = c.post(f"/instances/{iid}/start").json()
        assert (again["gpu_model"], again["gpu_count"]) == ("A100-80GB", 2)
        c.delete(f"/instances/{iid}")


def test_a_resize_that_cannot_happen_changes_nothing(live: LiveServer) -> None:
    with live.admin() as a:
        for host in a.get("/admin/hosts").json():
            assert a.put(f"/admin/hosts/{host['name']}", json={"disk_per_gpu_mb": 32}).status_code == 200
    with live.new_user("sami", topup="500.00") as c, live.new_user("theo") as other:
        big = ["sh", "-c", "truncate -s 40M big.bin; echo gpus=$CUDA_VISIBLE_DEVICES; sleep 60"]  # 40 of 64 MiB
        iid = _stopped(c, {"gpu_model": "T4", "gpu_count": 2, "command": big})
        refusals = [
            ({"gpu_model": "A100-80GB", "expected_price": "36.00"}, 409, "price_changed"),  # 2 GPUs: 72.00
            ({"gpu_count": 1}, 409, "disk_limit"),  # 40 MiB > 32 MiB of one GPU
            ({"gpu_count": 3}, 422, "count_exceeds_host"),
            ({"gpu_model": "NoSuchGPU"}, 422, "unknown_gpu_model"),
            ({"gpu_count": 0}, 422, "invalid_gpu_count"),
        ]
        for body, status, code in refusals:
            r = c.post(f"/instances/{iid}/start", json=body)
            assert (r.status_code, r.json()["error"]["code"]) == (status, code), (body, r.text)
            v = c.get(f"/instances/{iid}").json()
            assert (v["status"], v["gpu_model"], v["gpu_count"]) == ("stopped", "T4", 2), body
        assert "needs more" not in r.text
        assert other.post(f"/instances/{iid}/start", json={"gpu_count": 1}).status_code == 404
        assert c.get("/offers", params={"gpu": "A100-80GB"}).json()[0]["free"] == 2
        ok = c.post(f"/instances/{iid}/start", json={"gpu_model": "A100-80GB", "expected_price": "72.00"})
        assert ok.status_code == 200 and ok.json()["gpu_model"] == "A100-80GB", ok.text
        c.delete(f"/instances/{iid}")


def test_a_new_rental_starts_with_a_copy_of_a_stopped_one_links_kept_as_links(live: LiveServer) -> None:
    make = "mkdir -p d; echo data > d/f; ln -sf /etc/passwd link; echo gpus=$CUDA_VISIBLE_DEVICES; sleep 60"
    read = "cat d/f; readlink link; echo gpus=$CUDA_VISIBLE_DEVICES; sleep 60"
    with live.new_user("vera", topup="500.00") as c, live.new_user("walt") as other:
        src = _stopped(c, {"gpu_model": "T4", "command": ["sh", "-c", make]})
        running = c.post("/instances", json={"gpu_model": "T4", "command": ["sleep", "60"]}).json()["id"]
        before = sorted(p.name for p in live.platform.workspaces.iterdir())
        refusals = [
            ({"from_instance": running}, 409, "source_running"),
            ({"from_instance": "i-0000000000"}, 404, "instance_not_found"),
            ({"from_instance": "../../etc"}, 422, "invalid_instance_id"),
            ({"from_instance": src, "gpu_count": 3}, 422, "count_exceeds_host"),  # after the copy: it goes
        ]
        for extra, status, code in refusals:
            r = c.post("/instances", json={"gpu_model": "A100-80GB", "command": ["sleep", "1"], **extra})
            assert (r.status_code, r.json()["error"]["code"]) == (status, code), (extra, r.text)
        assert sorted(p.name for p in live.platform.workspaces.iterdir()) == before  # no copy left behind
        r = other.post("/instances", json={"gpu_model": "A100-80GB", "command": ["sleep", "1"], "from_instance": src})
        assert r.status_code == 404  # another renter's workspace is not there to copy

        r = c.post("/instances", json={"gpu_model": "A100-80GB", "command": ["sh", "-c", read], "from_instance": src})
        assert r.status_code == 201, r.text
        new = r.json()["id"]
        wait_for(lambda: "gpus=" in c.get(f"/instances/{new}/logs").json()["text"])
        assert "data\n/etc/passwd\n" in c.get(f"/instances/{new}/logs").json()["text"]
        link = live.platform.workspaces / new / "link"
        assert link.is_symlink() and not (live.platform.workspaces / new / "passwd").exists()
        assert (live.platform.workspaces / src / "d" / "f").read_text() == "data\n"  # the source is untouched
        assert (live.platform.workspaces / new / "d" / "f").stat().st_uid == (
            live.platform.workspaces / src
        ).stat().st_uid
        reasons = [e["reason"] for e in c.get(f"/instances/{new}/events").json()]
        assert f"rented with a copy of {src}'s workspace" in reasons
        for iid in (src, running, new):
            c.delete(f"/instances/{iid}")
