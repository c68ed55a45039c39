"""What every section's readers share: the table they register in, and finding a row of a result."""

from collections.abc import Callable

from playground.lecture.figures import Context, NotMeasured, Reading

Reader = Callable[[Context], Reading]


class Readers(dict[str, Reader]):
    """A section's readers by figure id: `@READERS.add("l1-latency")` over a function of a
    `Context` that returns the figure's `Reading`."""

    def add(self, figure_id: str) -> Callable[[Reader], Reader]:
        def register(fn: Reader) -> Reader:
            if figure_id in self:
                raise ValueError(f"two readers for figure {figure_id!r}")
            self[figure_id] = fn
            return fn

        return register


def find_row(rows: list[dict], what: str, **match) -> dict:
    """The first of `rows` whose values match `match`; NotMeasured naming `what` if none does."""
    for r in rows:
        if all(r.get(k) == v for k, v in match.items()):
            return r
    raise NotMeasured(f"no {what} row with {', '.join(f'{k}={v!r}' for k, v in match.items())}")
