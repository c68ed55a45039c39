"""Gradient buckets (PyTorch DDP style) and compute/communication overlap: the labs of lecture
sections 5.3 and 3.5 (nodes `buckets`, `overlap`).

`architectures` gives real models' gradient tensors in backward order, `schedules` lists each
strategy's buckets (packed by `playground.collectives.bucketing` under a byte cap), `gradients`
makes values whose all-reduced sum is exact, `backward` times a step whose all-reduces run after
backward or on a communication thread (`playground.collectives.comm_thread`) while backward
(`compute`) goes on. The `*_report` modules turn the ranks' results into each lab's tables, notes
and plots; the start-of-run ping-pong and the alpha-beta model live in `playground.models`.
"""
