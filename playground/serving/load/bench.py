"""`python -m playground bench serving`: the server under Poisson load at a sweep of rates, through
HTTP as a user's client would, beside the lecture's queueing models (`run_serving_bench`).

Per setup (a way of starting the server: prefill-first scheduling, chunked prefill, speculative
decoding) the server is started (`serve`, a child process), warmed up, and sent `requests` requests
at each rate: Poisson arrivals (or a trace's, scaled to the rate), each request on its own
streaming connection (httpx, asyncio), open loop: a request is sent at its arrival time whatever
the others are doing, as users do. Between rates the server drains. Rates `auto`: first a few
requests one after the other measure a request alone (`alone`), then the sweep runs at 0.25 to 8
times 1 / alone: one at a time the server would saturate at 1 / alone; batching takes it past.

Written to runs/<stamp>-bench-serving/: result.json (the tables, notes, every row), latency.png.
"""

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from playground.core.errors import ParamError
from playground.core.rundir import EXIT_FAILED, EXIT_OK, make_run_dir
from playground.display.report import Report, make_console, progress_bar, render_report
from playground.serving.load.arrivals import (
    Workload,
    poisson_arrivals_s,
    prompts,
    read_trace_s,
    scaled_trace_s,
)
from playground.serving.load.client import RequestRecord, send_request
from playground.serving.load.load_report import notes, plot, tables
from playground.serving.load.load_stats import Slo, fit_model, rate_row, with_model_columns
from playground.serving.load.server_process import ServerProcess
from playground.transformer.data import lecture_bytes

# setup name -> the serve flags that make it (one table: the CLI's choices derive from it)
SETUPS = {
    "prefill-first": [],
    "chunked": ["--chunked-prefill", "--max-num-batched-tokens", "128"],
    "speculative": ["--speculative-tokens", "4"],
}
AUTO_MULTIPLES = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)  # rates as multiples of 1 / alone
ALONE_REQUESTS = 5


@dataclass(frozen=True)
class ServingBenchConfig:
    serve_flags: tuple[str, ...] = ()  # what `serve` gets besides the setup's flags (--model, shape, ...)
    setups: tuple[str, ...] = ("prefill-first",)
    rates: tuple[float, ...] = ()  # requests/s; () = auto (see the module doc)
    requests: int = 50  # a rate
    workload: Workload = field(default_factory=Workload)
    slo: Slo = field(default_factory=Slo)
    slo_tbt_ms: float = 200.0  # the time-between-tokens SLO of the chunked-prefill comparison
    trace: str | None = None  # a file of arrival times instead of Poisson
    seed: int = 0
    out: str = "runs"

    def __post_init__(self):
        unknown = [s for s in self.setups if s not in SETUPS]
        if unknown or not self.setups:
            raise ParamError(
                "--setups", f"allowed: {', '.join(SETUPS)}; got {','.join(self.setups) or 'none'}"
            )
        if any(not r > 0 for r in self.rates):
            raise ParamError("--rates", f"must be > 0 requests/s, got {','.join(map(str, self.rates))}")
        if self.requests < 2:
            raise ParamError("--requests", f"must be >= 2 a rate, got {self.requests}")


async def _send_all(
    url: str, arrivals_s: np.ndarray, requests: list[list[int]], max_tokens: int, on_done
) -> list[RequestRecord]:
    """Open loop: request i is sent at arrivals_s[i] (from now), whatever the others do."""
    import httpx

    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0), limits=limits) as client:
        start = time.perf_counter()

        async def one(at_s: float, prompt: list[int]) -> RequestRecord:
            await asyncio.sleep(max(0.0, at_s - (time.perf_counter() - start)))
            record = await send_request(
                client, url, "playground", prompt, max_tokens, time.perf_counter() - start
            )
            on_done()
            return record

        return list(
            await asyncio.gather(*(one(float(a), p) for a, p in zip(arrivals_s, requests, strict=True)))
        )


def _alone_s(url: str, config: ServingBenchConfig, text: bytes) -> float:
    """The median time of a request with the server to itself (one after the other)."""
    rng = np.random.default_rng(config.seed + 1)
    times = []
    for prompt in prompts(config.workload, ALONE_REQUESTS, text, rng):
        (record,) = asyncio.run(
            _send_all(url, np.zeros(1), [prompt], config.workload.output_tokens, lambda: None)
        )
        if record.ok and record.e2e_s:
            times.append(record.e2e_s)
    if not times:
        raise ParamError("bench serving", f"the server at {url} answered no request")
    return float(np.median(times))


def _sweep_setup(setup: str, config: ServingBenchConfig, text: bytes, console, said: list[str]) -> list[dict]:
    rows = []
    with ServerProcess([*config.serve_flags, *SETUPS[setup]]) as server:
        said += [f"{setup}: {line}" for line in server.said[:1]]
        alone = _alone_s(server.url, config, text)  # also the warm-up
        rates = config.rates or tuple(round(m / alone, 2) for m in AUTO_MULTIPLES)
        trace = read_trace_s(Path(config.trace)) if config.trace else None
        with progress_bar(console) as progress:
            task = progress.add_task(f"{setup}", total=len(rates) * config.requests)
            for k, rate in enumerate(rates):
                rng = np.random.default_rng([config.seed, k])
                arrivals = (
                    scaled_trace_s(trace, rate, config.requests)
                    if trace is not None
                    else poisson_arrivals_s(rate, config.requests, rng)
                )
                progress.update(task, description=f"{setup} at {rate:g}/s")
                records = asyncio.run(
                    _send_all(
                        server.url,
                        arrivals,
                        prompts(config.workload, config.requests, text, rng),
                        config.workload.output_tokens,
                        lambda: progress.advance(task),
                    )
                )
                rows.append(rate_row(setup, rate, records, config.slo))
    return rows


def run_serving_bench(config: ServingBenchConfig) -> int:
    """The sweep of every setup; prints and writes the report. Exit 1 if requests failed."""
    console = make_console()
    text = lecture_bytes().tobytes()
    run_dir = make_run_dir(Path(config.out), "bench-serving")
    said: list[str] = []
    rows_by_setup, models, all_notes, all_rows = {}, {}, [], []
    for setup in config.setups:
        rows = _sweep_setup(setup, config, text, console, said)
        model = fit_model(rows, config.workload.output_tokens)
        rows_by_setup[setup], models[setup] = with_model_columns(rows, model), model
        all_rows += rows_by_setup[setup]
        all_notes += notes(setup, rows, model, config.slo_tbt_ms)
    all_notes += said
    all_notes.append(
        f"SLO: TTFT <= {1e3 * config.slo.ttft_s:g} ms and TPOT <= {1e3 * config.slo.tpot_s:g} ms; "
        f"{config.requests} requests a rate, {config.workload.output_tokens} output tokens each"
    )
    plot(rows_by_setup, models, run_dir / "latency.png")
    failed = sum(r["failed"] for r in all_rows)
    report = Report(
        ok=not failed,
        tables=tables(all_rows),
        notes=all_notes,
        failures=[f"{failed} requests failed"] if failed else [],
        files=["latency.png"],
    )
    render_report(report, console)
    _write_result(run_dir, report, all_rows)
    console.print(f"written: {run_dir}/result.json, {run_dir}/latency.png", highlight=False)
    return EXIT_OK if report.ok else EXIT_FAILED


def _write_result(run_dir: Path, report: Report, rows: list[dict]) -> None:
    import json
    from dataclasses import asdict

    body = {
        "ok": report.ok,
        "tables": [asdict(t) for t in report.tables],
        "notes": report.notes,
        "failures": report.failures,
        "rows": rows,
        "files": report.files,
    }
    (run_dir / "result.json").write_text(json.dumps(body, indent=1, default=str))
