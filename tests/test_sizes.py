import pytest

from playground.sizes import format_size, parse_size, parse_size_range


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
