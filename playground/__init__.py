"""A multi-process distributed-systems playground: real collectives over ZeroMQ and systems labs.

`import playground as pg` gives the Python API (docs/python-api.md): `pg.run`, `pg.bench`,
`pg.simulate`, `pg.launch`, the collectives (`pg.allreduce`, ...) and the errors. Every rank process
imports this package too, so importing it stays cheap: each name is imported on first use (PEP 562).
"""

from playground.core.version import VERSION as __version__  # noqa: F401 - the package's version

_EXPORTS = {
    **dict.fromkeys(("run", "bench", "simulate", "launch", "Result", "OutputFile"), "playground.api"),
    **dict.fromkeys(
        (
            "allreduce",
            "broadcast",
            "reduce",
            "allgather",
            "reduce_scatter",
            "alltoall",
            "alltoallv",
            "gather",
            "scatter",
            "sendrecv",
            "ReduceOp",
        ),
        "playground.collectives",
    ),
    **dict.fromkeys(
        ("PlaygroundError", "RunFailed", "ScenarioError", "ParamError"), "playground.core.errors"
    ),
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
