"""Loads the C module with a message that says how to build it when it is missing."""

from types import ModuleType

from playground.errors import ToolMissing


def load_native() -> ModuleType:
    """`playground._native`, or ToolMissing naming the command that builds it."""
    try:
        from playground import _native
    except ImportError as e:
        raise ToolMissing(
            "the native module playground._native is not built: run `pip install .` "
            "(or `python setup.py build_ext --inplace` in a checkout); it needs a C compiler"
            f" ({e})",
            tool="playground._native",
        ) from None
    return _native
