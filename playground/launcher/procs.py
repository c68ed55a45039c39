"""Start another program's worker processes (a baseline's: Gloo, MPI, PyTorch DDP), watch them,
and reap every one whatever happens.

Shared by the labs that run a baseline beside their own code (`baselines` for the collectives,
`training` for PyTorch DDP). Each worker appends JSON records, one a line, to `rank-<r>.jsonl` in
the run's directory (`write_record`), flushed at once so a worker that dies still says how far it
got; a worker that fails leaves one `error` record (`record_error`). Pickle never carries them.

Each command runs in its own session (process group), so killing the group also kills what it
started: mpiexec's proxies and ranks, or a worker's helpers. The parent polls instead of blocking in
`wait`, which lets it stop the whole run on the first failure (the other ranks would otherwise sit
in a collective until their own timeout), on the run's deadline, or on Ctrl-C. Output goes to files
in the run directory, never to pipes, so a chatty worker cannot fill a pipe and stall.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import IO

from playground.comm.addresses import free_tcp_port
from playground.core.errors import PlaygroundError

POLL_S = 0.05
TERM_GRACE_S = 1.0  # after SIGTERM, how long a group gets before SIGKILL (mpiexec cleans up its ranks)


def worker_env(extra: dict) -> dict:
    """The parent's environment, plus our package on the path and one thread per rank (N ranks already
    share the cores; BLAS/OpenMP pools per rank would only oversubscribe them)."""
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "OMP_NUM_THREADS": "1", **extra}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


def rank_file(out_dir: Path, rank: int) -> Path:
    return Path(out_dir) / f"rank-{rank}.jsonl"


def write_record(f: IO[str], record: dict) -> None:
    """One JSON line, flushed at once."""
    f.write(json.dumps(record) + "\n")
    f.flush()


def record_error(out_dir: Path, rank: int, exc: BaseException) -> None:
    """Leave the parent one line saying why this rank failed (the traceback goes to stderr)."""
    traceback.print_exc()
    with open(rank_file(out_dir, rank), "a") as f:
        write_record(
            f, {"rank": rank, "error": f"{type(exc).__name__}: {exc}".splitlines()[0], "t": time.time()}
        )


def run_env_workers(
    name: str, module: str, spec: dict, ranks: int, out_dir: Path, timeout_s: float
) -> list[list[dict]]:
    """`python -m MODULE --spec JSON --out OUT_DIR` once per rank with the env:// variables torchrun
    sets (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, a free loopback port): each
    rank's records (`run_workers`; the module's `main` is usually `worker_main`)."""
    cmd = [sys.executable, "-m", module, "--spec", json.dumps(spec), "--out", str(out_dir)]
    env = {"WORLD_SIZE": str(ranks), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_tcp_port())}
    envs = [worker_env({**env, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(ranks)]
    return run_workers(name, [cmd] * ranks, envs, out_dir, ranks, timeout_s)


def worker_main(train, description: str, argv: list[str] | None = None) -> int:
    """A worker's command line, `--spec JSON --out DIR`: `train(spec, out_dir)`; an exception becomes
    the rank's error record for the parent (exit status 1)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--spec", required=True, help="JSON: what the worker trains or measures")
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    try:
        train(json.loads(args.spec), args.out)
    except Exception as e:  # noqa: BLE001 - reported to the parent, which names the first failure
        record_error(args.out, rank, e)
        return 1
    return 0


def exit_worker(code: int) -> None:
    """End a torch worker with `code`, skipping the interpreter's finalization: Gloo's worker threads
    can still hold work objects whose destruction then aborts the process ("terminate called without
    an active exception", seen once after all 50 steps of a DDP run were written;
    pytorch/pytorch#179291). The records are closed by then; only the standard streams are left to
    flush."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class BaselineError(PlaygroundError):
    """A baseline run failed: a worker crashed, timed out, or reported nothing. The message is one line."""


def run_workers(
    name: str, cmds: list[list[str]], envs: list[dict], out_dir: Path, nranks: int, timeout_s: float
) -> list[list[dict]]:
    """Run the commands to completion and return each rank's records; BaselineError on any failure."""
    procs: list[subprocess.Popen] = []
    logs = []
    t0 = time.monotonic()
    try:
        for i, (cmd, env) in enumerate(zip(cmds, envs, strict=True)):
            log = open(out_dir / f"proc-{i}.log", "wb")  # noqa: SIM115 - closed in finally
            logs.append(log)
            try:
                procs.append(
                    subprocess.Popen(
                        cmd,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
            except OSError as e:
                raise BaselineError(f"{name}: cannot start {cmd[0]}: {e}") from None
        failed = _watch(procs, t0 + timeout_s)
    except KeyboardInterrupt:
        _kill_all(procs)
        raise
    finally:
        _kill_all(procs)
        for log in logs:
            log.close()
    per_rank = [_read_records(rank_file(out_dir, r)) for r in range(nranks)]
    if isinstance(failed, str):  # "timeout"
        raise BaselineError(
            f"{name}: timed out after {timeout_s:.0f}s{_progress(per_rank)}; logs in {out_dir}"
        )
    if failed is not None:
        rank = failed if len(procs) == nranks else None  # one process a rank, not one mpiexec for all
        raise BaselineError(
            f"{name}: {_first_error(per_rank, procs[failed], out_dir / f'proc-{failed}.log', rank)}"
        )
    errors = _errors(per_rank)
    if errors:
        raise BaselineError(f"{name}: {errors[0]}")
    return per_rank


def _watch(procs: list[subprocess.Popen], deadline: float) -> int | str | None:
    """None when all exited 0; the index of the first that failed; "timeout" when the deadline passed.
    Of several seen failed in one poll, one killed by a signal comes first: the others most likely
    failed because it died (a peer's connection reset), not the other way round."""
    while True:
        codes = [p.poll() for p in procs]
        failed = {i: code for i, code in enumerate(codes) if code is not None and code != 0}
        if failed:
            return min(failed, key=lambda i: (failed[i] >= 0, i))
        if all(code is not None for code in codes):
            return None
        if time.monotonic() > deadline:
            return "timeout"
        time.sleep(POLL_S)


def _kill_all(procs: list[subprocess.Popen]) -> None:
    """SIGTERM every group still alive, SIGKILL what is left after a grace period, then reap all."""
    alive = [p for p in procs if p.poll() is None]
    for p in alive:
        _signal_group(p, signal.SIGTERM)
    deadline = time.monotonic() + TERM_GRACE_S
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if p.poll() is None]
        time.sleep(POLL_S)
    for p in procs:
        _signal_group(p, signal.SIGKILL)  # also catches leftovers of groups whose leader already exited
        p.wait()


def _signal_group(p: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _read_records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass  # a line cut short by a kill
    return out


def _errors(per_rank: list[list[dict]]) -> list[str]:
    """Each rank's reported error, earliest first: the first is usually the root cause."""
    errs = [rec for recs in per_rank for rec in recs if "error" in rec]
    return [f"rank {e['rank']} failed: {e['error']}" for e in sorted(errs, key=lambda e: e.get("t", 0))]


def _first_error(per_rank: list[list[dict]], proc: subprocess.Popen, log: Path, rank: int | None) -> str:
    """The root cause: the failed process's own error record, else its death (when it is one rank,
    `rank`, the others' errors are its consequences); else the earliest error any rank recorded."""
    code = proc.returncode
    how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"
    if rank is not None:
        own = [rec for rec in per_rank[rank] if "error" in rec]
        if own:
            return f"rank {rank} failed: {own[0]['error']}"
        return f"rank {rank} (pid {proc.pid}) {how}: {_last_line(log)}"
    errors = _errors(per_rank)
    if errors:
        return errors[0]
    program = proc.args[0] if isinstance(proc.args, list) else proc.args  # run_workers gives lists
    return f"{Path(str(program)).name} {how}: {_last_line(log)}"


def _last_line(log: Path) -> str:
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no output)"
    return lines[-1][:300] if lines else "(no output)"


def _progress(per_rank: list[list[dict]]) -> str:
    started = [rec["size"] for recs in per_rank for rec in recs if rec.get("phase") == "start"]
    return f" (reached size {max(started)} B)" if started else " (before the first size started)"
