"""sysfs cache sizes and lat_mem_rd output parsing on fixed inputs."""

from playground.core import machine
from playground.memlab import lmbench


def write_index(root, n, level, kind, size, line=64, shared="0"):
    d = root / f"index{n}"
    d.mkdir()
    for name, value in {
        "level": level,
        "type": kind,
        "size": size,
        "coherency_line_size": line,
        "shared_cpu_list": shared,
    }.items():
        (d / name).write_text(f"{value}\n")


def test_data_caches_from_a_sysfs_tree(tmp_path):
    write_index(tmp_path, 0, 1, "Data", "32K")
    write_index(tmp_path, 1, 1, "Instruction", "32K")
    write_index(tmp_path, 2, 2, "Unified", "1024K")
    write_index(tmp_path, 3, 3, "Unified", "32768K", shared="0-7")
    caches = machine.data_caches(tmp_path)
    assert [(c.name, c.size_bytes, c.shared_by_cpus) for c in caches] == [
        ("L1d", 32768, 1),
        ("L2", 1 << 20, 1),
        ("L3", 32 << 20, 8),
    ]
    assert machine.cache_line_bytes(tmp_path) == 64


def test_missing_sysfs_gives_no_caches(tmp_path):
    assert machine.data_caches(tmp_path / "nope") == []
    assert machine.cache_line_bytes(tmp_path / "nope") == 64


def test_thp_mode(tmp_path):
    f = tmp_path / "enabled"
    f.write_text("always [madvise] never\n")
    assert machine.thp_mode(f) == "madvise"
    assert machine.thp_mode(tmp_path / "missing") == "unknown"


def test_parse_lat_mem_rd_output():
    text = '"stride=64\n0.00049 1.090\n0.03125 1.103\n16.00000 165.735\n\n'
    sizes, ns = lmbench.parse_output(text)
    assert sizes == [514, 32768, 16 << 20] and ns == [1.09, 1.103, 165.735]
