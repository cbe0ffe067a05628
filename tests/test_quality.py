"""The page's measurement-quality parts on the published H200 tables (no GPU)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from kernelbook import tables
from kernelbook.report import pipeline_cost, plot, quality

ROOT = Path(__file__).resolve().parents[1]
SGEMM = ROOT / "worklogs" / "nvidia-h200" / "sgemm" / "data"


@pytest.fixture(scope="module")
def meas():
    return tables.read(SGEMM / "measurements.parquet")


def test_baseline_spread_is_max_over_min_per_size(meas):
    t = quality.baseline_spread(meas).set_index("size")
    ok = meas[meas["status"] == "ok"]
    at = ok[ok["size"] == "4096x4096x4096"]["baseline_median_ms"]
    row = t.loc["4096x4096x4096"]
    assert row["jobs"] == len(at)
    assert row["spread_pct"] == pytest.approx(100 * (at.max() / at.min() - 1))
    assert list(t.index)[0] == "128x128x128"  # ordered by size


def test_spread_section_flags_sizes_over_the_bound():
    m = pd.DataFrame(
        {
            "status": ["ok"] * 4,
            "size": ["a", "a", "b", "b"],
            "flop": [1.0, 1.0, 2.0, 2.0],
            "bytes_min": [1.0, 1.0, 2.0, 2.0],
            "baseline_median_ms": [1.0, 1.05, 2.0, 2.01],
        }
    )
    text = "\n".join(quality.spread_section(m, "cuBLAS", lambda x, d=4: f"{x:.{d}g}"))
    assert "| a | 2 |" in text and "**5**" in text  # 5 % over the 2 % bound, in bold
    assert "| b | 2 |" in text and "**0.5**" not in text
    assert "Over the bound at a (50 us between the extremes)." in text


def test_spread_compares_only_jobs_that_time_the_same_baseline_call():
    """The regimes study's variants have different baselines (eager scale, chain, sum...):
    each call's spread is over its own jobs, and the page names the call."""
    m = pd.DataFrame(
        {
            "status": ["ok"] * 5,
            "size": ["1000"] * 5,
            "flop": [1.0] * 5,
            "bytes_min": [1.0] * 5,
            "baseline_mode": ["eager scale"] + ["eager chain"] * 3 + ["eager sum"],
            "baseline_median_ms": [0.008, 0.039, 0.0555, 0.041, 0.0104],
        }
    )
    t = quality.baseline_spread(m).set_index("baseline")
    assert t.loc["eager chain", "jobs"] == 3
    assert t.loc["eager chain", "spread_pct"] == pytest.approx(100 * (0.0555 / 0.039 - 1))
    assert t.loc["eager scale", "spread_pct"] == 0.0
    text = "\n".join(quality.spread_section(m, "eager", lambda x, d=4: f"{x:.{d}g}"))
    assert "| baseline | size | jobs |" in text
    assert "| eager chain | 1000 | 3 |" in text and "**42.3**" in text
    assert "Over the bound at eager chain at 1000 (16.5 us between the extremes)." in text
    assert "eager scale at 1000 (" not in text


def test_sample_rows_follow_a_tuned_row_to_its_winning_candidate(meas):
    samples = tables.read(SGEMM / "samples.parquet")
    s = quality.sample_rows(meas, samples, "4096x4096x4096")
    tuned = meas[(meas["variant"] == "10_warptiling") & (meas["size"] == "4096x4096x4096")]
    winner = tuned["tuned_from"].iloc[0]
    got = s[(s["row"] == "10_warptiling") & (s["function"] == "variant")]
    assert len(got) == int(tuned["n_samples"].iloc[0])
    assert set(got["variant"]) == {winner}
    assert got["ms"].median() == pytest.approx(float(tuned["median_ms"].iloc[0]), rel=1e-5)


def test_distribution_figure_is_drawn_or_says_why(meas, tmp_path):
    plot.style()
    samples = tables.read(SGEMM / "samples.parquet")
    order = [v for v in meas["variant"].unique() if "__" not in v]
    f = quality.distribution(meas, samples, order, tmp_path, size_label="4096x4096x4096")
    assert f.drawn and (tmp_path / f.png).is_file()
    with pytest.raises(plot.NoData, match="no samples table"):
        quality.distribution(meas, None, order, tmp_path, size_label="4096x4096x4096")


def test_stop_reasons_and_older_tables(meas):
    said = quality.stop_reasons(meas)
    timed = meas[meas["status"] == "ok"]  # a skipped size (01_naive at 8192^3) has no samples
    assert len(timed) < len(meas)
    n, ok = len(timed), int(timed["converged"].astype(bool).sum())
    assert said.startswith(f"{ok} of {n} converged (")
    for reason, k in timed["stop_reason"].value_counts().items():
        assert f"{reason} {k}" in said
    old = timed.drop(columns=["stop_reason"]).assign(converged=False)
    assert quality.stop_reasons(old) == f"0 of {n} converged"


def test_before_after_compares_the_same_cells(meas):
    before = meas.assign(pct_of_baseline=meas["pct_of_baseline"] / 2)
    text = quality.before_after(before, meas, "4096x4096x4096")
    row = meas[(meas["variant"] == "01_naive") & (meas["size"] == "4096x4096x4096")]
    pct = float(row["pct_of_baseline"].iloc[0])
    assert f"{pct / 2:.1f} -> {pct:.1f}" in text
    assert "128x128x128: before -> after" in text and "256x256x256" in text


def test_stages_table_reads_snakemake_benchmark_files(tmp_path):
    head = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
    paths = []
    for rule, sub, job, secs in [
        ("compile", "build/sgemm", "01_naive", 2.5),
        ("bench", "nvidia-h200/sgemm", "01_naive", 40.0),
        ("device", "nvidia-h200", "device", 6.0),
    ]:
        p = tmp_path / "results" / "benchmarks" / rule / sub / f"{job}.tsv"
        p.parent.mkdir(parents=True)
        p.write_text(head + f"{secs}\t0:00:0{int(secs) % 10}\t100.5\t1\t1\t1\t0\t0\t1\tNA\n")
        paths.append(p)
    rows = pipeline_cost.table(paths, "sgemm")
    assert [(r["rule"], r["stage"], r["job"], r["seconds"]) for r in rows] == [
        ("compile", "compile", "01_naive", 2.5),
        ("bench", "bench", "01_naive", 40.0),
        ("device", "device", "device", 6.0),
    ]
    assert rows[0]["max_rss_mb"] == 100.5 and rows[0]["cpu_seconds"] is None
    summary = {r["stage"]: r for r in pipeline_cost.summary(rows)}
    assert summary["bench"]["seconds"] == 40.0 and summary["bench"]["jobs"] == 1


def test_published_stage_tables_cover_every_stage_that_ran():
    df = tables.read(SGEMM / "stages.parquet")
    assert {"compile", "bench", "profile", "sanitize", "device"} <= set(df["stage"])
    assert "other" not in set(df["stage"])


def test_the_cost_section_splits_bench_and_profile_jobs_by_their_own_clocks():
    """Bench rows (the published softmax tables keep their clocks) and profile rows: a job's
    start-up and wait once, each size's ncu share once, whatever its number of metrics."""
    soft = ROOT / "worklogs" / "nvidia-h200" / "softmax" / "data"
    # as measured before the rows kept the sampling's share of the timing
    meas = tables.read(soft / "measurements.parquet").drop(columns="sampling_s")
    spent = quality.bench_time(meas)
    # each job has clocks of its own (its start-up, its wait): a plain variant's, a tuned
    # variant's candidates' (one job for them all) and its own job's
    assert (meas["variant_kind"] == "candidate").any()
    clocks = meas.drop_duplicates(["job_startup_s", "job_wait_s"])
    assert spent["jobs"] == len(clocks) < meas["variant"].nunique()
    assert spent["timing"] == pytest.approx(meas["timing_s"].sum())
    assert spent["wait"] == pytest.approx(clocks["job_wait_s"].sum())
    assert "sampling" not in spent
    lines = quality.stages_section(pd.DataFrame(), str, meas=meas)
    assert lines == []  # no stages table, no section
    newer = meas.assign(sampling_s=meas["timing_s"] * 0.25)
    spent = quality.bench_time(newer)
    assert spent["sampling"] == pytest.approx(0.25 * meas["timing_s"].sum())
    assert spent["timing_setup"] + spent["sampling"] == pytest.approx(spent["timing"])
    stages = tables.read(soft / "stages.parquet")
    text = "\n".join(quality.stages_section(stages, lambda x, d: f"{x:.{d}g}", meas=newer))
    assert "| timing: inputs and baselines | timing: samples |" in text
    assert "| timing |" not in text

    def rows(variant, size, report, ncu_s, metrics, wait):
        return [
            {"variant": variant, "size": size, "report": report, "ncu_s": ncu_s,
             "read_s": None if ncu_s is None else 0.5, "metric": m,
             "job_startup_s": 0.1, "job_wait_s": wait}
            for m in metrics
        ]  # fmt: skip

    both = "a+b.ncu-rep"
    prof = pd.DataFrame(
        rows("04", "a", both, 3.0, ["x", "y", "z"], 2.0)
        + rows("04", "b", both, 3.0, ["x", "y", "z"], 2.0)
        + rows("07", "a", "a.ncu-rep", 4.0, ["x", "y"], 1.0)
        + rows("07", "b", None, None, [None], 1.0)  # failed: no process time
    )
    p = quality.profile_time(prof)
    assert (p["jobs"], p["sizes"], p["processes"]) == (2, 3, 2)
    assert (p["wait"], p["ncu"], p["read"]) == (3.0, 10.0, 1.5)
    stages = pd.DataFrame(
        {"stage": ["profile"], "rule": ["profile"], "job": ["x"], "seconds": [1.0]}
    )
    text = "\n".join(quality.stages_section(stages, lambda x, d=4: f"{x:g}", None, meas, prof))
    assert "Inside the 2 profile jobs (3 sizes profiled by 2 ncu processes;" in text
    assert "| 0.2 | 3 | 10 | 1.5 |" in text
    assert quality.profile_time(prof.drop(columns=["ncu_s"])) is None
