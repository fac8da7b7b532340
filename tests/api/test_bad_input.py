"""Bad input: a 4xx with a stable code and a helpful message, and nothing changes."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import LiveServer


def snapshot(live: LiveServer, c: httpx.Client) -> tuple[object, ...]:
    return (c.get("/instances").json(), c.get("/balance").json(), live.admin().get("/offers").json())


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"gpu_model": "Z9000", "command": ["true"]}, 422, "unknown_gpu_model"),
        ({"gpu_model": "H100-80GB", "command": ["true"]}, 409, "model_not_offered"),
        ({"gpu_model": "T4", "gpu_count": 0, "command": ["true"]}, 422, "invalid_gpu_count"),
        ({"gpu_model": "T4", "gpu_count": -1, "command": ["true"]}, 422, "invalid_gpu_count"),
        ({"gpu_model": "T4", "gpu_count": 3, "command": ["true"]}, 422, "count_exceeds_host"),
        ({"gpu_model": "T4", "command": []}, 422, "invalid_command"),
        ({"gpu_model": "T4", "gpu_count": "two", "command": ["true"]}, 422, "invalid_request"),
        ({"gpu_model": "T4"}, 422, "invalid_request"),
        ({"gpu_model": "T4", "command": ["true"], "surprise": 1}, 422, "invalid_request"),
        ({"gpu_model": "T4", "gpu_count": 2**31, "command": ["true"]}, 422, "invalid_gpu_count"),
        ({"gpu_model": "T4", "gpu_count": 2**63, "command": ["true"]}, 422, "invalid_gpu_count"),
        ({"gpu_model": "T4", "command": ["true"], "image": "no-such"}, 404, "image_not_found"),
        ({"gpu_model": "T4", "command": ["true"], "env": {"A B": "x"}}, 422, "invalid_env"),
        ({"gpu_model": "T4", "command": ["true"], "env": {"HOME": "/"}}, 422, "invalid_env"),
        ({"gpu_model": "T4", "command": ["true"], "env": {"X": "a\u0000b"}}, 422, "invalid_env"),
        ({"gpu_model": "T4", "command": ["true"], "name": "a\u0000b"}, 422, "invalid_name"),
    ],
)
def test_bad_rent_requests(live: LiveServer, body: dict[str, object], status: int, code: str) -> None:
    with live.new_user("eve") as c:
        before = snapshot(live, c)
        r = c.post("/instances", json=body)
        assert r.status_code == status, r.text
        err = r.json()["error"]
        assert err["code"] == code and len(err["message"]) > 10
        assert snapshot(live, c) == before


def test_malformed_json_and_auth(live: LiveServer) -> None:
    with live.new_user("fred") as c:
        r = c.post("/instances", content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "malformed_json"
    with live.client() as anon:
        r = anon.get("/instances")
        assert r.status_code == 401 and r.json()["error"]["code"] == "missing_token"
    with live.client("dl_wrong") as bad:
        r = bad.get("/balance")
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_token"
    with live.new_user("gina") as g:
        r = g.post("/admin/users", json={"name": "mallory"})
        assert r.status_code == 403 and r.json()["error"]["code"] == "admin_only"


def test_another_tenants_instance_is_404(live: LiveServer) -> None:
    with live.new_user("hank") as owner, live.new_user("ivan") as other:
        iid = owner.post("/instances", json={"gpu_model": "T4", "command": ["sleep", "30"]}).json()["id"]
        for method, path in [("GET", ""), ("POST", "/stop"), ("POST", "/start"), ("DELETE", ""), ("GET", "/logs")]:
            r = other.request(method, f"/instances/{iid}{path}")
            assert r.status_code == 404, (method, path)
            assert r.json()["error"]["code"] == "instance_not_found"
        assert owner.get(f"/instances/{iid}").json()["status"] == "running"
        assert other.get("/instances/i-doesnotexist").status_code == 404
        owner.delete(f"/instances/{iid}")


@pytest.mark.parametrize("amount", ["-5", "1.234", "abc", "0", ""])
def test_bad_topups_change_nothing(live: LiveServer, amount: str) -> None:
    with live.new_user("judy", topup="1.00") as c, live.admin() as a:
        r = a.post("/admin/users/judy/topup", json={"amount": amount})
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_amount"
        assert c.get("/balance").json()["balance"] == "1.00"
        r = a.post("/admin/users/judy/topup", json={"amount": 5})
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request"
        r = a.post("/admin/users/nobody/topup", json={"amount": "1"})
        assert r.status_code == 404 and r.json()["error"]["code"] == "user_not_found"


def test_bad_prices_and_unpriced_models(live: LiveServer) -> None:
    with live.admin() as a:
        assert a.put("/admin/prices/T4", json={"price_per_hour": "-1"}).json()["error"]["code"] == "invalid_amount"
        assert a.put("/admin/prices/Z9", json={"price_per_hour": "1"}).json()["error"]["code"] == "unknown_gpu_model"
        assert a.get("/offers", params={"gpu": "T4"}).json()[0]["price_per_hour"] == "3.60"
        assert a.get("/offers", params={"max_price": "abc"}).json()["error"]["code"] == "invalid_amount"
        assert [o["gpu_model"] for o in a.get("/offers", params={"min_vram": 40}).json()] == ["A100-80GB"]
        assert [o["gpu_model"] for o in a.get("/offers", params={"max_price": "10"}).json()] == ["T4"]


def test_insufficient_balance_to_rent(live: LiveServer) -> None:
    with live.new_user("kim", topup=None) as c:
        r = c.post("/instances", json={"gpu_model": "T4", "command": ["true"]})
        assert r.status_code == 402 and r.json()["error"]["code"] == "insufficient_funds"
        assert "top up" in r.json()["error"]["message"]
        assert c.get("/instances").json() == []


def test_gpu_quota_over_http(live: LiveServer) -> None:
    with live.new_user("quinn") as c, live.admin() as a:
        r = a.put("/admin/users/quinn/gpu-quota", json={"gpus": -1})
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_quota"
        assert a.put("/admin/users/quinn/gpu-quota", json={"gpus": 1}).json() == {"name": "quinn", "gpus": 1}
        r = c.post("/instances", json={"gpu_model": "T4", "gpu_count": 2, "command": ["true"]})
        assert r.status_code == 429 and r.json()["error"]["code"] == "gpu_quota_exceeded"
        assert c.get("/instances").json() == []
        assert a.put("/admin/users/quinn/gpu-quota", json={"gpus": None}).json()["gpus"] is None
        assert c.put("/admin/users/quinn/gpu-quota", json={"gpus": 9}).status_code == 403


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"command": ["sh", "-c", "echo a\u0000b"]}, "invalid_command"),  # issue 8: a NUL held a GPU forever
        ({"command": ["true"], "gpus": 2**40}, "invalid_gpu_count"),
        ({"command": ["true"], "image": "no-such"}, "image_not_found"),
        ({"command": ["true"], "env": {"DANLU_JOB_ID": "x"}}, "invalid_env"),
    ],
)
def test_bad_job_submissions_queue_nothing(live: LiveServer, body: dict[str, object], code: str) -> None:
    with live.new_user("jude") as c:
        r = c.post("/jobs", json=body)
        assert r.json()["error"]["code"] == code, r.text
        assert r.status_code in (404, 422)
        assert c.get("/jobs").json() == []
