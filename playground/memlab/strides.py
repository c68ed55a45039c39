"""Which cache lines a strided read touches (seed §1.5): the count the stride lab's timings follow.

Reading a[0], a[s], a[2s], ... of a float32 array fetches whole lines. While s * 4 bytes is at
most a line, every line of the array is fetched however few elements are read; past a line,
each element read costs a line of its own, so doubling the stride halves the lines.
"""

EXACT_FLOAT_SUM = 8 * 2**24  # 8 float32 accumulators of 1.0 stay exact up to this many elements


def lines_touched(num_elems: int, stride_elems: int, line_bytes: int) -> int:
    """Distinct cache lines holding a[0], a[s], a[2s], ... of a float32 array (line-aligned)."""
    num_read = len(range(0, num_elems, stride_elems))
    if 4 * stride_elems > line_bytes:  # each element in a line of its own
        return num_read
    return (4 * stride_elems * (num_read - 1)) // line_bytes + 1  # gaps < a line: every line
