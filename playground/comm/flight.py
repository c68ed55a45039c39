"""The flight recorder's ring: each rank's last K operations, in memory anyone on the host can read.

Every Communicator of a launched rank keeps its ring in a file of the run directory,
`flight-rank-<r>.bin`, mapped into the rank's memory: native/oprecord.c writes an entry per
collective (begin_collective ... end_collective) and per point-to-point operation outside one, in
place, with no allocation and no system call (the kernel writes the pages back when it likes). So
the ring is there to read whatever happened to the rank: after it raised, while it hangs, after a
SIGKILL; the launcher, `inspect --flight` and a live view read it from outside, and the rank pays
nothing for being watched. PyTorch's flight recorder (TORCH_NCCL_TRACE_BUFFER_SIZE) keeps the same
ring inside the process and must be asked to dump it.

Layout (native/comm_core.h; ENTRY below mirrors it): a 256-byte header (magic, version, entry size,
capacity, rank, size, pid, the number of entries written, the one running) and `capacity` entries of
160 bytes, entry `record` at slot (record - 1) % capacity. A writer sets an entry's `record` to 0
first and last to its number, so a reader that reads the same nonzero `record` before and after an
entry has a whole one (an entry being overwritten as it is read is skipped).

Times are the host's CLOCK_MONOTONIC_COARSE (a few ms resolution: enough to say since when a rank
waits; step and collective times are the trace's).
"""

import mmap
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

DEFAULT_ENTRIES = 256  # per launched rank: 40 KiB, within a core's L2 (PLAYGROUND_FLIGHT_ENTRIES; 0: none)
IN_PROCESS_ENTRIES = 64  # per rank of an in-process world (in memory, no file)
HEADER_BYTES = 256
MAGIC = b"PGFLIGHT"
VERSION = 1
ENV_ENTRIES = "PLAYGROUND_FLIGHT_ENTRIES"

HEADER = np.dtype(
    [
        ("magic", "S8"),
        ("version", "<u4"),
        ("entry_bytes", "<u4"),
        ("capacity", "<u4"),
        ("rank", "<i4"),
        ("size", "<i4"),
        ("pid", "<i4"),
        ("records", "<u8"),
        ("active", "<u8"),
        ("created_ns", "<i8"),
    ]
)
ENTRY = np.dtype(
    [
        ("record", "<u8"),
        ("seq", "<u8"),
        ("group_seq", "<u8"),
        ("t_begin_ns", "<i8"),
        ("t_end_ns", "<i8"),
        ("t_wait_ns", "<i8"),
        ("nbytes", "<i8"),
        ("group", "<i4"),
        ("peer", "<i4"),
        ("tag", "<i4"),
        ("fingerprint", "<u4"),
        ("kind", "u1"),
        ("state", "u1"),
        ("dtype", "S6"),
        ("op", "S8"),
        ("algorithm", "S16"),
        ("name", "S56"),
    ]
)
KINDS = {1: "collective", 2: "send", 3: "recv"}
STATES = {1: "scheduled", 2: "started", 3: "completed", 4: "failed"}


def ring_path(run_dir: Path, rank: int) -> Path:
    return Path(run_dir) / f"flight-rank-{rank}.bin"


def entries_from_env(default: int = DEFAULT_ENTRIES) -> int:
    """PLAYGROUND_FLIGHT_ENTRIES rounded up to a power of two (0 turns the recorder off)."""
    raw = os.environ.get(ENV_ENTRIES, "")
    n = int(raw) if raw.strip().isdigit() else default
    return 0 if n <= 0 else 1 << (n - 1).bit_length()


def _header(rank: int, size: int, capacity: int) -> bytes:
    h = np.zeros(1, HEADER)
    h[0] = (MAGIC, VERSION, ENTRY.itemsize, capacity, rank, size, os.getpid(), 0, 0, 0)
    return h.tobytes().ljust(HEADER_BYTES, b"\0")


def new_ring(rank: int, size: int, capacity: int, path: Path | None = None):
    """A writable buffer holding an empty ring of `capacity` (a power of two) entries: a file at
    `path` mapped shared (the launcher's ranks), or memory of this process (in-process worlds)."""
    nbytes = HEADER_BYTES + capacity * ENTRY.itemsize
    if path is None:
        buf = bytearray(nbytes)
        buf[:HEADER_BYTES] = _header(rank, size, capacity)
        return buf
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, nbytes)
        os.pwrite(fd, _header(rank, size, capacity), 0)
        return mmap.mmap(fd, nbytes)
    finally:
        os.close(fd)


@dataclass
class Ring:
    """One rank's ring as read: its header and its whole entries, oldest first."""

    rank: int
    size: int
    pid: int
    capacity: int
    records: int  # entries ever written (the newest's number)
    active: int  # the record of the collective running when it was read (0: none)
    entries: list[dict] = field(default_factory=list)

    @property
    def wrapped(self) -> bool:
        return self.records > self.capacity

    @property
    def running(self) -> dict | None:
        return next((e for e in reversed(self.entries) if e["record"] == self.active), None)

    @property
    def current(self) -> dict | None:
        """The collective it is in, or the one that ended it: the running one, else the newest
        collective when that one failed (an abort ended it)."""
        if self.running is not None:
            return self.running
        last = next((e for e in reversed(self.entries) if e["kind"] == "collective"), None)
        return last if last is not None and last["state"] == "failed" else None

    @property
    def last_completed(self) -> dict | None:
        return next(
            (e for e in reversed(self.entries) if e["kind"] == "collective" and e["state"] == "completed"),
            None,
        )


def _text(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def dtype_name(text: str) -> str:
    """numpy's name of a dtype.str ("<f4" -> "float32"); the text itself if numpy does not know it."""
    try:
        return np.dtype(text).name if text else ""
    except TypeError:
        return text


def decode(buf) -> Ring:
    """The ring in `buf` (bytes, a mapping, or a file's contents); ValueError if it is not one."""
    data = memoryview(buf).cast("B")
    if len(data) < HEADER_BYTES or bytes(data[:8]) != MAGIC:
        raise ValueError("not a flight ring (no PGFLIGHT header)")
    h = np.frombuffer(data, HEADER, count=1)[0]
    if int(h["version"]) != VERSION or int(h["entry_bytes"]) != ENTRY.itemsize:
        raise ValueError(f"flight ring version {int(h['version'])}, this reader knows {VERSION}")
    capacity = int(h["capacity"])
    raw = np.frombuffer(data, ENTRY, count=capacity, offset=HEADER_BYTES).copy()
    again = np.frombuffer(data, ENTRY, count=capacity, offset=HEADER_BYTES)["record"]
    whole = (raw["record"] != 0) & (raw["record"] == again)  # not being rewritten while read
    entries = [_entry(e) for e in np.sort(raw[whole], order="record")]
    return Ring(
        int(h["rank"]),
        int(h["size"]),
        int(h["pid"]),
        capacity,
        int(h["records"]),
        int(h["active"]),
        entries,
    )


def _entry(e) -> dict:
    kind = KINDS.get(int(e["kind"]), "?")
    out = {
        "record": int(e["record"]),
        "kind": kind,
        "seq": int(e["seq"]),
        "name": _text(e["name"]),
        "algorithm": _text(e["algorithm"]),
        "state": STATES.get(int(e["state"]), "?"),
        "t_begin_ns": int(e["t_begin_ns"]),
        "t_end_ns": int(e["t_end_ns"]),
        "nbytes": int(e["nbytes"]),
        "dtype": dtype_name(_text(e["dtype"])),
    }
    if kind == "collective":
        out.update(
            group=int(e["group"]),
            group_seq=int(e["group_seq"]),
            op=_text(e["op"]),
            fingerprint=int(e["fingerprint"]),
        )
    if int(e["peer"]) >= 0:
        out.update(peer=int(e["peer"]), tag=int(e["tag"]))
    if int(e["t_wait_ns"]):
        out["t_wait_ns"] = int(e["t_wait_ns"])
    return out


def read_ring(path: Path) -> Ring:
    return decode(Path(path).read_bytes())


def read_run(run_dir: Path) -> dict[int, Ring]:
    """Every rank's ring in a run directory, by rank (those that are not rings are left out)."""
    rings = {}
    for path in sorted(Path(run_dir).glob("flight-rank-*.bin")):
        try:
            ring = read_ring(path)
        except (OSError, ValueError):
            continue
        rings[ring.rank] = ring
    return rings
