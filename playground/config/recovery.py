"""A scenario's `recovery:` section: what the launcher does when a rank fails."""

import dataclasses
from dataclasses import dataclass
from typing import Literal

from playground.core.errors import ParamError


@dataclass(frozen=True)
class Recovery:
    """What the launcher does when a rank fails (raises, exits, is killed, hangs, its host dies).

    `way: restart` (the default): with `max_restarts` > 0 it stops the group, starts it again under
    a new rendezvous generation (a late message of the group before is refused), and every rank goes
    on from the newest whole checkpoint (a training node's `checkpoint_every`). `way: peer`
    (torchft's live recovery): the survivors keep running; the launcher starts a replacement for
    the failed rank only, every rank re-forms the group under a new generation, and a survivor
    copies its state (parameters, optimizer, step) to the ranks behind: no checkpoint is read.
    `way: shrink`: no replacement; the survivors re-form as N-1 ranks, renumbered, and go on with
    the same global batch (its N row-blocks shared out over N-1 ranks). Either way, after `max_restarts` recoveries a failure ends the run,
    exit status 1, naming every failure. `mtbf_s` is a drill: the launcher SIGKILLs a rank drawn at
    random at exponential intervals of that mean, in every generation (`seed` draws them).
    """

    # start the group again after a failure, up to this many times (--max-restarts); 0: a failure
    # ends the run
    max_restarts: int = 0
    # a drill: SIGKILL a rank drawn at random, at exponential intervals of this mean (seconds after
    # each generation's rendezvous); null: none
    mtbf_s: float | None = None
    seed: int = 0  # the drill's draws (which rank, when)
    # how the group goes on after a failure: restart (every rank, from the newest checkpoint), peer
    # (a replacement rank copies a survivor's state), shrink (the survivors go on as N-1 ranks); the
    # node must offer peer and shrink
    way: Literal["restart", "peer", "shrink"] = "restart"

    def __post_init__(self):
        if self.max_restarts < 0:
            raise ParamError("max_restarts", f"must be >= 0, got {self.max_restarts}")
        if self.mtbf_s is not None and not self.mtbf_s > 0:
            raise ParamError("mtbf_s", f"must be > 0 seconds or null, got {self.mtbf_s}")

    @property
    def is_default(self) -> bool:
        return self == Recovery()

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
