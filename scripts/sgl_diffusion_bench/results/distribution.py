"""A sample of figures described (n, mean, median, stdev, CV, range) and the relative change between two means,
finite or refused: every number the statistics state starts here, so an overflow is one refusal (input.out_of_range)
wherever it happens, never an inf in a document."""

from __future__ import annotations

import math
import statistics
from typing import Any, Sequence

from .. import contract, inputs


def out_of_range(what: str) -> contract.InputError:
    """The refusal for figures whose statistics leave the floats: finite inputs, never an inf in a document."""
    return contract.InputError(inputs.OUT_OF_RANGE, f"{what} is out of range of a float",
                               f"figures must lie within +/-{inputs.MAX_FIGURE:g} (ms or MiB) and a baseline far "
                               "enough from 0 for a relative change; pass the figures the engine measured")


def finite(value: float, what: str) -> float:
    """``value`` when it is a finite float, else the out_of_range refusal naming ``what``."""
    if not math.isfinite(value):
        raise out_of_range(what)
    return value


def safe_mean(values: Sequence[float]) -> float:
    """fmean, which sums first (1.7e308 twice overflows fsum); on overflow the mean of the values divided by n,
    which any finite values keep finite."""
    try:
        return statistics.fmean(values)
    except OverflowError:
        return math.fsum(v / len(values) for v in values)


def describe(values: Sequence[float]) -> dict[str, Any]:
    """n, mean, median, sample stdev, CV and range; None where the figure needs more values."""
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return {"n": 0, "mean": None, "median": None, "stdev": None, "cv_pct": None, "min": None, "max": None}
    if not all(map(math.isfinite, vals)):
        raise out_of_range("a figure")
    mean = safe_mean(vals)
    try:
        stdev = finite(statistics.stdev(vals), "the standard deviation") if len(vals) > 1 else None
    except OverflowError:
        raise out_of_range("the standard deviation") from None
    return {"n": len(vals), "mean": mean, "median": finite(statistics.median(vals), "the median"), "stdev": stdev,
            "cv_pct": finite(stdev / mean * 100, "the coefficient of variation") if stdev is not None and mean
            else None, "min": min(vals), "max": max(vals)}


def relative_change_pct(baseline: float | None, candidate: float | None) -> float | None:
    """(candidate - baseline) / baseline in %; None without a baseline (or a 0 one), out_of_range past a float."""
    if baseline is None or candidate is None or baseline == 0:
        return None
    try:
        return finite((candidate - baseline) / baseline * 100, f"the change from {baseline:g} to {candidate:g}")
    except OverflowError:
        raise out_of_range(f"the change from {baseline:g} to {candidate:g}") from None
