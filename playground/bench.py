"""`python -m playground bench ...` (filled in by the collective-suite work)."""


def add_bench_parser(sub, func) -> None:
    b = sub.add_parser("bench", help="benchmark collectives (nccl-tests style)")
    b.set_defaults(func=func)


def run_bench(args) -> int:
    print("bench: not available yet")
    return 2
