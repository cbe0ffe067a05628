"""Host timing (timing.method host), without a GPU: the batch-size rule, the per-call
arithmetic, the calibration and the alternation under the stopping rule on synthetic
batches, the config's refusal of a cold cache naming the study, and the columns a host row
and its samples get (no events, no kernel time). The GPU side is tests/test_gpu_host_timing.py.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from kernelbook import config as cfg
from kernelbook import tables
from kernelbook.config import ConfigError
from kernelbook.measure import cupti, device, host, sizes, stopping
from kernelbook.measure.timing import Stats, Timer, TimingError
from kernelbook.report import quality

REPO = Path(__file__).resolve().parents[1]
MS, US = 1e-3, 1e-6


# -- the batch-size rule -------------------------------------------------------------------
def test_a_batch_that_lasts_the_minimum_keeps_its_size():
    assert host.batch_calls(120, 1.0 * MS, 1.0 * MS) == 120
    assert host.batch_calls(1, 4.0 * MS, 1.0 * MS) == 1  # one call of a long op is enough


def test_a_short_batch_is_aimed_past_the_minimum_from_the_rate_seen():
    # one call of 20 us: 1 ms x 1.25 margin at 20 us a call is 62.5, so 63 calls
    assert host.batch_calls(1, 20 * US, 1.0 * MS) == 63
    assert host.batch_calls(63, 63 * 8 * US, 1.0 * MS) == math.ceil(63 * 1.25e-3 / (63 * 8e-6))


def test_a_short_batch_at_least_doubles():
    # 0.9 ms: the rate says 139 calls, but growth is at least twofold
    assert host.batch_calls(100, 0.9 * MS, 1.0 * MS) == 200
    assert host.batch_calls(7, 0.0, 1.0 * MS) == 14  # a batch the clock did not see


def test_a_batch_never_grows_past_the_cap_and_the_cap_is_final():
    assert host.batch_calls(600, 10 * US, 1.0 * MS, max_calls=1000) == 1000
    assert host.batch_calls(1000, 10 * US, 1.0 * MS, max_calls=1000) == 1000


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((0, 1 * MS), "at least one call"),
        ((5, -1.0), "cannot last -1.0 s"),
        ((5, math.nan), "cannot last nan s"),
        ((5, 1 * MS, 0.0), "host_batch_s must be positive"),
        ((5, 1 * MS, 1 * MS, 0), "host_batch_max at least 1"),
    ],
)
def test_bad_batch_input_is_named(args, match):
    with pytest.raises(ValueError, match=match):
        host.batch_calls(*args)


def test_per_call_is_the_batch_over_its_calls():
    assert host.per_call_ms(4.31 * MS, 100) == pytest.approx(0.0431)
    assert host.per_call_ms(0.0, 3) == 0.0
    with pytest.raises(ValueError, match="at least one call"):
        host.per_call_ms(1.0, 0)
    with pytest.raises(ValueError, match="cannot last"):
        host.per_call_ms(-1.0, 1)


# -- calibration and sampling on synthetic batches ------------------------------------------
class Synthetic:
    """A function whose batch of k calls lasts ``latency + k * per_call`` seconds (the one
    synchronisation and the first call's latency, then the steady state), on a simulated
    clock that the batches advance."""

    def __init__(self, clock, per_call_s, latency_s=20 * US, hiccups=()):
        self.clock, self.per_call, self.latency = clock, per_call_s, latency_s
        self.hiccups = list(hiccups)  # extra seconds of the first batches
        self.calls: list[int] = []

    def __call__(self, k: int) -> float:
        s = self.latency + k * self.per_call + (self.hiccups.pop(0) if self.hiccups else 0.0)
        self.calls.append(k)
        self.clock.now += s
        return s


class SimClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_calibration_grows_the_batch_until_it_lasts_the_minimum():
    run = Synthetic(SimClock(), 8.6 * US)
    k = host.calibrate(run, 1.0 * MS)
    assert run(k) >= 1.0 * MS
    assert k <= 2 * 1.25 * MS / (8.6 * US)  # not far past it
    # every size was run twice, from one call, and grew at each step
    sizes = run.calls[:-1]
    assert sizes[0] == sizes[1] == 1 and sizes[::2] == sizes[1::2]
    assert all(b > a for a, b in zip(sizes[::2], sizes[2::2], strict=False))


def test_one_hiccup_does_not_stop_the_growth_early():
    # the first one-call batch stalls for 5 ms: its twin is quick, so growth goes on
    run = Synthetic(SimClock(), 8.6 * US, hiccups=[5 * MS])
    assert host.calibrate(run, 1.0 * MS) > 100


def rule(**kw):
    base = dict(min_samples=10, max_samples=200, max_noise=0.005, min_time_s=0.05, timeout_s=5)
    return stopping.Rule(**{**base, **kw})


def test_functions_are_calibrated_apart_and_sampled_alternately():
    clock = SimClock()
    eager, graph = Synthetic(clock, 8.6 * US), Synthetic(clock, 1.64 * US)
    order = []

    def tagged(name, run):
        def batch(k):
            order.append(name)
            return run(k)

        return batch

    batches = {"variant": tagged("variant", graph), "baseline": tagged("baseline", eager)}
    series, verdict = host.measure(batches, rule(), 1.0 * MS, clock=clock)
    v, b = series["variant"], series["baseline"]
    assert v.calls > b.calls  # the cheaper call needs more of them a batch
    for s, per_call in ((v, 1.64e-3), (b, 8.6e-3)):
        # the one synchronisation (20 us) spread over a batch of >= 1 ms: under 2 %
        assert all(x == pytest.approx(per_call, rel=0.02) for x in s.samples)
        assert s.calls * min(s.samples) >= 1.0  # ms: each batch lasted the minimum
        assert len(s.times) == len(s.samples) and list(s.times) == sorted(s.times)
    sampling = order[len(order) - 2 * len(v.samples) :]
    assert sampling == ["variant", "baseline"] * len(v.samples)
    assert verdict.stop and verdict.converged and verdict.reason == "converged"
    assert clock.now >= 0.05  # min_time_s, on the simulated clock


def test_the_stopping_rule_still_caps_the_samples():
    clock = SimClock()
    series, verdict = host.measure(
        {"variant": Synthetic(clock, 5 * US)}, rule(min_time_s=100, max_samples=12), clock=clock
    )
    assert verdict.reason == "max_samples" and len(series["variant"].samples) == 12


# -- the timer's host path, with its batch replaced by arithmetic ---------------------------
POLICY = {
    "method": "host", "cache": "warm", "warmup": 3, "min_samples": 10, "max_samples": 40,
    "target_rse": 0.005, "min_time_s": 0.0, "max_time_s": 5, "launch_timeout_s": 60,
    "host_batch_s": 0.001, "host_batch_max": 10**6,
}  # fmt: skip


def host_timer(per_call_s: dict[str, float]) -> Timer:
    """A Timer without CUDA whose batch of k calls of a function lasts k x its cost."""
    t = Timer.__new__(Timer)
    t.policy, t.rule, t.instrument = POLICY, stopping.Rule.of(POLICY), cupti.HOST
    t.wait_stream = lambda what: None
    t._batch = lambda fn, k, what: k * per_call_s[what.rsplit("[", 1)[-1].rstrip("]")]
    return t


def test_host_stats_have_no_events_and_no_kernel_time():
    warm = []
    fns = {"variant": lambda: warm.append("v"), "baseline": lambda: warm.append("b")}
    st = host_timer({"variant": 8.2e-6, "baseline": 43.1e-6})._measure_host(fns, "chain")
    v, b = st["variant"], st["baseline"]
    assert warm == ["v"] * 3 + ["b"] * 3  # each warmed up, then only batches
    assert v.method == b.method == cupti.HOST and v.note is None
    assert v.median == pytest.approx(0.0082) and b.median == pytest.approx(0.0431)
    assert v.events == () and math.isnan(v.event_median)
    assert v.kernel_sum_median is None and v.kernels_per_call is None
    assert v.batch_calls * v.median >= 1.0 and b.batch_calls < v.batch_calls


def test_host_rows_and_samples_record_host_and_leave_the_gpu_columns_empty(tmp_path):
    v = Stats.of([0.0082, 0.0083], True, "converged", (1.0, 2.0), method="host", events=(),
                 batch_calls=150)  # fmt: skip
    bl = Stats.of([0.0431, 0.0433], True, "converged", (1.5, 2.5), method="host", events=(),
                  batch_calls=30)  # fmt: skip
    cols = sizes.instrument_columns(v, bl)
    assert cols["timing_method"] == "host" and cols["timing_note"] is None
    assert math.isnan(cols["event_median_ms"]) and math.isnan(cols["baseline_event_median_ms"])
    assert cols["kernel_sum_median_ms"] is None and cols["kernels_per_call"] is None
    assert cols["batch_calls"] == 150 and cols["baseline_batch_calls"] == 30
    samples = sizes.sample_instruments(v)
    assert [s["ms"] for s in samples] == [0.0082, 0.0083]
    for s in samples:
        assert s["timing_method"] == "host" and s["batch_calls"] == 150
        assert s["event_ms"] is None and s["kernel_span_ms"] is None and s["kernels"] is None
    rows = [
        {"study": "regimes", "variant": "04_chain_graph", "size": "1000", "function": "variant",
         "sample": i, **s, "sm_clock_mhz": 1980.0, "gpu_uuid": "GPU-x"}
        for i, s in enumerate(samples)
    ]  # fmt: skip
    tables.write(rows, tmp_path / "s.parquet", "samples")
    df = tables.read(tmp_path / "s.parquet")
    assert list(df["batch_calls"]) == [150, 150] and df["event_ms"].isna().all()


def test_the_schema_documents_the_host_columns():
    defs = tables.definitions()
    m, s = defs["measurements"]["columns"], defs["samples"]["columns"]
    for cols, name in ((m, "batch_calls"), (m, "baseline_batch_calls"), (s, "batch_calls")):
        assert cols[name].get("nullable") and "host" in cols[name]["description"], name
    assert "host" in m["timing_method"]["description"]
    assert "empty for host" in m["event_median_ms"]["description"]
    assert "host" in s["ms"]["description"] and "host" in s["timing_method"]["description"]


def test_the_page_and_the_device_table_say_host_time_not_kernel_time():
    import pandas as pd

    text = quality.timer_description(pd.DataFrame({"timing_method": ["host", "host"]}))
    assert text.startswith("host wall time per call over batches of back-to-back calls")
    assert "no kernel time and no events" in text and "CUPTI" not in text
    st = Stats.of([0.0082], True, "converged", method="host", events=(), batch_calls=150)
    assert device.instrument_text(st) == (
        "host wall-time median per call, 150 back-to-back calls a batch"
    )


def test_the_timer_refuses_a_cold_cache_for_host_time():
    with pytest.raises(TimingError, match="'host' needs timing.cache 'warm'"):
        Timer({**POLICY, "cache": "cold"}, 0, None)


# -- the config ------------------------------------------------------------------------------
STUDY = """\
problem: regimes
dtype: bfloat16
sizes:
  - N: [1000]
baseline: eager
timing: {TIMING}
variants:
  - id: 01_scale_eager
    kind: torch
    source: kernels/regimes/01_scale_eager.py
    entry: run
"""


@pytest.fixture
def root(tmp_path) -> Path:
    shutil.copytree(REPO / "config", tmp_path / "config")
    shutil.copytree(REPO / "kernels", tmp_path / "kernels")
    return tmp_path


def load(root: Path, timing: str) -> cfg.Study:
    (root / "config" / "studies" / "overhead.yaml").write_text(STUDY.replace("{TIMING}", timing))
    return cfg.load_project({"studies": ["overhead"]}, root=root).study("overhead")


def test_host_with_a_cold_cache_is_an_error_naming_the_study(root):
    with pytest.raises(ConfigError) as e:
        load(root, "{method: host, cache: cold}")
    msg = str(e.value)
    assert msg.startswith("config/studies/overhead.yaml: timing.method 'host' needs")
    assert "cache: warm" in msg


def test_host_with_a_warm_cache_loads_with_the_batch_defaults(root):
    t = load(root, "{method: host, cache: warm, host_batch_s: 0.002}").timing
    assert t["method"] == "host" and t["host_batch_s"] == 0.002
    assert t["host_batch_max"] == host.MAX_CALLS
    assert load(root, "{method: host, cache: warm}").timing["host_batch_s"] == host.MIN_BATCH_S
