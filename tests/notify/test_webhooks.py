"""Webhooks for the event feed (issue 10 part 4), on SQLite and PostgreSQL with a fake clock and a
real HTTP receiver on this machine: signed with HMAC-SHA256, at least once with backoff, each with
the event's id to de-duplicate, surviving a restart; a renter's URL reaches only public addresses."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from sqlalchemy import func, select
from standardwebhooks.webhooks import Webhook as StandardWebhook
from standardwebhooks.webhooks import WebhookVerificationError

from danlu.context import Platform
from danlu.core.clock import FakeClock
from danlu.core.errors import InvalidInput, NotFound
from danlu.db.engine import open_database
from danlu.db.models import Event, User, WebhookDelivery
from danlu.notify import signing, webhooks
from danlu.notify.signing import MAX_ATTEMPTS, new_secret, next_retry_s, standard_headers, verify
from tests.billing.test_metering import renter


class Receiver:
    """An HTTP endpoint that answers the status codes it is told to, in order, then 200."""

    def __init__(self) -> None:
        self.got: list[tuple[dict[str, str], bytes]] = []
        self.answers: list[int] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.got.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(outer.answers.pop(0) if outer.answers else 200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()


@pytest.fixture
def p(platform: Platform) -> Platform:
    platform.settings.webhook_allow_private = True  # the receiver is on this machine
    return platform


def event(p: Platform, user: User, kind: str = "idle_stop", message: str = "i-1: idle") -> int:
    with p.db.write() as s:
        e = Event(user_id=user.id, billing_account_id=None, kind=kind, message=message, at_ms=p.clock.now_ms())
        s.add(e)
        s.flush()
        return e.id


def test_a_users_events_are_posted_signed_once_each(p: Platform, receiver: Receiver) -> None:
    ann, eve = renter(p, "ann", None), renter(p, "eve", None)
    before = event(p, ann, message="before the webhook")
    hook = webhooks.add(p, ann, receiver.url)
    assert hook.secret and hook.secret.startswith("whsec_")
    first = event(p, ann)
    event(p, eve, message="eve's, not ann's")
    assert webhooks.enqueue(p) == 1 and webhooks.enqueue(p) == 0  # a delivery row per event, once
    assert webhooks.deliver_due(p) == (1, 0)
    [(headers, body)] = receiver.got
    assert headers["x-danlu-event-id"] == str(first) != str(before)
    assert verify(hook.secret, int(headers["x-danlu-timestamp"]), body, headers["x-danlu-signature"])
    assert not verify("whsec_other", int(headers["x-danlu-timestamp"]), body, headers["x-danlu-signature"])
    assert json.loads(body) | {"at": None} == {
        "id": first, "kind": "idle_stop", "message": "i-1: idle", "instance_id": None, "at": None
    }  # fmt: skip
    assert webhooks.deliver_due(p) == (0, 0)
    [listed] = webhooks.list_webhooks(p, ann)
    assert (listed.delivered, listed.pending, listed.secret) == (1, 0, None)  # the secret is shown once
    # The Standard Webhooks headers, checked by that scheme's own Python library as a receiver would.
    assert headers["webhook-id"] == str(first) and headers["webhook-timestamp"] == headers["x-danlu-timestamp"]
    sent_at = datetime.fromtimestamp(int(headers["webhook-timestamp"]), UTC)
    assert StandardWebhook(hook.secret).sign(str(first), sent_at, body) == headers["webhook-signature"]
    assert StandardWebhook(new_secret()).sign(str(first), sent_at, body) != headers["webhook-signature"]
    assert StandardWebhook(hook.secret).sign(str(before), sent_at, body) != headers["webhook-signature"]  # id signed


def test_a_rotated_secret_signs_beside_the_old_one_for_a_day_then_alone(
    p: Platform, fake_clock: FakeClock, receiver: Receiver
) -> None:
    """Issue 28: a webhook's secret can be rotated without a receiver missing a delivery. For a day
    ``webhook-signature`` carries the new and the old ``v1,`` signature (Standard Webhooks' list);
    after it, the new one alone. The new secret is shown once; another renter's hook is not there."""
    ann, eve = renter(p, "ann", None), renter(p, "eve", None)
    hook = webhooks.add(p, ann, receiver.url)
    rotated = webhooks.rotate_secret(p, ann, hook.id)
    assert rotated.secret and hook.secret and rotated.secret != hook.secret and rotated.secret.startswith("whsec_")
    assert webhooks.list_webhooks(p, ann)[0].secret is None
    with pytest.raises(NotFound):
        webhooks.rotate_secret(p, eve, hook.id)

    def delivered(event_id: int) -> tuple[list[str], datetime, bytes, dict[str, str]]:
        assert webhooks.enqueue(p) == 1 and webhooks.deliver_due(p) == (1, 0)
        headers, body = receiver.got[-1]
        assert headers["webhook-id"] == str(event_id)
        return (
            headers["webhook-signature"].split(" "),
            datetime.fromtimestamp(int(headers["webhook-timestamp"]), UTC),
            body,
            headers,
        )

    first = event(p, ann)
    sigs, at, body, headers = delivered(first)
    assert sigs == [StandardWebhook(s).sign(str(first), at, body) for s in (rotated.secret, hook.secret)]
    assert verify(rotated.secret, int(headers["x-danlu-timestamp"]), body, headers["x-danlu-signature"])
    fake_clock.advance(seconds=24 * 3600)
    second = event(p, ann)
    sigs, at, body, _ = delivered(second)
    assert sigs == [StandardWebhook(rotated.secret).sign(str(second), at, body)]  # the old one is done


def test_standard_webhooks_libraries_verify_every_secret_we_made(fake_clock: FakeClock) -> None:
    """New secrets are whsec_ + standard base64; older ones were urlsafe base64 and are keyed as the
    libraries read them (lenient), so a receiver's library verifies both. Real time: the library
    rejects a timestamp more than 5 minutes from its own clock."""
    import binascii
    import secrets
    import time

    body = b'{"id": 7, "kind": "idle_stop"}'
    assert base64.b64decode(new_secret().removeprefix("whsec_"), validate=True)  # strict base64: every library
    older = ["whsec_" + secrets.token_urlsafe(32) for _ in range(20)] + ["whsec_-_-_" + "Q" * 43]
    for secret in (new_secret(), *older):
        headers = standard_headers(secret, "7", int(time.time()), body)
        try:
            receiver = StandardWebhook(secret)
        except binascii.Error:  # unreadable by any library: no standard headers (test below)
            assert headers == {} and secret in older, secret
            continue
        assert receiver.verify(body, headers) == {"id": 7, "kind": "idle_stop"}
        with pytest.raises(WebhookVerificationError):
            StandardWebhook(new_secret()).verify(body, headers)
        with pytest.raises(WebhookVerificationError):
            StandardWebhook(secret).verify(body.replace(b"7", b"8"), headers)


def test_an_older_secret_no_library_can_read_gets_no_standard_signature_and_delivery_goes_on() -> None:
    """An older urlsafe secret whose base64 letters number 1 more than a multiple of 4 (the '-' and
    '_' skipped) is one the Standard Webhooks libraries cannot read at all; signing with it raised
    binascii.Error in the delivery path (seen in CI on a random one). Such a hook gets only the older
    X-Danlu-Signature; rotating its secret gives it the standard headers."""
    import binascii

    secret = "whsec_-_-_" + "Q" * 41
    with pytest.raises(binascii.Error):
        StandardWebhook(secret)
    assert standard_headers(secret, "7", 1_700_000_000, b"{}") == {}


def test_a_failing_receiver_is_retried_with_backoff_and_sees_the_same_event_id(
    p: Platform, fake_clock: FakeClock, receiver: Receiver
) -> None:
    ann = renter(p, "ann", None)
    hook = webhooks.add(p, ann, receiver.url)
    eid = event(p, ann)
    webhooks.enqueue(p)
    receiver.answers = [500, 503]
    assert webhooks.deliver_due(p) == (0, 1)
    assert webhooks.deliver_due(p) == (0, 0)  # not due again before its backoff
    fake_clock.advance(seconds=next_retry_s(1) or 0)
    assert webhooks.deliver_due(p) == (0, 1)
    fake_clock.advance(seconds=(next_retry_s(2) or 0) - 1)
    assert webhooks.deliver_due(p) == (0, 0)
    fake_clock.advance(seconds=1)
    assert webhooks.deliver_due(p) == (1, 0)
    assert [h["x-danlu-event-id"] for h, _ in receiver.got] == [str(eid)] * 3
    [d] = webhooks.deliveries(p, ann, hook.id)
    assert (d.status, d.attempts, d.last_status_code) == ("delivered", 3, 200)


def test_deliveries_survive_a_restart(p: Platform, receiver: Receiver) -> None:
    ann = renter(p, "ann", None)
    webhooks.add(p, ann, receiver.url)
    event(p, ann)
    webhooks.enqueue(p)  # queued, then the server dies before sending
    p.db.engine.dispose()
    again = Platform(db=open_database(p.db.url), clock=p.clock, backend=p.backend, settings=p.settings,
                     sandbox=p.sandbox)  # fmt: skip
    assert webhooks.deliver_due(again) == (1, 0) and len(receiver.got) == 1
    again.db.engine.dispose()


def test_a_receiver_that_never_answers_2xx_is_given_up_after_the_last_attempt(
    p: Platform, fake_clock: FakeClock
) -> None:
    p.settings.webhook_allow_private = True
    ann = renter(p, "ann", None)
    hook = webhooks.add(p, ann, "http://127.0.0.1:9/closed")  # nothing listens on port 9
    event(p, ann)
    webhooks.enqueue(p)
    for _ in range(MAX_ATTEMPTS):
        fake_clock.advance(seconds=6 * 3600)
        webhooks.deliver_due(p)
    [d] = webhooks.deliveries(p, ann, hook.id)
    assert d.status == "failed" and d.attempts == MAX_ATTEMPTS and d.last_error and d.next_attempt_ms is None


def test_kinds_filter_and_removal(p: Platform, receiver: Receiver) -> None:
    ann = renter(p, "ann", None)
    hook = webhooks.add(p, ann, receiver.url, ["budget_threshold"])
    event(p, ann, "idle_stop")
    event(p, ann, "budget_threshold", "80% of your budget")
    assert webhooks.enqueue(p) == 1
    webhooks.remove(p, ann, hook.id)
    assert webhooks.deliver_due(p) == (0, 0) and receiver.got == []  # dropped with the webhook
    with pytest.raises(InvalidInput) as e:
        webhooks.add(p, ann, receiver.url, ["no_such_kind"])
    assert e.value.code == "invalid_event_kind"


def test_a_renters_url_reaches_only_public_addresses(platform: Platform) -> None:
    ann = renter(platform, "ann", None)
    for url in ("http://127.0.0.1:8000/", "http://10.0.0.5/x", "http://169.254.169.254/latest/meta-data",
                "http://[::1]/", "http://192.168.1.1/", "http://[::ffff:127.0.0.1]/", "http://localhost/"):  # fmt: skip
        with pytest.raises(InvalidInput) as e:
            webhooks.add(platform, ann, url)
        assert e.value.code == "webhook_address_not_allowed", url
    # the last: a bracketed host that is no IPv6 address made urlsplit raise (500; an attacker's pass, issue 28)
    for url in ("ftp://example.com/", "http://", "http://user:pw@8.8.8.8/", "javascript:alert(1)",
                "http://[2001:0:8.8.8.8::]/hook", "http://[fe80::1%25eth0/"):  # fmt: skip
        with pytest.raises(InvalidInput) as e:
            webhooks.add(platform, ann, url)
        assert e.value.code == "invalid_webhook_url", url
    assert webhooks.add(platform, ann, "https://8.8.8.8/hook").id  # a public address (not contacted now)
    with platform.db.read() as s:
        assert s.execute(select(func.count()).select_from(WebhookDelivery)).scalar_one() == 0


def test_another_users_webhook_answers_404(p: Platform, receiver: Receiver) -> None:
    ann, eve = renter(p, "ann", None), renter(p, "eve", None)
    hook = webhooks.add(p, ann, receiver.url)
    for call in (lambda: webhooks.deliveries(p, eve, hook.id), lambda: webhooks.remove(p, eve, hook.id)):
        with pytest.raises(NotFound) as e:
            call()
        assert e.value.code == "webhook_not_found"
    assert webhooks.list_webhooks(p, eve) == [] and len(webhooks.list_webhooks(p, ann)) == 1


def test_a_delivery_goes_to_the_address_just_checked_with_the_name_as_host(
    p: Platform, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DNS rebinding: the name is resolved once per attempt, checked, and the request goes to that
    address (the name only in Host and, for https, SNI), so a second lookup cannot aim it elsewhere."""
    port = receiver.server.server_address[1]
    lookups: list[str] = []

    def resolver(host: str, _port: int) -> list[str]:
        lookups.append(host)
        return ["127.0.0.1"]  # the first answer; a rebinding DNS would answer differently next time

    monkeypatch.setattr(webhooks, "resolve_host", resolver)
    monkeypatch.setattr(webhooks.check_url, "__defaults__", (resolver,))
    ann = renter(p, "ann", None)
    webhooks.add(p, ann, f"http://hooks.danlu.test:{port}/hook")
    event(p, ann)
    webhooks.enqueue(p)
    assert webhooks.deliver_due(p) == (1, 0)  # hooks.danlu.test resolves nowhere else: it went to the pin
    [(headers, _)] = receiver.got
    assert headers["host"] == f"hooks.danlu.test:{port}" and lookups == ["hooks.danlu.test"] * 2


def test_pinned_urls_keep_the_port_path_and_the_name_for_tls() -> None:
    assert webhooks.pinned("https://hooks.example.org:8443/a/b?c=1", "93.184.216.34") == (
        "https://93.184.216.34:8443/a/b?c=1",
        {"Host": "hooks.example.org:8443"},
        {"sni_hostname": "hooks.example.org"},
    )
    assert webhooks.pinned("http://hooks.example.org/x", "2001:db8::1") == (
        "http://[2001:db8::1]/x",
        {"Host": "hooks.example.org"},
        {},
    )


def test_a_renters_url_never_reaches_this_machine_by_its_own_public_address(
    platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a host with a public address, services listening on 0.0.0.0 were reachable by a renter's webhook
    (the check was "is it global?" only; the sandbox's network filter already excludes the host's own)."""
    monkeypatch.setattr(webhooks, "host_addresses", lambda: ["127.0.0.1", "93.184.216.34"])  # this machine's
    ann = renter(platform, "ann", None)
    with pytest.raises(InvalidInput) as e:
        webhooks.add(platform, ann, "http://93.184.216.34:9090/metrics")
    assert e.value.code == "webhook_address_not_allowed" and "this machine" in e.value.message
    assert webhooks.add(platform, ann, "https://8.8.8.8/hook").id  # another public address


# IPv6 forms that carry an IPv4 address inside (issue 28, finding 1): Python's is_global calls
# them public, and a NAT64, 6to4, Teredo or SIIT gateway on the path delivers them to that IPv4.
EMBEDDED = {
    "::127.0.0.1": "IPv4-compatible (::/96)",
    "::a9fe:a9fe": "IPv4-compatible, the metadata address",
    "2002:7f00:1::": "6to4 of 127.0.0.1",
    "2002:a00:5::1": "6to4 of 10.0.0.5",
    "2002:c0a8:101::": "6to4 of 192.168.1.1",
    "64:ff9b::127.0.0.1": "NAT64 well-known prefix",
    "64:ff9b::a9fe:a9fe": "NAT64 well-known prefix, the metadata address",
    "64:ff9b:1::a00:5": "NAT64 local-use prefix (RFC 8215: never public)",
    "::ffff:0:a00:5": "SIIT IPv4-translated (::ffff:0:0:0/96)",
    "2001:0:4136:e378:8000:63bf:80ff:fffe": "Teredo whose client is 127.0.0.1 (obfuscated)",
    "2001:0:7f00:1::1": "Teredo whose server is 127.0.0.1",
    # Not global unicast, though Python 3.11's is_global says public (an attacker's pass, issue 28):
    "fec0::1": "site-local (deprecated, RFC 3879)",
    "5f00::1": "SRv6 SIDs (RFC 9602)",
    "4000::1": "unassigned, outside 2000::/3",
}


@pytest.mark.parametrize("address", sorted(EMBEDDED))
def test_an_ipv6_address_carrying_a_private_ipv4_is_refused(address: str) -> None:
    assert signing.forbidden_address([address]) is not None, EMBEDDED[address]


def test_ipv6_forms_of_public_ipv4_and_plain_public_ipv6_pass() -> None:
    for address in ("2002:808:808::1", "64:ff9b::8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8"):
        assert signing.forbidden_address([address]) is None, address
