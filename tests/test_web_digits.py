"""examples/web-digits in a real browser: the page is built (the digits CNN compiled for wasm),
served on 127.0.0.1, opened in Debian's chromium (headless), and digits are drawn on its canvas
with mouse events; the page must show the right digit.

Chromium is driven through the DevTools protocol over --remote-debugging-pipe (JSON messages
on file descriptors 3 and 4): the standard library is enough, so no new test dependency
(a websocket client, or playwright's large wheel with its own node driver) for what the
DevTools class below does in a hundred lines. Skipped when chromium,
emcc or node is missing (`make test` installs them on Debian).
"""
from __future__ import annotations

import base64
import functools
import http.server
import importlib.util
import json
import math
import os
import select
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from mlcc.targets import load_target

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser"))
                 if p), None)
MISSING = "; ".join(load_target("wasm").missing_tools()
                    + ([] if CHROMIUM else ["chromium is not installed (apt-get install "
                                            "chromium)"]))
pytestmark = pytest.mark.skipif(bool(MISSING), reason=MISSING or "chromium present")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         "--remote-debugging-pipe", "--window-size=900,620"]
TIMEOUT_S = 60

# Strokes in pad fractions (0..1): a person's way of writing each digit.
DIGITS = {
    "0": [[(0.5 + 0.2 * math.sin(t / 20 * 2 * math.pi), 0.5 - 0.32 * math.cos(t / 20 * 2 * math.pi))
           for t in range(21)]],
    "1": [[(0.42, 0.25), (0.52, 0.15), (0.52, 0.85)]],
    "4": [[(0.55, 0.15), (0.25, 0.6), (0.75, 0.6)], [(0.6, 0.4), (0.6, 0.88)]],
    "7": [[(0.25, 0.18), (0.75, 0.18), (0.45, 0.86)]],
}


class DevTools:
    """A minimal DevTools-protocol client over chromium's --remote-debugging-pipe."""

    def __init__(self, exe: str, profile: Path):
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def child_fds():               # chromium reads commands on fd 3, writes on fd 4
            a, b = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [exe, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=child_fds, pass_fds=(3, 4))
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buffer = b""
        self._next_id = 0
        self.session = None

    def close(self) -> None:
        for fd in (self._to_chrome, self._from_chrome):
            try:
                os.close(fd)
            except OSError:
                pass
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_chrome], [], [], left)[0]:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, **params) -> dict:
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params}
        if self.session and not method.startswith("Target."):
            msg["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            reply = self._message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def attach_to_page(self) -> None:
        pages = [t for t in self.send("Target.getTargets")["targetInfos"] if t["type"] == "page"]
        self.session = self.send("Target.attachToTarget", targetId=pages[0]["targetId"],
                                 flatten=True)["sessionId"]

    def evaluate(self, expression: str):
        res = self.send("Runtime.evaluate", expression=expression, returnByValue=True,
                        awaitPromise=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"{expression}: {res['exceptionDetails']}")
        return res["result"].get("value")

    def wait_for(self, expression: str, timeout: float = TIMEOUT_S):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.1)
        raise TimeoutError(f"page: {expression} stayed false for {timeout} s")

    def mouse(self, kind: str, x: float, y: float, buttons: int) -> None:
        self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left",
                  buttons=buttons, clickCount=1 if kind != "mouseMoved" else 0)

    def stroke(self, points: list[tuple[float, float]], steps: int = 8) -> None:
        """Presses, drags through the points in small steps, releases: what a hand does."""
        self.mouse("mousePressed", *points[0], buttons=1)
        for (x0, y0), (x1, y1) in zip(points, points[1:]):
            for i in range(1, steps + 1):
                self.mouse("mouseMoved", x0 + (x1 - x0) * i / steps,
                           y0 + (y1 - y0) * i / steps, buttons=1)
        self.mouse("mouseReleased", *points[-1], buttons=0)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      ".mjs": "text/javascript", ".js": "text/javascript",
                      ".wasm": "application/wasm"}

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    # Loaded from its file: a module called "build" may already be imported (PyPA's build).
    spec = importlib.util.spec_from_file_location("web_digits_build",
                                                  ROOT / "examples" / "web-digits" / "build.py")
    web_build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(web_build)
    out = web_build.build(tmp_path_factory.mktemp("web") / "site")
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Quiet, directory=str(out)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/index.html"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def page(site, tmp_path_factory):
    browser = DevTools(CHROMIUM, tmp_path_factory.mktemp("profile"))
    try:
        browser.attach_to_page()
        browser.send("Page.enable")
        browser.send("Runtime.enable")
        browser.send("Emulation.setDeviceMetricsOverride", width=900, height=720,
                     deviceScaleFactor=1, mobile=False)
        browser.send("Page.navigate", url=site)
        browser.wait_for("window.mlccDigits && (window.mlccDigits.ready || "
                         "window.mlccDigits.error !== null)")
        error = browser.evaluate("window.mlccDigits.error")
        assert error is None, f"the page could not load the model: {error}"
        yield browser
    finally:
        browser.close()


def _draw(page, strokes) -> dict:
    page.evaluate("document.getElementById('clear').click()")
    box = page.evaluate("(() => { const r = document.getElementById('pad')"
                        ".getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; "
                        "})()")
    left, top, width, height = box
    for s in strokes:
        page.stroke([(left + x * width, top + y * height) for x, y in s])
    return page.wait_for("window.mlccDigits.prediction")


@pytest.mark.parametrize("digit", sorted(DIGITS))
def test_drawn_digit_is_recognized(page, digit):
    pred = _draw(page, DIGITS[digit])
    shown = page.evaluate("document.getElementById('digit').textContent")
    assert shown == digit and pred["digit"] == int(digit), (
        f"drew {digit}, the page shows {shown}; probabilities "
        f"{[round(p, 3) for p in pred['probabilities']]}; input {pred['input']}")
    assert abs(sum(pred["probabilities"]) - 1) < 1e-4
    counts = [v * 16 for v in pred["input"]]          # 4x4 block counts 0..16, divided by 16
    assert all(c == int(c) and 0 <= c <= 16 for c in counts) and max(counts) >= 12
    bar = page.evaluate("document.querySelector('.bar.top').previousElementSibling"
                        ".textContent")
    assert bar == digit


def test_page_screenshot_and_clear(page, tmp_path):
    _draw(page, DIGITS["7"])
    shot = page.send("Page.captureScreenshot", format="png")["data"]
    path = Path(os.environ.get("MLCC_SCREENSHOT_DIR", tmp_path)) / "web-digits.png"
    path.write_bytes(base64.b64decode(shot))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000
    status = page.evaluate("document.getElementById('status').textContent")
    assert status.startswith("inference ") and "(wasm, SIMD128)" in status
    page.evaluate("document.getElementById('clear').click()")
    assert page.evaluate("document.getElementById('digit').textContent") == "?"
