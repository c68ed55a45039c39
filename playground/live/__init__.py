"""The live page: a run seen while it runs (`run --live`, `watch RUN_DIR`), and at /metrics.

`snapshot` reads the run directory (flight rings, timing logs, failures, result.json), `metrics`
turns a snapshot into Prometheus' format, `page` is the HTML the browser polls, `server` serves
them (Starlette over uvicorn on a thread), `command` is `watch` and the `--live` flags.
"""
