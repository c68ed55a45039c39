"""Data-parallel training of the numpy transformer."""
