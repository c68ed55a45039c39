"""A multi-process distributed-systems playground: real collectives over ZeroMQ and systems labs.

`import playground as pg` gives the Python API (docs/python-api.md): `pg.run`, `pg.bench`,
`pg.simulate`, `pg.launch`, the collectives (`pg.allreduce`, ...) and the errors. Every rank process
imports this package too, so importing it stays cheap: each name is imported on first use (PEP 562).
"""

import sys
import types

__version__ = "0.1.0"

_EXPORTS = {
    **dict.fromkeys(("run", "bench", "simulate", "launch", "Result", "OutputFile"), "playground.api"),
    **dict.fromkeys(
        ("allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "ReduceOp"),
        "playground.collectives",
    ),
    **dict.fromkeys(("PlaygroundError", "RunFailed", "ScenarioError", "ParamError"), "playground.errors"),
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


class _Package(types.ModuleType):
    """`run`, `bench` and `launch` are functions of the API and modules of this package too. The
    import system sets a submodule as an attribute of its package once it is imported, which would
    hide the function: here the function wins. The modules stay where `from playground.run import
    execute` finds them (sys.modules)."""

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, types.ModuleType) and _EXPORTS.get(name) == "playground.api":
            return
        super().__setattr__(name, value)

    def __reduce__(self):
        """Pickled by name, as pickle and dill pickle a plain module (dill looks modules up by
        their exact type): a rank function that uses `pg` gets the rank's own import of it."""
        from importlib import import_module

        return import_module, (self.__name__,)


sys.modules[__name__].__class__ = _Package
