"""Pure parts of the open-loop load generator: wire format and arrival/service samples."""

import numpy as np
import pytest

from playground.queueing import loadgen


def test_request_and_reply_round_trip():
    assert loadgen.decode_request(loadgen.encode_request(7, 2, 0.005)) == (7, 2, 0.005)
    assert loadgen.decode_reply(loadgen.encode_reply(7, 2, 1.5, 1.6, 3)) == (7, 2, 1.5, 1.6, 3)
    assert loadgen.decode_request(loadgen.encode_request(loadgen.ABORT, 4, 0.0))[0] < 0


def test_poisson_arrivals_mean_gap():
    rng = np.random.default_rng(0)
    t = loadgen.poisson_arrivals_s(200.0, 20_000, rng)
    assert np.all(np.diff(t) > 0)
    assert np.mean(np.diff(t)) == pytest.approx(1 / 200, rel=0.03)


def test_service_times_kinds():
    rng = np.random.default_rng(0)
    assert np.all(loadgen.service_times_s(0.01, 5, "fixed", rng) == 0.01)
    s = loadgen.service_times_s(0.01, 20_000, "exponential", rng)
    assert s.mean() == pytest.approx(0.01, rel=0.03) and s.std() == pytest.approx(0.01, rel=0.05)
    with pytest.raises(ValueError, match="service"):
        loadgen.service_times_s(0.01, 5, "uniform", rng)
