"""The per-rank event log, its alignment across ranks, and clock offsets between ranks."""
