"""Mixture of experts in the transformer (docs/moe.md): every block's MLP becomes E experts and a
router, a plan applied to the one model as the pipeline's and tensor parallelism's are.

config.py (MoEConfig: E, top-k, capacity factor, balancing loss; ExpertPlan: which experts a rank
holds, the parameters' names and shapes) -> routing.py (router, capacity, balancing loss: forward and
backward) ; permute.py (tokens to their experts and back: sorted by expert, or gathered in place) ;
experts.py (one expert's MLP) -> layer.py (MoELayer: the whole layer over an expert group, its
phases timed, its loads recorded).
"""

from playground.transformer.moe.config import ExpertPlan, MoEConfig, check_expert_parallel, is_expert
from playground.transformer.moe.layer import PHASES, Exchange, LocalExchange, MoELayer
from playground.transformer.moe.permute import PERMUTATIONS

__all__ = [
    "PERMUTATIONS",
    "PHASES",
    "Exchange",
    "ExpertPlan",
    "LocalExchange",
    "MoEConfig",
    "MoELayer",
    "check_expert_parallel",
    "is_expert",
]
