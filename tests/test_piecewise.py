"""playground.models.piecewise: SMPI's piecewise-linear message cost, fitted per size range."""

import pytest

from playground.core.errors import UsageError
from playground.models.costs import Link, allreduce_hd_time_s, allreduce_ring_time_s
from playground.models.piecewise import Piece, evaluate, fit_pieces, piece_for

# three ranges, each its own line: inline messages, a socket path, shared-memory rings
TRUE = (Piece(0, 20e-6, 1e-10), Piece(16384, 35e-6, 5e-10), Piece(65536, 60e-6, 2e-10))
SIZES = [64, 1024, 4096, 16384, 32768, 49152, 65536, 1 << 20, 16 << 20, 64 << 20]


def test_exact_recovery_of_piecewise_linear_times():
    times = [evaluate(TRUE, n) for n in SIZES]
    fitted = fit_pieces(SIZES, times, [0, 16384, 65536])
    assert [p.from_bytes for p in fitted] == [0, 16384, 65536]
    for got, want in zip(fitted, TRUE, strict=True):
        assert got.alpha_s == pytest.approx(want.alpha_s, rel=1e-9)
        assert got.s_per_byte == pytest.approx(want.s_per_byte, rel=1e-9)


def test_one_range_is_the_classic_alpha_beta_fit():
    times = [10e-6 + n / 2e9 for n in SIZES]
    (piece,) = fit_pieces(SIZES, times)
    assert (piece.alpha_s, 1 / piece.s_per_byte) == pytest.approx((10e-6, 2e9))


def test_a_range_with_one_size_joins_the_range_below():
    times = [evaluate(TRUE[:2], n) for n in SIZES[:7]]
    fitted = fit_pieces(SIZES[:7], times, [0, 16384, 65536])  # only 65536 itself in the last range
    assert [p.from_bytes for p in fitted] == [0, 16384]


def test_clipping_keeps_costs_non_negative():
    (piece,) = fit_pieces([1000, 2000], [1e-6, 3e-6])  # the line would cross zero below 500 B
    assert piece.alpha_s == 0.0 and piece.s_per_byte > 0
    (flat,) = fit_pieces([1000, 2000], [3e-6, 1e-6])  # time falling with size: no slope
    assert flat.s_per_byte == 0.0 and flat.alpha_s > 0


@pytest.mark.parametrize(
    "sizes, times, says",
    [([64, 64], [1e-6, 2e-6], "two distinct message sizes"), ([64, 128], [1e-6], "2 sizes but 1 times")],
)
def test_bad_input_says_why(sizes, times, says):
    with pytest.raises(UsageError, match=says):
        fit_pieces(sizes, times)


def test_a_link_with_pieces_prices_each_message_by_its_range():
    link = Link(TRUE[0].alpha_s, 1 / TRUE[0].s_per_byte, pieces=TRUE)
    assert link.message_time_s(1 << 20) == pytest.approx(piece_for(TRUE, 1 << 20).time_s(1 << 20))
    # the ring's messages are S/N: a 1 MiB all-reduce on 8 ranks sends 128 KiB ones (the third range)
    expected = 14 * TRUE[2].time_s((1 << 20) / 8)
    assert allreduce_ring_time_s(1 << 20, 8, link) == pytest.approx(expected)
    # halving-doubling halves its messages step by step, each priced in its own range
    s = 64 << 10
    assert allreduce_hd_time_s(s, 4, link) == pytest.approx(
        2 * (TRUE[1].time_s(s / 2) + TRUE[1].time_s(s / 4))
    )
    s = 16 << 10  # 8 KiB and 4 KiB: the first range
    assert allreduce_hd_time_s(s, 4, link) == pytest.approx(
        2 * (TRUE[0].time_s(s / 2) + TRUE[0].time_s(s / 4))
    )
    # without pieces, the uniform link's closed form is unchanged
    plain = Link(5e-6, 50e9)
    assert allreduce_hd_time_s(s, 4, plain) == pytest.approx(4 * 5e-6 + 2 * 0.75 * s / 50e9, rel=1e-12)
