"""What one collective costs the training step's model (`steptime_model.CollectiveCost`), from the
run's model source: with a calibration, the closed form on its link where every rank has a core,
else the simulator on its host with the cores there are (time slices, wake-ups, memory bandwidth
shared: what ranks waiting for cores pay); without one, the closed form on the source's link. And
what a message pays beside the ranks' compute threads (`behind_compute_ratio`)."""

from collections.abc import Callable
from functools import cache

from playground.collectives import registry
from playground.models.calibration import ModelSource
from playground.sim.driver import simulate
from playground.sim.network import Machine
from playground.training.steptime_model import CollectiveCost


def collective_cost(source: ModelSource) -> CollectiveCost:
    """(collective, algorithm, bytes, ranks, cores) -> seconds on `source`."""
    calibration, transport = source.calibration, source.transport

    @cache
    def cost(collective: str, algorithm: str, size_bytes: float, num_ranks: int, cores: int) -> float:
        if calibration is None:
            return registry.collective_time_s(collective, algorithm, size_bytes, num_ranks, source.link)
        if num_ranks <= cores:
            link = calibration.link(transport, num_ranks, size_bytes)
            return registry.collective_time_s(collective, algorithm, size_bytes, num_ranks, link)
        host = calibration.host(transport, num_ranks, size_bytes)
        link = calibration.link(transport)
        machine = Machine(1, num_ranks, link, link, host.gamma_bytes_per_s, cores, host)
        row, _ = simulate(
            machine,
            collective,
            algorithm,
            int(size_bytes),
            data=False,
            segment_bytes=calibration.segment_bytes(transport),
        )
        return row["time_us"] * 1e-6

    return cost


def behind_compute_ratio(source: ModelSource) -> Callable[[float, int], float] | None:
    """(message bytes, ranks) -> how many times longer a message takes beside the ranks' compute
    threads (`Calibration.behind_compute`); None without a calibration (the closed forms' link
    knows no compute)."""
    calibration, transport = source.calibration, source.transport
    if calibration is None:
        return None

    @cache
    def ratio(message_bytes: float, num_ranks: int) -> float:
        return calibration.behind_compute(transport, num_ranks, message_bytes)

    return ratio
