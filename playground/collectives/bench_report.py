"""Rows and tables as nccl-tests prints them, built one way for our collectives and the baselines.

`bench` divides a baseline's time by ours, so both rows must come from the same arithmetic: one
`build_row` turns every rank's record of one (algorithm, size) into a row. Each rank records its
median time (`median_us`) and its wrong-element count (`wrong`: `check.count_wrong`, -1 when not
checked; `first_wrong` where the first wrong element was seen); with in-place measurements, also
`ip_median_us`, `ip_wrong` and `ip_first_wrong` (nccl-tests' second column set: the result written
over the input). A baseline whose library has no out-of-place form of a collective (torch's
all_reduce) records only the `ip_` figures: its out-of-place columns are None, never the other
form's figure, so a ratio always sets like against like (`FORMS`). The row's time is the
slowest rank's median (a collective ends when its last rank does); algbw = size / time and
busbw = algbw x `busbw_factor` (GB/s are 1e9 bytes/s); wrong is summed over ranks. Nothing is
rounded here: the table rounds for display, result.json keeps what was measured. A zero time
has no bandwidth: algbw and busbw are None (JSON null, "-" in the table), never 0 or NaN.

Beside the measurement, `add_model_columns` puts the alpha-beta-gamma model's time for the same
collective, algorithm (for `auto->rd`, the one auto ran), rank count and size (`model_us`, from
`playground.models.costs`), measured / model (`vs_model`), and for all-reduce and all-to-all the
algorithm the model would pick (`model_pick`; the all-to-all's by the calibrated prices where there
are); the table's title says where the model's link came from. With a calibration the caller passes `modelled` instead, which prices each row itself: the closed form on
the calibrated link for the row's size, or, where ranks outnumber the calibrated cores and the
closed forms (every rank a CPU of its own) do not hold, the simulator (`model_by` says which).
"""

from playground.collectives.check import (
    ONE_LINK_SHARE,
    busbw_factor,
    describe_first_wrong,
    earliest_first_wrong,
)
from playground.collectives.registry import AUTO_FOR, BY_KEY, best_algorithm, collective_time_s, flat, names
from playground.display.report import Report, Table
from playground.models.calibration import ModelSource
from playground.models.costs import Link

REDUCING = frozenset({"allreduce", "reduce_scatter", "reduce"})
COLUMNS = {
    "size": "size (B)",
    "count": "count",
    "dtype": "type",
    "op": "redop",
    "algorithm": "algo",
    "time_us": "time (us)",
    "algbw_gbps": "algbw (GB/s)",
    "busbw_gbps": "busbw (GB/s)",
    "wrong": "#wrong",
}
IN_PLACE_COLUMNS = {
    "ip_time_us": "in-place time (us)",
    "ip_algbw_gbps": "algbw",
    "ip_busbw_gbps": "busbw",
    "ip_wrong": "#wrong",
}
MODEL_COLUMNS = {"model_us": "model (us)", "vs_model": "measured/model"}
PICK_COLUMN = {"model_pick": "model pick"}
BY_COLUMN = {"model_by": "model by"}
LEGEND = {  # the columns an nccl-tests reader cannot guess, said once under the table
    "model_pick": "the algorithm the model predicts fastest at this size and rank count",
    "model_us": "the alpha-beta-gamma model's time for the row's algorithm and size (its link: the title)",
    "vs_model": "time / model time: above 1 the run is slower than the model",
    "model_by": "what priced the row: the closed form on the calibrated link, or the simulator where ranks "
    "wait for cores",
}
FORMS = (("", "out of place"), ("ip_", "in place"))  # (column prefix, what it measures), nccl-tests' order
FACTOR_TEXT = {"allreduce": "2(N-1)/N", **dict.fromkeys(ONE_LINK_SHARE, "(N-1)/N")}


def build_row(
    collective: str, per_rank: list[dict], size: int, count: int, dtype: str, op: str, algorithm: str
) -> dict:
    """One nccl-tests row from every rank's record of one (algorithm, size); `size` in bytes and
    `count` in elements as nccl-tests defines them for `collective`. With in-place records
    (`ip_median_us`), the in-place columns (prefix ip_) join the same row."""
    factor = busbw_factor(collective, len(per_rank))
    row = {
        "size": size,
        "count": count,
        "dtype": dtype,
        "op": op if collective in REDUCING else "none",
        "algorithm": algorithm,
    }
    for prefix, _ in FORMS:
        if prefix + "median_us" in per_rank[0]:
            row.update(_timed_columns(per_rank, prefix, size, factor))
        elif not prefix:  # not offered in this form: its columns hold nothing
            row.update(dict.fromkeys(("time_us", "algbw_gbps", "busbw_gbps", "wrong")))
    return row


def _timed_columns(per_rank: list[dict], prefix: str, size: int, factor: float) -> dict:
    time_us = max(r[prefix + "median_us"] for r in per_rank)
    algbw = size / time_us / 1e3 if time_us > 0 else None  # bytes/us / 1e3 = GB/s
    wrongs = [r[prefix + "wrong"] for r in per_rank]
    columns = {
        prefix + "time_us": time_us,
        prefix + "algbw_gbps": algbw,
        prefix + "busbw_gbps": None if algbw is None else algbw * factor,
        prefix + "wrong": -1 if min(wrongs) < 0 else sum(wrongs),
    }
    first = earliest_first_wrong(per_rank, prefix)
    if first is not None:
        columns[prefix + "first_wrong"] = first
    return columns


def model_algorithm(collective: str, algorithm: str, size: int, num_ranks: int, link: Link) -> str:
    """The algorithm whose formula models a row: what `auto` ran (`auto->rd`), the row's own, or,
    for a baseline (`gloo`, `mpi`: their algorithm is theirs to choose), the model's pick."""
    algorithm = algorithm.rpartition("->")[2]
    if (collective, algorithm) in BY_KEY:
        return algorithm
    if collective in AUTO_FOR:
        return best_algorithm(size, num_ranks, link, collective=collective)
    return names(collective, auto=False)[0]


def add_model_columns(
    rows: list[dict], collective: str, num_ranks: int, link: Link, modelled=None
) -> list[dict]:
    """The rows with `model_us`, `vs_model` (time / model, the out-of-place time or, for a baseline
    offering only the in-place form, that one; None when the model says 0) and, for all-reduce,
    `model_pick` appended; with `modelled` ((algorithm, size) -> (seconds, by) or None), its price
    where it has one and `model_by` saying what gave it. Nothing else changes."""
    out = []
    for row in rows:
        algorithm = model_algorithm(collective, row["algorithm"], row["size"], num_ranks, link)
        priced = modelled(algorithm, row["size"]) if modelled is not None else None
        if priced is None:
            model_us, by = (
                collective_time_s(collective, algorithm, row["size"], num_ranks, link) * 1e6,
                "closed form",
            )
        else:
            model_us, by = priced[0] * 1e6, priced[1]
        time_us = row["time_us"] if row["time_us"] is not None else row.get("ip_time_us")
        extra = {
            "model_us": model_us,
            "vs_model": time_us / model_us if model_us > 0 and time_us is not None else None,
        }
        if modelled is not None:
            extra["model_by"] = by
        if collective == "allreduce":
            extra["model_pick"] = best_algorithm(row["size"], num_ranks, link)
        elif collective in AUTO_FOR:
            extra["model_pick"] = _pick(collective, row["size"], num_ranks, link, modelled)
        out.append({**row, **extra})
    return out


def _pick(collective: str, size: int, num_ranks: int, link: Link, modelled) -> str:
    """The model's fastest algorithm of `collective` at `size`: by `modelled`'s prices where it has
    them all (a calibration: closed form or simulator), else by the closed forms on `link`."""
    prices = {a: modelled(a, size) for a in flat(collective)} if modelled is not None else {}
    if not prices or any(p is None for p in prices.values()):
        return best_algorithm(size, num_ranks, link, collective=collective)
    return min(prices, key=lambda a: prices[a][0])


def with_model_columns(columns: dict[str, str], collective: str, by: bool = False) -> dict[str, str]:
    """`columns` with the model's: its pick right after the algorithm (all-reduce), its time and
    the ratio at the end (and, with `by`, what gave each row's model)."""
    out = {}
    for key, header in columns.items():
        out[key] = header
        if key == "algorithm" and collective in AUTO_FOR:
            out.update(PICK_COLUMN)
    return {**out, **MODEL_COLUMNS, **(BY_COLUMN if by else {})}


def bench_report(
    per_rank_rows: list[list[dict]],
    collective: str,
    dtype: str,
    op: str,
    iters: int,
    warmup: int,
    data: dict | None = None,
    model: ModelSource | None = None,
    modelled=None,
) -> Report:
    """The bench's report from every rank's list of records (the same (algorithm, size) order on
    every rank): the nccl-tests table, nccl-tests' closing lines, a failure per wrong row. With
    `model`, the model columns and its caption (the title's second line); with `modelled`, each
    row priced by it (see `add_model_columns`)."""
    n = len(per_rank_rows)
    rows = [
        build_row(collective, list(recs), recs[0]["size"], recs[0]["count"], dtype, op, recs[0]["algorithm"])
        for recs in zip(*per_rank_rows, strict=True)
    ]
    if model is not None:
        rows = add_model_columns(rows, collective, n, model.link, modelled)
    failures = wrong_row_failures(rows, collective)
    title = (
        f"{collective}, {n} ranks, {dtype}: median of {iters} iterations after {warmup} warm-up; "
        f"slowest rank; busbw = algbw x {FACTOR_TEXT.get(collective, '1')}"
    )
    columns = {**COLUMNS, **IN_PLACE_COLUMNS} if rows and "ip_time_us" in rows[0] else COLUMNS
    if model is not None:
        title += f"\n{model.caption}"
        columns = with_model_columns(columns, collective, by=modelled is not None)
        data = {**(data or {}), "model": model.to_dict()}
    return Report(
        ok=not failures,
        tables=[nccl_table(title, rows, columns)],
        failures=failures,
        notes=closing_lines(rows),
        data=data or {},
    )


def nccl_table(title: str, rows: list[dict], columns: dict[str, str]) -> Table:
    """The nccl-tests table: a row is named by its size and algorithm, the model's columns
    explained under it."""
    legend = {k: v for k, v in LEGEND.items() if k in columns}
    return Table(title, rows, columns, keys=("size", "algorithm"), legend=legend)


def wrong_row_failures(rows: list[dict], collective: str, label=lambda r: "") -> list[str]:
    """One failure per row with wrong elements (and per in-place column with them), saying where
    the first one was seen: '3 wrong elements: allreduce ring size 4096 (first seen on rank 1 at
    warm-up iteration 0: element 0 is 2.0, expected 4.0)'."""
    out = []
    for r in rows:
        for prefix, place in (("", ""), ("ip_", " in place")):
            if (r.get(prefix + "wrong") or 0) > 0:
                first = r.get(prefix + "first_wrong")
                where = f" ({describe_first_wrong(first)})" if first else ""
                out.append(
                    f"{r[prefix + 'wrong']} wrong elements: {collective} {r['algorithm']}{place}"
                    f"{label(r)} size {r['size']}{where}"
                )
    return out


def closing_lines(rows: list[dict]) -> list[str]:
    """nccl-tests' last lines: wrong values overall, and the average busbw (here per algorithm)."""
    counts: list[int] = [  # a form not measured counts nothing
        w for r in rows for prefix, _ in FORMS if (w := r.get(prefix + "wrong")) is not None
    ]
    checked = all(w >= 0 for w in counts)
    wrong = sum(max(0, w) for w in counts)
    lines = [
        f"wrong values: {wrong} {'OK' if wrong == 0 else 'FAILED'}"
        if checked
        else "wrong values: not checked"
    ]
    by_algo: dict[str, list[float]] = {}
    for r in rows:
        busbw = by_algo.setdefault(r["algorithm"].split("->")[0], [])
        value = r["busbw_gbps"] if r["time_us"] is not None else r.get("ip_busbw_gbps")
        if value is not None:
            busbw.append(value)
    lines.append(
        "avg busbw (GB/s): "
        + ", ".join(f"{a} {sum(v) / len(v):.3g}" if v else f"{a} -" for a, v in by_algo.items())
    )
    return lines
