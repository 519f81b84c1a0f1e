"""``teamrl report``'s page in headless Chromium, offline: for the browser tests and for
``docs/screenshots.py`` (never imported by the package itself).

    with open_report(Path("runs/x/report.html")) as (page, log):
        page.select_option("#f-agent", "alice")
        assert not log.errors and not log.requests

Every request that is not ``file:`` or ``data:`` is aborted and recorded in ``log.requests``;
console errors and page errors go to ``log.errors``. It drives the system's Chromium
(``/usr/bin/chromium``, or ``TEAMRL_CHROMIUM``) through Playwright's Python binding; nothing is
downloaded (never ``playwright install``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SECTIONS = ("curves", "samples", "tree", "evals")  # the page's <section> ids, in order


def chromium_path() -> str | None:
    """The Chromium binary to drive, or None when there is none."""
    chosen = os.environ.get("TEAMRL_CHROMIUM")
    if chosen:
        return chosen if Path(chosen).exists() else None
    for name in ("/usr/bin/chromium", "/usr/bin/chromium-browser"):
        if Path(name).exists():
            return name
    return shutil.which("chromium") or shutil.which("chromium-browser")


def missing() -> str | None:
    """Why the page cannot be driven here (no binding, no Chromium), or None."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "needs Playwright's Python binding: pip install 'teamrl[browser]'"
    if chromium_path() is None:
        return "needs Chromium: apt-get install -y chromium (or set TEAMRL_CHROMIUM)"
    return None


@dataclass
class PageLog:
    """What the page did that it should not: requests beyond the file, errors."""

    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@contextmanager
def open_report(path: Path, width: int = 1280, height: int = 900) -> Iterator[tuple]:
    """The page at ``path`` loaded from file:// in a fresh Chromium profile, with its log."""
    from playwright.sync_api import sync_playwright

    log = PageLog()

    def route(r) -> None:
        url = r.request.url
        if url.startswith(("file:", "data:")):
            r.continue_()
        else:
            log.requests.append(url)
            r.abort()

    def console(msg) -> None:
        if msg.type == "error":
            log.errors.append(f"console: {msg.text}")

    profile = tempfile.mkdtemp(prefix="teamrl-chromium-")
    try:
        with sync_playwright() as pw:
            context = pw.chromium.launch_persistent_context(
                profile,
                executable_path=chromium_path(),
                args=CHROMIUM_ARGS,
                headless=True,
                viewport={"width": width, "height": height},
                offline=True,
            )
            try:
                context.route("**/*", route)
                page = context.new_page()
                page.on("console", console)
                page.on("pageerror", lambda err: log.errors.append(f"page: {err}"))
                page.goto(Path(path).resolve().as_uri(), wait_until="load")
                yield page, log
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def screenshots(report: Path, prefix: str, max_height: int = 1400) -> list[Path]:
    """One PNG per section of the page, ``{prefix}-{section}.png`` (a section taller than
    ``max_height`` pixels is cut there); returns their paths. Raises if the page made a
    request or an error."""
    out = []
    with open_report(report) as (page, log):
        for section in SECTIONS:
            path = Path(f"{prefix}-{section}.png")
            path.parent.mkdir(parents=True, exist_ok=True)
            box = page.locator(f"#{section}").bounding_box()
            assert box is not None, f"the page has no #{section}"
            clip = {**box, "height": min(box["height"], max_height)}
            page.screenshot(path=str(path), clip=clip, full_page=True)
            out.append(path)
        if log.errors or log.requests:
            raise RuntimeError(f"the page misbehaved: {log.errors + log.requests}")
    return out
