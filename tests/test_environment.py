"""Every PLAYGROUND_* environment variable the code or the tests read is in the one table."""

import re
from pathlib import Path

from playground.core.environment import NAMES, VARIABLES

ROOT = Path(__file__).resolve().parents[1]


def test_every_variable_in_the_code_is_in_the_table():
    used = {}
    for folder in ("playground", "nodes", "tests", ".ci"):
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and path.suffix in (".py", "") and path.name != "environment.py":
                for name in re.findall(r"PLAYGROUND_[A-Z_]+[A-Z]", path.read_text(errors="replace")):
                    used.setdefault(name, path.relative_to(ROOT))
    missing = {name: str(where) for name, where in used.items() if name not in NAMES}
    assert not missing, f"add these to playground/core/environment.py: {missing}"
    unused = NAMES - set(used)
    assert not unused, f"no code reads these any more: {sorted(unused)}"


def test_each_variable_says_who_sets_it_and_why():
    assert len(NAMES) == len(VARIABLES)
    for v in VARIABLES:
        assert v.who_sets_it and len(v.meaning) > 20, v
