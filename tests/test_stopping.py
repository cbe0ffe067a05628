"""The stopping rule on synthetic series (no GPU): a pure function of the samples."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kernelbook.measure.stopping import Rule, decide, drift_of, rse_of_median

RULE = Rule(min_samples=10, max_samples=2000, max_noise=0.005, min_time_s=0.1, timeout_s=15.0)


def run(rule, series: dict[str, np.ndarray], seconds_per_round: float):
    """Feed the rule one round at a time, as the timer does; return (verdict, rounds)."""
    n_max = min(len(s) for s in series.values())
    for n in range(1, n_max + 1):
        v = decide(rule, {k: s[:n] for k, s in series.items()}, n * seconds_per_round)
        if v.stop:
            return v, n
    raise AssertionError("the rule never stopped within the series")


def test_rse_of_median_matches_the_normal_theory():
    rng = np.random.default_rng(1)
    a = 1.0 + 0.01 * rng.standard_normal(10_000)
    # sqrt(pi/2) * sigma / sqrt(n) / median
    assert rse_of_median(a) == pytest.approx(1.2533 * 0.01 / 100, rel=0.05)
    assert rse_of_median([1.0]) == math.inf
    assert rse_of_median([0.0, 0.0, 0.0]) == math.inf


def test_a_quiet_short_kernel_converges_long_before_the_cap():
    # 5 us kernel, 0.3 % noise, 200 us of wall time a round: min_time_s is wall-clock time,
    # so it stops after ~500 rounds instead of running to max_samples for 0.1 s of GPU time
    rng = np.random.default_rng(2)
    s = {
        "variant": 0.005 * (1 + 0.003 * rng.standard_normal(5000)),
        "baseline": 0.004 * (1 + 0.003 * rng.standard_normal(5000)),
    }
    v, n = run(RULE, s, 200e-6)
    assert v.reason == "converged" and v.converged
    assert n == pytest.approx(500, abs=2)
    assert v.noise <= RULE.max_noise


def test_a_long_kernel_stops_at_min_samples_once_min_time_has_passed():
    rng = np.random.default_rng(3)
    s = {"variant": 3.0 * (1 + 0.002 * rng.standard_normal(100))}
    v, n = run(RULE, s, 0.02)
    assert v.reason == "converged" and n == RULE.min_samples


def test_min_samples_hold_even_when_time_is_up():
    s = {"variant": np.full(50, 1.0)}
    assert not decide(RULE, {"variant": s["variant"][:9]}, 100.0).stop
    assert decide(RULE, {"variant": s["variant"][:10]}, 100.0).stop


def test_every_function_must_be_quiet():
    rng = np.random.default_rng(4)
    quiet = 1 + 0.001 * rng.standard_normal(3000)
    noisy = 1 + 0.08 * rng.standard_normal(3000)
    v, n = run(RULE, {"variant": quiet, "baseline": noisy}, 0.001)
    assert decide(RULE, {"variant": quiet[:100]}, 0.1).stop  # alone: 100 rounds (min time)
    # the noisy baseline's median is known to 0.5 % only after ~400 samples
    assert 200 < n < 1000 and v.converged
    assert rse_of_median(noisy[:n]) <= RULE.max_noise < rse_of_median(noisy[: n - 50])


def test_a_noisy_series_runs_to_the_cap_and_is_not_converged():
    rng = np.random.default_rng(5)
    s = {"variant": np.exp(0.8 * rng.standard_normal(2000))}
    v, n = run(RULE, s, 0.0001)
    assert v.reason == "max_samples" and n == RULE.max_samples
    assert not v.converged


def test_a_bimodal_series_converges_on_its_median_with_enough_samples():
    # two clock states, alternating at random: the median is robust, the halves agree
    rng = np.random.default_rng(6)
    modes = np.where(rng.random(4000) < 0.3, 1.10, 1.00)
    s = {"variant": modes * (1 + 0.002 * rng.standard_normal(4000))}
    v, n = run(Rule(max_samples=4000, timeout_s=1e9), s, 0.001)
    assert v.converged and v.reason == "converged"
    assert np.median(s["variant"][:n]) == pytest.approx(1.0, rel=0.01)


def test_a_drifting_series_is_not_converged():
    # the level climbs 5 % over the run (clocks falling as the GPU heats): quiet by the
    # median's standard error, but the halves disagree, so sampling goes on to the cap
    rng = np.random.default_rng(7)
    n = 300
    s = {"variant": np.linspace(1.0, 1.05, n) * (1 + 0.001 * rng.standard_normal(n))}
    rule = Rule(max_samples=n, min_time_s=0.2, timeout_s=1e9)
    v, rounds = run(rule, s, 0.001)
    assert v.reason == "max_samples" and rounds == n and not v.converged
    assert v.drift == pytest.approx(0.025, rel=0.3)
    change, se = drift_of(s["variant"])
    assert change > 0.01 and change > 4 * se
    # the same samples in random order: no drift, converged at the minimum time
    flat = {"variant": rng.permutation(s["variant"])}
    v, rounds = run(rule, flat, 0.001)
    assert v.converged and rounds == 200


def test_a_step_at_the_start_settles():
    # a few slow first samples (clock ramp): the median of the halves agrees once enough
    # steady samples follow
    rng = np.random.default_rng(8)
    a = 1 + 0.001 * rng.standard_normal(1000)
    a[:5] *= 1.3
    v, n = run(RULE, {"variant": a}, 0.01)
    assert v.converged and RULE.min_samples < n < 50
    assert np.median(a[:n]) == pytest.approx(1.0, rel=0.002)


def test_timeout_ends_a_measurement_that_is_never_quiet():
    rng = np.random.default_rng(9)
    s = {"variant": np.exp(0.8 * rng.standard_normal(5000))}
    v, n = run(Rule(max_samples=5000, timeout_s=0.5), s, 0.001)
    assert v.reason == "timeout" and n == 500 and not v.converged


def test_rule_of_reads_the_timing_policy():
    r = Rule.of(
        {
            "min_samples": 7,
            "max_samples": 70,
            "target_rse": 0.01,
            "min_time_s": 0.2,
            "max_time_s": 3,
        }
    )
    assert (r.min_samples, r.max_samples, r.max_noise, r.min_time_s, r.timeout_s) == (
        7,
        70,
        0.01,
        0.2,
        3.0,
    )
