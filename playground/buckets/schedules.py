"""The buckets lab's schedules: each strategy it compares, as labelled lists of buckets.

The packing itself (`plan_buckets`, DDP's caps) is the one every lab uses and lives in
`playground.collectives.bucketing`; a strategy here is which caps it gives it.
"""

from collections.abc import Sequence

from playground.collectives.bucketing import MIB, Bucket, plan_buckets


def schedules(
    strategies: Sequence[str],
    tensor_bytes: Sequence[int],
    bucket_mb: Sequence[float],
    first_bucket_mb: float | None,
    scale: float = 1.0,
) -> list[tuple[str, float | None, list[Bucket]]]:
    """(label, cap in MiB or None, buckets) for every strategy ("per_tensor": a cap of 0 bytes,
    "bucketed" once per cap in `bucket_mb`, "single": no cap), in the order given; caps are scaled
    like the tensors."""
    out: list[tuple[str, float | None, list[Bucket]]] = []
    for s in strategies:
        if s == "per_tensor":
            out.append(("per-tensor", None, plan_buckets(tensor_bytes, 0)))
        elif s == "single":
            out.append(("single bucket", None, plan_buckets(tensor_bytes, None)))
        else:
            first = None if first_bucket_mb is None else round(first_bucket_mb * MIB * scale)
            for cap_mb in bucket_mb:
                buckets = plan_buckets(tensor_bytes, round(cap_mb * MIB * scale), first)
                out.append((f"bucketed {cap_mb:g} MiB", cap_mb, buckets))
    return out
