"""Every environment variable the playground reads, in one table.

Most are set by the playground itself for the processes it starts (the launcher for its ranks, the
emulated hosts' rsh for mpiexec's); a few are switches a user may set. A scenario key or a flag is
the way to configure a run; these exist where a value must reach a process before it has read its
scenario, or where a test or benchmark needs a lever the interface deliberately does not offer.
`tests/test_environment.py` checks that every PLAYGROUND_* name in the code is here, and the
docs' reference page is made from this table.
"""

from typing import NamedTuple


class Variable(NamedTuple):
    name: str
    who_sets_it: str  # "launcher", "user", "tests"
    meaning: str


VARIABLES: tuple[Variable, ...] = (
    Variable(
        "PLAYGROUND_SHM_MIN_BYTES",
        "user, tests",
        "shm transport: arrays of at least this many bytes go through the /dev/shm rings, smaller ones "
        "inline in the mailbox (default 32 KiB); tests set 0 to push tiny arrays through the rings",
    ),
    Variable(
        "PLAYGROUND_SHM_CELL_BYTES",
        "user, tests",
        "shm transport: the cell a large swap (sendrecv_reduce) streams through its window at a time "
        "(default 64 KiB); tests set a few bytes to run a small array through many cells",
    ),
    Variable(
        "PLAYGROUND_IPC_RING_MIN_BYTES",
        "user, bench table",
        "ipc transport: arrays of at least this many bytes send their bytes through /dev/shm rings and only "
        "a descriptor through ZeroMQ (default 64 KiB); 0 sends every byte through the sockets "
        "(`bench table --systems ipc-sockets`)",
    ),
    Variable(
        "PLAYGROUND_CALIBRATION",
        "user, tests",
        "the calibration.json the model columns and `simulate` read when no command names one (default: "
        "./calibration.json, written by `python -m playground calibrate`)",
    ),
    Variable(
        "PLAYGROUND_COORD_PORT",
        "user",
        "under an external launcher (mpiexec, srun, torchrun): the coordinator's port, when the default "
        "(MASTER_PORT, or MASTER_PORT + 1 under torchrun) is taken",
    ),
    Variable(
        "PLAYGROUND_RUN_DIR",
        "launcher, user",
        "the run directory every rank writes its log into (set for forked ranks; under an external "
        "launcher, a shared directory for all ranks of one run)",
    ),
    Variable(
        "PLAYGROUND_IPC_DIR",
        "launcher",
        "the directory of the run's ipc:// sockets, where every emulated host's namespace sees it",
    ),
    Variable(
        "PLAYGROUND_HOST",
        "launcher",
        "the emulated host a rank runs on (its network namespace's name), set by playground-netns-rsh",
    ),
    Variable("PLAYGROUND_NETNS", "launcher", "the network namespace a forked rank enters before it starts"),
    Variable(
        "PLAYGROUND_GENERATION",
        "launcher",
        "the rendezvous generation a rank belongs to: 0 at the start, one more at each restart of the "
        "group (`--max-restarts`); the coordinator refuses a message of another generation "
        "(TORCHELASTIC_RESTART_COUNT under torchrun)",
    ),
    Variable(
        "PLAYGROUND_RESUME",
        "launcher",
        "the checkpoint a restarted rank goes on from (the newest whole one, chosen by the launcher); "
        "unset: start from the beginning",
    ),
    Variable(
        "PLAYGROUND_LIVE",
        "launcher",
        "1 where our launcher can re-form a rank's group in place (`recovery.way: peer` or `shrink` with "
        "restarts allowed): a rank whose peer died then re-forms instead of ending",
    ),
    Variable(
        "PLAYGROUND_REPLACEMENT",
        "launcher",
        "1 in a rank started to replace a failed one (`recovery.way: peer`): it takes its state from a "
        "survivor before its first step",
    ),
    Variable(
        "PLAYGROUND_CLOCK_SKEW_US",
        "user, tests",
        "drill: `RANK=US[,RANK=US]` makes those ranks' clocks run US microseconds ahead (negative: behind), "
        "which the offsets measured at rendezvous must repair in `inspect --trace`",
    ),
    Variable(
        "PLAYGROUND_FLIGHT_ENTRIES",
        "user, benchmarks",
        "the flight recorder's ring in each launched rank: its last N operations (default 256, rounded up "
        "to a power of two) in flight-rank-<r>.bin of the run directory; 0 turns the recorder off "
        "(`python -m playground.commands.flight_bench` compares the two)",
    ),
    Variable(
        "PLAYGROUND_KERNELS",
        "user, tests",
        "the transformer's kernels when a model names none: native (the default: native/transformer.c's fused "
        "passes) or numpy (layers.py, the readable reference); an A/B of a whole run",
    ),
    Variable(
        "PLAYGROUND_BLAS",
        "user, tests",
        "the BLAS the transformer's native kernels call for their matrix products: auto (the default: MKL if the "
        "mkl package is installed, else numpy's own), numpy, or mkl",
    ),
    Variable(
        "PLAYGROUND_WIDE",
        "user",
        "tables: `1` prints every table in one piece at its full width, however wide the terminal (`run "
        "--wide` and `bench --wide` set it); otherwise a table wider than the terminal wraps its headers or "
        "moves columns to a second table",
    ),
    Variable(
        "PLAYGROUND_REQUIRE_TOOLS",
        "CI",
        "tests: a test whose tool (MPICH, Slurm, Chromium, torch, root, the docs toolchain) is missing fails "
        "instead of skipping (.ci/run sets it)",
    ),
    Variable(
        "PLAYGROUND_SKIPPED_TOOLS",
        "CI",
        "tests: a file each test that skipped for a missing tool adds its id to (.ci/run runs those again "
        "once it has installed every tool)",
    ),
    Variable(
        "PLAYGROUND_ARTIFACTS", "tests", "tests: the browser test also copies its screenshot and page here"
    ),
    Variable(
        "PLAYGROUND_LECTURE_TEXT",
        "tests",
        "tests: another copy of the lecture's text to check the lecture page's quotes against",
    ),
)
NAMES = frozenset(v.name for v in VARIABLES)
