"""A rank's place in its run's current rendezvous generation, and how it moves to the next one.

Every rank talks to the coordinator over one control socket (and, with emulated hosts, a
heartbeat socket), both named by the rank and the generation (`comm.control.control_identity`).
Under `recovery.way: restart` a rank lives in one generation: when a peer fails, the launcher
stops every rank. Under `recovery.way: peer` (and `shrink`) a survivor outlives its group: its communicator
raises PeerLost, the training loop drops the unfinished step and calls `reform`, which

1. closes the old transport and control socket (the old group is gone: nothing of it is read again);
2. opens the control socket of the next generation and joins its rendezvous (register, clock probes,
   the table), as a replacement rank the launcher just started does;
3. connects a new transport to the new table's endpoints and reopens the communicator over it in
   place (`Communicator.reopen`), so the node, its strategy and its checkpoints keep their `comm`;
4. waits at a barrier for every rank of the new group.

Under `shrink` no replacement comes: the abort names the lost ranks, and each survivor takes its
place among the survivors (its rank less the lost ranks below it) in a group of N - lost.

The launcher makes each generation's scratch directory before the group before it can fail, so a
survivor that re-forms at once finds it. The state the ranks then agree on is the training loop's
(playground/training/live.py).
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import zmq

from playground.comm.control import Heartbeat, control_identity
from playground.rendezvous.join import RankEnv

REPLACEMENT_VARIABLE = "PLAYGROUND_REPLACEMENT"  # "1": a process started for a failed rank (way: peer)
# "1": the launcher recovers this group live (way peer or shrink, restarts allowed); a rank re-forms
# only then: under another launcher, or with no restart allowed, nobody would form the next generation
LIVE_VARIABLE = "PLAYGROUND_LIVE"
_CTRL_LINGER_MS = 2000  # let a final error/done message reach the coordinator after close

# connect(env, ctrl) -> (transport, control link, hosts): the worker's join and connect for one generation
Connect = Callable[[RankEnv, zmq.Socket], tuple]


class Membership:
    """This rank's control socket (and heartbeat) in generation `env.generation`; `reform` moves
    the rank and its communicator to the next one (module doc). `is_replacement`: this process was
    started for a failed rank, so its state must first come from a survivor."""

    def __init__(
        self,
        ctx: zmq.Context,
        env: RankEnv,
        heartbeat: bool,
        is_replacement: bool = False,
        way: str = "peer",
    ):
        self.ctx, self.env, self.with_heartbeat, self.way = ctx, env, heartbeat, way
        self.is_replacement = is_replacement
        self.connect: Connect | None = None  # set by the worker once it can build a transport
        self.comm: Any = None  # the communicator `reform` reopens
        self.num_reforms = 0
        self.ctrl = self._open_ctrl()
        self.heartbeat = self._start_heartbeat()

    @property
    def generation(self) -> int:
        return self.env.generation

    def _open_ctrl(self) -> zmq.Socket:
        ctrl = self.ctx.socket(zmq.DEALER)
        ctrl.setsockopt(zmq.IDENTITY, control_identity(self.env.rank, self.env.generation))
        ctrl.setsockopt(zmq.LINGER, _CTRL_LINGER_MS)
        ctrl.setsockopt(zmq.RECONNECT_IVL, 20)
        ctrl.connect(self.env.coordinator)
        return ctrl

    def _start_heartbeat(self) -> Heartbeat | None:
        if not self.with_heartbeat:
            return None
        return Heartbeat(self.ctx, self.env.coordinator, self.env.rank, generation=self.env.generation)

    def reform(self) -> None:
        """Leave the failed group and join the next generation's (module doc); raises what the
        rendezvous raises (CommTimeout, PeerLost when the new group fails too)."""
        comm, connect = self.comm, self.connect
        if comm is None or connect is None:
            raise RuntimeError("Membership.reform before the worker connected this rank")
        lost = comm.control.abort.get("lost", []) if self.way == "shrink" and comm.control else []
        comm.close()
        self._close_sockets(linger_ms=0)
        env = self.env
        rank = env.rank - sum(1 for r in lost if r < env.rank)  # renumbered among the survivors
        self.env = dataclasses.replace(
            env, rank=rank, world_size=env.world_size - len(lost), generation=env.generation + 1
        )
        if rank != env.rank and comm.tracer.path is not None:  # the launcher renamed the log so
            comm.tracer.path = comm.tracer.path.with_name(f"rank-{rank}.jsonl")
        self.ctrl = self._open_ctrl()
        self.heartbeat = self._start_heartbeat()
        transport, control, hosts = connect(self.env, self.ctrl)
        comm.reopen(transport, control, hosts, self.env.rank, self.env.world_size)
        self.num_reforms += 1
        comm.barrier()

    def _close_sockets(self, linger_ms: int | None = None) -> None:
        if self.heartbeat is not None:
            self.heartbeat.stop()
            self.heartbeat = None
        if linger_ms is None:
            self.ctrl.close()
        else:
            self.ctrl.close(linger=linger_ms)

    def close(self) -> None:
        """The control socket closed (its last message given time to leave) and the heartbeat stopped."""
        self._close_sockets()
