"""Expert parallelism on a grid: the world's N ranks as N / P replicas of an expert group of P ranks
(DeepSpeed-MoE's and Megatron-LM's layout: the expert groups inside the data-parallel world).

    rank = replica x P + expert_index          (the expert index fastest: an expert group is P neighbours)

Every rank trains its own rows of the global batch (data parallelism over all N). Within an expert
group the ranks hold different experts (rank i of the group: experts i E/P .. (i+1) E/P - 1) and send
each token to the rank of its expert and back (`expert`: the all-to-alls); the ranks that hold the
same experts, one per replica, sum those experts' gradients (`expert_data`: N / P ranks). The
parameters outside the experts are on every rank and their gradients summed over all N: first over
the expert group, then over `expert_data` (a two-step all-reduce over the whole grid).
"""

from playground.comm.group import split
from playground.core.errors import UsageError


class ExpertGrid:
    """This rank's two groups of an N / P x P arrangement of `comm`'s ranks (collective over `comm`)."""

    def __init__(self, comm, expert: int):
        if expert < 1 or comm.size % expert:
            raise UsageError(
                f"an expert group of {expert} ranks does not divide {comm.size} ranks", field="expert"
            )
        self.comm, self.expert_size, self.replicas = comm, expert, comm.size // expert
        self.replica, self.expert_index = divmod(comm.rank, expert)
        self.expert = split(comm, self.replica, comm.rank, "expert")
        self.expert_data = split(comm, self.expert_index, comm.rank, "expert_data")

    def describe(self) -> str:
        return f"{self.replicas} x {self.expert_size} (replicas x expert group)"

    def __repr__(self):
        return f"ExpertGrid({self.describe()}; rank {self.comm.rank} at replica {self.replica}, expert {self.expert_index})"
