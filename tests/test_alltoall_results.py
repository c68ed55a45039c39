"""`results --sections alltoall`: cells against the anchors, the model's picks and crossovers from
synthetic runs, the pick table `auto` reads, and the whole page at tiny sizes (the benches replaced
by synthetic results, the simulator run for real)."""

import json
from pathlib import Path

import pytest

from playground import cli
from playground.collectives.auto import choose_alltoall
from playground.commands import alltoall_results as ar
from playground.commands import results
from playground.sim.calibrated import model_pick, pick_table


def _comparison(collective, ranks, rows):
    return {
        "collective": collective,
        "ranks": ranks,
        "comparison": [
            {"size": size, "form": form, "ours": "pairwise", "ours_us": ours, "gloo_us": gloo, "mpi_us": mpi}
            for size, form, ours, gloo, mpi in rows
        ],
    }


def test_anchor_cells_are_medians_of_the_rounds_and_the_verdict_counts_the_goal():
    runs = [
        _comparison(
            "alltoall",
            4,
            [("64 KiB", "out of place", ours, 300.0, mpi), ("64 KiB", "in place", 50.0, None, 40.0)],
        )
        for ours, mpi in ((100.0, 90.0), (120.0, 200.0), (110.0, 150.0))
    ]
    cells = {(c["form"]): c for c in ar.anchor_cells(runs)}
    oop = cells["out of place"]
    assert (oop["size"], oop["ours_us"], oop["mpi_us"], oop["gloo_us"]) == (65536, 110.0, 150.0, 300.0)
    assert oop["x_mpi"] == pytest.approx(150 / 110) and oop["x_gloo"] == pytest.approx(300 / 110)
    assert cells["in place"]["x_gloo"] is None and cells["in place"]["x_mpi"] == pytest.approx(0.8)
    assert ar.anchor_verdict(list(cells.values())).startswith(
        "**Ours at least MPICH's speed in 1 of 2 cells, at least twice Gloo's in 1 of 1**"
    )
    assert (
        "| alltoall | 4 | 64 KiB | out of place | 110 | pairwise | 300 | 150 | 2.73 | 1.36 |"
        in ar.anchor_table(list(cells.values()))
    )


def _bench(ranks, rows):
    return {
        "ranks": ranks,
        "rows": [{"algorithm": a, "size": s, "time_us": t, "model_us": m} for a, s, t, m in rows],
    }


def test_picks_hit_near_and_miss():
    runs = [
        _bench(8, [("pairwise", 1024, 100.0, 90.0), ("bruck", 1024, 50.0, 40.0), ("scattered", 1024, 52.0, 60.0),
                   ("pairwise", 4096, 100.0, 90.0), ("bruck", 4096, 104.0, 80.0), ("scattered", 4096, 300.0, 95.0),
                   ("pairwise", 8192, 100.0, 90.0), ("bruck", 8192, 200.0, 80.0), ("scattered", 8192, 300.0, 95.0)]),
    ]  # fmt: skip
    cells = ar.pick_cells(runs)
    assert [(c["size"], c["fastest"], c["pick"], c["hit"], c["near"]) for c in cells] == [
        (1024, "bruck", "bruck", True, True),
        (4096, "pairwise", "bruck", False, True),  # 104 is within 10% of 100
        (8192, "pairwise", "bruck", False, False),
    ]
    assert ar.pick_verdict(cells, [], "measured").startswith(
        "**The model picks the measured fastest in 1 of 3 cells** (2 within 10% of the fastest)"
    )
    assert "| 8 | 8 KiB | 100 | 200 | 300 | pairwise | bruck | **no** |" in ar.pick_table(cells)


def test_picks_say_in_how_many_rounds_the_fastest_was_fastest():
    # two rounds: at 1 KiB both find bruck fastest; at 4 KiB they disagree (a tie within the noise)
    rounds = [
        _bench(4, [("pairwise", 1024, 100.0, 90.0), ("bruck", 1024, 50.0, 40.0), ("scattered", 1024, 60.0, 60.0),
                   ("pairwise", 4096, 90.0, 80.0), ("bruck", 4096, 200.0, 90.0), ("scattered", 4096, 100.0, 95.0)]),
        _bench(4, [("pairwise", 1024, 110.0, 90.0), ("bruck", 1024, 54.0, 40.0), ("scattered", 1024, 58.0, 60.0),
                   ("pairwise", 4096, 120.0, 80.0), ("bruck", 4096, 210.0, 90.0), ("scattered", 4096, 98.0, 95.0)]),
    ]  # fmt: skip
    cells = ar.pick_cells(rounds)
    assert [(c["size"], c["fastest"], c["agree"], c["rounds"], c["hit"]) for c in cells] == [
        (1024, "bruck", 2, 2, True),
        (4096, "scattered", 1, 2, False),  # medians 105 / 99: scattered, fastest in the second round only
    ]
    assert (
        "(2 within 10% of the fastest; in the 1 cell whose every round had the same fastest, it picks it in 1)"
        in (ar.pick_verdict(cells, [], "measured"))
    )
    table = ar.pick_table(cells)
    assert table[0].endswith("| fastest (measured) | fastest in rounds | model's pick | |")
    assert "| 4 | 4 KiB | 105 | 205 | 99 | scattered | 1 of 2 | pairwise | near |" in table
    single = ar.pick_cells(rounds[:1])  # one round (the simulator's): no rounds column, no clause
    assert "rounds" not in ar.pick_table(single)[0] and "every round" not in ar.pick_verdict(
        single, [], "simulated"
    )


def test_a_simulated_size_below_one_element_a_peer_is_no_cell():
    # 64 B on 32 ranks rounds down to 0 elements a peer: every algorithm "takes" 0 us, which is no pick
    rows = [
        {"ranks": 32, "size": size, "algorithm": algo, "time_us": t, "model_us": m}
        for size, algo, t, m in [(0, "pairwise", 0.0, 0.0), (0, "bruck", 0.0, 0.0), (0, "scattered", 0.0, 0.0),
                                 (256, "pairwise", 155.0, 155.0), (256, "bruck", 25.0, 25.0),
                                 (256, "scattered", 5.0, 5.0)]
    ]  # fmt: skip
    cells = ar.sim_cells({"rows": rows})
    assert [(c["ranks"], c["size"], c["fastest"]) for c in cells] == [(32, 256, "scattered")]


def test_the_crossover_is_read_between_the_neighbours_on_log_axes():
    # Bruck 10 + S/100, pairwise 70 + S/1000 (us, S bytes): equal at S = 60 / (0.01 - 0.001) = 6667
    times = {s: (10 + s / 100, 70 + s / 1000) for s in (1024, 2048, 4096, 8192, 16384)}
    s_star = ar.crossover(times)
    assert 4096 < s_star < 8192 and s_star == pytest.approx(6667, rel=0.1)
    assert ar.crossover({s: (1.0, 2.0) for s in (1, 2)}) is None  # never overtakes
    assert ar.crossover({s: (2.0, 1.0) for s in (1, 2)}) == 0.0  # ahead everywhere
    assert ar.crossover({1: (1.0, 2.0), 2: (2.0, 1.0), 4: (1.0, 2.0)}) is None  # falls behind again
    cells = [
        {
            "ranks": n,
            "size": s,
            "measured": {"bruck": b, "pairwise": p},
            "model": {"bruck": b, "pairwise": 2 * p},
        }
        for n in (2, 8)
        for s, (b, p) in times.items()
    ]
    crosses = ar.crossovers(cells)
    assert [x["ranks"] for x in crosses] == [8]  # 2 ranks: the same messages, nothing to judge
    assert crosses[0]["model"] > crosses[0]["measured"] and crosses[0]["ratio"] > 1
    assert ar.crossovers(cells, {8: 5000.0})[0]["model"] == 5000.0


def test_the_model_pick_table_is_what_auto_runs():
    prices = {
        "pairwise": lambda s: 100 + s / 1000,
        "bruck": lambda s: 30 + s / 100,
        "scattered": lambda s: 40 + s / 500,
    }
    seconds = lambda algo, size: (prices[algo](size), "closed form")  # noqa: E731
    table = pick_table(seconds, ["pairwise", "bruck", "scattered"], [256, 1024, 4096, 16384, 65536])
    assert [a for _, a in table] == ["bruck", "scattered", "pairwise"]
    assert table[0][0] == 0 and table[1][0] == 2048  # halfway (geometrically) between 1 and 4 KiB
    for size in (256, 1024, 4096, 16384, 65536):
        assert choose_alltoall(size, 8, [tuple(b) for b in table]) == model_pick(seconds, list(prices), size)
    assert choose_alltoall(128, 8) == "bruck" and choose_alltoall(128, 4) == "scattered"  # MPICH's rule
    assert choose_alltoall(8 << 20, 8) == "pairwise"


@pytest.mark.timeout(120)
def test_the_page_at_tiny_sizes(tmp_path, monkeypatch):
    """The benches replaced by synthetic results (one round, quick), the simulator run for real:
    the three parts and their verdicts are on the page."""

    def fake_run(self, *args, timeout_s=600):
        self.commands.append("python -m playground " + " ".join(args))
        if args[0] == "simulate":  # the real command, in this process (no interpreter to start)
            assert cli.main(list(args)) == 0
            return
        out = Path(args[args.index("--out") + 1])
        ranks = int(args[args.index("--ranks") + 1])
        if "--baseline" in args:
            result = _comparison(args[1], ranks, [("64 KiB", "out of place", 10.0, 30.0, 12.0)])
            result["rows"] = []
        else:
            rows = [
                (a, s, t, t)
                for s in (256, 65536)
                for a, t in (("pairwise", s / 100 + 30), ("bruck", s / 50 + 10), ("scattered", s / 90 + 20))
            ]
            result = _bench(ranks, rows)
        (out / "run").mkdir(parents=True)
        (out / "run" / "result.json").write_text(json.dumps(result))
        (out / "latest").symlink_to(out / "run")

    monkeypatch.setattr(results.Context, "run", fake_run)
    ctx = results.Context(tmp_path / "work", True, 1, results.Console(quiet=True), tmp_path)
    page = ar.section(ctx)
    assert "**Ours at least MPICH's speed in 2 of 2 cells, at least twice Gloo's in 2 of 2**" in page
    assert "**The model picks the measured fastest in 4 of 4 cells**" in page
    assert "**The model picks the simulated fastest in" in page and "| 64 | 1 MiB |" in page
    assert any(c.startswith("python -m playground simulate alltoall --link ib") for c in ctx.commands)
