"""Fitting a table to the terminal it is printed in: which columns go into which part, how wide each is.

A value is never cut. Each column has a natural width (its widest header or cell on one line) and
a least width (its longest word: a number is one word, a header or a text cell may wrap between
words). A table whose natural widths fit is printed as it is; one whose least widths fit is
printed at full width with headers and text wrapped; one wider than that is split: the key
columns (what names a row, such as the size and the algorithm) start every part, and the other
columns follow in order, as many to a part as fit. Rich's table with its default box and padding
takes 3 characters a column and 1 more (`OVERHEAD`).
"""

import re
from dataclasses import dataclass

PER_COLUMN = 3  # one space each side and one rule
OVERHEAD = 1  # the closing rule


@dataclass(frozen=True)
class Column:
    header: str
    cells: tuple[str, ...]
    numeric: bool

    @property
    def natural(self) -> int:
        lines = [*self.header.splitlines(), *(line for c in self.cells for line in c.splitlines())]
        return max(map(len, lines), default=1)

    @property
    def least(self) -> int:
        """The longest word: what the column needs so that nothing in it is cut."""
        words = re.split(r"\s+", self.header) + [w for c in self.cells for w in re.split(r"\s+", c)]
        return max(map(len, words), default=1)


@dataclass(frozen=True)
class Part:
    columns: tuple[int, ...]  # indexes of the table's columns, the keys first
    widths: tuple[int, ...]  # each column's width in this part (no padding)


def table_width(widths) -> int:
    return sum(widths) + PER_COLUMN * len(widths) + OVERHEAD


def _widths(columns: list[Column], width: int) -> tuple[int, ...]:
    """Natural widths if they fit; else the least widths plus the room left, shared in proportion
    to what each column would still take."""
    natural = [c.natural for c in columns]
    if table_width(natural) <= width:
        return tuple(natural)
    least = [c.least for c in columns]
    room = width - table_width(least)
    want = [n - m for n, m in zip(natural, least, strict=True)]
    if room <= 0 or not sum(want):
        return tuple(least)
    extra = [room * w // sum(want) for w in want]
    return tuple(m + min(e, w) for m, e, w in zip(least, extra, want, strict=True))


def fit(columns: list[Column], width: int, keys: int = 1) -> list[Part]:
    """The parts a table of `columns` is printed in at `width` characters; the first `keys`
    columns start every part. As few parts as fit, the other columns shared out evenly."""
    everything = list(range(len(columns)))
    if table_width([c.least for c in columns]) <= width or len(columns) <= keys + 1:
        return [Part(tuple(everything), _widths(columns, width))]
    keys = max(1, min(keys, len(columns) - 1))
    head, rest = everything[:keys], everything[keys:]
    for count in range(2, len(rest) + 1):
        groups = _even_groups([columns[i].least + PER_COLUMN for i in rest], count)
        parts = [head + rest[a:b] for a, b in groups]
        if all(table_width([columns[i].least for i in p]) <= width for p in parts):
            break
    return [Part(tuple(p), _widths([columns[i] for i in p], width)) for p in parts]


def _even_groups(sizes: list[int], count: int) -> list[tuple[int, int]]:
    """`sizes` cut into `count` consecutive groups (start, end) whose largest sum is as small as
    can be (the linear partition, by dynamic programming over the cut points)."""
    n = len(sizes)
    prefix = [0]
    for s in sizes:
        prefix.append(prefix[-1] + s)
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(count + 1)]  # best[k][j]: first j sizes in k groups
    cut = [[0] * (n + 1) for _ in range(count + 1)]
    best[0][0] = 0
    for k in range(1, count + 1):
        for j in range(k, n + 1):
            for i in range(k - 1, j):
                cost = max(best[k - 1][i], prefix[j] - prefix[i])
                if cost < best[k][j]:
                    best[k][j], cut[k][j] = cost, i
    groups, j = [], n
    for k in range(count, 0, -1):
        groups.append((cut[k][j], j))
        j = cut[k][j]
    return groups[::-1]
