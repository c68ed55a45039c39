"""Every interleaving of threads doing `x += 1` as three steps (read, add, write), and the final x.

Lecture section 3.4 / exercise 7: `x += 1` is a read into a register, an add, and a write back.
Two threads with one increment each have C(6, 3) = 20 orders; with two increments each
C(12, 6) = 924 orders, ending with x = 2, 3, 4 in 702, 216 and 6 of them -- only 6 are right.
The enumeration is exhaustive (a multinomial number of orders), so keep it to a dozen or so steps.
"""

from collections import Counter
from collections.abc import Iterator
from math import factorial

STEPS = ("read", "add", "write")


def count_interleavings(step_counts: list[int] | tuple[int, ...]) -> int:
    """Number of orders that keep each thread's own steps in order: (sum n)! / prod(n!)."""
    out = factorial(sum(step_counts))
    for n in step_counts:
        out //= factorial(n)
    return out


def interleavings(step_counts: list[int] | tuple[int, ...]) -> Iterator[tuple[int, ...]]:
    """Each order as a tuple of thread ids, one per step, in lexicographic order."""
    remaining = list(step_counts)
    total = sum(remaining)
    order: list[int] = []

    def rec() -> Iterator[tuple[int, ...]]:
        if len(order) == total:
            yield tuple(order)
            return
        for t, left in enumerate(remaining):
            if left:
                remaining[t] -= 1
                order.append(t)
                yield from rec()
                order.pop()
                remaining[t] += 1

    yield from rec()


def run_increments(order: tuple[int, ...], num_threads: int, x0: int = 0) -> int:
    """Final x after threads run read/add/write steps in `order` (each thread's register private)."""
    x = x0
    register = [0] * num_threads
    step_index = [0] * num_threads
    for t in order:
        step = STEPS[step_index[t] % 3]
        step_index[t] += 1
        if step == "read":
            register[t] = x
        elif step == "add":
            register[t] += 1
        else:
            x = register[t]
    return x


def final_value_counts(num_threads: int, increments_per_thread: int) -> Counter:
    """How many interleavings end with each final x: the lecture's {2: 702, 3: 216, 4: 6}."""
    counts: Counter = Counter()
    steps = [3 * increments_per_thread] * num_threads
    for order in interleavings(steps):
        counts[run_increments(order, num_threads)] += 1
    return counts


def describe(order: tuple[int, ...], num_threads: int) -> str:
    """An order in words, e.g. 'A read(0) -> B read(0) -> A add -> A write(1) -> ...'."""
    x, register, step_index, words = 0, [0] * num_threads, [0] * num_threads, []
    for t in order:
        step = STEPS[step_index[t] % 3]
        step_index[t] += 1
        name = chr(ord("A") + t)
        if step == "read":
            register[t] = x
            words.append(f"{name} read({x})")
        elif step == "add":
            register[t] += 1
            words.append(f"{name} add")
        else:
            x = register[t]
            words.append(f"{name} write({x})")
    return " -> ".join(words)


LECTURE_FINAL_VALUES = {1: {1: 18, 2: 2}, 2: {2: 702, 3: 216, 4: 6}}  # increments per thread -> {x: orders}


def lecture_rows() -> list[dict]:
    """Two threads with 1 and with 2 increments each: orders and final values beside the lecture's."""
    rows = []
    for per_thread, lecture in LECTURE_FINAL_VALUES.items():
        counts = final_value_counts(2, per_thread)
        rows.append(
            {
                "case": f"2 threads x {per_thread} increment(s)",
                "orders": count_interleavings([3 * per_thread] * 2),
                "final_values": ", ".join(f"x={k}: {v}" for k, v in sorted(counts.items())),
                "lecture": ", ".join(f"x={k}: {v}" for k, v in sorted(lecture.items())),
                "correct": counts.get(2 * per_thread, 0),
                "match": dict(counts) == lecture,
            }
        )
    return rows
