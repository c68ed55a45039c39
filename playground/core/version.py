"""The playground's version (pyproject.toml's): what a calibration records, so that one measured by
another version is refused rather than read with other meanings (models/calibration.py)."""

VERSION = "0.1.0"
