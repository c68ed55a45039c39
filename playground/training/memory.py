"""What a rank holds for training, per mode: the arrays' own bytes, and the process's RSS.

The replicated modes and ZeRO-1 keep the parameters and gradients as one whole flat buffer each
(ZeRO-1 shards only Adam's m and v); ZeRO-2 keeps the gradients as 1/N shards, ZeRO-3 the
parameters too, each whole only for a unit at a time (`sharded.Residency` counts the most at once).
The strategy says what it holds (`GradientStrategy.memory()`). RSS is what the process
really has resident (psutil), activations and the interpreter included; ranks keep freed memory
(`playground.core.machine.keep_freed_memory`), so RSS never falls within a run and a mode's RSS includes
what the modes before it left: run one mode alone (`--set params.mode=zero1`) to see its own.
"""

import resource

import psutil


def rss_bytes() -> int:
    return int(psutil.Process().memory_info().rss)


def memory_record(state: dict, start_rss_bytes: int = 0) -> dict:
    """The model state a strategy keeps (`GradientStrategy.memory()`: its arrays' bytes, the units
    whole at once at most) and this process's RSS now, at its peak, and before the mode began."""
    return {
        **state,
        "start_rss_bytes": int(start_rss_bytes),
        "rss_bytes": int(psutil.Process().memory_info().rss),
        "peak_rss_bytes": int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024,  # KiB on Linux
    }
