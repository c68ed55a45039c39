"""Per-pair mailboxes in shared memory: how every message of the one-host path travels and wakes.

Each receiving rank owns a file in the run's /dev/shm directory holding a *bell* word and, per
sender, a mailbox of `SLOTS` fixed slots of `SLOT_BYTES` (native/mailbox.c has the layout and the
memory ordering). A sender copies the message into its next slot, publishes the slot's sequence
number with a release store and bumps the receiver's bell; the receiver polls the bell, takes the
next message of the sender whose slot is ready, and frees the slot. No system call on either side
while the receiver is awake; a sleeping receiver is woken with one FUTEX_WAKE.

What a slot carries is a wire record (wire.py): a header and a small array's bytes, a JSON body,
or the descriptor of a large array in the sender's shared-memory ring (shm.py). Because every
message from one sender goes through its one mailbox, per-sender order holds by construction.

Waiting, in C with the GIL released, follows one rule (`spin_policy`): while ranks do not
outnumber cores a receiver polls its bell with the pause instruction for up to SPIN_S, keeping
its core (yielding it would hand it to whatever else runs on the machine, for a whole time slice:
measured, 2-rank 8-byte all-reduce 10-16 us pausing against 66-88 us yielding after 20 us, with
other jobs running); up to two ranks per core it polls yielding the core between polls, so a rank
with work on this core goes first; beyond that (8 ranks on 2 cores) it sleeps at once, since a
poller takes the core from the rank that has to send (which is how MPICH's busy-polling collapses
from 2 us to tens of milliseconds there). Sleeps are FUTEX_WAIT on the bell with the caller's
timeout, so deadlines and aborts are still checked between slices.

A full mailbox refuses the post (the communicator waits while taking in what arrives); the
receiver that frees a slot rings the waiting sender's bell, so it retries at once.
"""

import os

from _playground_native import Mailboxes, Swap, copy_payload

from playground.core.machine import usable_cores

SLOTS = 16  # messages in flight per (sender, receiver)
# A 64 KiB array and its header fit a slot, so up to there a message is one record, which the
# receiver's C `land` copies into its target with no Python object in between; a larger one takes
# the Python path of a ring message (shm.py) or a lent one. `bench p2p --transport shm` on an Intel
# Xeon (2 cores), one way: with 8 KiB slots 8,000 B 2.4 us, 8,192 B 14.1 us; with these, 32 KiB 14.1
# -> 4.9 us, 64 KiB 26.9 -> 8.3 us. Virtually 1.06 MiB per (sender, receiver); an 8-byte message
# touches one page of its slot, and a pair's first record of more than a page maps all 16 of its
# slots at once (native/mailbox.c, warm_up).
SLOT_BYTES = 68 << 10
# A rank's inbound mailboxes stay within this once touched, so slots shrink past 15 ranks (64 ranks:
# 16 KiB), down to 8 KiB; the run's 64 mailbox files then hold 1 GiB at most, not 4.3.
FILE_BUDGET_BYTES = 16 << 20
MIN_SLOT_BYTES = 8 << 10
SPIN_S = 200e-6  # polling before sleeping: a sleep and wake-up costs ~5-50 us here, by load

__all__ = ["Mailboxes", "SLOTS", "SLOT_BYTES", "Swap", "copy_payload", "open_mailboxes", "spin_policy"]


def mailbox_path(directory: str, rank: int) -> str:
    return os.path.join(directory, f"mbox-{rank}")


def slot_bytes_for(size: int) -> int:
    """The slot of a run of `size` ranks: SLOT_BYTES while a rank's file (a mailbox of SLOTS slots per
    rank) fits FILE_BUDGET_BYTES, else the most whole pages that do, at least MIN_SLOT_BYTES."""
    fit = FILE_BUDGET_BYTES // (max(1, size) * SLOTS) // 4096 * 4096
    return max(MIN_SLOT_BYTES, min(SLOT_BYTES, fit))


def open_mailboxes(directory: str, rank: int, size: int) -> Mailboxes:
    """This rank's file (its bell and inbound mailboxes), created before any peer posts to it."""
    os.makedirs(directory, exist_ok=True)
    return Mailboxes(directory, rank, size, SLOTS, slot_bytes_for(size))


def nudge_to_own_core(local_rank: int, local_ranks: int) -> None:
    """Move this process to core `local_rank` (of those it may use) and let it go again: when ranks
    do not outnumber cores, they start on cores of their own. A fork leaves a child on its parent's
    core, and on a busy machine the scheduler may keep two spinning ranks there for seconds (each
    then waits for the other's time slice). A nudge, not a pin: the scheduler may move it later."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except AttributeError:
        return
    if local_ranks > len(allowed) or len(allowed) < 2:
        return
    try:
        os.sched_setaffinity(0, {allowed[local_rank % len(allowed)]})
        os.sched_setaffinity(0, allowed)
    except OSError:
        pass


def spin_policy(local_ranks: int, cores: int | None = None) -> tuple[float, float]:
    """(pause_ns, yield_ns) for a receiver with `local_ranks` ranks on this host: pause-spin while
    ranks <= cores, yield-poll while ranks <= 2 x cores, else (0, 0): sleep at once."""
    cores = cores or usable_cores()
    if local_ranks <= cores:
        return SPIN_S * 1e9, 0.0
    if local_ranks <= 2 * cores:
        return 0.0, SPIN_S * 1e9
    return 0.0, 0.0
