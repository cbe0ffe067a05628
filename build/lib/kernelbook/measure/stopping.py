"""When a measurement has enough samples: a pure function of the samples, after nvbench.

nvbench's stopping criteria are small objects fed samples and asked whether they are
finished (minimum samples, minimum time, maximum noise, timeout). Here the rule is one pure
function, ``decide``, of the samples taken so far for every function of a measurement
(variant, baseline, copy: sampled alternately) and of the wall-clock time spent, so that it
can be tested on synthetic series without a GPU.

A measurement stops, in this order of precedence:

- ``converged``: at least ``min_samples`` of each function, at least ``min_time_s`` of
  wall-clock time spent sampling (so that the samples span slow changes of clock and
  temperature, whatever the kernel's length), the noise of every function's median (its
  relative standard error) at most ``max_noise``, and no drift between the first and the
  second half of the samples;
- ``max_samples``: the sample cap is reached; converged only if the noise and drift tests
  pass there;
- ``timeout``: ``timeout_s`` of wall-clock time are spent (never before ``min_samples``);
  converged only if the noise and drift tests pass there.

``min_time_s`` is wall-clock time, not accumulated kernel time: a 5 µs kernel would need
20,000 samples to accumulate 0.1 s of kernel time and would stop at the cap only because of
its length, while its median is known to 0.5 % after a few hundred.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

# 1.2533 = sqrt(pi / 2): the asymptotic standard error of a normal sample's median is
# sqrt(pi / 2) * sigma / sqrt(n); sigma from the interquartile range (1.349 sigma).
_MEDIAN_SE = math.sqrt(math.pi / 2)
_IQR_SIGMA = 1.349


def rse_of_median(samples: Sequence[float] | np.ndarray) -> float:
    """Relative standard error of the median, with sigma estimated robustly from the
    interquartile range (a few outliers barely move it); inf below two samples."""
    a = np.asarray(samples, dtype=np.float64)
    if a.size < 2:
        return math.inf
    q1, med, q3 = np.percentile(a, [25, 50, 75])
    if med <= 0:
        return math.inf
    sigma = (q3 - q1) / _IQR_SIGMA
    return float(_MEDIAN_SE * sigma / math.sqrt(a.size) / med)


def drift_of(samples: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """(relative change of the median from the first to the second half, its standard
    error): a series whose level moves (clocks ramping, a neighbour starting) shows it."""
    a = np.asarray(samples, dtype=np.float64)
    if a.size < 8:
        return 0.0, math.inf
    half = a.size // 2
    first, second = a[:half], a[a.size - half :]
    med = float(np.median(a))
    if med <= 0:
        return 0.0, math.inf
    change = (float(np.median(second)) - float(np.median(first))) / med
    se = math.hypot(rse_of_median(first), rse_of_median(second))
    return change, se


@dataclass(frozen=True)
class Rule:
    """The stopping rule's parameters (config ``timing``: see src/kernelbook/schemas)."""

    min_samples: int = 10
    max_samples: int = 5000
    max_noise: float = 0.005
    min_time_s: float = 0.1
    timeout_s: float = 15.0
    # A drift counts when the halves' medians differ by more than max_drift and by more
    # than drift_sigmas standard errors: a real level change, not the noise of two halves.
    max_drift: float = 0.01
    drift_sigmas: float = 4.0

    @classmethod
    def of(cls, timing: Mapping) -> Rule:
        return cls(
            min_samples=int(timing["min_samples"]),
            max_samples=int(timing["max_samples"]),
            max_noise=float(timing["target_rse"]),
            min_time_s=float(timing["min_time_s"]),
            timeout_s=float(timing["max_time_s"]),
            max_drift=float(timing.get("max_drift", cls.max_drift)),
        )


@dataclass(frozen=True)
class Verdict:
    stop: bool
    converged: bool
    reason: str  # converged | max_samples | timeout | continue
    noise: float  # the largest relative standard error of a median, over the functions
    drift: float  # the largest relative drift between halves, over the functions


def quiet(rule: Rule, samples: Mapping[str, Sequence[float]]) -> tuple[bool, float, float]:
    """(noise and drift tests pass, worst noise, worst significant drift)."""
    noise, drift, ok = 0.0, 0.0, True
    for s in samples.values():
        r = rse_of_median(s)
        change, se = drift_of(s)
        noise = max(noise, r)
        drifting = abs(change) > rule.max_drift and abs(change) > rule.drift_sigmas * se
        if drifting:
            drift = max(drift, abs(change))
        ok = ok and r <= rule.max_noise and not drifting
    return ok, noise, drift


def decide(rule: Rule, samples: Mapping[str, Sequence[float]], elapsed_s: float) -> Verdict:
    """Whether to stop sampling, given every function's samples so far and the wall-clock
    seconds spent sampling them."""
    n = min((len(s) for s in samples.values()), default=0)
    if n < rule.min_samples:
        return Verdict(False, False, "continue", math.inf, 0.0)
    ok, noise, drift = quiet(rule, samples)
    if ok and elapsed_s >= rule.min_time_s:
        return Verdict(True, True, "converged", noise, drift)
    if n >= rule.max_samples:
        return Verdict(True, ok, "max_samples", noise, drift)
    if elapsed_s >= rule.timeout_s:
        return Verdict(True, ok, "timeout", noise, drift)
    return Verdict(False, False, "continue", noise, drift)
