"""Kernel time as the GPU records it: CUPTI activity records, through NVIDIA's cupti-python.

CUDA events, even behind the blocking kernel, hold a constant of about 2.5 us on an H200
(the GPU's own work between an event and the kernel): a third of a 10 us kernel. CUPTI's
kernel records carry the GPU's own start and end timestamps of each kernel, what Nsight
Compute's gpu__time_duration reads.

How the kernels of one sample are found: the timer pushes a CUPTI *external correlation id*
(kind CUSTOM0, one id per sample) just before it calls the function it times and pops it
right after. CUPTI then writes, for every driver or runtime API call made in between, an
EXTERNAL_CORRELATION record that ties the call's correlation id to the sample's id; every
kernel, copy or memset a call launched carries the call's correlation id. So the kernels of
a sample are exactly those launched inside the timed call (one kernel, cuBLAS's split-K
pair, a torch variant's several, a graph's), and the L2 flush and the blocking kernel,
launched outside it, are not among them. The span from the first kernel's start to the last
kernel's end is the sample; the sum of the kernels' durations is kept beside it.

Pitfalls this module handles: CONCURRENT_KERNEL (not KERNEL, which serialises kernels), and
DRIVER as well as RUNTIME records (cuBLAS and CuPy launch through the driver API; without
the API records there are no external correlation records); the buffer callbacks are
registered once per process (``clock()`` is a process-wide singleton); one CUPTI client at a
time (no torch.profiler inside a bench job: CUPTI then fails to attach and the rows say
so); records are made only while a measurement runs (``Clock.recording``), and the activity
buffers are flushed (forced) once a batch of samples, after its synchronisations.

Where CUPTI cannot attach (cupti-python not installed, a host that restricts profiling to
administrators, another profiler already attached, ``KERNELBOOK_CUPTI=0``), ``clock()`` is
None and ``reason()`` says why: the timer falls back to events, and every row records its
instrument and the reason (nothing silently mixed).

The arithmetic (``kernel_times``) and the fallback decision (``instrument``, ``why_not``)
are pure functions, tested without a GPU.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# The instruments a row's headline number can come from.
CUPTI, EVENTS, HOST = "cupti", "events", "host"

ENV = "KERNELBOOK_CUPTI"  # "0" turns CUPTI off (events then time every row, and say why)
# CUPTI's activity buffers. A full buffer is handed back on CUPTI's own worker thread, whose
# Python callback then waits for the GIL; a CUDA call made under the GIL meanwhile (CuPy's
# random set-up) can wait on CUPTI in turn, and the process hangs: on the H200, 16 KiB
# buffers hung a bench job's correctness check every time. So records are made only while a
# measurement runs (Clock.recording) and a buffer holds far more than one batch of samples
# (at most timing.QUEUE_LAUNCHES launches) between two collections (~50 to ~70 records a
# sample at most: tools/explore/timer_sample_cost.py), so that only a forced flush, on the
# timer's own thread, ever hands one back. The size
# itself costs little: through Timer.measure (4 functions a round) 16 KiB, 512 KiB and
# 4 MiB measured 1.00, 1.16 and 0.97 ms a sample of a CuPy kernel, 1.40, 1.49 and 1.56 ms
# of a torch op (H200, b452985); the records themselves are most of a flush's cost.
BUFFER_BYTES = 512 * 1024
# API calls that only wait on or stamp the stream (the timer's polls of its end event, its
# events): their records are never needed (no GPU work hangs on them) and were most of a
# sample's ~50 to ~70 records, each one parsed in Python at the flush. Recorded no more,
# per callback id, once the kinds are on (enabling a kind resets its per-call settings).
QUIET_DRIVER = (
    "cuEventQuery", "cuEventSynchronize", "cuEventElapsedTime", "cuEventElapsedTime_v2",
    "cuEventRecord", "cuEventRecord_ptsz", "cuEventRecordWithFlags",
    "cuEventRecordWithFlags_ptsz", "cuStreamQuery", "cuStreamQuery_ptsz",
)  # fmt: skip
QUIET_RUNTIME = (
    "cudaEventQuery_v3020", "cudaEventSynchronize_v3020", "cudaEventElapsedTime_v3020",
    "cudaEventElapsedTime_v12080", "cudaEventElapsedTime_v2_v12080", "cudaEventRecord_v3020",
    "cudaEventRecord_ptsz_v7000", "cudaEventRecordWithFlags_v11010",
    "cudaEventRecordWithFlags_ptsz_v11010", "cudaStreamQuery_v3020", "cudaStreamQuery_ptsz_v7000",
)  # fmt: skip
# Which API calls make records while a measurement runs ($KERNELBOOK_CUPTI_API):
# "launches" (the default): only the calls that put work on the GPU, a callback name with
# Launch, Memcpy or Memset in it (kernels, graphs, copies, memsets), whose records tie each
# kernel to the timed call; no other call (CuPy's context and attribute queries around a
# launch, torch's device and stream queries, the timer's polls of its events) makes one.
# "quiet": every call but those of QUIET_DRIVER and QUIET_RUNTIME (the rule of fab5edd).
API_ENV = "KERNELBOOK_CUPTI_API"
API_MODES = ("launches", "quiet")
WORK_API = re.compile(r"Launch|Memcpy|Memset")
# An activity record whose API call's correlation record has not been seen is kept this
# many collections (it may arrive in the next flush), then dropped (a kernel nobody tagged:
# the blocking kernel, the flush, input set-up).
_KEEP_UNMATCHED = 2


@dataclass(frozen=True)
class KernelTime:
    """The GPU work of one timed call: its kernels' (and copies') timestamps, in ns."""

    start_ns: int  # the first kernel's start
    end_ns: int  # the last kernel's end
    busy_ns: int  # the sum of the kernels' durations (overlaps counted twice)
    count: int  # kernels, copies and memsets

    @property
    def span_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def span_ms(self) -> float:
        return self.span_ns / 1e6

    @property
    def sum_ms(self) -> float:
        return self.busy_ns / 1e6


def kernel_times(
    correlations: Iterable[tuple[int, int]], activities: Iterable[tuple[int, int, int]]
) -> dict[int, KernelTime]:
    """{external id: KernelTime} from CUPTI records.

    ``correlations``: (correlation id of an API call, external id pushed around it), from
    the EXTERNAL_CORRELATION records. ``activities``: (correlation id, start ns, end ns) of
    each kernel, memcpy and memset record. An activity whose correlation id no external id
    claims is not part of any sample (the blocking kernel, the flush) and is left out; a
    record without timestamps (0, 0: CUPTI could not collect them) is left out too."""
    owner = dict(correlations)
    acc: dict[int, list[int]] = {}
    for corr, start, end in activities:
        ext = owner.get(corr)
        if ext is None or (start == 0 and end == 0) or end < start:
            continue
        a = acc.get(ext)
        if a is None:
            acc[ext] = [start, end, end - start, 1]
        else:
            a[0] = min(a[0], start)
            a[1] = max(a[1], end)
            a[2] += end - start
            a[3] += 1
    return {ext: KernelTime(*a) for ext, a in acc.items()}


def instrument(method: str, clock_ok: bool) -> str:
    """The instrument of a measurement's headline number: host clocks where the timing
    method is ``host`` (overhead is the subject), CUPTI kernel time where CUPTI attached,
    else the blocking-kernel events."""
    if method == HOST:
        return HOST
    return CUPTI if clock_ok else EVENTS


_HINTS = {
    "ERROR_INSUFFICIENT_PRIVILEGES": "this host restricts GPU profiling to administrators "
    "(NVreg_RestrictProfilingToAdminUsers)",
    "ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES": "the virtual GPU does not allow profiling",
    "ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED": "another CUPTI client (a profiler) is "
    "attached to this process",
    "ERROR_NOT_INITIALIZED": "CUPTI could not be initialised",
    "ERROR_NOT_COMPATIBLE": "cupti-python does not match the driver's CUDA version",
    "ERROR_CUPTI_ERROR_NOT_SUPPORTED": "not supported on this device",
    "ERROR_NOT_SUPPORTED": "not supported on this device",
}


def why_not(error: BaseException | str | None, env: Mapping[str, str] | None = None) -> str:
    """Why CUPTI does not time this process, in words, for the rows' ``timing_note``:
    from the environment (``KERNELBOOK_CUPTI=0``), the import error, or the CUPTI error
    (a cupti.cuptiError's status, named)."""
    env = os.environ if env is None else env
    if turned_off(env):
        return f"CUPTI turned off ({ENV}={env[ENV]}): events time every row"
    if error is None:
        return "CUPTI not attached: events time every row"
    if isinstance(error, str):
        return error
    if isinstance(error, ImportError):
        return (
            f"cupti-python is not installed ({error}): events time every row "
            "(pip install cupti-python matching the CUDA runtime)"
        )
    name = _status_name(error)
    if name:
        hint = _HINTS.get(name)
        return (
            f"CUPTI could not attach: CUPTI_{name}"
            + (f" ({hint})" if hint else "")
            + (": events time every row")
        )
    return f"CUPTI could not attach: {type(error).__name__}: {error}: events time every row"


def _status_name(error: BaseException) -> str | None:
    """'ERROR_INSUFFICIENT_PRIVILEGES' for a cuptiError of that status, else None."""
    status = getattr(error, "status", None)
    if status is None:
        return None
    name = getattr(status, "name", None)
    if name:
        return str(name)
    try:
        from cupti import cupti

        return cupti.Result(int(status)).name
    except Exception:  # noqa: BLE001 - an unknown code, or no cupti: say the number
        return f"status {status}"


class Clock:
    """The process's CUPTI activity collector: tags timed calls, collects their kernels."""

    def __init__(self, cupti_module):
        c = cupti_module
        self._c = c
        self._lock = threading.Lock()
        self._corr: list[tuple[int, int]] = []
        self._acts: list[tuple[int, int, int]] = []
        self._owner: dict[int, int] = {}  # correlation id -> external id, not yet claimed
        self._unmatched: list[tuple[int, tuple[int, int, int]]] = []
        self._kind_ext = int(c.ActivityKind.EXTERNAL_CORRELATION)
        self._custom = int(c.ExternalCorrelationKind.CUSTOM0)
        self._work = {
            int(c.ActivityKind.CONCURRENT_KERNEL),
            int(c.ActivityKind.KERNEL),
            int(c.ActivityKind.MEMCPY),
            int(c.ActivityKind.MEMSET),
        }
        self._forced = int(c.ActivityFlag.FLUSH_FORCED)
        self.records = 0  # every record CUPTI delivered (API records included)
        self.version = _version()
        self._tags = itertools.count(1)
        self._kinds = [getattr(c.ActivityKind, k) for k in self.KINDS]
        self._recording = False
        self.api = api_mode()
        self._api_off = self._silenced(self.api)
        self._error = getattr(c, "cuptiError", RuntimeError)
        self.api_refused: list[int] = []  # callback ids this libcupti would not switch off

    # -- CUPTI's buffer callbacks (CUPTI's thread, or the flushing one) ------------------
    def _requested(self):
        return BUFFER_BYTES, 0

    def _completed(self, activities):
        corr, acts = [], []
        ext_kind, custom, work = self._kind_ext, self._custom, self._work
        n = 0
        for a in activities:
            n += 1
            k = int(a.kind)
            if k in work:
                acts.append((int(a.correlation_id), int(a.start), int(a.end)))
            elif k == ext_kind and int(a.external_kind) == custom:
                corr.append((int(a.correlation_id), int(a.external_id)))
        with self._lock:
            self._corr += corr
            self._acts += acts
            self.records += n

    KINDS = (
        "CONCURRENT_KERNEL",
        "MEMCPY",
        "MEMSET",
        "DRIVER",
        "RUNTIME",
        "EXTERNAL_CORRELATION",
    )

    def start(self) -> None:
        """Attach: register the buffer callbacks, and enable each kind once and disable it
        again, so that a host that refuses (profiling restricted to administrators, another
        client) says so here. No record is made until ``recording``."""
        self._c.activity_register_callbacks(self._requested, self._completed)
        for kind in self._kinds:
            self._c.activity_enable(kind)
        for kind in self._kinds:
            self._c.activity_disable(kind)

    @contextlib.contextmanager
    def recording(self):
        """Records made inside the block only (a measurement: its warm-up and its samples):
        the kinds enabled on entry, disabled on exit, and what arrived after the last
        ``collect`` dropped. Set-up and reference code run unrecorded, so no buffer fills
        behind the timer's back (see BUFFER_BYTES). Nested blocks share the outer one."""
        if self._recording:
            yield self
            return
        self._recording = True
        try:
            for kind in self._kinds:
                self._c.activity_enable(kind)
            self._quiet()
            yield self
        finally:
            self._recording = False
            try:
                for kind in self._kinds:
                    self._c.activity_disable(kind)
                self._c.activity_flush_all(self._forced)
            finally:
                with self._lock:
                    self._corr, self._acts = [], []
                self._unmatched = []

    def _silenced(self, mode: str) -> list[tuple[object, list[int]]]:
        """(switch, callback ids) of the API calls that make no record in ``mode`` (see
        API_ENV), each table's ids once (names differ by version; those this cupti-python
        names). Looked up once: every recording turns them off again."""
        c = self._c
        out = []
        for table, quiet, enable in (
            ("driver_api_trace_cbid", QUIET_DRIVER, "activity_enable_driver_api"),
            ("runtime_api_trace_cbid", QUIET_RUNTIME, "activity_enable_runtime_api"),
        ):
            ids, switch = getattr(c, table, None), getattr(c, enable, None)
            if ids is None or switch is None:
                continue
            if mode == "quiet":
                off = [int(getattr(ids, n)) for n in quiet if getattr(ids, n, None) is not None]
            else:  # launches: all but the calls that put work on the GPU
                off = [int(v) for n, v in ids.__members__.items() if not WORK_API.search(n)]
            # INVALID (0), SIZE and FORCE_INT are the enum's bounds, no call's id: CUPTI
            # refuses them (ERROR_INVALID_PARAMETER)
            size = getattr(ids, "SIZE", None)
            off = [v for v in off if v > 0 and (size is None or v < int(size))]
            out.append((switch, sorted(set(off))))
        return out

    def _quiet(self) -> None:
        """No records for the API calls ``_silenced`` names (after the kinds are enabled:
        enabling a kind resets its per-call settings). An id this libcupti refuses (one
        newer than it, say) keeps its records, which only costs their parsing; it is
        dropped from the list, and ``api_refused`` names it."""
        for i, (switch, ids) in enumerate(self._api_off):
            refused = []
            for cbid in ids:
                try:
                    switch(cbid, 0)
                except self._error:
                    refused.append(cbid)
            if refused:
                self._api_off[i] = (switch, [c for c in ids if c not in refused])
                self.api_refused += refused

    # -- the timer's side ---------------------------------------------------------------
    def next_tag(self) -> int:
        """A new external id, unique in the process (every Timer shares the clock)."""
        return next(self._tags)

    def push(self, tag: int) -> None:
        self._c.activity_push_external_correlation_id(self._custom, int(tag))

    def pop(self) -> None:
        self._c.activity_pop_external_correlation_id(self._custom)

    def collect(self) -> dict[int, KernelTime]:
        """Flush CUPTI's buffers (after the sample's synchronisation) and return the GPU
        work of every tagged call whose records arrived, by tag."""
        self._c.activity_flush_all(self._forced)
        with self._lock:
            corr, self._corr = self._corr, []
            acts, self._acts = self._acts, []
        self._owner.update(corr)
        pending = [a for _, a in self._unmatched] + acts
        ages = [age for age, _ in self._unmatched] + [0] * len(acts)
        owner = self._owner
        claimed = [a for a in pending if a[0] in owner]
        self._unmatched = [
            (age + 1, a)
            for age, a in zip(ages, pending, strict=True)
            if a[0] not in owner and age + 1 < _KEEP_UNMATCHED
        ]
        out = kernel_times(((a[0], owner[a[0]]) for a in claimed), claimed)
        if len(owner) > 100_000:  # API calls that launched nothing: forget the old ones
            keep = sorted(owner)[-10_000:]
            self._owner = {k: owner[k] for k in keep}
        return out


_CLOCK: Clock | None = None
_REASON: str | None = None
_TRIED = False


def clock() -> Clock | None:
    """The process's CUPTI clock, attached on first use (callbacks registered once); None
    where CUPTI cannot time here (``reason()`` says why)."""
    global _CLOCK, _REASON, _TRIED
    if _TRIED:
        return _CLOCK
    if turned_off():
        _TRIED = True
        _REASON = why_not(None)
        return None
    api_mode()  # a bad $KERNELBOOK_CUPTI_API is an error naming it, each time asked
    _TRIED = True
    try:
        from cupti import cupti as c
    except Exception as e:  # noqa: BLE001 - ImportError, or a missing libcupti
        _REASON = why_not(e if isinstance(e, ImportError) else ImportError(str(e)))
        return None
    try:
        clk = Clock(c)
        clk.start()
    except Exception as e:  # noqa: BLE001 - cuptiError (privileges, another subscriber)
        _REASON = why_not(e)
        return None
    _CLOCK = clk
    return clk


def turned_off(env: Mapping[str, str] | None = None) -> bool:
    """Whether $KERNELBOOK_CUPTI turns CUPTI off (0, no, off, false)."""
    env = os.environ if env is None else env
    return env.get(ENV, "1").strip().lower() in ("0", "no", "off", "false")


def api_mode(env: Mapping[str, str] | None = None) -> str:
    """$KERNELBOOK_CUPTI_API (see API_ENV): 'launches' unless set; another value is an error
    naming the variable."""
    env = os.environ if env is None else env
    mode = env.get(API_ENV, "launches").strip().lower() or "launches"
    if mode not in API_MODES:
        raise ValueError(f"{API_ENV}={env[API_ENV]!r}: one of {', '.join(API_MODES)}")
    return mode


def attached() -> bool:
    """Whether this process has attached CUPTI (its callbacks then stay on every API call)."""
    return _CLOCK is not None


def reason() -> str | None:
    """Why ``clock()`` is None (None while it is not, or before it was asked for)."""
    return _REASON


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("cupti-python")
    except Exception:  # noqa: BLE001 - metadata missing in a bare --target install
        return "unknown"
