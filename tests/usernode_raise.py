"""A user node whose rank 1 raises after a first all-reduce; the others keep communicating."""

import numpy as np

from playground.collectives import allreduce


def main(comm, params):
    allreduce(comm, np.ones(10))
    if comm.rank == 1:
        raise ValueError("bad gradient on rank 1")
    for _ in range(100):
        allreduce(comm, np.ones(10))
    return {"ok": True}
