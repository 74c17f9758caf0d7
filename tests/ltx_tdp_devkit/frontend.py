"""ComfyUI's own frontend in headless Chromium (Debian's `chromium`), driven by Playwright.

The browser is the system one (`/usr/bin/chromium`); Playwright never downloads a browser here. The page
is the frontend the server under test ships (its `comfyui-frontend-package`), so a workflow that loads
here loads for a user of that ComfyUI.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from .frontend_js import EDIT, FIT, FIT_BOUNDS, INSTALL_HOOKS, LOAD

CHROMIUM = "/usr/bin/chromium"
SUBGRAPH_INPUT = -10
"""The id of a subgraph's input node in a saved workflow (links from it carry the subgraph node's inputs)."""
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--no-first-run", "--disable-sync", "--disable-dev-shm-usage",
]

OFFLINE_ERRORS = ("net::ERR_NAME_NOT_RESOLVED", "net::ERR_INTERNET_DISCONNECTED", "Error fetching file size")
"""Console errors of an offline machine: the frontend looks up release notes and the size of each missing
model at its download link (older frontends log a failed lookup as "Error fetching file size")."""

FRONTEND_SETTINGS = {
    # A first start shows the template browser and tours; they would cover the screenshots.
    "Comfy.TutorialCompleted": True,
    "Comfy.Validation.Workflows": True,
    "Comfy.Minimap.Visible": False,  # it would cover the bottom right of every screenshot
}


def chromium_path() -> str | None:
    """The system Chromium, installing Debian's package when apt is there and it is missing.

    Returns None (the caller skips) only where it is neither installed nor installable.
    """
    path = shutil.which("chromium") or (CHROMIUM if Path(CHROMIUM).exists() else None)
    if path:
        return path
    if shutil.which("apt-get") is None:
        return None
    env = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    subprocess.run(["apt-get", "update", "-qq"], check=False, env=env, capture_output=True, timeout=600)
    subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], check=False, env=env, capture_output=True,
                   timeout=900)
    return shutil.which("chromium")


@dataclass
class LoadReport:
    """What the frontend made of one workflow."""

    node_count: int
    node_types: list[str]
    missing_types: list[str]
    """Types of nodes in the graph that the frontend has no definition for (after loading)."""
    missing_dialog: list[str]
    """Node types the frontend reported through its missing-nodes dialog."""
    load_error: str | None
    console_errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.missing_types or self.missing_dialog or self.load_error or self.console_errors)


class InFlight:
    """The page's HTTP requests that have not finished or failed yet (a websocket or an event stream never does,
    so those are not counted): what the frontend still waits for after an action."""

    LONG_LIVED = frozenset({"websocket", "eventsource"})

    def __init__(self, page: Any):
        self.pending: set[Any] = set()
        page.on("request", self._start)
        page.on("requestfinished", self._end)
        page.on("requestfailed", self._end)

    def _start(self, request: Any) -> None:
        if request.resource_type not in self.LONG_LIVED:
            self.pending.add(request)

    def _end(self, request: Any) -> None:
        self.pending.discard(request)


def settle(page: Any, inflight: InFlight, timeout_s: float = 60.0) -> None:
    """Wait until the page has no request in flight and has drawn two more frames: the frontend has finished
    what an action started (model lists, file-size lookups, their console errors, the canvas). Polls page events;
    the timeout only guards against a request that never ends (it then returns, as a fixed wait would)."""
    deadline = time.monotonic() + timeout_s
    while inflight.pending and time.monotonic() < deadline:
        page.wait_for_timeout(50)  # a poll: lets Playwright deliver the request events
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(null))))")


class Frontend:
    """One browser page on the server's frontend; load workflows, read what it made of them."""

    def __init__(self, page: Any, console_errors: list[str], inflight: InFlight):
        self.page = page
        self._console_errors = console_errors
        self._inflight = inflight

    def settle(self) -> None:
        """Wait until the frontend has finished what the last action started (`settle`)."""
        settle(self.page, self._inflight)

    def load(self, workflow: dict) -> LoadReport:
        self._console_errors.clear()
        raw = self.page.evaluate(LOAD, workflow)
        self.settle()
        errors = [e for e in self._console_errors if not any(s in e for s in OFFLINE_ERRORS)]
        return LoadReport(console_errors=errors, **raw)

    def screenshot(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._dismiss_overlays()
        self.page.evaluate(FIT)
        self.settle()
        self.page.screenshot(path=str(path))
        return path

    def _edit(self, path: tuple[int, ...], op: str, **args: Any) -> Any:
        return self.page.evaluate(EDIT, {"path": list(path), "op": op, "args": args})

    def add_node(self, path: tuple[int, ...], node_type: str, pos: tuple[float, float]) -> int:
        """Add a node of `node_type` to the graph at `path` (subgraph-node ids from the root), as a user
        dropping it on the canvas does; return its id."""
        return self._edit(path, "add", type=node_type, pos=list(pos))

    def connect(self, path: tuple[int, ...], origin: int, slot: int, target: int, input_name: str) -> int:
        """Link output `slot` of node `origin` to input `input_name` of `target` (replacing its link). Origin
        `SUBGRAPH_INPUT` (-10, the id a subgraph's input node has in a saved workflow) links input `slot` of the
        subgraph at `path`, as dragging from the subgraph's input on the canvas does."""
        return self._edit(path, "connect", origin=origin, slot=slot, target=target, input=input_name)

    def set_mode(self, path: tuple[int, ...], node_id: int, mode: int) -> None:
        """Set a node's mode (0 always, 2 muted, 4 bypassed), as the node's Bypass / Mute commands do."""
        self._edit(path, "mode", id=node_id, value=mode)

    def remove_node(self, path: tuple[int, ...], node_id: int) -> None:
        self._edit(path, "remove", id=node_id)

    def set_widget(self, path: tuple[int, ...], node_id: int, name: str, value: Any) -> Any:
        """Set widget `name` of node `node_id` to `value`, as a user typing or picking it does; the value set."""
        return self._edit(path, "widget", id=node_id, name=name, value=value)

    def open_subgraph(self, path: tuple[int, ...]) -> None:
        """Show the subgraph at `path` on the canvas, as double-clicking into a subgraph node does."""
        self._dismiss_overlays()  # before: Escape also leaves an open subgraph
        self._edit(path, "open")
        self.settle()

    def node_bounds(self, path: tuple[int, ...], node_ids: list[int]) -> list[float]:
        """[x0, y0, x1, y1] around the nodes as the frontend lays them out (title bars included)."""
        return self._edit(path, "bounds", ids=node_ids)

    def screenshot_region(self, path: Path, bounds: list[float]) -> Path:
        """A screenshot of the canvas zoomed onto `bounds` (canvas coordinates of the graph shown)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self._dismiss_overlays(escape=False)  # Escape would leave an open subgraph
        self.page.evaluate(FIT_BOUNDS, bounds)
        self.settle()
        self.page.screenshot(path=str(path))
        return path

    def _dismiss_overlays(self, escape: bool = True) -> None:
        if escape:
            self.page.keyboard.press("Escape")  # close a dialog (e.g. missing models) so the graph shows
        dismiss = self.page.get_by_role("button", name="Dismiss")
        if dismiss.count():
            try:
                dismiss.first.click(timeout=2000)
            except Exception:  # noqa: BLE001 - best effort: an overlay only hides part of the screenshot
                pass

    def template_thumbnails(self, module: str, count: int, timeout_s: float = 60.0) -> dict[str, int]:
        """Open the template browser on the category of the custom node folder `module`, as a user does, and return
        the HTTP status of every thumbnail the frontend requests for it (URL -> status), once `count` have come
        back or `timeout_s` has passed."""
        seen: dict[str, int] = {}
        marker = f"/workflow_templates/{module}/"

        def on_response(response: Any) -> None:
            if marker in response.url and response.url.endswith(".jpg"):
                seen[response.url] = response.status

        self.page.on("response", on_response)
        try:
            self._dismiss_overlays()
            self.page.evaluate("() => app.extensionManager.command.execute('Comfy.BrowseTemplates')")
            self.page.get_by_text(module, exact=True).first.click()
            deadline = time.monotonic() + timeout_s
            while len(seen) < count and time.monotonic() < deadline:
                self.page.wait_for_timeout(100)  # a poll: lets Playwright deliver the responses
        finally:
            self.page.remove_listener("response", on_response)
            self.page.keyboard.press("Escape")
        return seen

    def serialize(self) -> dict:
        """The loaded graph as the frontend saves it (UI format)."""
        return json.loads(self.page.evaluate("() => JSON.stringify((app.rootGraph || app.graph).serialize())"))

    def graph_to_prompt(self) -> dict:
        """The API prompt the frontend would queue for the loaded graph."""
        return self.page.evaluate("async () => (await app.graphToPrompt()).output")


@contextmanager
def browser_page(url: str) -> Iterator[Frontend]:
    """The frontend at `url` in the system Chromium, for a test: skips (pytest) where Playwright or Chromium is
    missing and cannot be installed."""
    import pytest

    pytest.importorskip("playwright", reason="Playwright (pip `playwright`) is not installed; scripts/env.sh installs it")
    chromium = chromium_path()
    if chromium is None:
        pytest.skip("no Chromium for the template tests: /usr/bin/chromium is missing and apt-get is not available "
                    "to install it")
    with open_frontend(url, chromium) as page:
        yield page


@contextmanager
def open_frontend(url: str, chromium: str = CHROMIUM, timeout_ms: int = 120_000,
                  viewport: tuple[int, int] = (1920, 1080)) -> Iterator[Frontend]:
    """Open the frontend at `url` (a running ComfyUI) and wait until `window.app` has a graph."""
    import requests
    from playwright.sync_api import sync_playwright

    for key, value in FRONTEND_SETTINGS.items():
        try:
            requests.post(f"{url}/settings/{key}", json=value, timeout=10)
        except requests.RequestException:
            pass
    console_errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
            page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: console_errors.append(f"page error: {e}"))
            inflight = InFlight(page)
            page.set_default_timeout(timeout_ms)
            page.goto(url, wait_until="domcontentloaded")
            page.wait_for_function("() => window.app && (window.app.rootGraph || window.app.graph) && window.LiteGraph",
                                   timeout=timeout_ms)
            settle(page, inflight)  # the start-up's own requests (node definitions, settings, release notes)
            page.evaluate(INSTALL_HOOKS)
            console_errors.clear()  # start-up noise (e.g. no internet for release notes) is not a load error
            yield Frontend(page, console_errors, inflight)
        finally:
            browser.close()
