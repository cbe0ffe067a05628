"""Host time, for studies whose subject is overhead (``timing.method: host``): the
steady-state wall time of one call over back-to-back calls.

A sample is one *batch*: K calls of the function back to back, with no synchronisation
between them, then one event recorded on the stream and waited for (the timer's hang and
fault checks apply to it); the host's monotonic clock (``time.perf_counter``) from before the
first call to the moment the event is seen complete, divided by K. Where the host is the
bottleneck (a tiny PyTorch op: its dispatch outlasts its kernel) the GPU finishes each call
soon after it is queued and a batch is K times the host's cost of a call; where the GPU is
the bottleneck the host runs ahead until the launch queue is full and a batch is K times the
GPU's time. Either way the one synchronisation, the first call's latency and the clock's
resolution are spread over the K calls.

K is chosen per function after its warm-up (``calibrate``): from one call, grown (at least
doubled, else aimed at the minimum with a margin, from the rate seen) until a batch lasts at
least ``host_batch_s`` (1 ms by default), and at most ``host_batch_max`` calls; each
calibration batch is run twice and the quicker counts, so one hiccup does not stop the
growth early. K is then fixed for all of the function's samples. The functions of a
measurement (variant, baseline, copy) are sampled alternately, one batch each in turn, and
kernelbook.measure.stopping decides when to stop, as for the other instruments.

What host time leaves out and keeps: no L2 flush between calls (the config refuses
``cache: cold`` with ``method: host``: the calls of a batch find their data where the last
one left it), no blocking kernel (host time is the subject), no CUPTI (the instrument is the
host clock, so a host row's event and kernel columns are empty). Anything else the process
does meanwhile (the NVML sampler's thread, the allocator, the interpreter) is in the number,
as it is in the caller's; the median keeps an occasional stall out of the headline.

The arithmetic (``batch_calls``, ``per_call_ms``), the calibration and the alternation under
the stopping rule (``measure``) are pure of CUDA: kernelbook.measure.timing.Timer hands
them a function that runs one batch and returns its seconds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kernelbook.measure import stopping

MIN_BATCH_S = 1e-3  # the default timing.host_batch_s
MAX_CALLS = 1_000_000  # the default timing.host_batch_max
MARGIN = 1.25  # a grown batch aims this far past the minimum

# runs ``calls`` back-to-back calls and one synchronisation; returns the host seconds
Batch = Callable[[int], float]


def batch_calls(
    calls: int, batch_s: float, min_batch_s: float = MIN_BATCH_S, max_calls: int = MAX_CALLS
) -> int:
    """The calls of the next calibration batch, after a batch of ``calls`` lasted
    ``batch_s`` seconds: ``calls`` again once it lasted ``min_batch_s`` (or reached
    ``max_calls``: the answer is final then), else enough to last ``min_batch_s`` x MARGIN at
    the rate seen, and at least twice as many, at most ``max_calls``."""
    if int(calls) < 1:
        raise ValueError(f"a batch has at least one call, not {calls}")
    if not batch_s >= 0:  # negative or NaN
        raise ValueError(f"a batch cannot last {batch_s} s")
    if min_batch_s <= 0 or int(max_calls) < 1:
        raise ValueError(
            f"host_batch_s must be positive and host_batch_max at least 1, not "
            f"{min_batch_s} and {max_calls}"
        )
    calls, max_calls = int(calls), int(max_calls)
    if batch_s >= min_batch_s or calls >= max_calls:
        return calls
    aim = math.ceil(calls * min_batch_s * MARGIN / batch_s) if batch_s > 0 else 0
    return min(max_calls, max(2 * calls, aim))


def per_call_ms(batch_s: float, calls: int) -> float:
    """Milliseconds a call: a batch's host seconds over its calls."""
    if int(calls) < 1:
        raise ValueError(f"a batch has at least one call, not {calls}")
    if not batch_s >= 0:
        raise ValueError(f"a batch cannot last {batch_s} s")
    return batch_s * 1e3 / int(calls)


def calibrate(run: Batch, min_batch_s: float = MIN_BATCH_S, max_calls: int = MAX_CALLS) -> int:
    """The calls a batch of ``run`` needs to last ``min_batch_s`` (``batch_calls``, from one
    call; each batch size is run twice and the quicker counts)."""
    calls = 1
    while True:
        seconds = min(run(calls), run(calls))
        grown = batch_calls(calls, seconds, min_batch_s, max_calls)
        if grown == calls:
            return calls
        calls = grown


@dataclass(frozen=True)
class Series:
    """One function's host-timed samples: ms a call, the clock after each, calls a batch."""

    calls: int
    samples: tuple[float, ...]
    times: tuple[float, ...]


def measure(
    batches: Mapping[str, Batch],
    rule: stopping.Rule,
    min_batch_s: float = MIN_BATCH_S,
    max_calls: int = MAX_CALLS,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[dict[str, Series], stopping.Verdict]:
    """Calibrate each function's batch, then sample the functions' batches in turn until
    the stopping rule says stop: ({name: Series}, the rule's verdict). ``clock`` stamps
    each sample (the NVML sampler's readings are matched to the stamps)."""
    calls = {name: calibrate(run, min_batch_s, max_calls) for name, run in batches.items()}
    samples: dict[str, list[float]] = {name: [] for name in batches}
    times: dict[str, list[float]] = {name: [] for name in batches}
    start = clock()
    while True:
        for name, run in batches.items():
            samples[name].append(per_call_ms(run(calls[name]), calls[name]))
            times[name].append(clock())
        verdict = stopping.decide(rule, samples, clock() - start)
        if verdict.stop:
            break
    series = {
        name: Series(calls[name], tuple(samples[name]), tuple(times[name])) for name in batches
    }
    return series, verdict
