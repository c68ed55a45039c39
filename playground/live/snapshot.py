"""What a run looks like now, read from its run directory: the live page's and /metrics' numbers.

Everything here is read from files the run writes anyway, by the watching process, so the ranks pay
nothing for being watched:

- each rank's current operation and sequence number: its flight ring (`flight-rank-<r>.bin`,
  playground.comm.flight), mapped by the rank and read here as it is written;
- bytes moved between each pair of ranks, training's step times and loss, and the straggler scores:
  the ranks' timing logs (`rank-<r>.jsonl`: `send` events, `train.step` events, the sections
  playground.tracing.stragglers judges), read incrementally (each poll reads only the new lines);
- serving's KV blocks and queue: serving-engine.jsonl, the engine's state that rank 0 appends every
  0.2 s while it waits for its clients (playground.kvcache.server.thread.EngineLog);
- the root cause: failures.jsonl (each failure the moment the coordinator records it), then
  result.json's first failure once the run is over (the launcher's verdict, the same line it prints).
"""

import json
import time
from pathlib import Path

from playground.comm import flight, flight_report
from playground.kvcache.server.thread import ENGINE_LOG
from playground.rendezvous.failures import FAILURES_LOG
from playground.tracing import stragglers

STRAGGLER_EVERY_S = 2.0  # judging re-reads every section's samples: not on every poll
EMPTY = {  # before the run directory exists
    "run_dir": "",
    "scenario": "",
    "node": "",
    "num_ranks": 0,
    "status": "starting",
    "ranks": [],
    "bytes": [],
    "training": {},
    "serving": [],
    "stragglers": None,
    "root_cause": None,
    "failures": [],
    "flight": [],
    "elapsed_s": None,
}


class RankLog:
    """One rank's timing log, read a whole line at a time from where the last read stopped."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self.sent_bytes: dict[int, int] = {}  # peer -> bytes this rank sent it
        self.steps: list[dict] = []  # train.step events: step, loss, step_s
        self.judged: list[dict] = []  # what stragglers.judge reads (compute, op, wait)

    def poll(self) -> bool:
        """Read the lines written since the last poll; whether there were any."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return False
        end = chunk.rfind(b"\n") + 1  # a line still being written is read next time
        if end == 0:
            return False
        self.offset += end
        for line in chunk[:end].decode("utf-8", "replace").splitlines():
            self._take(line)
        return True

    def _take(self, line: str) -> None:
        judged = any(c in line for c in stragglers.JUDGED)
        if not (judged or '"send"' in line or '"train.step"' in line):
            return
        try:
            e = json.loads(line)
        except json.JSONDecodeError:
            return
        args = e.get("args") or {}
        if e.get("name") == "send" and "peer" in args:
            self.sent_bytes[args["peer"]] = self.sent_bytes.get(args["peer"], 0) + int(args.get("bytes", 0))
        elif e.get("name") == "train.step":
            self.steps.append({"step": args.get("step"), "loss": args.get("loss"), "step_s": e["dur"] / 1e6})
        if judged:
            self.judged.append(e)


class RunWatcher:
    """Polls a run directory; `snapshot()` is the run as it is now (a dict of plain values)."""

    def __init__(self, run_dir: Path, cpus: int | None = None):
        self.run_dir = Path(run_dir).resolve()
        self.cpus = cpus
        self.logs: dict[int, RankLog] = {}
        self.judged_at = 0.0
        self.scores: dict | None = None
        self.changed = False  # new log lines since the last judgement

    def _scenario(self) -> dict:
        import yaml

        try:
            return yaml.safe_load((self.run_dir / "scenario.yaml").read_text()) or {}
        except (OSError, yaml.YAMLError):
            return {}

    def _result(self) -> dict | None:
        try:
            return json.loads((self.run_dir / "result.json").read_text())
        except (OSError, json.JSONDecodeError):
            return None  # not written yet (or being written: the next poll reads it)

    def _poll_logs(self, ranks: int) -> None:
        for rank in range(ranks):
            log = self.logs.setdefault(rank, RankLog(self.run_dir / f"rank-{rank}.jsonl"))
            self.changed |= log.poll()

    def _stragglers(self, ranks: int, done: bool) -> dict | None:
        if ranks < 2:
            return None
        now = time.monotonic()
        if self.changed and (done or now - self.judged_at >= STRAGGLER_EVERY_S):
            found = stragglers.judge({r: log.judged for r, log in self.logs.items()}, self.cpus)
            self.scores = {"note": found.note(), **found.to_dict()}
            self.judged_at, self.changed = now, False
        return self.scores

    def snapshot(self) -> dict:
        scenario = self._scenario()
        result = self._result()
        ranks = int(scenario.get("ranks") or (result or {}).get("ranks") or 0)
        self._poll_logs(ranks)
        rings = flight.read_run(self.run_dir)
        failures = _jsonl(self.run_dir / FAILURES_LOG)
        if result is not None:
            status = "finished" if result.get("ok") else "failed"
        else:
            started = rings or any(log.offset for log in self.logs.values())  # the recorder may be off
            status = "failing" if failures else ("running" if started else "starting")
        return {
            "run_dir": str(self.run_dir),
            "scenario": scenario.get("name", self.run_dir.name),
            "node": scenario.get("node", ""),
            "num_ranks": ranks,
            "status": status,
            "ranks": [_rank_row(r, rings.get(r)) for r in range(ranks)],
            "bytes": [[self.logs[s].sent_bytes.get(d, 0) for d in range(ranks)] for s in range(ranks)],
            "training": {r: log.steps for r, log in self.logs.items() if log.steps},
            "serving": _serving(self.run_dir),
            "stragglers": self._stragglers(ranks, result is not None),
            "root_cause": _root_cause(failures, result),
            "failures": [f["headline"] for f in failures],
            "flight": flight_report.summary_lines(flight_report.analyze(rings)) if rings else [],
            "elapsed_s": (result or {}).get("elapsed_s"),
        }


def _rank_row(rank: int, ring: flight.Ring | None) -> dict:
    """A rank's row: the operation it is in (or last finished) and its sequence number."""
    if ring is None:
        return {"rank": rank, "op": "", "seq": None, "state": "not started", "records": 0}
    entry = ring.current or ring.last_completed or (ring.entries[-1] if ring.entries else None)
    if entry is None:
        return {
            "rank": rank,
            "op": "",
            "seq": None,
            "state": "no operation yet",
            "records": 0,
            "pid": ring.pid,
        }
    return {
        "rank": rank,
        "pid": ring.pid,
        "op": flight_report.describe(entry, short=True),
        "seq": entry["seq"],
        "state": entry["state"],
        "records": ring.records,
    }


def _jsonl(path: Path) -> list[dict]:
    """A file of JSON lines; a missing file is none, a torn last line is left for the next read."""
    try:
        text = path.read_text()
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def _root_cause(failures: list[dict], result: dict | None) -> str | None:
    """result.json's first failure once the run is over; until then the first primary failure."""
    if result is not None:
        return (result.get("failures") or [None])[0]
    primary = [f for f in failures if not f.get("secondary")] or failures
    return primary[0]["headline"] if primary else None


def _serving(run_dir: Path) -> list[dict]:
    """The serving engine's samples (running, waiting, KV blocks allocated), from serving-engine.jsonl."""
    return _jsonl(run_dir / ENGINE_LOG)
