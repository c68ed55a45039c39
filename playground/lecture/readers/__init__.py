"""One reader per lecture figure: where in the scenarios' results its values live, a module per
section of the lecture (memory, queueing, concurrency, paging, networking: lecture.yaml's ids).

A reader gets a `Context` (the runs, the section's constants, the machine) and returns a
`Reading` of this machine's value, the model's and, when the lecture gives only the inputs, the
lecture's own figure computed from them. Values come from result.json and the resolved
scenario.yaml of each run; the lecture's figures themselves are only in lecture.yaml.
"""

from playground.lecture.readers import concurrency, memory, networking, paging, queueing
from playground.lecture.readers.common import Reader

SECTIONS = (memory, queueing, concurrency, paging, networking)  # in the lecture's order


def _every_reader() -> dict[str, Reader]:
    readers: dict[str, Reader] = {}
    for section in SECTIONS:
        twice = set(readers) & set(section.READERS)
        if twice:
            raise ValueError(f"figures with a reader in two sections: {', '.join(sorted(twice))}")
        readers.update(section.READERS)
    return readers


READERS = _every_reader()  # figure id -> its reader, every section's
