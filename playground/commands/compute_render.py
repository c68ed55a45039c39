"""`bench compute`'s page from its measurements (compute_bench.py): what ran, the ceilings, ours
against torch per shape, the optimizer, where our time goes, and the roofline."""

import statistics

from playground.commands.training_results import median_spread
from playground.transformer.profile import GROUPS

LABELS = {"native": "ours (native)", "mkl": "ours (native, MKL)", "numpy": "ours (numpy)", "torch": "torch"}
OURS_NATIVE = ("native", "mkl")  # our native kernels, their products on numpy's BLAS or on MKL's
ELEMENTWISE = ("layernorm", "gelu", "loss", "embedding")  # the pieces bound by memory, not arithmetic


def render(machine: dict, results: list[dict], systems: list[str], rounds: int, openblas_env: dict) -> str:
    parts = [
        _what_ran(machine, openblas_env),
        _against_torch(results, systems, rounds),
        _products(results, machine, rounds),
        _optimizer(results, systems),
        _shares(results),
        _roofline(results, machine),
    ]
    return "\n".join(parts)


def _what_ran(m: dict, openblas_env: dict) -> str:
    blas = ", ".join(
        f"{b['internal_api']} {b['version']} ("
        + (f"{b['architecture']} kernel, " if b["architecture"] else "")
        + f"{b['num_threads']} thread{'s' * (b['num_threads'] != 1)})"
        for b in m["blas"]
    )
    torch = m.get("torch")
    env = (
        "set here (" + ", ".join(f"{k}={v}" for k, v in openblas_env.items()) + "); unset for this "
        "benchmark's processes, so that numpy's OpenBLAS picks its kernel for this CPU"
        if openblas_env
        else "not set here"
    )
    lines = [
        "## What ran",
        "",
        f"- numpy {m['numpy']}; the BLAS libraries loaded, as threadpoolctl reports them inside the "
        f"measuring process: {blas};",
        f"- torch {torch['version']} ({torch['blas']}, {torch['threads']} thread);"
        if torch
        else "- no torch;",
        f"- our kernels: native/transformer.c, compiled for {m['kernel_isa']} here; their products "
        "(native/gemm.c, transformer/blas.py): "
        + (
            f"{m['native_blas']}, numpy's own"
            if m["native_blas"]
            else "numpy's matmul (no CBLAS could be bound)"
        )
        + (
            f"; in the `mkl` column {m['mkl_blas']}, the BLAS torch's CPU build links (the `mkl` extra)"
            if m.get("mkl_blas")
            else "; the `mkl` extra (MKL, the BLAS torch's CPU build links) is not installed here"
        )
        + ";",
        f"- OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE: {env}.",
        "",
        f"The ceilings, on one thread: a 1024^3 product at {m['numpy_gflops']:.1f} GFLOP/s (numpy's BLAS), "
        f"{m['native_gflops']:.1f} (ours on it)"
        + (f", {m['mkl_gflops']:.1f} (ours on MKL)" if "mkl_gflops" in m else "")
        + (f", {m['torch_gflops']:.1f} (torch's)" if "torch_gflops" in m else "")
        + f"; a 64 MiB copy at {m['copy_gbps']:.1f} GB/s (read + written).",
        "",
    ]
    return "\n".join(lines)


def _ms(values: list[float]) -> str:
    return median_spread(values, scale=1e3, digits=2 if statistics.median(values) < 0.1 else 1)


def _against_torch(results: list[dict], systems: list[str], rounds: int) -> str:
    ours = [s for s in OURS_NATIVE if s in systems]
    vs_torch = ours if "torch" in systems else []
    lines = [
        "## Forward + backward, one rank's shapes",
        "",
        "A rank of `run SCENARIO --ranks N` computes its batch / N sequences; here each system runs "
        "those shapes in turn, round after round (the order rotating), on one thread. ms per step, "
        f"median (min-max) over {rounds} rounds; the losses of the first step beside (the same weights "
        "and batch give the same loss).",
        "",
        "| scenario | ranks | tokens | "
        + " | ".join(LABELS[s] for s in systems)
        + "".join(f" | {s} / torch" for s in vs_torch)
        + " | loss gap |",
        "|---|---:|---:|" + "---:|" * (len(systems) + len(vs_torch)) + "---:|",
    ]
    faster = dict.fromkeys(vs_torch, 0)
    for r in results:
        cells = [_ms(r["step_s"][s]) for s in systems]
        torch_s = statistics.median(r["step_s"]["torch"]) if vs_torch else 0.0
        for s in vs_torch:
            q = statistics.median(r["step_s"][s]) / torch_s
            faster[s] += q <= 1
            cells.append(f"{q:.2f}")
        gap = f"{max(abs(v - r['losses']['torch']) for v in r['losses'].values()):.1e}" if vs_torch else "-"
        tokens = r["batch"] * r["config"]["context"]
        lines.append(f"| {r['scenario']} | {r['ranks']} | {tokens:,} | " + " | ".join(cells) + f" | {gap} |")
    if vs_torch:
        said = "; ".join(f"{LABELS[s]} in {n} of {len(results)} rows" for s, n in faster.items())
        lines += ["", f"At least as fast as torch (the medians): {said}."]
    return "\n".join(lines) + "\n"


def _products(results: list[dict], machine: dict, rounds: int) -> str:
    """The twelve products of one block on each BLAS: the part of the step the kernels do not change."""
    shown = [s for s in ("numpy", "native", "mkl", "torch") if s in results[0]["products_s"]]
    labels = {"numpy": "numpy's BLAS", "native": "ours (numpy's BLAS)", "mkl": "ours (MKL)", "torch": "torch"}
    lines = [
        "## The products alone",
        "",
        "One block's twelve matrix products (its four linear layers: x W forward, x^T dy and dy W^T "
        "backward) on the rank's tokens, by numpy's matmul (its own BLAS), by our native matmul (through "
        f"the same library: {machine['native_blas'] or 'none'}"
        + (f"; and through {machine['mkl_blas']}" if machine.get("mkl_blas") else "")
        + f") and by torch; ms, median (min-max) over {rounds} rounds. Most of a step is these; what the "
        "kernels change is the rest.",
        "",
        "| scenario | ranks | " + " | ".join(labels[s] for s in shown) + " |",
        "|---|---:|" + "---:|" * len(shown),
    ]
    for r in results:
        lines.append(
            f"| {r['scenario']} | {r['ranks']} | " + " | ".join(_ms(r["products_s"][s]) for s in shown) + " |"
        )
    return "\n".join(lines) + "\n"


def _optimizer(results: list[dict], systems: list[str]) -> str:
    lines = [
        "## The optimizer step",
        "",
        "Adam over the whole model (ours: one pass of the C kernel, or numpy's fourteen; torch: "
        "torch.optim.Adam as the DDP baseline runs it), ms per step, median (min-max).",
        "",
        "| scenario | parameters | " + " | ".join(LABELS[s] for s in systems) + " |",
        "|---|---:|" + "---:|" * len(systems),
    ]
    seen = set()
    for r in results:
        if r["scenario"] in seen:
            continue
        seen.add(r["scenario"])
        cells = [_ms(r["optimizer_s"][s]) for s in systems]
        lines.append(f"| {r['scenario']} | {r['num_params']:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _shares(results: list[dict]) -> str:
    lines = [
        "## Where our time goes",
        "",
        "Each piece's share of forward + backward (%), from one profiled run of the same steps "
        "(transformer/profile.py: every kernel call timed); `other` is the rest (the embedding's "
        "gather, residual adds, Python).",
        "",
        "| scenario | ranks | kernels | fwd+bwd (ms) | " + " | ".join(GROUPS) + " |",
        "|---|---:|---|---:|" + "---:|" * len(GROUPS),
    ]
    for r in results:
        for name, p in r["profiles"].items():
            total = p["forward_backward_s"]
            shares = [f"{100 * p['groups'][g]['seconds'] / total:.1f}" for g in GROUPS]
            lines.append(
                f"| {r['scenario']} | {r['ranks']} | {name} | {total * 1e3:,.1f} | "
                + " | ".join(shares)
                + " |"
            )
    return "\n".join(lines) + "\n"


def _roofline(results: list[dict], machine: dict) -> str:
    copy = machine["copy_gbps"]
    ours = [s for s in OURS_NATIVE if s in results[0]["profiles"]]
    peaks = ", ".join(f"{machine[f'{s}_gflops']:.1f} ({LABELS[s]})" for s in ours)
    lines = [
        "## Against the machine's ceilings (native kernels)",
        "",
        f"GFLOP/s of the model's arithmetic (the products; attention counted as its full T x T) and its "
        f"share of the matrix-multiply rate of the BLAS our products call ({peaks}); for the pieces that do "
        f"next to no arithmetic (layernorm, GELU, the loss, the embedding), the bytes they read and write "
        f"per second against the copy rate ({copy:.1f} GB/s).",
        "",
        "| scenario | ranks | kernels | fwd+bwd GFLOP/s | % of peak | matmul % | attention % | others GB/s "
        "| % of copy |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        for system in ours:
            p, peak = r["profiles"][system], machine[f"{system}_gflops"]
            g = p["groups"]
            flops = sum(v["flops"] for v in g.values())
            rate = flops / p["forward_backward_s"] / 1e9
            mm, att = (
                g[k]["flops"] / g[k]["seconds"] / 1e9 if g[k]["seconds"] else 0.0
                for k in ("matmul", "attention")
            )
            nbytes = sum(g[k]["bytes"] for k in ELEMENTWISE)
            seconds = sum(g[k]["seconds"] for k in ELEMENTWISE)
            gbps = nbytes / seconds / 1e9 if seconds else 0.0
            lines.append(
                f"| {r['scenario']} | {r['ranks']} | {system} | {rate:.1f} | {100 * rate / peak:.0f} | "
                f"{100 * mm / peak:.0f} | {100 * att / peak:.0f} | {gbps:.1f} | {100 * gbps / copy:.0f} |"
            )
    return "\n".join(lines) + "\n"
