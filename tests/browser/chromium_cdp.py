"""A small client of Chromium's DevTools protocol for the browser tests: launch headless Debian Chromium,
open a page, evaluate JavaScript, record every network request, take a screenshot.

Only what the tests need: one page over one websocket (``websocket-client``), commands answered in order,
events kept in a list. The launch flags keep a machine without a network quiet: no background fetches, no
component updates, no sync, no QUIC probes, and a fresh profile per launch.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import websocket

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--mute-audio", "--hide-scrollbars",
         "--remote-allow-origins=*", "--window-size=1300,1000")


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Chromium:
    def __init__(self, binary: str, timeout: float = 20.0):
        self.profile = tempfile.mkdtemp(prefix="ratchet-chromium-")
        self.proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={self.profile}", "--remote-debugging-port=0", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        port = self._devtools_port(timeout)
        request = urllib.request.Request(f"http://127.0.0.1:{port}/json/new?about:blank", method="PUT")
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            target = json.loads(resp.read())
        self.ws = websocket.create_connection(target["webSocketDebuggerUrl"], timeout=timeout)
        self._next_id = 0
        self.events: list[dict] = []
        self.send("Page.enable")
        self.send("Network.enable")
        self.send("Runtime.enable")
        self.send("Performance.enable", {"timeDomain": "threadTicks"})

    def _devtools_port(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            match = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line or "")
            if match:
                return int(match.group(1))
            if not line and self.proc.poll() is not None:
                break
        self.close()
        raise RuntimeError("Chromium did not start its DevTools endpoint")

    def send(self, method: str, params: dict | None = None, timeout: float = 20.0) -> dict:
        self._next_id += 1
        ident = self._next_id
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params or {}}))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = json.loads(self.ws.recv())
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            if "method" in message:
                self.events.append(message)
        raise TimeoutError(method)

    def wait_event(self, method: str, timeout: float = 20.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for i, event in enumerate(self.events):
                if event["method"] == method:
                    return self.events.pop(i)
            self.ws.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                self.events.append(json.loads(self.ws.recv()))
            except websocket.WebSocketTimeoutException:
                break
        raise TimeoutError(method)

    def navigate(self, url: str, timeout: float = 30.0) -> None:
        self.events = [e for e in self.events if e["method"] != "Page.loadEventFired"]
        self.send("Page.navigate", {"url": url})
        self.wait_event("Page.loadEventFired", timeout)

    def evaluate(self, expression: str, timeout: float = 20.0):
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True}, timeout)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:60]}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 10.0, interval: float = 0.1):
        """Evaluate until the value is truthy; returns it (raises TimeoutError with the last value)."""
        deadline = time.monotonic() + timeout
        value = None
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(interval)
        raise TimeoutError(f"{expression[:80]} stayed {value!r} for {timeout} s")

    def main_thread_s(self) -> float:
        """CPU seconds the page's main thread has spent on the current document (Performance domain, in
        thread ticks): the work of opening it, apart from how busy the machine is."""
        metrics = {m["name"]: m["value"] for m in self.send("Performance.getMetrics")["metrics"]}
        return float(metrics["ThreadTime"])

    def requested_urls(self) -> list[str]:
        # Drain what arrived since the last command, then list every request the page made.
        self.send("Runtime.evaluate", {"expression": "1"})
        return [e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"]

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            if getattr(self, "ws", None):
                self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            shutil.rmtree(self.profile, ignore_errors=True)
