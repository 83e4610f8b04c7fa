"""Means, standard errors, paired differences over seeds, and the verdict rule.

The verdict of a comparison (treatment − control, paired by seed: same initialisation and
data order) uses the 95 % confidence interval of the mean difference, Student t with n − 1
degrees of freedom:

- **reproduced**: the interval lies on the side the paper predicts;
- **not reproduced (opposite)**: it lies on the other side;
- **not reproduced (no effect)**: it lies within ±tolerance, so an effect of that size is
  ruled out at this scale;
- **inconclusive**: anything else, including a single seed.
"""

import math
from typing import Dict, Mapping, Sequence

import numpy as np
from scipy import stats as scipy_stats

REPRODUCED = "reproduced"
OPPOSITE = "not reproduced (opposite)"
NO_EFFECT = "not reproduced (no effect)"
INCONCLUSIVE = "inconclusive"


def summary(values: Sequence[float]) -> Dict[str, float]:
    """n, mean and standard error of the mean (nan for fewer than two values)."""
    values = np.asarray(values, np.float64)
    n = len(values)
    se = float(values.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan")
    return {"n": n, "mean": float(values.mean()) if n else float("nan"), "se": se}


def paired_difference(treatment: Mapping[int, float], control: Mapping[int, float],
                      *, control_is_fixed: bool = False) -> Dict[str, float]:
    """Mean ± s.e. of treatment[seed] − control[seed] over the seeds both have, and its 95 %
    interval. With `control_is_fixed` the control is one number (a deterministic arm) taken
    against every seed of the treatment."""
    if control_is_fixed:
        (fixed,) = control.values()
        seeds = sorted(treatment)
        diffs = np.array([treatment[s] - fixed for s in seeds], np.float64)
    else:
        seeds = sorted(set(treatment) & set(control))
        diffs = np.array([treatment[s] - control[s] for s in seeds], np.float64)
    result = summary(diffs)
    n = result["n"]
    if n > 1:
        half = float(scipy_stats.t.ppf(0.975, n - 1)) * result["se"]
        result.update(low=result["mean"] - half, high=result["mean"] + half)
    else:
        result.update(low=float("nan"), high=float("nan"))
    result["seeds"] = seeds
    return result


def verdict(difference: Mapping[str, float], direction: int, tolerance: float) -> str:
    """The rule in the module docstring, for a `paired_difference`."""
    if difference["n"] < 2 or math.isnan(difference["low"]):
        return INCONCLUSIVE
    low, high = difference["low"] * direction, difference["high"] * direction
    if low > high:
        low, high = high, low
    if low > 0:
        return REPRODUCED
    if high < 0:
        return OPPOSITE
    if -tolerance < low and high < tolerance:
        return NO_EFFECT
    return INCONCLUSIVE
