// The console's web terminal: xterm.js (vendored) over danlu's session WebSocket
// (/api/v1/instances/{id}/exec?tty=true, docs/access.md): binary frames whose first byte is the
// channel (0 stdin, 1 stdout, 3 status, 4 resize). The console's session cookie authenticates it.
"use strict";
(function () {
  const box = document.getElementById("terminal");
  if (!box || !window.Terminal) return;
  const id = box.dataset.id;
  const say = document.getElementById("terminal-status");
  const term = new window.Terminal({ cursorBlink: true, convertEol: false, fontFamily: "monospace", scrollback: 5000 });
  const fit = new window.FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(box);
  fit.fit();
  const enc = new TextEncoder();
  const dec = new TextDecoder();
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const url = `${scheme}//${location.host}/api/v1/instances/${encodeURIComponent(id)}/exec?tty=true&cols=${term.cols}&rows=${term.rows}`;
  const ws = new WebSocket(url, ["danlu.exec.v1"]);
  ws.binaryType = "arraybuffer";
  function frame(channel, bytes) {
    const out = new Uint8Array(bytes.length + 1);
    out[0] = channel;
    out.set(bytes, 1);
    return out;
  }
  ws.onopen = function () {
    box.dataset.state = "open";
    say.textContent = box.dataset.open;
    term.focus();
  };
  ws.onmessage = function (event) {
    const data = new Uint8Array(event.data);
    if (data[0] === 1 || data[0] === 2) {
      term.write(data.subarray(1));
    } else if (data[0] === 3) {
      const status = JSON.parse(dec.decode(data.subarray(1)));
      box.dataset.state = "ended";
      say.textContent = status.error ? status.error.message : `${box.dataset.ended} ${status.exit_code}`;
    }
  };
  ws.onclose = function () {
    if (box.dataset.state !== "ended") {
      box.dataset.state = "ended";
      say.textContent = box.dataset.closed;
    }
  };
  term.onData(function (text) {
    if (ws.readyState === WebSocket.OPEN) ws.send(frame(0, enc.encode(text)));
  });
  term.onResize(function (size) {
    if (ws.readyState === WebSocket.OPEN) ws.send(frame(4, enc.encode(JSON.stringify({ cols: size.cols, rows: size.rows }))));
  });
  window.addEventListener("resize", function () { fit.fit(); });
})();
