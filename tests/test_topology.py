"""The emulated cluster's shape: block placement, the link's values, names and tbf's sizing."""

import pytest

from playground.core.errors import ParamError
from playground.core.topology import (
    Link,
    describe_placement,
    host_addr,
    parse_link_spec,
    place_blocks,
    ranks_on,
    tbf_args,
    tbf_burst_bytes,
)


@pytest.mark.parametrize(
    "ranks,hosts,expected",
    [
        (8, 4, (0, 0, 1, 1, 2, 2, 3, 3)),
        (8, 3, (0, 0, 0, 1, 1, 1, 2, 2)),
        (9, 4, (0, 0, 0, 1, 1, 2, 2, 3, 3)),  # ceil-sized blocks would leave host 3 empty
        (5, 5, (0, 1, 2, 3, 4)),
        (3, 1, (0, 0, 0)),
        (1, 1, (0,)),
    ],
)
def test_blocks_of_consecutive_ranks(ranks, hosts, expected):
    assert place_blocks(ranks, hosts) == expected


@pytest.mark.parametrize("ranks", range(1, 20))
def test_every_host_gets_a_block_differing_by_at_most_one(ranks):
    for hosts in range(1, ranks + 1):
        placement = place_blocks(ranks, hosts)
        sizes = [len(ranks_on(placement, h)) for h in range(hosts)]
        assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1
        assert list(placement) == sorted(placement)  # blocks: never back to an earlier host


@pytest.mark.parametrize("ranks,hosts", [(4, 5), (4, 0)])
def test_more_hosts_than_ranks_is_an_error(ranks, hosts):
    with pytest.raises(ValueError, match="hosts: expected 1 to 4"):
        place_blocks(ranks, hosts)


def test_describe_placement():
    assert describe_placement((0, 0, 1, 2, 2, 2)) == "h0: ranks 0-1, h1: rank 2, h2: ranks 3-5"


@pytest.mark.parametrize(
    "text,expected",
    [
        ("1gbit", {"rate": "1gbit"}),
        ("1gbit,delay=200us", {"rate": "1gbit", "delay": "200us"}),
        ("rate=100mbit, delay=1ms", {"rate": "100mbit", "delay": "1ms"}),
        ("delay=50us", {"delay": "50us"}),
    ],
)
def test_link_spec_of_the_command_line(text, expected):
    assert parse_link_spec(text) == expected


@pytest.mark.parametrize("bad", ["", ",", "1gbit,2gbit", "1gbit,rate=2gbit"])
def test_bad_link_spec(bad):
    with pytest.raises(ValueError, match="--link"):
        parse_link_spec(bad)


def test_link_bounds_and_forms():
    assert Link(rate=10**9, delay=200e-6).to_dict() == {"rate": "1gbit", "delay": "200us"}
    assert Link().describe() == "unshaped" and Link(rate=10**8).describe() == "100mbit each way"
    with pytest.raises(ParamError, match="rate: expected 1mbit to 100gbit"):
        Link(rate=1000)
    with pytest.raises(ParamError, match="delay: expected 0 to 10s"):
        Link(delay=11.0)


def test_addresses_and_tbf():
    assert host_addr(0) == "10.77.0.1" and host_addr(3) == "10.77.0.4"
    assert tbf_burst_bytes(100 * 10**6) == 64 * 1024  # rate/HZ = 50 KB is below one GSO packet
    assert tbf_burst_bytes(10**9) == 500_000  # rate/HZ at HZ=250
    args = tbf_args(10**9)
    assert args[:3] == ["tbf", "rate", "1000000000bit"] and "burst" in args
