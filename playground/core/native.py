"""Loads the C module with a message that says how to build it when it is missing.

It is a top-level module, not inside the package: `python -m playground` run in a checkout imports
./playground (pure Python) ahead of the installed package, and still finds the compiled module
that `pip install .` put beside it in site-packages."""

from types import ModuleType

from playground.core.errors import ToolMissing


def load_native() -> ModuleType:
    """`_playground_native`, or ToolMissing naming the command that builds it."""
    try:
        import _playground_native
    except ImportError as e:
        raise ToolMissing(
            "the native module _playground_native is not built: run `pip install .` "
            "(or `python setup.py build_ext --inplace` in a checkout); it needs a C compiler"
            f" ({e})",
            tool="_playground_native",
        ) from None
    return _playground_native
