"""The launcher's side of host drills (a scenario's `fault:` with a host action).

cut_link and kill_host are done here, by the process that owns the namespaces: at `after_s` seconds
after every rank registered (a coordinator timer), or when the fault's counting rank asks, after
`after_ops` of its posts (a `fault` control message). delay_link is done by every rank's transport
(comm/delay.py); it is only recorded here, at the time it starts. Every drill is recorded in the
coordinator's events (result.json) and quoted in the failures of the host's ranks, so the root
cause says what was done, not only what followed.
"""

import os
import signal

from playground.config.scenario import Fault
from playground.core.errors import EmulationError
from playground.core.sizes import format_duration
from playground.core.topology import host_name, ranks_on
from playground.hosts.netns import Cluster
from playground.rendezvous.coordinator import Coordinator
from playground.rendezvous.failures import RankFailure


class HostDrill:
    """One armed host fault of a launched run."""

    def __init__(self, fault: Fault, placement: tuple[int, ...], cluster: Cluster, coordinator: Coordinator):
        self.fault, self.cluster, self.coordinator = fault, cluster, coordinator
        self.host = fault.target_host(placement)
        self.ranks = ranks_on(placement, self.host)
        self.fired = False

    def arm(self) -> None:
        f = self.fault
        if f.action == "delay_link" and f.delay is not None:
            what = f"delay of {format_duration(f.delay)} added to host {host_name(self.host)}'s link"
            self.coordinator.timers.append((f.after_s or 0.0, lambda: self._record(what)))
        elif f.after_s is not None:
            self.coordinator.timers.append((f.after_s, lambda: self.fire(f"after {f.after_s:g}s")))
        else:
            self.coordinator.on_fault = self.on_request

    def on_request(self, rank: int, msg: dict) -> None:
        if msg.get("action") == self.fault.action:
            self.fire(f"on rank {rank}'s operation {self.fault.after_ops + 1}")

    def _record(self, what: str) -> None:
        self.coordinator.record(what, host_name(self.host))

    def fire(self, when: str) -> None:
        if self.fired:
            return
        self.fired = True
        name = host_name(self.host)
        try:
            if self.fault.action == "cut_link":
                self._record(f"link of host {name} cut by the scenario's fault ({when})")
                self.cluster.link_down(self.host)
            elif self.fault.action == "kill_host":
                self._record(f"every rank of host {name} SIGKILLed by the scenario's fault ({when})")
                for rank in self.ranks:
                    pid = self.coordinator.pids.get(rank)
                    if pid:
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
        except EmulationError as e:
            self.coordinator.fail(
                RankFailure(self.ranks[0], self.coordinator.elapsed_s(), "error", f"the drill failed: {e}")
            )
