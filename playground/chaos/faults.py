"""Every kind of fault chaos fires, in the order of its table's rows: one `FaultKind` each, carrying
where it comes from, whom it hits, the signal, what the root cause must say and the exit status.

The standalone KV server's clients name their error's class (kvclient.py): a killed server answers
nothing (WaitTimeout); after a restart a client that hears the new server in its timeout names the
lost requests (ServerLost), one that does not (a new server slow to start on a loaded machine) can
only time out, as it would for a dead one.

Adding one: a line here, and its name in the `faults` of the workloads it applies to
(workloads.py); an inside or a host fault must also be an action the scenarios' `fault:` keys know
(config/scenario.py).
"""

import signal

from playground.chaos.kinds import FaultKind

SIGKILL, SIGSTOP = int(signal.SIGKILL), int(signal.SIGSTOP)

_RANK_KILLED = "killed by SIGKILL"

FAULTS: dict[str, FaultKind] = {
    f.name: f
    for f in (
        FaultKind(
            "raise", "inside: the rank raises FaultInjected on a post", "inside", "rank", says="FaultInjected"
        ),
        FaultKind("kill", "inside: the rank SIGKILLs itself on a post", "inside", "rank", says=_RANK_KILLED),
        FaultKind(
            "exit",
            "inside: the rank exits with status 3 on a post",
            "inside",
            "rank",
            says="exited with status 3",
        ),
        FaultKind("hang", "inside: the rank sleeps forever in a post", "inside", "rank", says="unresponsive"),
        FaultKind(
            "corrupt",
            "inside: the rank flips a bit of an array it sends",
            "inside",
            "rank",
            found_by=r"wrong elements|ResultMismatch",
            needs_end=True,
        ),
        FaultKind(
            "slow",
            "inside: the rank works twice as slowly from a post on; the report must name it a straggler",
            "inside",
            "rank",
            exit_code=0,
            needs_end=True,
            sets=("fault.factor=2",),
            straggler=True,
        ),
        FaultKind("SIGKILL", "outside: SIGKILL to a rank", "outside", "rank", SIGKILL, says=_RANK_KILLED),
        FaultKind("SIGSTOP", "outside: SIGSTOP to a rank", "outside", "rank", SIGSTOP, says="stopped"),
        FaultKind(
            "server killed",
            "outside: SIGKILL to the KV server rank (rank 0 of serving or kvcache)",
            "outside",
            "server",
            SIGKILL,
            says=_RANK_KILLED,
            clients_fail_with=("WaitTimeout",),
            standalone_what="outside: SIGKILL to the standalone KV server; its clients can only time out",
        ),
        FaultKind(
            "client killed",
            "outside: SIGKILL to a client rank of serving or kvcache, mid-request",
            "outside",
            "client",
            SIGKILL,
            says=_RANK_KILLED,
            standalone_what="outside: SIGKILL to a standalone client mid-request; the others must finish "
            "and the server free its requests and blocks after the lease",
        ),
        FaultKind(
            "server restarted",
            "outside: the standalone KV server SIGKILLed and started again on its address",
            "outside",
            "server",
            SIGKILL,
            restarts=True,
            clients_fail_with=("ServerLost", "WaitTimeout"),
        ),
        FaultKind(
            "Ctrl-C",
            "outside: SIGINT to the launcher's process group, as a terminal sends it",
            "outside",
            "launcher",
            int(signal.SIGINT),
            to_group=True,
            exit_code=130,
            interrupts=True,
        ),
        FaultKind(
            "SIGTERM",
            "outside: SIGTERM to the launcher",
            "outside",
            "launcher",
            int(signal.SIGTERM),
            exit_code=130,
            interrupts=True,
        ),
        FaultKind(
            "launcher SIGKILL",
            "outside: SIGKILL to the launcher",
            "outside",
            "launcher",
            SIGKILL,
            exit_code=-9,
            cleans_up=False,
        ),
        FaultKind("cut_link", "hosts: a host's link taken down", "hosts", "host", says="lost"),
        FaultKind("kill_host", "hosts: every rank of a host SIGKILLed", "hosts", "host", says=_RANK_KILLED),
        FaultKind(
            "delay_link",
            "hosts: a host's link delayed past the receive timeout",
            "hosts",
            "host",
            sets=("fault.delay=30s",),
        ),
    )
}

HOST_FAULTS = tuple(f for f in FAULTS.values() if f.source == "hosts")


def named(*names: str) -> tuple[FaultKind, ...]:
    return tuple(FAULTS[n] for n in names)
