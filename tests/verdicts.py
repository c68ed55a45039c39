"""Every verdict on the lecture page read back against the numbers on its own row.

`check_summary(md)` parses summary.md's figure tables (figure | lecture | this machine | model |
verdict) and checks each exact row from its cells alone, as a reader would: "matched" only when
the checked column equals the lecture's figure to the precision the lecture gave; "within 25%"
only when every value beside it is; a row whose values beside the checked ones are outside the
band must say "outside". Nothing here calls the code that wrote the verdict.
"""

import re

BAND = 0.25
HEADER = "| figure | lecture | this machine | model | matched, or where they differ and why |"


NUMBER = re.compile(r"-?[\d,]*\.?\d+(?:e[+-]?\d+)?")
UNIT = re.compile(r"[^\d\s]+(?: [^\d\s]+)?")  # %, items/s, x S: words without digits


def numbers(cell: str) -> list[float] | None:
    """A cell's values (before any " — " note), or None when they are not all numbers (words, a
    hexadecimal address, a note alone)."""
    value = cell.split(" — ")[0].strip()
    if value in ("", "-"):
        return []
    parts = [p.strip() for p in value.split(" / ")]
    last, _, unit = parts[-1].partition(" ")
    parts[-1] = last
    if unit and not UNIT.fullmatch(unit):
        return None
    if not all(NUMBER.fullmatch(p) for p in parts):
        return None
    return [float(p.replace(",", "")) for p in parts]


def decimals(text: str) -> int:
    return len(text.partition(".")[2])


def lecture_texts(cell: str) -> list[str]:
    parts = [p.strip() for p in cell.split(" — ")[0].split(" / ")]
    parts[-1] = parts[-1].split(" ")[0]
    return parts


def rows(md: str) -> list[list[str]]:
    """The figure tables' rows of summary.md, each its five cells."""
    out, inside = [], False
    for line in md.splitlines():
        if line == HEADER:
            inside = True
            continue
        if inside and line.startswith("|---"):
            continue
        if inside and line.startswith("| "):
            out.append([c.strip().replace("\\|", "|") for c in line.strip("| ").split(" | ")])
        else:
            inside = False
    return out


def check_row(cells: list[str]) -> None:
    figure, lecture, measured, model, last = cells
    verdict = re.match(r"\*\*(.*?)\*\*", last)
    if verdict is None:
        return  # a timed row: no verdict, the why
    verdict = verdict[1]
    checked_cell, other_cell = (model, measured) if "(the model)" in verdict else (measured, model)
    checked, other, want = numbers(checked_cell), numbers(other_cell), numbers(lecture)
    bound = re.fullmatch(r"(>=|<=|>|<)\s*(-?[\d.]+)", lecture.split(" — ")[0].strip())
    if verdict.startswith("matched") and bound:  # the lecture says only "> 0"
        op, limit = bound[1], float(bound[2])
        assert checked and len(checked) == 1, cells
        assert {
            ">": checked[0] > limit,
            ">=": checked[0] >= limit,
            "<": checked[0] < limit,
            "<=": checked[0] <= limit,
        }[op], f"{figure}: {verdict}, yet {checked[0]} is not {op} {limit}"
    elif verdict.startswith("matched"):
        if want is None or checked is None:  # words (0x134123): the same text
            assert checked_cell.split(" — ")[0].lower() == lecture.split(" — ")[0].lower(), cells
        else:
            texts = lecture_texts(lecture)
            assert len(checked) == len(want), f"{figure}: {verdict} but {checked} vs the lecture's {want}"
            for got, text in zip(checked, texts, strict=True):
                assert round(got, decimals(text)) == float(text), f"{figure}: {verdict}, yet {got} vs {text}"
    if not (checked and other):
        return
    pairs = list(zip(checked, other, strict=False))
    if "(the model)" in verdict:
        off = [(c, o) for c, o in pairs if not (c > 0 and 1 / (1 + BAND) <= o / c <= 1 + BAND)]
        if "within" in verdict:
            assert not off, f"{figure}: says within, yet {off} (model, this machine) are not"
        if off:
            assert "outside" in verdict, f"{figure}: {off} (model, this machine) outside the band, unsaid"
    elif not any(w in verdict for w in ("differs", "outside")):
        assert all(c == o for c, o in pairs), f"{figure}: the model {other} beside this machine's {checked}"


def check_summary(md: str) -> int:
    """Check every exact row of summary.md; returns how many verdicts were checked."""
    checked = 0
    for cells in rows(md):
        check_row(cells)
        checked += cells[4].startswith("**")
    return checked
