"""Forking ranks, watching them, the root cause of a failure, result.json; ranks started by other launchers; other programs' workers."""
