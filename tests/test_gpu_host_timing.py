"""Host timing on a GPU (timing.method host): a 5-op eager chain of tiny elementwise ops
costs its caller more per call than the same chain replayed from a CUDA graph, both within
broad physical bounds, each batch lasting its minimum; the device table's launch-overhead
rows are per op and host time; the regimes study's bench rows and samples are host-timed,
with no events and no kernel time, and its graph variant beats its eager baseline at N=1000.

Reference on an H200 (docs/measuring.md): the 5-op eager chain 43.1 us a call, its graph's
replay 8.2 us, a single eager op 11.2 us. The bounds here are loose on purpose: other GPUs
and hosts differ, the order does not. Run on one GPU, one test at a time (-n 0): two tests
timing at once would share the host and the GPU.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from kernelbook import config, gpu, tables

ROOT = Path(__file__).resolve().parents[1]
INFO, WHY = gpu.detect()
# host timing in this process: the GPU (and its lock) to itself for each test
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.gpu_exclusive,
    pytest.mark.skipif(INFO is None, reason=f"no GPU here: {WHY}"),
]
SETTINGS = config.load_settings({"studies": []})
POLICY = {**SETTINGS["timing"], "method": "host", "cache": "warm", "max_time_s": 2.0}


def _streams():
    import cupy as cp
    import torch

    ts = torch.cuda.Stream()
    return cp.cuda.ExternalStream(ts.cuda_stream), ts


def test_eager_chain_costs_more_per_call_than_its_graph_replay():
    import torch

    from kernelbook.measure import device
    from kernelbook.measure.timing import Timer

    stream, ts = _streams()
    with stream, torch.cuda.stream(ts):
        timer = Timer(POLICY, 0, stream, ts)
        try:
            eager = device.overhead_chain(torch, 1000)
            graph = device.captured(torch, eager)
            x = torch.randn(1000, device="cuda").to(torch.bfloat16)  # a single op on it
            y = torch.empty_like(x)
            st = timer.measure(
                {
                    "eager": eager,
                    "graph": graph.replay,
                    "one": lambda: torch.mul(x, 2.5, out=y),
                },
                "5-op chain at N=1000",
            )
        finally:
            timer.close()
    e, g, o = st["eager"], st["graph"], st["one"]
    print(f"HOST eager {e.median * 1e3:.1f} us, graph {g.median * 1e3:.1f} us, one op "
          f"{o.median * 1e3:.1f} us a call; batches {e.batch_calls}/{g.batch_calls}/"
          f"{o.batch_calls}")  # fmt: skip
    for s in (e, g, o):
        assert s.method == "host" and s.note is None and s.n >= POLICY["min_samples"]
        assert s.events == () and math.isnan(s.event_median) and s.kernels_per_call is None
        # each batch lasted about its minimum: its one sync is spread over many calls
        assert s.batch_calls * s.median >= 0.8 * POLICY["host_batch_s"] * 1e3
    assert 0.5e-3 < g.median < e.median < 1.0  # ms: 0.5 us .. 1 ms a call
    assert e.median > 2 * g.median  # five dispatches against one replay
    assert o.median < e.median  # one op against five


def test_device_launch_overhead_is_per_op_host_time_and_refused_after_cupti():
    import torch

    from kernelbook.measure import cupti, device

    stream, ts = _streams()
    timing = {**SETTINGS["timing"], "max_time_s": 2.0}
    if cupti.attached():
        pytest.skip("this pytest process attached CUPTI in an earlier test")
    with stream, torch.cuda.stream(ts):
        rows = device.launch_overhead(timing, stream, ts)
    eager, graph = rows["launch_overhead_us"], rows["launch_overhead_graph_us"]
    print(f"HOST per op: eager {eager[0]:.2f} us, graph {graph[0]:.2f} us")
    assert 0.1 < graph[0] < eager[0] < 40
    assert graph[0] < 10
    for _, method in rows.values():
        assert device.HOST_WALL_TIME in method and "/ 5" in method
    if cupti.clock() is None:
        pytest.skip(f"CUPTI does not attach here: {cupti.reason()}")
    with pytest.raises(RuntimeError, match="before this process attaches CUPTI"):
        device.launch_overhead(timing, stream, ts)


def test_device_table_launch_overhead_agrees_with_a_regimes_eager_op(tmp_path):
    """The device table's eager op (its own job, as the pipeline runs it) and the regimes
    study's one-op eager variant at N = 1000 (a bench job) are the same kind of call: their
    host times agree to a factor well under 2. With CUPTI attached before the overheads were
    timed, the table read 20.7 us an op against 8 us (an H200 host)."""
    out = tmp_path / "device.parquet"
    cmd = [sys.executable, "-m", "kernelbook", "device", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = tables.read(out).set_index("quantity")
    per_op = float(table.loc["launch_overhead_us", "value"])
    row, _ = _bench(tmp_path, "01_scale_eager")
    one_op = float(row["median_ms"]) * 1e3
    print(f"device table {per_op:.2f} us an op; regimes 01_scale_eager {one_op:.2f} us a call")
    assert 0.6 < per_op / one_op < 1.6, (per_op, one_op)
    from kernelbook.report import prediction

    assert prediction.HOST_INCLUSIVE in table.loc["launch_overhead_us", "method"]
    assert prediction.HOST_INCLUSIVE in table.loc["launch_overhead_graph_us", "method"]


def _bench(tmp_path: Path, variant: str) -> tuple[pd.Series, pd.DataFrame]:
    out, samples = tmp_path / f"{variant}.parquet", tmp_path / f"{variant}-samples.parquet"
    cmd = [sys.executable, "-m", "kernelbook", "--settings", json.dumps({"studies": ["regimes"]})]
    cmd += ["bench", "regimes", variant, "--size", "1000"]
    cmd += ["--out", str(out), "--samples-out", str(samples)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    print(proc.stderr[-2000:])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = tables.read(out)
    assert len(rows) == 1
    return rows.iloc[0], tables.read(samples)


@pytest.mark.parametrize("variant", ["01_scale_eager", "04_chain_graph"])
def test_regimes_bench_rows_are_host_timed(tmp_path, variant):
    row, samples = _bench(tmp_path, variant)
    assert row["status"] == "ok" and row["correct"]
    assert row["timing_method"] == "host" and pd.isna(row["timing_note"])
    assert row["cache"] == "warm" and row["flush_bytes"] == 0 and not row["blocking_kernel"]
    assert pd.isna(row["event_median_ms"]) and pd.isna(row["baseline_event_median_ms"])
    assert pd.isna(row["kernel_sum_median_ms"]) and pd.isna(row["kernels_per_call"])
    assert row["batch_calls"] >= 1 and row["baseline_batch_calls"] >= 1
    assert 0.5e-3 < row["median_ms"] < 1.0  # 0.5 us .. 1 ms a call at N=1000
    assert set(samples["timing_method"]) == {"host"}
    assert set(samples["function"]) == {"variant", "baseline", "copy"}
    assert samples["event_ms"].isna().all() and samples["kernel_span_ms"].isna().all()
    v = samples[samples["function"] == "variant"]
    assert set(v["batch_calls"]) == {row["batch_calls"]} and len(v) == row["n_samples"]
    if variant == "04_chain_graph":
        # the baseline is the same four ops launched eagerly: the graph saves their dispatch
        assert row["baseline_median_ms"] > 1.5 * row["median_ms"], row["pct_of_baseline"]
    else:
        # the baseline is the variant's own call: a control near 100 %
        assert 70 < row["pct_of_baseline"] < 130
