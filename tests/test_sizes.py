import pytest

from playground.core.sizes import (
    format_duration,
    format_rate,
    format_size,
    parse_duration,
    parse_rate,
    parse_size,
    parse_size_range,
)


@pytest.mark.parametrize(
    "text,expected",
    [
        (8, 8),
        ("8", 8),
        ("1KiB", 1024),
        ("64MiB", 64 << 20),
        ("2GiB", 2 << 30),
        ("1K", 1000),
        ("1.5KiB", 1536),
        (" 4 kib ", 4096),
        ("0", 0),
    ],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["1XB", "-4", "abc", "", True, None, "1.3B", -1])
def test_parse_size_rejects(bad):
    with pytest.raises(ValueError):
        parse_size(bad)


def test_size_range_doubles_like_nccl_tests():
    assert parse_size_range("8..64") == [8, 16, 32, 64]
    assert parse_size_range("1KiB..4KiB") == [1024, 2048, 4096]
    assert parse_size_range("8,1KiB") == [8, 1024]
    with pytest.raises(ValueError):
        parse_size_range("64..8")


def test_format_size():
    assert format_size(8) == "8 B"
    assert format_size(65536) == "64 KiB"
    assert format_size(3 << 19) == "1.5 MiB"


@pytest.mark.parametrize(
    "text,bits",
    [("100mbit", 100_000_000), ("1gbit", 10**9), ("1.5gbit", 1_500_000_000), (2_000_000, 2_000_000)],
)
def test_parse_rate(text, bits):
    assert parse_rate(text) == bits


@pytest.mark.parametrize("bad", ["fast", "1gbps", "-1gbit", "0mbit", 0, True, "1 gb"])
def test_bad_rate_names_what_is_allowed(bad):
    with pytest.raises(ValueError, match="rate"):
        parse_rate(bad)


@pytest.mark.parametrize(
    "text,seconds", [("200us", 0.0002), ("1.5ms", 0.0015), ("2s", 2.0), ("0", 0.0), (0, 0.0)]
)
def test_parse_duration_round_trips(text, seconds):
    assert parse_duration(text) == seconds
    assert parse_duration(format_duration(seconds)) == seconds


@pytest.mark.parametrize("bad", ["200", 200, "1h", "fast", "-1ms"])
def test_bad_duration_wants_a_unit(bad):
    with pytest.raises(ValueError, match="duration"):
        parse_duration(bad)


def test_format_rate():
    assert [format_rate(r) for r in (10**8, 10**9, 2.5e9, 8000)] == ["100mbit", "1gbit", "2.5gbit", "8kbit"]
