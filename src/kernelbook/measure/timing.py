"""The measurement loop, written once: warm-up, L2 flush, a blocking kernel, interleaving,
and the stopping rule (kernelbook.measure.stopping).

No host time is counted in a sample. Before each batch of samples a *blocking kernel* (one
thread) is queued that spins on a flag in pinned, device-mapped host memory; behind it, for
each sample, the L2 flush, the start event, the launch(es) being timed and the end event are
queued; then the host releases the flag. The GPU runs every flush, event and launch back to
back, so the interval between a sample's events never holds a gap while the host was still
launching (the technique of nvbench's blocking kernel). Without it, a flush that ends before
the host has launched the kernel charges the host's launch time to the kernel: a torch call
costs more host time than a CuPy launch, so a torch baseline would be charged more than the
variant.

A batch holds whole rounds (one sample of each function), as many as fill ``batch_ms`` of
GPU time (within QUEUE_LAUNCHES), and is waited for, and its CUPTI records collected, once
(one sample a hold cost the host 0.78 ms a sample of a CuPy kernel, 1.27 ms of a torch op,
on the H200 at fab5edd: tools/explore/timer_sample_cost.py; docs/measuring.md has what the
batches left). Each sample keeps its own flush before it and its own events and records.

With ``cache: cold`` the flush *reads* a buffer twice the size of the device's L2 before
each sample: every line a previous launch left (dirty ones are written back during the
flush, outside the timed region) is evicted, and L2 is left holding clean lines of the
flush buffer, as after an invalidation. ``warm`` does not flush.

What a sample is: where CUPTI attaches (kernelbook.measure.cupti), the GPU's own record of
the kernels launched inside the timed call, from the first one's start to the last one's end
(the sum of their durations is kept beside it); the events around the call are kept on every
sample as the second instrument. Where CUPTI cannot attach, the events are the sample, and
every row says which instrument made it (``Stats.method``, ``Stats.note``).

With ``method: host`` (studies whose subject is overhead) none of that applies: a sample is
the host's wall time of a batch of back-to-back calls ending with one synchronisation, over
its calls (kernelbook.measure.host); no blocking kernel, no flush, no CUPTI, no events.

The functions of a measurement (variant, baseline, copy) are sampled alternately, so all
see the same clocks and temperature, and "% of baseline" is a ratio measured side by side.
The blocking kernel gives up after ``block_timeout_s``; a batch whose queueing took longer
(a function that synchronises with the host cannot be covered) is dropped, and a function
that never fits is an error rather than a silently biased number.
"""

from __future__ import annotations

import ctypes
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from kernelbook.launch.kernel import device_sm_count, wait_event
from kernelbook.measure import cupti, host, stopping
from kernelbook.measure.stopping import rse_of_median

__all__ = ["TimingError", "Stats", "Timer", "rse_of_median"]


class TimingError(RuntimeError):
    """A function cannot be timed honestly (it synchronises with the host)."""


class _NoKernels(RuntimeError):
    """CUPTI attached but recorded no GPU work for a timed call: the measurement is made
    again with events (the message becomes the rows' timing_note)."""


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
    stop_reason: str = ""
    samples: tuple[float, ...] = field(default=(), repr=False)  # ms, in sampling order
    times: tuple[float, ...] = field(default=(), repr=False)  # host monotonic s at each end
    method: str = cupti.EVENTS  # the instrument of ``samples``: cupti, events or host
    note: str | None = None  # why CUPTI did not make ``samples``, where it did not
    # the events around each sample (ms), on every sample of cupti and events (none: host)
    events: tuple[float, ...] = field(default=(), repr=False)
    # CUPTI: each sample's sum of kernel durations (ms) and its number of kernels
    kernel_sums: tuple[float, ...] = field(default=(), repr=False)
    kernel_counts: tuple[float, ...] = field(default=(), repr=False)
    batch_calls: int | None = None  # host: the calls of each sample's batch

    @property
    def rel_std(self) -> float:
        return self.std / self.mean if self.mean else math.nan

    @property
    def event_median(self) -> float:
        return float(np.median(self.events)) if self.events else math.nan

    @property
    def kernel_sum_median(self) -> float | None:
        return float(np.median(self.kernel_sums)) if self.kernel_sums else None

    @property
    def kernels_per_call(self) -> int | None:
        return int(round(float(np.median(self.kernel_counts)))) if self.kernel_counts else None

    @classmethod
    def of(
        cls,
        samples,
        converged: bool,
        stop_reason: str = "",
        times=(),
        *,
        method: str = cupti.EVENTS,
        note: str | None = None,
        events=None,
        kernel_sums=(),
        kernel_counts=(),
        batch_calls: int | None = None,
    ) -> Stats:
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
            stop_reason=stop_reason,
            samples=tuple(float(x) for x in a),
            times=tuple(float(t) for t in times),
            method=method,
            note=note,
            events=tuple(float(x) for x in (a if events is None else events)),
            kernel_sums=tuple(float(x) for x in kernel_sums),
            kernel_counts=tuple(float(x) for x in kernel_counts),
            batch_calls=None if batch_calls is None else int(batch_calls),
        )


# The blocking kernel and the read-only L2 flush, compiled once per process (NVRTC).
_DEVICE_SOURCE = r"""
extern "C" __global__ void kb_hold(volatile int* flags, unsigned long long timeout_ns) {
    // flags[0]: released by the host; flags[1]: set here when the host never released it.
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    while (flags[0] == 0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (t - t0 > timeout_ns) {
            flags[1] = 1;
            break;
        }
        __nanosleep(500);
    }
    __threadfence_system();
}

extern "C" __global__ void kb_flush(const int4* __restrict__ buf, unsigned long long n,
                                    int key, int* sink) {
    // Reads every line of buf; the store is never taken (key is chosen so), but the
    // compiler cannot know, so the loads stay.
    int acc = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         i < n; i += (unsigned long long)gridDim.x * blockDim.x) {
        int4 v = buf[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == key) sink[0] = acc;
}
"""

_MODULE = None

# A batch of samples: the GPU time it aims at (config timing.batch_ms), and the most launches
# (kernels, flushes, events) queued behind one blocking kernel. CUDA queues about a thousand
# launches a stream before a launch blocks the host, and a host blocked behind the spinning
# blocking kernel would wait for its timeout.
BATCH_MS = 10.0
QUEUE_LAUNCHES = 256


def _device_module():
    global _MODULE
    if _MODULE is None:
        import cupy as cp

        _MODULE = cp.RawModule(code=_DEVICE_SOURCE, options=("--std=c++17",))
    return _MODULE


class _HostFlags:
    """Two ints in pinned, device-mapped host memory (UVA: one address for both sides)."""

    def __init__(self):
        import cupy as cp

        rt = cp.cuda.runtime
        mapped = getattr(rt, "hostAllocMapped", 2)
        portable = getattr(rt, "hostAllocPortable", 1)
        self.ptr = rt.hostAlloc(8, mapped | portable)
        self._rt = rt
        self.release = ctypes.c_int.from_address(self.ptr)
        self.timed_out = ctypes.c_int.from_address(self.ptr + 4)

    def arm(self):
        self.release.value = 0
        self.timed_out.value = 0

    def close(self):
        if self.ptr:
            self._rt.freeHost(self.ptr)
            self.ptr = 0


class Timer:
    """Times launch functions on one stream according to a timing policy (config).

    ``kernel_clock=False`` times with events only, never CUPTI. ``method: host`` times
    with the host clock over batches of back-to-back calls (kernelbook.measure.host)."""

    def __init__(
        self, policy: dict, l2_bytes: int, cupy_stream, torch_stream=None, kernel_clock=True
    ):
        import cupy as cp

        self.cp = cp
        self.policy = policy
        self.rule = stopping.Rule.of(policy)
        self.stream = cupy_stream
        self.torch_stream = torch_stream
        method = policy.get("method", cupti.EVENTS)
        self.host = method == cupti.HOST
        self.cold = policy["cache"] == "cold"
        if self.host and self.cold:  # the config refuses it too, naming the study
            raise TimingError(
                "timing.method 'host' needs timing.cache 'warm' (no L2 flush between "
                "back-to-back calls)"
            )
        # host time is the subject: nothing holds the calls back
        self.blocking = bool(policy.get("blocking_kernel", True)) and not self.host
        self.block_timeout_ns = int(float(policy.get("block_timeout_s", 2.0)) * 1e9)
        # Reading twice the L2 evicts everything a previous launch left there.
        self.flush_bytes = 2 * int(l2_bytes) if self.cold else 0
        self._flush_buf = (
            cp.zeros(self.flush_bytes // 16 * 4, dtype=cp.int32) if self.cold else None
        )
        self._sink = cp.zeros(1, dtype=cp.int32)
        self._flags = _HostFlags() if self.blocking else None
        mod = _device_module() if (self.cold or self.blocking) else None
        self._hold = mod.get_function("kb_hold") if self.blocking else None
        self._flush_kernel = mod.get_function("kb_flush") if self.cold else None
        sms = device_sm_count()
        self._flush_grid = (sms * 4,)
        self._event_pairs: list = []  # (start, end) events of each call of a batch
        # the GPU time a batch of rounds queued behind one blocking kernel aims at
        self.batch_ms = float(policy.get("batch_ms", BATCH_MS))
        self.batch_span_ms = 0.0  # the last batch's first start to its last end (events)
        self._done = cp.cuda.Event(disable_timing=True)  # the end of a host-timed batch
        self.dropped = 0  # samples dropped: the host outlasted the blocking kernel, or
        # CUPTI recorded no kernel for the sample
        self.clock = cupti.clock() if kernel_clock and not self.host else None
        # the planned instrument, and why not CUPTI (a measurement may still fall back);
        # host rows are host-timed by choice: no reason to give
        self.instrument = cupti.instrument(method, self.clock is not None)
        self.note = (
            cupti.reason() if kernel_clock and self.clock is None and not self.host else None
        )

    def close(self):
        """Free the host flags once the stream is idle. After a crash the context is dead:
        the flags are left to the process's exit rather than raising over the crash."""
        if self._flags is None:
            return
        try:
            self.wait_stream("timer close")
            self._flags.close()
        except Exception:  # DeviceFault, Hang, a CUDA error: the error that matters is raised
            pass
        self._flags = None

    def flush(self) -> None:
        if self._flush_buf is not None:
            n = np.uint64(self._flush_buf.size // 4)
            with self.stream:
                self._flush_kernel(
                    self._flush_grid, (512,), (self._flush_buf, n, np.int32(0x5A5A5A5A), self._sink)
                )

    def wait(self, event, what: str, spin: bool = False) -> None:
        """Wait for ``event`` (launch.kernel.wait_event: a Hang after launch_timeout_s, a
        DeviceFault at once on an error status). ``spin``: poll without sleeping (host
        timing: the moment the event completes ends the batch's time, so no sleep may add
        to it)."""
        limit = float(self.policy["launch_timeout_s"])
        wait_event(event, limit, what, "launch_timeout_s", spin=spin)

    def _pairs(self, n: int) -> list:
        """``n`` pairs of timing events, kept for the next batch (re-recorded once waited for)."""
        while len(self._event_pairs) < n:
            self._event_pairs.append((self.cp.cuda.Event(), self.cp.cuda.Event()))
        return self._event_pairs[:n]

    def _take(self, items, flush: bool) -> list[float] | None:
        """One batch: each ``(what, fn, tag)`` of ``items`` queued behind one blocking kernel,
        each with the flush before it and a pair of events around it, then the blocking
        kernel released and each end waited for in order, so that a hang or a fault names
        the call it is in. Returns each call's event milliseconds; None when queueing took
        the host longer than the blocking kernel waits (the whole batch is dropped). With a
        ``tag``, what ``fn`` launches (not the flush, not the hold) carries it in CUPTI's
        records, which the caller collects."""
        flags = self._flags
        pairs = self._pairs(len(items))
        if flags is not None:
            flags.arm()
            with self.stream:
                self._hold((1,), (1,), (np.uint64(flags.ptr), np.uint64(self.block_timeout_ns)))
        try:
            for (_, fn, tag), (start, end) in zip(items, pairs, strict=True):
                if flush:
                    self.flush()
                start.record(self.stream)
                if tag is not None:
                    self.clock.push(tag)
                    try:
                        fn()
                    finally:
                        self.clock.pop()
                else:
                    fn()
                end.record(self.stream)
        finally:  # a call that raised leaves no kernel spinning until its timeout
            if flags is not None:
                flags.release.value = 1
        for (what, _, _), (_, end) in zip(items, pairs, strict=True):
            self.wait(end, what)
        if flags is not None and flags.timed_out.value:
            self.dropped += len(items)
            return None
        elapsed = self.cp.cuda.get_elapsed_time
        self.batch_span_ms = elapsed(pairs[0][0], pairs[-1][1])
        return [elapsed(start, end) for start, end in pairs]

    def _launch(
        self, fn: Callable[[], None], what: str, flush: bool, tag: int | None = None
    ) -> float | None:
        """One timed launch of ``fn`` alone (a batch of one): its event milliseconds, or None
        when the host took longer than the blocking kernel waits."""
        got = self._take([(what, fn, tag)], flush)
        return None if got is None else got[0]

    def _rounds(self, rounds: int, width: int, counts, tagged: bool, samples) -> int:
        """The rounds of the next batch: as many as fill ``batch_ms`` of GPU time at what the
        last batch's rounds took (its first start to its last end, flushes included), within
        the launches CUDA queues without blocking the host (QUEUE_LAUNCHES: each sample's
        flush, events and kernels, CUPTI's count; one round a batch where there is no count)
        and never past ``max_samples``."""
        if self.batch_ms <= 0 or not tagged:
            return 1
        per_round = max(self.batch_span_ms / rounds, 1e-3)
        kernels = sum(float(np.median(c[-8:])) if c else 1.0 for c in counts.values())
        launches = kernels + width * (3 if self.cold else 2)
        want = min(int(self.batch_ms / per_round), int(QUEUE_LAUNCHES / launches))
        left = self.rule.max_samples - min(len(s) for s in samples.values())
        return max(1, min(want, left))

    def run_once(self, fn: Callable[[], None], what: str) -> float:
        """Launch once (no flush), wait (with the hang and fault checks), return the
        event-timed milliseconds."""
        t = self._launch(fn, what, flush=False)
        return t if t is not None else math.nan

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

    def _batch(self, fn: Callable[[], None], calls: int, what: str) -> float:
        """Host seconds of ``calls`` back-to-back calls of ``fn`` and one synchronisation at
        the end (an event, waited for with the hang and fault checks, spinning)."""
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        self._done.record(self.stream)
        self.wait(self._done, what, spin=True)
        return time.perf_counter() - t0

    def _measure_host(self, fns: dict[str, Callable[[], None]], what: str) -> dict[str, Stats]:
        """Host time: each function warmed up, its batch calibrated, then one batch of each
        in turn until the stopping rule says stop (kernelbook.measure.host)."""
        p = self.policy
        for name, fn in fns.items():
            for _ in range(int(p["warmup"])):
                fn()
            self.wait_stream(f"{what} [{name}] warm-up")
        batches = {
            name: (lambda k, fn=fn, w=f"{what} [{name}]": self._batch(fn, k, w))
            for name, fn in fns.items()
        }
        series, verdict = host.measure(
            batches,
            self.rule,
            float(p.get("host_batch_s", host.MIN_BATCH_S)),
            int(p.get("host_batch_max", host.MAX_CALLS)),
        )
        return {
            name: Stats.of(
                s.samples,
                verdict.converged,
                verdict.reason,
                s.times,
                method=cupti.HOST,
                events=(),
                batch_calls=s.calls,
            )
            for name, s in series.items()
        }

    def measure(self, fns: dict[str, Callable[[], None]], what: str) -> dict[str, Stats]:
        """Sample every function alternately until the stopping rule says stop: on CUPTI
        kernel time where CUPTI attached, else (and, whole, where CUPTI records no kernel
        for a function) on the events, with the reason in every Stats' note; with
        ``method: host``, on the host clock over batches of back-to-back calls."""
        if self.instrument == cupti.HOST:
            return self._measure_host(fns, what)
        if self.clock is None:
            return self._measure(fns, what, False, self.note)
        try:
            with self.clock.recording():
                return self._measure(fns, what, True, None)
        except _NoKernels as e:
            return self._measure(fns, what, False, str(e))

    def _measure(self, fns, what: str, tagged: bool, note: str | None) -> dict[str, Stats]:
        p = self.policy
        per_launch = dict.fromkeys(fns, 1)
        runners = dict(fns)
        if p["method"] == "graph":
            for name, fn in fns.items():
                runners[name], per_launch[name] = self._graph(fn, f"{what} [{name}]")
        for name, fn in runners.items():
            tag = self.clock.next_tag() if tagged else None
            if tag is not None:
                self.clock.push(tag)
            try:
                for _ in range(int(p["warmup"])):
                    fn()
            finally:
                if tag is not None:
                    self.clock.pop()
            self.wait_stream(f"{what} [{name}] warm-up")
            if tag is not None and tag not in self.clock.collect():
                raise _NoKernels(f"CUPTI recorded no GPU work for {what} [{name}]: events time it")
        samples: dict[str, list[float]] = {name: [] for name in fns}
        times: dict[str, list[float]] = {name: [] for name in fns}
        events: dict[str, list[float]] = {name: [] for name in fns}
        sums: dict[str, list[float]] = {name: [] for name in fns}
        counts: dict[str, list[float]] = {name: [] for name in fns}
        lost = dict.fromkeys(fns, 0)  # samples CUPTI recorded no kernel for
        start = time.monotonic()
        misses = 0
        rounds = 1  # the first batch is one round: it says what a round costs the GPU
        while True:
            # A batch: ``rounds`` rounds of one sample of each function, all queued behind
            # one blocking kernel and waited for at once; CUPTI's buffers are flushed once a
            # batch. A sample's own synchronisation, flush and matching cost the host more
            # than a short sample's GPU work (tools/explore/timer_sample_cost.py); behind the
            # blocking kernel the GPU still runs each flush and call back to back.
            items, names = [], []
            for _ in range(rounds):
                for name, fn in runners.items():
                    tag = self.clock.next_tag() if tagged else None
                    items.append((f"{what} [{name}]", fn, tag))
                    names.append(name)
            got = self._take(items, self.cold)
            end = time.monotonic()
            if got is None:
                misses += 1
                if misses > 5 and misses > min(len(x) for x in samples.values()):
                    raise TimingError(
                        f"{what}: queueing one batch of samples took the host longer than "
                        f"block_timeout_s ({self.block_timeout_ns / 1e9:g} s) {misses} "
                        "times; a function that synchronises with the host cannot be "
                        "timed behind the blocking kernel"
                    )
                rounds = 1
                continue
            found = self.clock.collect() if tagged else {}
            for name, (_, _, tag), ev in zip(names, items, got, strict=True):
                kernels = found.get(tag) if tagged else None
                k = per_launch[name]
                if tagged:
                    if kernels is None:
                        self.dropped += 1
                        lost[name] += 1
                        if lost[name] > 5 and lost[name] > len(samples[name]):
                            raise _NoKernels(
                                f"CUPTI recorded no kernel for {lost[name]} samples of "
                                f"{what} [{name}]: events time it"
                            )
                        continue
                    samples[name].append(kernels.span_ms / k)
                    sums[name].append(kernels.sum_ms / k)
                    counts[name].append(kernels.count / k)
                else:
                    samples[name].append(ev / k)
                events[name].append(ev / k)
                times[name].append(end)
            verdict = stopping.decide(self.rule, samples, time.monotonic() - start)
            if verdict.stop:
                break
            rounds = self._rounds(rounds, len(runners), counts, tagged, samples)
        method = cupti.CUPTI if tagged else cupti.EVENTS
        return {
            name: Stats.of(
                s,
                verdict.converged,
                verdict.reason,
                times[name],
                method=method,
                note=note,
                events=events[name],
                kernel_sums=sums[name],
                kernel_counts=counts[name],
            )
            for name, s in samples.items()
        }
