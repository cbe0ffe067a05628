"""The measurement loop, written once: warm-up, L2 flush, interleaving, adaptive stopping.

Every sample is timed on the device with two CUDA events on one stream around a single
launch (or, in graph mode, around the replay of a graph of launches). With ``cache: cold``
a buffer twice the device's L2 is written before each sample, outside the timed region.
The variant and its baseline are sampled alternately, so both see the same clocks and
temperature, and "% of baseline" is a ratio measured side by side.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


class Hang(RuntimeError):
    """A launch did not finish within the configured time."""


@dataclass(frozen=True)
class Stats:
    n: int
    median: float
    q1: float
    q3: float
    min: float
    max: float
    mean: float
    std: float
    rse_median: float
    converged: bool

    @property
    def rel_std(self) -> float:
        return self.std / self.mean if self.mean else math.nan

    @classmethod
    def of(cls, samples, converged: bool) -> Stats:
        a = np.asarray(samples, dtype=np.float64)
        q1, med, q3 = np.percentile(a, [25, 50, 75])
        return cls(
            n=int(a.size),
            median=float(med),
            q1=float(q1),
            q3=float(q3),
            min=float(a.min()),
            max=float(a.max()),
            mean=float(a.mean()),
            std=float(a.std(ddof=1)) if a.size > 1 else 0.0,
            rse_median=rse_of_median(a),
            converged=converged,
        )


def rse_of_median(a: np.ndarray) -> float:
    """Relative standard error of the median: 1.2533 * sigma / sqrt(n) / median, with sigma
    estimated robustly from the interquartile range (outliers barely move it)."""
    if a.size < 2:
        return math.inf
    q1, med, q3 = np.percentile(a, [25, 50, 75])
    sigma = (q3 - q1) / 1.349
    return float(1.2533 * sigma / math.sqrt(a.size) / med) if med > 0 else math.inf


class Timer:
    """Times launch functions on one stream according to a timing policy (config)."""

    def __init__(self, policy: dict, l2_bytes: int, cupy_stream, torch_stream=None):
        import cupy as cp

        self.cp = cp
        self.policy = policy
        self.stream = cupy_stream
        self.torch_stream = torch_stream
        self.cold = policy["cache"] == "cold"
        # Writing twice the L2 evicts everything a previous launch left there.
        self.flush_bytes = 2 * int(l2_bytes) if self.cold else 0
        self._flush_buf = cp.empty(self.flush_bytes // 4, dtype=cp.float32) if self.cold else None
        self._flip = 0.0

    def flush(self) -> None:
        if self._flush_buf is not None:
            self._flip = 1.0 - self._flip
            self._flush_buf.fill(self._flip)

    def wait(self, event, what: str) -> None:
        """Wait for ``event``; a launch still running after launch_timeout_s is a hang."""
        timeout = float(self.policy["launch_timeout_s"])
        start = time.monotonic()
        pause = 0.0
        while not event.done:
            elapsed = time.monotonic() - start
            if elapsed > timeout:
                raise Hang(f"{what}: still running after {timeout:.0f} s (launch_timeout_s); hang?")
            pause = min(0.01, pause + 0.0001)
            time.sleep(pause)

    def run_once(self, fn: Callable[[], None], what: str) -> float:
        """Launch once, wait (with the hang check), return the event-timed milliseconds."""
        cp = self.cp
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record(self.stream)
        fn()
        end.record(self.stream)
        self.wait(end, what)
        return cp.cuda.get_elapsed_time(start, end)

    def _graph(self, fn, what):
        import torch

        g = torch.cuda.CUDAGraph()
        launches = int(self.policy["graph_launches"])
        with torch.cuda.graph(g, stream=self.torch_stream):
            for _ in range(launches):
                fn()
        self.wait_stream(what)
        return g.replay, launches

    def wait_stream(self, what: str) -> None:
        ev = self.cp.cuda.Event()
        ev.record(self.stream)
        self.wait(ev, what)

    def _quiet(self, samples: dict[str, list[float]]) -> bool:
        target = self.policy["target_rse"]
        return all(rse_of_median(np.asarray(s)) <= target for s in samples.values())

    def measure(self, fns: dict[str, Callable[[], None]], what: str) -> dict[str, Stats]:
        """Sample every function alternately until all meet the stopping rule or time is up."""
        p = self.policy
        per_launch = dict.fromkeys(fns, 1)
        runners = dict(fns)
        if p["method"] == "graph":
            for name, fn in fns.items():
                runners[name], per_launch[name] = self._graph(fn, f"{what} [{name}]")
        for name, fn in runners.items():
            for _ in range(int(p["warmup"])):
                fn()
            self.wait_stream(f"{what} [{name}] warm-up")
        samples: dict[str, list[float]] = {name: [] for name in fns}
        start = time.monotonic()
        n = 0
        while True:
            for name, fn in runners.items():
                self.flush()
                t = self.run_once(fn, f"{what} [{name}]")
                samples[name].append(t / per_launch[name])
            n += 1
            out_of_time = time.monotonic() - start > p["max_time_s"]
            if n >= p["max_samples"] or (n >= p["min_samples"] and out_of_time):
                break
            if n >= p["min_samples"] and (n < 50 or n % 10 == 0):
                # GPU time spent on all functions together: a fast baseline beside a slow
                # variant should not hold the measurement open on its own.
                spent = sum(sum(s) * per_launch[k] for k, s in samples.items()) / 1000.0
                if spent >= p["min_time_s"] and self._quiet(samples):
                    break
        converged = self._quiet(samples)
        return {name: Stats.of(s, converged) for name, s in samples.items()}
