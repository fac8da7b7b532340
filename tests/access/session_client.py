"""A test's client of the session WebSocket (danlu.access.protocol), on websockets' sync client."""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import urlencode

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from danlu.access import protocol
from tests.conftest import LiveServer


class Session:
    def __init__(
        self,
        srv: LiveServer,
        token: str | None,
        instance_id: str,
        command: list[str] = (),  # type: ignore[assignment]
        kind: str = "instances",
        **q: Any,
    ) -> None:
        params = [("command", c) for c in command] + [(k, str(v)) for k, v in q.items()]
        url = f"ws://127.0.0.1:{srv.port}/api/v1/{kind}/{instance_id}/exec?{urlencode(params)}"
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.ws: ClientConnection = connect(
            url, additional_headers=headers, max_size=None, open_timeout=30, legacy=True  # type: ignore[call-arg]
        )
        self.out, self.err = bytearray(), bytearray()
        self.status: dict[str, Any] | None = None

    def send(self, data: bytes, channel: int = protocol.STDIN) -> None:
        self.ws.send(protocol.frame(channel, data))

    def type(self, text: str) -> None:
        self.send(text.encode())

    def resize(self, cols: int, rows: int) -> None:
        self.send(json.dumps({"cols": cols, "rows": rows}).encode(), protocol.RESIZE)

    def eof(self) -> None:
        try:
            self.ws.send(bytes((protocol.CLOSE,)))
        except ConnectionClosed:  # refused already: finish() reads why
            pass

    def _take(self, message: bytes) -> None:
        channel, payload = message[0], message[1:]
        if channel == protocol.STDOUT:
            self.out += payload
        elif channel == protocol.STDERR:
            self.err += payload
        elif channel == protocol.STATUS:
            self.status = json.loads(payload)

    def read_until(self, marker: bytes, timeout: float = 60) -> bytes:
        """Output until ``marker`` appears (evidence, with a generous limit)."""
        deadline = time.monotonic() + timeout
        while marker not in self.out:
            left = deadline - time.monotonic()
            assert left > 0, f"{marker!r} never came; output so far: {bytes(self.out)[-2000:]!r}"
            try:
                message = self.ws.recv(timeout=left)
            except TimeoutError:
                continue
            assert isinstance(message, bytes)
            self._take(message)
        return bytes(self.out)

    def finish(self, timeout: float = 60) -> dict[str, Any]:
        """Everything until the server closes; the status frame."""
        deadline = time.monotonic() + timeout
        try:
            while True:
                message = self.ws.recv(timeout=max(0.1, deadline - time.monotonic()))
                assert isinstance(message, bytes)
                self._take(message)
        except ConnectionClosed:
            pass
        except TimeoutError:  # say what came before the silence, not just that it was silent
            said = f"output so far: {bytes(self.out)[-2000:]!r}, errors: {bytes(self.err)[-500:]!r}"
            raise AssertionError(f"the session did not end within {timeout} s; {said}") from None
        assert self.status is not None, (bytes(self.out), bytes(self.err))
        return self.status

    @property
    def close_code(self) -> int | None:
        return self.ws.close_code

    def drop(self) -> None:
        """Goes away without a word (a laptop's lid shut)."""
        self.ws.socket.close()


def run(srv: LiveServer, token: str | None, instance_id: str, command: list[str], **q: Any) -> Session:
    s = Session(srv, token, instance_id, command, **q)  # kind="jobs": a job's run
    s.eof()
    s.finish()
    return s
