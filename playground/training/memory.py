"""What a rank holds for training, per mode: the arrays' own bytes, and the process's RSS.

Parameters and gradients are one flat buffer each (every mode keeps both whole: ZeRO-1 shards
only the optimizer's states; stage 2 would shard the gradients too). Adam's m and v are two more
buffers of the parameters' size, or of the rank's 1/N shard under ZeRO-1. RSS is what the process
really has resident (psutil), activations and the interpreter included; ranks keep freed memory
(`playground.core.machine.keep_freed_memory`), so RSS never falls within a run and a mode's RSS includes
what the modes before it left: run one mode alone (`--set params.mode=zero1`) to see its own.
"""

import resource

import psutil


def memory_record(state: dict) -> dict:
    """The model state a strategy keeps (`GradientStrategy.memory()`: its arrays' bytes, the units
    whole at once at most) and this process's RSS now and at its peak."""
    return {
        **state,
        "rss_bytes": int(psutil.Process().memory_info().rss),
        "peak_rss_bytes": int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024,  # KiB on Linux
    }
