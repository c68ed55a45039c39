"""Checkpoints a run can trust: each rank's part written whole or not at all, a manifest last
(`store`), and the thread that writes them while training goes on (`writer`)."""
