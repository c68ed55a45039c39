"""The live page's server: a Starlette app over uvicorn, on its own thread, on 127.0.0.1.

Routes: `/` the page (playground.live.page), `/state.json` the snapshot it polls every second,
`/metrics` the same numbers in Prometheus' format, `/plotly.min.js` the plotting library from
plotly's own package (served from here: nothing is fetched from the network while a run is watched).
A snapshot is made on demand by the event loop's thread (at most every CACHE_S, however many pages
are open), never by the ranks.

`LiveServer` binds the socket in `start()` (port 0: a free one) and, in `stop()`, tells uvicorn to
exit, joins its thread and closes the socket: nothing of it outlives `stop()`, and uvicorn's thread
installs no signal handlers (only the main thread may), so Ctrl-C stays the launcher's.
"""

import asyncio
import importlib.util
import socket
import threading
import time
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from playground.core.errors import ParamError
from playground.live.metrics import metrics_text
from playground.live.page import PAGE
from playground.live.snapshot import EMPTY, RunWatcher

CACHE_S = 0.5
HOST = "127.0.0.1"
STOP_TIMEOUT_S = 5.0


def plotly_js() -> Path:
    """plotly.min.js as the plotly package ships it (found, not imported: plotly's Python side is
    not needed); a missing package is bad input naming the extra."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or spec.origin is None:
        raise ParamError("--live", "needs plotly: pip install 'playground[live]'")
    return Path(spec.origin).parent / "package_data" / "plotly.min.js"


class CachedSnapshot:
    """The watcher's snapshot, made again only when the last one is older than CACHE_S."""

    def __init__(self, watcher: RunWatcher | None = None):
        self.watcher = watcher  # None until the run directory exists (`LiveServer.watch`)
        self.lock = threading.Lock()
        self.made_at = -1e9
        self.value: dict = {}

    def __call__(self) -> dict:
        with self.lock:
            if self.watcher is None:
                return EMPTY
            if time.monotonic() - self.made_at >= CACHE_S:
                self.value = self.watcher.snapshot()
                self.made_at = time.monotonic()
            return self.value


def build_app(snapshot: CachedSnapshot) -> Starlette:
    async def page(request):
        return HTMLResponse(PAGE)

    async def state(request):
        return JSONResponse(snapshot())

    async def metrics(request):
        return Response(metrics_text(snapshot), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def plotly(request):
        return FileResponse(plotly_js(), media_type="text/javascript")

    return Starlette(
        routes=[
            Route("/", page),
            Route("/state.json", state),
            Route("/metrics", metrics),
            Route("/plotly.min.js", plotly),
        ]
    )


def bind(port: int, flag: str) -> socket.socket:
    """A listening socket on 127.0.0.1:`port` (0: a free one); a taken port is bad input."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port))
    except OSError as e:
        sock.close()
        raise ParamError(flag, f"cannot listen on {HOST}:{port}: {e.strerror or e}") from None
    sock.listen(64)
    return sock


class LiveServer:
    """The page for one run directory, served from a thread of this process until `stop()`."""

    def __init__(
        self, run_dir: Path | None = None, port: int = 0, cpus: int | None = None, flag: str = "--live-port"
    ):
        if not 0 <= port <= 65535:
            raise ParamError(flag, f"must be in 0..65535 (0: a free port), got {port}")
        self.cpus = cpus
        self.snapshot = CachedSnapshot(None if run_dir is None else RunWatcher(run_dir, cpus))
        self.port, self.flag = port, flag
        self.sock: socket.socket | None = None
        self.server: uvicorn.Server | None = None
        self.thread: threading.Thread | None = None

    def watch(self, run_dir: Path) -> None:
        """Show `run_dir` from now on (the server may start before the run directory exists)."""
        self.snapshot.watcher = RunWatcher(run_dir, self.cpus)

    @property
    def url(self) -> str:
        assert self.sock is not None, "start() first"
        return f"http://{HOST}:{self.sock.getsockname()[1]}/"

    def start(self) -> str:
        """Listen, serve from a new thread, and return the page's URL (the socket listens already:
        a browser may connect at once)."""
        plotly_js()  # before listening: without plotly the page could not draw
        self.sock = bind(self.port, self.flag)
        config = uvicorn.Config(
            build_app(self.snapshot), log_level="warning", access_log=False, lifespan="off"
        )
        self.server = server = uvicorn.Server(config)
        sockets = [self.sock]
        self.thread = threading.Thread(
            target=lambda: asyncio.run(server.serve(sockets=sockets)), name="live-page", daemon=True
        )
        self.thread.start()
        return self.url

    def stop(self) -> None:
        """Stop serving: uvicorn exits (open connections closed), its thread ends, the port is free."""
        if self.server is not None:
            self.server.should_exit = True
            self.server.force_exit = True  # the page's requests are short: no graceful wait
        if self.thread is not None:
            self.thread.join(STOP_TIMEOUT_S)
        if self.sock is not None:
            self.sock.close()
        self.server = self.thread = self.sock = None

    def __enter__(self) -> "LiveServer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
