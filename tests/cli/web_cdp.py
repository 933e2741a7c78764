"""Drive a headless Chromium over the DevTools protocol for the web page tests.

Standard library only (a minimal WebSocket client). Usage: web_cdp.py BROWSER; then
one JSON command per line on stdin, one JSON answer per line on stdout:

  {"go": URL}                 navigate and wait for the new document to load
  {"eval": JS}                evaluate (promises awaited), answer {"value": ...}
  {"submit": JS}              evaluate JS that submits a form, wait for the next document
  {"cookies": true}           the browser's cookies (Network.getCookies)
  {"screenshot": PATH}        a PNG of the page (1200 px wide, full height up to 1600)

An error answers {"error": "..."}. End of input closes the browser. The pages'
Content-Security-Policy is bypassed (Page.setBypassCSP): hostile content must be inert
through escaping and sanitizing alone.
"""

import base64
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request


class WebSocket:
    def __init__(self, url):
        m = re.match(r"ws://([^:/]+):(\d+)(/.*)", url)
        host, port, path = m.group(1), int(m.group(2)), m.group(3)
        self.sock = socket.create_connection((host, port), timeout=60)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (
                f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise RuntimeError("websocket handshake: connection closed")
            head += chunk
        head, self.buf = head.split(b"\r\n\r\n", 1)
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise RuntimeError(f"websocket handshake refused: {head!r}")

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise RuntimeError("websocket closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def send(self, text):
        data = text.encode()
        head = bytes([0x81])
        n = len(data)
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 1 << 16:
            head += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def recv(self):
        message = b""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            mask = self._read(4) if b1 & 0x80 else None
            data = self._read(n)
            if mask:
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
            opcode = b0 & 0x0F
            if opcode == 8:
                raise RuntimeError("websocket closed by the browser")
            if opcode in (9, 10):
                continue
            message += data
            if b0 & 0x80:
                return message.decode()


class Browser:
    def __init__(self, exe):
        self.profile = tempfile.mkdtemp(prefix="xet-web-test-")
        self.proc = subprocess.Popen(
            [
                exe,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--hide-scrollbars",
                "--remote-debugging-port=0",
                f"--user-data-dir={self.profile}",
                "--window-size=1200,800",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        port = None
        deadline = time.time() + 60
        while time.time() < deadline:
            line = self.proc.stderr.readline().decode(errors="replace")
            if not line:
                break
            m = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            if m:
                port = int(m.group(1))
                break
        if port is None:
            raise RuntimeError("the browser did not start its DevTools server")
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list"))
        page = next(t for t in targets if t.get("type") == "page")
        self.ws = WebSocket(page["webSocketDebuggerUrl"])
        self.next_id = 0
        self.call("Page.enable")
        # Pages forbid every script by their Content-Security-Policy; the tests switch
        # that off, so what they check is the escaping and sanitizing alone (and their
        # own fetches of download links are allowed).
        self.call("Page.setBypassCSP", enabled=True)
        self.call("Network.enable")
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=1200,
            height=800,
            deviceScaleFactor=1,
            mobile=False,
        )

    def call(self, method, **params):
        self.next_id += 1
        me = self.next_id
        self.ws.send(json.dumps({"id": me, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == me:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def eval(self, js):
        r = self.call(
            "Runtime.evaluate", expression=js, awaitPromise=True, returnByValue=True
        )
        if "exceptionDetails" in r:
            raise RuntimeError(f"script failed: {r['exceptionDetails']}")
        return r.get("result", {}).get("value")

    def mark(self):
        self.eval("window.__xet_old_document = true")

    def wait_new_document(self):
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                if self.eval(
                    "typeof window.__xet_old_document === 'undefined' && document.readyState === 'complete'"
                ):
                    return
            except RuntimeError:
                pass  # between documents
            time.sleep(0.05)
        raise RuntimeError("the page did not load")

    def close(self):
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


def main():
    browser = Browser(sys.argv[1])
    try:
        for line in sys.stdin:
            cmd = json.loads(line)
            try:
                if "go" in cmd:
                    browser.mark()
                    browser.call("Page.navigate", url=cmd["go"])
                    browser.wait_new_document()
                    answer = {"value": browser.eval("location.href")}
                elif "submit" in cmd:
                    browser.mark()
                    browser.eval(cmd["submit"])
                    browser.wait_new_document()
                    answer = {"value": browser.eval("location.href")}
                elif "eval" in cmd:
                    answer = {"value": browser.eval(cmd["eval"])}
                elif "cookies" in cmd:
                    answer = {"value": browser.call("Network.getCookies")["cookies"]}
                elif "screenshot" in cmd:
                    h = browser.eval("document.documentElement.scrollHeight")
                    h = max(600, min(int(h or 800), 1600))
                    browser.call(
                        "Emulation.setDeviceMetricsOverride",
                        width=1200,
                        height=h,
                        deviceScaleFactor=1,
                        mobile=False,
                    )
                    shot = browser.call("Page.captureScreenshot", format="png")
                    with open(cmd["screenshot"], "wb") as f:
                        f.write(base64.b64decode(shot["data"]))
                    answer = {"value": cmd["screenshot"]}
                else:
                    answer = {"error": f"unknown command {cmd}"}
            except Exception as e:  # noqa: BLE001 - every failure is the test's to see
                answer = {"error": str(e)}
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()
    finally:
        browser.close()


if __name__ == "__main__":
    main()
