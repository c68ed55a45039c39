"""The band a model is held to: measured / model within 1/1.25 .. 1.25 (25%, either way).

One definition for every verdict that sets a measurement beside its model (the lecture page's
rows, the serving lab's decode-step model, the simulator's accuracy page), so that "within" means
one thing everywhere and a row outside it can say so.
"""

BAND = 0.25


def within(ratio: float, band: float = BAND) -> bool:
    """Whether measured / model (`ratio`) is inside the band; NaN (no model) is not."""
    return 1 / (1 + band) <= ratio <= 1 + band


def band_words(band: float = BAND) -> str:
    """The band as a reader sees it: "within 25% (0.80-1.25)"."""
    return f"within {100 * band:.0f}% ({1 / (1 + band):.2f}-{1 + band:.2f})"
