"""Serve the explorer and drive it in a real browser (Debian's Chromium via Playwright).

    python docs/screenshot_app.py          # refreshes docs/figures/app.png for the README

tests/test_app_browser.py uses the same two helpers: ``serve`` starts ``streamlit run app.py``
on a free local port, ``drive`` loads the page, waits for the headline chart, changes the loads
widget and waits for the chart to redraw, with a screenshot of the first render.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
# what the probe of this workplace's machines runs Chromium with: no sandbox as root, and no
# background networking on a closed network
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextlib.contextmanager
def serve(timeout_s: float = 90.0) -> Iterator[str]:
    """``streamlit run app.py`` on a free port; yields its URL once healthy."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(ROOT / "app.py"),
        "--server.headless=true",
        f"--server.port={port}",
        "--server.address=127.0.0.1",
        "--browser.gatherUsageStats=false",
        "--server.fileWatcherType=none",
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("streamlit did not become healthy")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _points(page) -> int:
    return page.locator(".js-plotly-plot").first.locator("path.point").count()


def drive(
    url: str, screenshot: Path, expect_after: int = 4, timeout_ms: int = 600_000
) -> tuple[int, int]:
    """Load the page, count the headline chart's points and screenshot it, set the loads to
    '1,16' and wait for the redraw (``expect_after`` points: two per method at the default
    EAGLE-3 and n-gram); returns (points before, points after)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        page.goto(url, timeout=timeout_ms)
        page.wait_for_selector(".js-plotly-plot path.point", timeout=timeout_ms)
        before = _points(page)
        page.wait_for_timeout(1000)
        page.screenshot(path=str(screenshot))
        box = page.get_by_label("Loads (comma list)")
        box.fill("1,16")
        box.press("Enter")
        deadline = time.monotonic() + timeout_ms / 1000
        while _points(page) != expect_after and time.monotonic() < deadline:
            page.wait_for_timeout(500)
        after = _points(page)
        browser.close()
    return before, after


def main() -> None:
    out = ROOT / "docs" / "figures" / "app.png"
    with serve() as url:
        before, after = drive(url, out)
    print(f"headline chart: {before} points, then {after} after the edit; wrote {out}")


if __name__ == "__main__":
    main()
