"""A renter's web app for the port-proxy tests, stdlib only (it runs inside the sandbox with the
host image's python3): every HTTP request is answered with what arrived (method, target, headers,
body length) as JSON; a WebSocket upgrade is accepted and each text message comes back as
``echo:TEXT`` (the first one says the target it was opened on)."""

import base64
import hashlib
import json
import socketserver
import struct
import sys

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            chunk = self.rfile.readline()
            if not chunk:
                return
            head += chunk
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        if headers.get("upgrade", "").lower() == "websocket":
            self.websocket(target, headers)
            return
        length = int(headers.get("content-length", 0) or 0)
        if headers.get("transfer-encoding") == "chunked":
            while size := int(self.rfile.readline().strip(), 16):
                length += len(self.rfile.read(size))
                self.rfile.readline()
            self.rfile.readline()
        else:
            self.rfile.read(length)
        body = json.dumps({"method": method, "target": target, "headers": headers, "body_bytes": length}).encode()
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n")
        if "setcookie" in target:  # an app trying to sign the browser in to danlu as someone else
            self.wfile.write(b"Set-Cookie: danlu_session=planted; Path=/\r\nSet-Cookie: app=1; Path=/\r\n")
        self.wfile.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def websocket(self, target: str, headers: dict[str, str]) -> None:
        accept = base64.b64encode(hashlib.sha1((headers["sec-websocket-key"] + GUID).encode()).digest())
        self.wfile.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                         b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")  # fmt: skip
        self.send_text(f"opened:{target}")
        while True:
            first = self.rfile.read(2)
            if len(first) < 2:
                return
            opcode, n = first[0] & 0x0F, first[1] & 0x7F
            if n == 126:
                n = struct.unpack(">H", self.rfile.read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self.rfile.read(8))[0]
            mask = self.rfile.read(4)
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(self.rfile.read(n)))
            if opcode == 8:
                self.wfile.write(b"\x88\x00")
                return
            if opcode == 1:
                self.send_text("echo:" + data.decode())
            elif opcode == 9 and n < 126:  # a ping (the proxy's keepalive): pong, or it gives up on us
                self.wfile.write(b"\x8a" + bytes([n]) + data)

    def send_text(self, text: str) -> None:
        data = text.encode()
        size = bytes([len(data)]) if len(data) < 126 else b"\x7e" + struct.pack(">H", len(data))
        self.wfile.write(b"\x81" + size + data)


socketserver.ThreadingTCPServer.allow_reuse_address = True
socketserver.ThreadingTCPServer.daemon_threads = True
with socketserver.ThreadingTCPServer(("127.0.0.1", int(sys.argv[1])), Handler) as server:
    print("listening", flush=True)
    server.serve_forever()
