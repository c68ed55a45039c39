"""Gradient buckets (PyTorch DDP style), compute/communication overlap and ping-pong: the network
labs of lecture section 5 (nodes `buckets`, `overlap`, `pingpong`).

`architectures` gives real models' gradient tensors in backward order, `bucketing` packs them
into buckets under a byte cap and lists each strategy's schedule, `overlap` models and measures a
step whose all-reduces run on a communication thread (`comm_thread`) while backward (`backward`,
`compute`) goes on; `pingpong` fits this run's alpha and beta, `raw_pair` is the bare-pyzmq
yardstick. The `*_report` modules turn the ranks' results into each lab's tables, notes and
plots. The alpha-beta model lives in `playground.models.alphabeta`.
"""
