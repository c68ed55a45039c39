""" "Did you mean ...?" for a misspelt name (a scenario, a command, a flag, a key): the closest of
the allowed names by difflib's ratio, or nothing when none is close. One rule for every message
that lists what is allowed, so that a typo is answered the same way everywhere."""

import difflib
from collections.abc import Iterable


def closest(word: str, allowed: Iterable[str]) -> str | None:
    """The allowed name closest to `word`, if one is close (difflib's ratio at least 0.6)."""
    found = difflib.get_close_matches(str(word), [str(a) for a in allowed], n=1, cutoff=0.6)
    return found[0] if found else None


def did_you_mean(word: str, allowed: Iterable[str]) -> str:
    """ "did you mean 'ring'? " (with the trailing space, to go before the list of what is
    allowed), or "" when no allowed name is close."""
    best = closest(word, allowed)
    return f"did you mean {best!r}? " if best is not None else ""
