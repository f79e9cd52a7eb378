"""Headless Chromium (Debian's ``chromium``) driven over the DevTools protocol, for page tests.

``async with open_page(profile_dir) as page`` starts a fresh browser (its own
``--user-data-dir``, remote debugging on a free port), attaches to its first tab over a
trio-websocket connection, and gives :meth:`Page.navigate`, :meth:`Page.evaluate` and
:meth:`Page.screenshot`.  The browser is killed when the block ends.
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import trio
from trio_websocket import WebSocketConnection, open_websocket_url

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-port=0", "--window-size=1400,1000", "--hide-scrollbars"]


def chromium_binary() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    raise RuntimeError("chromium is not installed (tests/run.sh installs Debian's chromium)")


class Page:
    def __init__(self, ws: WebSocketConnection) -> None:
        self.ws = ws
        self._ids = itertools.count(1)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        ident = next(self._ids)
        await self.ws.send_message(json.dumps({"id": ident, "method": method,
                                               "params": params}))
        while True:  # skip events until our answer
            msg = json.loads(await self.ws.get_message())
            if msg.get("id") == ident:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    async def navigate(self, url: str) -> None:
        await self.call("Page.enable")
        await self.call("Page.navigate", url=url)

    async def evaluate(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression,
                                 returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def screenshot(self, *, full_page: bool = False) -> bytes:
        """The viewport as PNG; ``full_page``: the whole page, below the fold too."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = (await self.call("Page.getLayoutMetrics"))["cssContentSize"]
            params.update(captureBeyondViewport=True, clip={
                "x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1})
        return base64.b64decode((await self.call("Page.captureScreenshot", **params))["data"])


async def _devtools_port(path: trio.Path) -> int:
    """Chromium writes its debugging port here once it listens; nothing signals it."""
    for _ in itertools.count():
        if await path.exists():
            text = (await path.read_text()).split()
            if text:
                return int(text[0])
        await trio.sleep(0.1)
    raise AssertionError("unreachable")


@asynccontextmanager
async def open_page(profile: Path) -> AsyncIterator[Page]:
    await trio.Path(profile).mkdir(parents=True, exist_ok=True)
    proc = await trio.lowlevel.open_process(
        [chromium_binary(), *FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with trio.fail_after(30):
            port = await _devtools_port(trio.Path(profile / "DevToolsActivePort"))
            async with httpx.AsyncClient() as http:
                targets = (await http.get(f"http://127.0.0.1:{port}/json/list")).json()
        url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
        async with open_websocket_url(url, max_message_size=64 << 20) as ws:
            yield Page(ws)
    finally:
        proc.kill()
        with trio.CancelScope(shield=True):
            await proc.wait()
