"""Kernel time from CUPTI records, on the CPU: the span and sum arithmetic over synthetic
activity records, the collector fed through a stand-in for cupti-python's callbacks, the
fallback decision (and its words), the timer falling back to events as a whole measurement,
and the new columns of the tables."""

from __future__ import annotations

import contextlib
import enum
import sys
import types

import pytest

from kernelbook import tables
from kernelbook.measure import cupti, stopping
from kernelbook.measure.cupti import KernelTime, kernel_times
from kernelbook.measure.timing import QUEUE_LAUNCHES, Stats, Timer, TimingError

US = 1000  # ns


# -- the arithmetic --------------------------------------------------------------------
def test_one_kernel_span_and_sum_are_its_duration():
    t = kernel_times([(10, 1)], [(10, 5 * US, 12 * US)])
    assert t == {1: KernelTime(5 * US, 12 * US, 7 * US, 1)}
    assert t[1].span_ms == pytest.approx(0.007) and t[1].sum_ms == pytest.approx(0.007)


def test_split_k_two_kernels_back_to_back_span_covers_the_gap_sum_does_not():
    # cuBLAS BF16 at 1x4096x4096: the GEMM kernel, then its split-K reduction
    t = kernel_times([(20, 7), (21, 7)], [(20, 100 * US, 112 * US), (21, 113 * US, 116 * US)])
    k = t[7]
    assert (k.count, k.span_ns, k.busy_ns) == (2, 16 * US, 15 * US)


def test_overlapping_kernels_sum_exceeds_span():
    t = kernel_times([(1, 3), (2, 3)], [(1, 0 + US, 10 * US), (2, 2 * US, 8 * US)])
    assert t[3].span_ns == 9 * US and t[3].busy_ns == 15 * US


def test_kernels_outside_the_timed_call_are_left_out():
    # the blocking kernel (corr 5) and the L2 flush (corr 6) were launched untagged
    acts = [(5, 0, 90 * US), (6, 90 * US, 130 * US), (7, 131 * US, 140 * US)]
    t = kernel_times([(7, 42)], acts)
    assert list(t) == [42] and t[42].span_ns == 9 * US and t[42].count == 1


def test_records_without_timestamps_are_left_out():
    t = kernel_times([(1, 1), (2, 1)], [(1, 0, 0), (2, 3 * US, 4 * US)])
    assert t[1].count == 1 and t[1].span_ns == US


def test_samples_are_kept_apart_by_their_external_id():
    corr = [(1, 100), (2, 101), (3, 101), (4, 102)]
    acts = [(1, 0, 5), (2, 10, 20), (3, 25, 30), (4, 40, 41)]
    t = kernel_times(corr, acts)
    assert {k: (v.span_ns, v.busy_ns, v.count) for k, v in t.items()} == {
        100: (5, 5, 1),
        101: (20, 15, 2),
        102: (1, 1, 1),
    }


def test_an_api_call_that_launched_nothing_makes_no_sample():
    assert kernel_times([(1, 9)], []) == {}


# -- the collector, through a stand-in for cupti-python --------------------------------
class FakeCupti:
    """What Clock uses of cupti.cupti: enums, callbacks, push/pop, a forced flush that
    hands the queued records to the completion callback."""

    class ActivityKind(enum.IntEnum):
        KERNEL = 3
        CONCURRENT_KERNEL = 10
        MEMCPY = 1
        MEMSET = 2
        DRIVER = 4
        RUNTIME = 5
        EXTERNAL_CORRELATION = 39

    class ExternalCorrelationKind(enum.IntEnum):
        UNKNOWN = 1
        CUSTOM0 = 4

    class ActivityFlag(enum.IntEnum):
        FLUSH_FORCED = 1

    class cuptiError(Exception):  # noqa: N801 - cupti-python's name
        pass

    def __init__(self):
        self.enabled, self.stack, self.queue, self.flushes = [], [], [], []
        self.refuse = set()  # callback ids this libcupti does not know (besides the bounds)
        self.callbacks = None
        self.corr = 1000
        self.ever = set()  # every kind ever enabled
        self.api_off = []  # (driver or runtime, cbid, enable) per call

    def activity_register_callbacks(self, requested, completed):
        assert self.callbacks is None, "callbacks registered twice"
        self.callbacks = (requested, completed)

    def activity_enable(self, kind):
        self.enabled.append(kind)
        self.ever.add(kind)

    def activity_disable(self, kind):
        self.enabled.remove(kind)

    class driver_api_trace_cbid(enum.IntEnum):
        cuLaunchKernel = 307
        cuLaunchKernelEx = 652
        cuGraphLaunch = 514
        cuMemcpyDtoDAsync_v2 = 282
        cuMemsetD32Async = 190
        cuCtxGetCurrent = 303
        cuFuncGetAttribute = 102
        cuEventQuery = 127
        cuEventRecord = 128
        INVALID = 0  # the enum's bounds, as cupti-python has them: no call's id
        SIZE = 800
        FORCE_INT = 0x7FFFFFFF

    class runtime_api_trace_cbid(enum.IntEnum):
        cudaLaunchKernel_v7000 = 211
        _runtime_api_trace_cbid__cudaLaunchKernel_v13000 = 480
        cudaMemcpyAsync_v3020 = 41
        cudaGetDevice_v3020 = 17
        cudaStreamGetCaptureInfo_v10010 = 317
        cudaEventQuery_v3020 = 137
        INVALID = 0
        SIZE = 600
        FORCE_INT = 0x7FFFFFFF

    def _switch(self, api, table, cbid, enable):
        if not 0 < cbid < table.SIZE or cbid in self.refuse:  # as libcupti answers
            raise self.cuptiError("ERROR_INVALID_PARAMETER (1)")
        self.api_off.append((api, cbid, enable))

    def activity_enable_driver_api(self, cbid, enable):
        assert self.ActivityKind.DRIVER in self.enabled, "the kind resets it: enable it first"
        self._switch("driver", self.driver_api_trace_cbid, cbid, enable)

    def activity_enable_runtime_api(self, cbid, enable):
        assert self.ActivityKind.RUNTIME in self.enabled, "the kind resets it: enable it first"
        self._switch("runtime", self.runtime_api_trace_cbid, cbid, enable)

    def activity_push_external_correlation_id(self, kind, ext):
        self.stack.append((kind, ext))

    def activity_pop_external_correlation_id(self, kind):
        return self.stack.pop()[1]

    def activity_flush_all(self, flag):
        self.flushes.append(flag)
        batch, self.queue = self.queue, []
        self.callbacks[1](batch)

    # what the GPU and the driver would do: an API call (its correlation record when an
    # id is pushed) that launches ``kernels`` (start, end) pairs
    def launch(self, *kernels, kind=ActivityKind.CONCURRENT_KERNEL, deliver_kernels=True):
        self.corr += 1
        NS = types.SimpleNamespace
        on = set(self.enabled)
        if self.ActivityKind.EXTERNAL_CORRELATION in on:
            for k, ext in self.stack:
                self.queue.append(
                    NS(kind=self.ActivityKind.EXTERNAL_CORRELATION, external_kind=k,
                       external_id=ext, correlation_id=self.corr)
                )  # fmt: skip
        if self.ActivityKind.DRIVER in on:
            self.queue.append(NS(kind=self.ActivityKind.DRIVER, correlation_id=self.corr))
        if deliver_kernels and kind in on:
            for s, e in kernels:
                self.queue.append(NS(kind=kind, correlation_id=self.corr, start=s, end=e))
        return self.corr


def fake_clock(recording=True):
    """A clock on the stand-in, recording (as inside a measurement) unless told not to."""
    fake = FakeCupti()
    clk = cupti.Clock(fake)
    clk.start()
    if recording:
        fake.block = clk.recording()  # held: the block closes when the fake goes
        fake.block.__enter__()
    return clk, fake


def test_the_clock_records_concurrent_kernel_driver_runtime_and_correlation_while_recording():
    clk, fake = fake_clock(recording=False)
    K = FakeCupti.ActivityKind
    assert fake.enabled == [] and fake.callbacks[0]()[0] > 0  # attached, no record made yet
    assert {K.CONCURRENT_KERNEL, K.DRIVER} <= fake.ever  # tried at attach: a refusal shows
    with clk.recording():
        assert K.KERNEL not in fake.enabled  # KERNEL would serialise the kernels
        on = set(fake.enabled)
        assert {K.CONCURRENT_KERNEL, K.DRIVER, K.RUNTIME, K.EXTERNAL_CORRELATION} <= on
        with clk.recording():  # nested: the outer block's records go on
            pass
        assert set(fake.enabled) == on
    assert fake.enabled == []


def test_only_the_calls_that_put_work_on_the_gpu_make_records_while_recording():
    """Every API call's record is parsed in Python at a flush: a measurement turns off the
    records of every call but those that launch kernels or graphs, copy or set memory
    (after the kinds, which reset them), so CuPy's and torch's queries around a launch and
    the timer's own event polls make none."""
    clk, fake = fake_clock(recording=False)
    D, R = FakeCupti.driver_api_trace_cbid, FakeCupti.runtime_api_trace_cbid
    assert clk.api == "launches"
    with clk.recording():
        off = {(api, int(cbid)) for api, cbid, enable in fake.api_off if not enable}
    silent = {D.cuCtxGetCurrent, D.cuFuncGetAttribute, D.cuEventQuery, D.cuEventRecord}
    assert off == {("driver", int(c)) for c in silent} | {
        ("runtime", int(c))
        for c in (R.cudaGetDevice_v3020, R.cudaStreamGetCaptureInfo_v10010, R.cudaEventQuery_v3020)
    }
    assert all(not enable for _, _, enable in fake.api_off)
    n = len(fake.api_off)
    fake.api_off.clear()
    with clk.recording():  # again each time: enabling the kinds undid it
        assert len(fake.api_off) == n


def test_a_callback_id_libcupti_refuses_keeps_its_records_and_is_not_asked_again():
    """The enum's bounds are never switched (CUPTI refuses them); an id the host's libcupti
    does not know is left recording, named in api_refused, and not asked for again."""
    clk, fake = fake_clock(recording=False)
    D = FakeCupti.driver_api_trace_cbid
    fake.refuse = {int(D.cuFuncGetAttribute)}
    with clk.recording():
        off = {(api, int(cbid)) for api, cbid, enable in fake.api_off if not enable}
    assert ("driver", int(D.cuFuncGetAttribute)) not in off
    assert ("driver", int(D.cuCtxGetCurrent)) in off
    assert clk.api_refused == [int(D.cuFuncGetAttribute)]
    with clk.recording():  # asked once: the refused id is not tried again
        pass
    assert clk.api_refused == [int(D.cuFuncGetAttribute)]


def test_the_quiet_mode_silences_only_the_waits_on_events(monkeypatch):
    monkeypatch.setenv(cupti.API_ENV, "quiet")
    clk, fake = fake_clock(recording=False)
    D, R = FakeCupti.driver_api_trace_cbid, FakeCupti.runtime_api_trace_cbid
    with clk.recording():
        off = {(api, int(cbid)) for api, cbid, enable in fake.api_off if not enable}
    assert off == {("driver", D.cuEventQuery), ("driver", D.cuEventRecord)} | {
        ("runtime", R.cudaEventQuery_v3020)
    }


def test_a_bad_api_mode_is_an_error_naming_the_variable(fresh_clock):
    fresh_clock.setenv(cupti.API_ENV, "everything")
    for _ in range(2):  # each time it is asked, not once and then a silent fallback
        with pytest.raises(ValueError, match="KERNELBOOK_CUPTI_API='everything'"):
            cupti.clock()
    assert cupti.api_mode({}) == "launches" and cupti.api_mode({cupti.API_ENV: "Quiet"}) == "quiet"


def test_nothing_outside_a_measurement_is_recorded_and_its_leftovers_are_dropped():
    """Set-up and references run unrecorded (a CUPTI buffer that fills hands itself back on
    CUPTI's own thread, which waited on the GIL while a CUDA call held it: a hang)."""
    clk, fake = fake_clock(recording=False)
    for _ in range(100):
        fake.launch((0, US))  # the correctness check, inputs, references
    assert fake.queue == []
    with clk.recording():
        tag = clk.next_tag()
        clk.push(tag)
        fake.launch((5 * US, 9 * US))
        clk.pop()
        assert clk.collect()[tag].span_ns == 4 * US
        clk.push(tag2 := clk.next_tag())
        fake.launch((10 * US, 12 * US))  # recorded, never collected in the block
        clk.pop()
    assert fake.flushes[-1] == FakeCupti.ActivityFlag.FLUSH_FORCED
    with clk.recording():
        assert clk.collect() == {}  # the last block's records went with it
    assert tag2 != tag


def test_the_clock_attributes_kernels_to_the_tagged_call_only():
    clk, fake = fake_clock()
    fake.launch((0, 50 * US))  # the blocking kernel, untagged
    fake.launch((50 * US, 90 * US))  # the L2 flush
    tag = clk.next_tag()
    clk.push(tag)
    fake.launch((91 * US, 99 * US))  # cuBLAS split-K: two kernels, two launches
    fake.launch((99 * US, 101 * US))
    clk.pop()
    got = clk.collect()
    assert fake.flushes == [FakeCupti.ActivityFlag.FLUSH_FORCED]
    assert list(got) == [tag]
    assert (got[tag].span_ns, got[tag].busy_ns, got[tag].count) == (10 * US, 10 * US, 2)
    assert clk.records > 0


def test_a_copy_counts_as_the_calls_gpu_work():
    clk, fake = fake_clock()
    tag = clk.next_tag()
    clk.push(tag)
    fake.launch((5 * US, 25 * US), kind=FakeCupti.ActivityKind.MEMCPY)
    clk.pop()
    assert clk.collect()[tag].span_ns == 20 * US


def test_a_kernel_record_that_arrives_a_flush_late_still_finds_its_call():
    clk, fake = fake_clock()
    tag = clk.next_tag()
    clk.push(tag)
    corr = fake.launch((1 * US, 3 * US), deliver_kernels=False)
    clk.pop()
    assert clk.collect() == {}
    fake.queue.append(
        types.SimpleNamespace(
            kind=FakeCupti.ActivityKind.CONCURRENT_KERNEL, correlation_id=corr,
            start=1 * US, end=3 * US,
        )
    )  # fmt: skip
    assert clk.collect()[tag].span_ns == 2 * US


def test_tags_are_unique_in_the_process():
    clk, _ = fake_clock()
    tags = [clk.next_tag() for _ in range(5)]
    assert len(set(tags)) == 5


# -- the fallback decision -------------------------------------------------------------
def test_instrument_choice():
    assert cupti.instrument("events", True) == "cupti"
    assert cupti.instrument("graph", True) == "cupti"
    assert cupti.instrument("events", False) == "events"
    assert cupti.instrument("host", True) == "host"


class FakeStatus(enum.IntEnum):
    ERROR_INSUFFICIENT_PRIVILEGES = 35
    ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED = 39


class FakeCuptiError(Exception):
    def __init__(self, status):
        super().__init__(status)
        self.status = status


def test_why_not_names_the_cause():
    on = {}
    assert "KERNELBOOK_CUPTI=0" in cupti.why_not(None, {"KERNELBOOK_CUPTI": "0"})
    text = cupti.why_not(ImportError("No module named 'cupti'"), on)
    assert "cupti-python is not installed" in text and "events" in text
    text = cupti.why_not(FakeCuptiError(FakeStatus.ERROR_INSUFFICIENT_PRIVILEGES), on)
    assert "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES" in text
    assert "administrators" in text and text.endswith("events time every row")
    text = cupti.why_not(FakeCuptiError(FakeStatus.ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED), on)
    assert "another CUPTI client" in text
    assert "RuntimeError: boom" in cupti.why_not(RuntimeError("boom"), on)


@pytest.fixture
def fresh_clock(monkeypatch):
    monkeypatch.setattr(cupti, "_CLOCK", None)
    monkeypatch.setattr(cupti, "_REASON", None)
    monkeypatch.setattr(cupti, "_TRIED", False)
    return monkeypatch


def test_no_cupti_python_means_events_and_the_reason(fresh_clock):
    fresh_clock.delenv(cupti.ENV, raising=False)
    fresh_clock.setitem(sys.modules, "cupti", None)  # import cupti raises ImportError
    assert cupti.clock() is None
    assert "cupti-python is not installed" in cupti.reason()
    assert cupti.clock() is None  # asked once per process


def test_cupti_turned_off_by_the_environment(fresh_clock):
    fresh_clock.setenv(cupti.ENV, "0")
    assert cupti.clock() is None
    assert "KERNELBOOK_CUPTI=0" in cupti.reason()


def test_insufficient_privileges_means_events_and_the_reason(fresh_clock):
    fresh_clock.delenv(cupti.ENV, raising=False)

    class Refusing(FakeCupti):
        def activity_enable(self, kind):
            raise FakeCuptiError(FakeStatus.ERROR_INSUFFICIENT_PRIVILEGES)

    pkg = types.ModuleType("cupti")
    pkg.cupti = Refusing()
    fresh_clock.setitem(sys.modules, "cupti", pkg)
    assert cupti.clock() is None
    assert "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES" in cupti.reason()


# -- the timer's use of the clock, without a GPU ----------------------------------------
POLICY = {
    "method": "events", "cache": "warm", "warmup": 2, "min_samples": 10, "max_samples": 40,
    "target_rse": 0.005, "min_time_s": 0.0, "max_time_s": 5, "launch_timeout_s": 60,
}  # fmt: skip


def bare_timer(clock, sample, batch_ms=0.0, round_ms=1.0):
    """A Timer without CUDA: each queued call replaced by ``sample(name, tagged)``, which
    gives its event time and the kernels CUPTI is to deliver for it (None: none) at the
    clock's next collection, or None for a batch the blocking kernel timed out on. A batch's
    GPU span is ``round_ms`` a round; ``batch_ms`` is the policy's."""
    t = Timer.__new__(Timer)
    t.policy, t.rule, t.cold = POLICY, stopping.Rule.of(POLICY), False
    t.clock, t.note, t.dropped, t.block_timeout_ns = clock, None, 0, 2 * 10**9
    t.instrument = cupti.instrument("events", clock is not None)
    t.wait_stream = lambda what: None
    t.batch_ms, t.batch_span_ms, t.batches = batch_ms, 0.0, []
    delivered = {}

    def _take(items, flush):
        got, width = [], len({what for what, _, _ in items})
        t.batches.append(len(items))
        for what, _, tag in items:
            one = sample(what.rsplit("[", 1)[-1].rstrip("]"), tag is not None)
            if one is None:
                t.dropped += len(items)
                return None
            ev, kernels = one
            if tag is not None and kernels is not None:
                delivered[tag] = kernels
            got.append(ev)
        t.batch_span_ms = round_ms * len(items) / width
        return got

    t._take = _take
    if clock is not None:
        warm_up = clock.collect

        def collect():
            out = {**warm_up(), **delivered}
            delivered.clear()
            return out

        clock.collect = collect
    return t


class StubClock:
    """Answers the warm-up check: every pushed tag had GPU work (unless ``silent``)."""

    def __init__(self, silent=()):
        self.silent, self.tags, self.current = set(silent), iter(range(1, 10**6)), []
        self.pushed, self.on, self.blocks = [], False, 0

    def next_tag(self):
        return next(self.tags)

    def push(self, tag):
        self.pushed.append(tag)

    def pop(self):
        pass

    def collect(self):
        assert self.on, "collected outside a recording"
        return {t: KernelTime(0, 1, 1, 1) for t in self.pushed}

    @contextlib.contextmanager
    def recording(self):
        self.on = True
        self.blocks += 1
        try:
            yield self
        finally:
            self.on = False


def fns():
    return {"variant": lambda: None, "baseline": lambda: None}


def test_kernel_time_is_the_sample_and_events_ride_along():
    clock = StubClock()

    def sample(name, tagged):
        assert tagged and clock.on  # every sample inside the measurement's recording
        ev = 0.0098 if name == "variant" else 0.0120
        span = ev - 0.0025
        ns = round(span * 1e6)
        return ev, KernelTime(0, ns, ns, 2 if name == "baseline" else 1)

    st = bare_timer(clock, sample).measure(fns(), "t")
    assert clock.blocks == 1 and not clock.on  # one recording, closed with the measurement
    v, b = st["variant"], st["baseline"]
    assert v.method == b.method == "cupti" and v.note is None
    assert v.median == pytest.approx(0.0073) and v.event_median == pytest.approx(0.0098)
    assert b.kernels_per_call == 2 and b.kernel_sum_median == pytest.approx(0.0095)
    assert len(v.events) == len(v.samples) == v.n


def test_cuptis_buffers_are_flushed_once_a_batch_not_once_a_sample():
    """A forced flush costs the host more than a short sample's GPU work: the timer queues a
    batch of rounds, one sample of each function a round, then collects its kernels at once."""
    order = []

    def sample(name, tagged):
        order.append(name)
        return 0.01, KernelTime(0, 7000, 7000, 1)

    clock = StubClock()
    t = bare_timer(clock, sample, batch_ms=4.0, round_ms=1.0)
    collect = clock.collect

    def counted():
        order.append("collect")
        return collect()

    clock.collect = counted
    st = t.measure(fns(), "t")
    rounds = st["variant"].n
    assert st["baseline"].n == rounds and st["variant"].method == "cupti"
    loop = order[order.index("variant") :]
    # the first batch is one round; then 4 ms of GPU time at 1 ms a round: four rounds
    assert loop[:3] == ["variant", "baseline", "collect"]
    assert loop[3:12] == ["variant", "baseline"] * 4 + ["collect"]
    assert loop.count("collect") == len(t.batches) and t.batches[:3] == [2, 8, 8]


def test_a_batch_fills_batch_ms_within_the_launch_queue_and_max_samples():
    flip = iter(range(10**6))

    def sample(name, tagged):
        ns = 1000 + 100 * (next(flip) % 3)  # never quiet enough for the target below
        return 0.001, KernelTime(0, ns, ns, 3)  # three kernels a call

    # 0.01 ms a round would take 1000 rounds for 10 ms; two functions of 3 kernels, each
    # with 2 events: 10 launches a round, QUEUE_LAUNCHES // 10 rounds a batch
    t = bare_timer(StubClock(), sample, batch_ms=10.0, round_ms=0.01)
    t.rule = stopping.Rule.of({**POLICY, "max_samples": 1000, "target_rse": 1e-9})
    st = t.measure(fns(), "t")
    assert t.batches[0] == 2 and max(t.batches) == 2 * (QUEUE_LAUNCHES // 10)
    assert st["variant"].n == 1000  # the cap, not one sample past it
    assert st["variant"].stop_reason == "max_samples"


def test_without_kernel_counts_a_batch_is_one_round():
    t = bare_timer(None, lambda name, tagged: (0.01, None), batch_ms=10.0, round_ms=0.01)
    st = t.measure(fns(), "t")
    assert st["variant"].method == "events" and set(t.batches) == {2}


def test_a_batch_the_blocking_kernel_timed_out_on_is_dropped_whole():
    calls = {"n": 0}

    def sample(name, tagged):
        calls["n"] += 1
        if calls["n"] == 3:  # the second batch's first call: the host took too long
            return None
        return 0.01, KernelTime(0, 7000, 7000, 1)

    t = bare_timer(StubClock(), sample, batch_ms=4.0, round_ms=1.0)
    st = t.measure(fns(), "t")
    assert t.dropped == 8  # the whole second batch of four rounds
    assert t.batches[:3] == [2, 8, 2]  # then one round again, to learn the rate anew
    assert st["variant"].n == st["baseline"].n


def test_a_function_that_always_outlasts_the_blocking_kernel_is_an_error():
    t = bare_timer(StubClock(), lambda name, tagged: None)
    with pytest.raises(TimingError, match="block_timeout_s"):
        t.measure(fns(), "t")


def test_no_kernel_records_at_all_means_the_whole_measurement_is_events():
    def sample(name, tagged):
        return 0.01, None  # CUPTI attached but never delivers a kernel

    st = bare_timer(StubClock(), sample).measure(fns(), "t")
    assert {s.method for s in st.values()} == {"events"}
    assert all("CUPTI recorded no kernel" in s.note for s in st.values())
    assert st["variant"].median == pytest.approx(0.01)
    assert st["variant"].kernel_sums == ()


def test_an_occasional_lost_record_drops_that_sample_only():
    calls = {"n": 0}

    def sample(name, tagged):
        calls["n"] += 1
        if calls["n"] == 3:
            return 0.01, None
        return 0.01, KernelTime(0, 7000, 7000, 1)

    t = bare_timer(StubClock(), sample)
    st = t.measure(fns(), "t")
    assert {s.method for s in st.values()} == {"cupti"} and t.dropped == 1
    assert st["variant"].median == pytest.approx(0.007)


def test_without_a_clock_events_time_and_the_reason_is_kept():
    t = bare_timer(None, lambda name, tagged: (0.01, None))
    t.note = "cupti-python is not installed (...): events time every row"
    st = t.measure(fns(), "t")
    assert st["variant"].method == "events" and st["variant"].note == t.note


def test_stats_default_events_are_the_samples():
    s = Stats.of([1.0, 2.0, 3.0], True, "converged")
    assert s.events == s.samples and s.method == "events" and s.kernels_per_call is None


# -- the tables ---------------------------------------------------------------------------
NEW_MEASUREMENT_COLUMNS = [
    "timing_note", "graph_launches", "event_median_ms", "kernel_sum_median_ms",
    "kernels_per_call", "baseline_event_median_ms", "baseline_kernel_sum_median_ms",
    "baseline_kernels_per_call",
]  # fmt: skip


def test_the_schema_documents_the_new_columns():
    defs = tables.definitions()
    cols = defs["measurements"]["columns"]
    for c in [*NEW_MEASUREMENT_COLUMNS, "timing_method", "median_ms"]:
        assert cols[c].get("description"), c
    for c in NEW_MEASUREMENT_COLUMNS:
        assert cols[c].get("nullable"), c  # tables written before read as empty
    assert "cupti" in cols["timing_method"]["description"]
    scols = defs["samples"]["columns"]
    for c in ("timing_method", "event_ms", "kernel_span_ms", "kernel_sum_ms", "kernels"):
        assert scols[c].get("nullable") and scols[c].get("description"), c


def test_samples_table_takes_kernel_and_event_columns_and_old_rows(tmp_path):
    row = {"study": "sgemm", "variant": "03", "size": "128x128x128", "function": "baseline",
           "sample": 0, "ms": 0.0073, "timing_method": "cupti", "event_ms": 0.0098,
           "kernel_span_ms": 0.0073, "kernel_sum_ms": 0.0071, "kernels": 2,
           "sm_clock_mhz": 1980.0, "gpu_uuid": "GPU-x"}  # fmt: skip
    old = {k: row[k] for k in ("study", "variant", "size", "function", "sample", "ms",
                               "sm_clock_mhz", "gpu_uuid")}  # fmt: skip
    tables.write([row, {**old, "sample": 1}], tmp_path / "s.parquet", "samples")
    df = tables.read(tmp_path / "s.parquet")
    assert df["kernels"].iloc[0] == 2 and df["kernels"].isna().iloc[1]
    assert df["event_ms"].iloc[0] == pytest.approx(0.0098)
