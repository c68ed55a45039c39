"""Gradient buckets (PyTorch DDP style) and compute/communication overlap: the pure parts.

`architectures` gives real models' gradient tensors in backward order, `bucketing` packs them
into buckets under a byte cap, `overlap` models and measures a step whose all-reduces run on a
communication thread while backward goes on. The nodes `nodes.buckets` and `nodes.overlap` do
the I/O; the alpha-beta model lives in `playground.models.alphabeta`.
"""
