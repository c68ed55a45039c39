"""The server the load runs against, started as a user starts it: `python -m playground serve`
on a free port in a child process (so that the load generator and the server do not share one
interpreter's GIL), its URL read from the line it prints, stopped with Ctrl-C (SIGINT)."""

import signal
import subprocess
import sys
import time

import httpx

from playground.core.errors import LabError

START_TIMEOUT_S = 120.0


class ServerProcess:
    def __init__(self, flags: list[str]):
        self.command = [sys.executable, "-P", "-m", "playground", "serve", "--port", "0", *flags]
        self.proc = subprocess.Popen(self.command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.said: list[str] = []
        self.url = self._wait_for_url()

    def _wait_for_url(self) -> str:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if " on http://" in line:
                url = line.split(" on ")[1].split()[0]
                self._wait_healthy(url)
                return url
            self.said.append(line.strip())
        self.proc.wait(10)
        err = self.proc.stderr.read() if self.proc.stderr else ""
        raise LabError(f"`{' '.join(self.command[2:])}` did not start: {err.strip()[-500:]}", step="serve")

    def _wait_healthy(self, url: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while httpx.get(url + "/health", timeout=5).status_code != 200:
            if time.monotonic() > deadline:
                raise LabError(f"{url}/health did not answer 200 within {START_TIMEOUT_S:g} s", step="serve")
            time.sleep(0.05)

    def stop(self) -> int:
        """Ctrl-C, then its exit status (killed if it does not stop within 30 s)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream:
                stream.close()
        return self.proc.returncode

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
