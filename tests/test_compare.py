"""Is it faster? The bootstrap interval of a ratio of medians and its verdict on synthetic
sample series, `kernelbook compare` and its exit status, and the page's verdicts. CPU only,
seconds."""

from __future__ import annotations

import json
import re
import subprocess

import numpy as np
import pandas as pd
import pytest
from conftest import REPO

from kernelbook import cli, tables
from kernelbook.report import compare, publish
from kernelbook.report.markdown import parse_tables

N = 200


def series(kind: str, seed: int, n: int = N) -> np.ndarray:
    """Synthetic kernel times around 1 ms."""
    rng = np.random.default_rng(seed)
    base = 1.0 + 0.002 * rng.standard_normal(n)
    if kind == "bimodal":  # two clock or placement states, half the samples in each
        return base * np.where(rng.random(n) < 0.5, 1.0, 1.05)
    if kind == "drifting":  # warming up: from 3 % fast to 3 % slow over the run
        return base * np.linspace(0.97, 1.03, n)
    if kind == "heavy":  # rare, huge outliers (preemption): a Pareto tail on 10 %
        tail = np.where(rng.random(n) < 0.1, rng.pareto(1.5, n), 0.0)
        return base * (1.0 + tail)
    return base


def speed(ref: np.ndarray, new: np.ndarray, key: str = "t") -> tuple[tuple, str]:
    got = compare.ratio_interval(ref, new, key)
    return got, compare.verdict(got[1], got[2])


@pytest.mark.parametrize(
    "name, ref, new, expected",
    [
        ("identical", series("plain", 1), series("plain", 2), "same"),
        ("2 % faster", series("plain", 1), 0.98 * series("plain", 2), "faster"),
        ("2 % slower", series("plain", 1), 1.02 * series("plain", 2), "slower"),
        # same mixture on both sides: the median jumps between the modes, nothing is known
        ("bimodal", series("bimodal", 1, 40), series("bimodal", 2, 40), "ambiguous"),
        # a drift of +-3 % over 20 samples: the median is not known to 1 %
        ("drifting", series("plain", 1, 20), series("drifting", 2, 20), "ambiguous"),
        # the median ignores the tail: still the same kernel
        ("heavy-tailed", series("heavy", 1, 400), series("heavy", 2, 400), "same"),
    ],
)
def test_verdict_on_synthetic_series(name, ref, new, expected):
    (point, lo, hi), v = speed(ref, new)
    assert lo <= point <= hi
    assert v == expected, (name, point, lo, hi)


def test_the_interval_is_seeded_per_key_and_vectorised():
    a, b = series("plain", 1, 1000), series("plain", 2, 1000)
    assert compare.ratio_interval(a, b, "k") == compare.ratio_interval(a, b, "k")
    assert compare.ratio_interval(a, b, "k") != compare.ratio_interval(a, b, "other")
    assert np.isnan(compare.ratio_interval([], b, "k")[1])
    # the counting median is np.median of the same resamples, to the bit
    for n in (1, 2, 7, 60):
        x = np.sort(series("heavy", n, n))
        idx = np.random.default_rng(3).integers(0, n, size=(500, n))
        got = compare.boot_medians(x, np.random.default_rng(3), 500)
        assert np.array_equal(got, np.median(x[idx], axis=1))
    assert compare.verdict(np.nan, np.nan) == "no samples"


def test_the_threshold_is_the_whole_interval():
    assert compare.verdict(0.995, 1.009) == "same"
    assert compare.verdict(1.002, 1.011) == "faster"  # above 1, not all within 1 %
    assert compare.verdict(0.98, 1.02) == "ambiguous"
    assert compare.verdict(0.95, 0.97) == "slower"


def tables_of(ms: dict[str, float], method: str = "cupti", seed: int = 0, samples=True):
    """A measurements table (and its samples) of one study: variant -> median ms."""
    rows, samp = [], []
    for i, (v, m) in enumerate(ms.items()):
        x = m * series("plain", seed + i, 60)
        rows.append(
            {
                "study": "s",
                "variant": v,
                "variant_kind": "variant",
                "tuned_from": None,
                "size": "1024",
                "status": "ok",
                "median_ms": float(np.median(x)),
                "q1_ms": float(np.quantile(x, 0.25)),
                "q3_ms": float(np.quantile(x, 0.75)),
                "n_samples": len(x),
                "timing_method": method,
                "sm_clock_mhz": 1980.0,
                "throttled": False,
                "cache": "cold",
                "gpu_name": "H200",
            }
        )
        samp += [
            {"study": "s", "variant": v, "size": "1024", "function": "variant", "sample": j,
             "ms": float(t)}
            for j, t in enumerate(x)
        ]  # fmt: skip
    return pd.DataFrame(rows), (pd.DataFrame(samp) if samples else None)


def write_side(folder, meas, samp):
    folder.mkdir(parents=True)
    meas.to_parquet(folder / "measurements.parquet")
    if samp is not None:
        samp.to_parquet(folder / "samples.parquet")


def test_compare_pairs_flags_and_falls_back_to_quartiles():
    a, sa = tables_of({"v1": 1.0, "v2": 1.0, "v3": 1.0}, method="events", seed=10)
    b, sb = tables_of({"v1": 1.0, "v2": 0.97, "v3": 1.03}, method="cupti", seed=20)
    t = compare.compare(a, sa, b, sb)
    assert list(t["variant"]) == ["v1", "v2", "v3"]
    assert list(t["verdict"]) == ["same", "faster", "slower"]
    assert (t["interval_from"] == "samples").all()
    assert t["flags"].str.contains("timer events vs cupti").all()
    # without B's samples: a normal interval from the rows' quartiles and n, said so
    t = compare.compare(a, sa, b, None)
    assert (t["interval_from"] == "quartiles").all()
    assert list(t["verdict"]) == ["same", "faster", "slower"]
    # the order of the rows does not matter
    t2 = compare.compare(a.iloc[::-1], sa.iloc[::-1], b, sb)
    assert (
        t2.sort_values("variant")["speed_lo"].tolist()
        == compare.compare(a, sa, b, sb)["speed_lo"].tolist()
    )


def test_cli_exit_status_with_fail_on(tmp_path, capsys):
    a, sa = tables_of({"v1": 1.0, "v2": 1.0}, seed=10)
    b, sb = tables_of({"v1": 1.0, "v2": 1.05}, seed=20)
    write_side(tmp_path / "a", a, sa)
    write_side(tmp_path / "b", b, sb)
    A, B = str(tmp_path / "a"), str(tmp_path / "b" / "measurements.parquet")
    assert cli.main(["compare", A, B]) == 0
    assert cli.main(["compare", A, B, "--fail-on", "ambiguous"]) == 0
    out = str(tmp_path / "out" / "cmp")
    assert cli.main(["compare", A, B, "--fail-on", "slower,ambiguous", "--out", out]) == 1
    text = capsys.readouterr().out
    assert "slower" in text and "verdicts:" in text
    md = (tmp_path / "out" / "cmp.md").read_text()
    assert "seed 20261201" in md and "| v2 |" in md
    t = tables.read(tmp_path / "out" / "cmp.parquet")
    assert t.set_index("variant")["verdict"].to_dict() == {"v1": "same", "v2": "slower"}
    assert set(t["ci_resamples"]) == {compare.RESAMPLES}
    assert cli.main(["compare", B, A, "--fail-on", "slower"]) == 0  # the other way: faster
    # a 10 % threshold: 5 % slower is then the same
    assert cli.main(["compare", A, B, "--fail-on", "slower", "--threshold", "10"]) == 0
    assert cli.main(["compare", A, str(tmp_path / "nowhere")]) == 1
    assert "no measurements table" in capsys.readouterr().err
    assert cli.main(["compare", A, B, "--fail-on", "worse"]) == 1


def test_a_side_from_a_git_revision(monkeypatch):
    monkeypatch.chdir(REPO)
    rev = "3e6b5d1"
    if subprocess.run(["git", "cat-file", "-e", rev], capture_output=True).returncode:
        pytest.skip(f"{rev} is not in this clone")
    meas, samples, _ = compare.read_side(f"{rev}:worklogs/nvidia-h200/transpose")
    assert set(meas["timing_method"]) == {"events"} and samples is not None and len(samples)


@pytest.fixture(scope="module")
def softmax_page(tmp_path_factory):
    out = tmp_path_factory.mktemp("softmax")
    page = publish.render_published(
        REPO / "worklogs", "nvidia-h200", "softmax", REPO / "analysis", out
    )
    return page.read_text()


def test_the_page_shows_verdicts(softmax_page):
    md = softmax_page
    ladder = next(t for t in parse_tables(md) if t and "vs previous" in t[0])
    assert {r["vs previous"] for r in ladder} <= {*compare.VERDICTS, "—"}
    assert {r["vs torch"] for r in ladder} - {"—"} <= set(compare.VERDICTS)
    for r in ladder:
        if r["status"] == "ok":
            lo, hi = map(float, r["interval"].strip("[]").split(", "))
            assert lo <= float(r["% of torch"]) <= hi
    assert f"seed {compare.SEED}" in md
    answer = r"\*\*Answer at .*% of torch\*\* \(.*; interval \[[\d.]+, [\d.]+\] %, \w+\)"
    assert re.search(answer, md)
    # a step whose `claims: faster` its interval does not bear out is named before the ladder,
    # and one that it does is not: each claim on the previous step, against the ladder's verdict
    front = md.split("## The ladder", 1)[0]
    study = json.loads((REPO / "worklogs/nvidia-h200/softmax/data/study.json").read_text())
    claims = {v["id"]: v.get("claims", {}) for v in study["variants"]}
    order = [r["variant"] for r in ladder]
    checked = 0
    for i, r in enumerate(ladder[1:], 1):
        if claims.get(r["variant"], {}).get("previous") != "faster":
            continue
        named = f"**{r['variant']}** claims to be faster than {order[i - 1]}, but" in front
        assert named == (r["vs previous"] != "faster"), (r["variant"], r["vs previous"])
        checked += 1
    assert checked >= 4  # 02 to 06 each claim to beat the step before


# ------------------------------------------------------------------------------------------
# Which samples are a row's: the samples table's job column


def tuned_tables(job: bool = True):
    """A tuned variant t as its jobs leave it: its winner c1 timed in its own tuning job
    (1.00 ms), then re-timed in t's job (1.05 ms, the confirmation: t's row), each beside the
    baseline (2 ms). The samples name the candidate that ran; ``job`` adds the job column."""
    tuning, retime = 1.00 * series("plain", 1, 80), 1.05 * series("plain", 2, 120)
    base_tuning, base_retime = 2.0 * series("plain", 3, 80), 2.0 * series("plain", 4, 120)

    def row(variant, kind, tuned_from, x, b, selected=None):
        return {
            "study": "s", "variant": variant, "variant_kind": kind, "tuned_from": tuned_from,
            "size": "1024", "status": "ok", "median_ms": float(np.median(x)),
            "n_samples": len(x), "selected_median_ms": selected,
            "pct_of_baseline": 100.0 * float(np.median(b) / np.median(x)),
        }  # fmt: skip

    meas = pd.DataFrame(
        [
            row("c1", "candidate", "t", tuning, base_tuning),
            row("t", "tuned", "c1", retime, base_retime, float(np.median(tuning))),
        ]
    )
    samp = []
    for jobname, x, b in (("c1", tuning, base_tuning), ("t", retime, base_retime)):
        for fn, ms in (("variant", x), ("baseline", b)):
            samp += [
                {"study": "s", "variant": "c1", "job": jobname, "size": "1024", "function": fn,
                 "sample": i, "ms": float(m)}
                for i, m in enumerate(ms)
            ]  # fmt: skip
    samp = pd.DataFrame(samp)
    return meas, (samp if job else samp.drop(columns="job")), (tuning, retime)


def test_a_tuned_row_takes_exactly_its_own_jobs_samples():
    meas, samp, (tuning, retime) = tuned_tables()
    idx = compare.indexed(samp)
    assert idx.exact and compare.has_jobs(samp)
    cand, tuned = meas.iloc[0], meas.iloc[1]
    assert np.array_equal(np.sort(compare.row_samples(idx, tuned)["variant"]), np.sort(retime))
    assert np.array_equal(np.sort(compare.row_samples(idx, cand)["variant"]), np.sort(tuning))
    # its interval is of the re-timing alone: the ratio of the medians it shows, unmoved
    got = compare.with_intervals(meas, samp).iloc[1]
    lo, hi = compare.ratio_interval(
        compare.row_samples(idx, tuned)["baseline"], retime, "s|t|1024|baseline"
    )[1:]
    assert (got["pct_of_baseline_lo"], got["pct_of_baseline_hi"]) == pytest.approx(
        (100 * lo, 100 * hi), rel=1e-12
    )
    assert "re-timing's samples alone" in compare.method_note(samp)
    # the distribution figure reads the same samples
    from kernelbook.report import quality

    rows = quality.sample_rows(meas.assign(variant_kind="tuned"), samp, "1024")
    assert len(rows[rows["row"] == "t"]) == 2 * len(retime)


def test_older_samples_without_the_job_column_pool_a_tuned_winners_jobs():
    """Published tables have no job column: a tuned row's samples are its winner's, both of
    its jobs pooled, as before the column (and the page says so)."""
    meas, samp, (tuning, retime) = tuned_tables(job=False)
    idx = compare.indexed(samp)
    assert not idx.exact and not compare.has_jobs(samp)
    got = compare.row_samples(idx, meas.iloc[1])["variant"]
    assert np.array_equal(np.sort(got), np.sort(np.concatenate([tuning, retime])))
    assert "pools its tuning job's samples" in compare.method_note(samp)
    assert "tuned winner" not in compare.method_note(None)  # no samples: nothing to say
    # a table gathered from older and newer jobs: the rows without a job are their variant's
    mixed = pd.concat([samp.iloc[:5], tuned_tables()[1].iloc[5:]], ignore_index=True)
    assert not compare.has_jobs(mixed) and len(compare.indexed(mixed)[("s", "t", "1024")])


def test_a_selection_row_is_its_winners_tuning_job_and_a_confirmation_never_is():
    meas, samp, (tuning, _) = tuned_tables()
    own = samp[samp["job"] == "c1"]  # the tuned variant's job took no samples
    idx = compare.indexed(own)
    # the selection's row (no confirmation): the winner's best in its tuning job
    selection = meas.iloc[1].copy()
    selection["selected_median_ms"] = None
    assert np.array_equal(np.sort(compare.row_samples(idx, selection)["variant"]), np.sort(tuning))
    # a confirmed row is the re-timing's: never the tuning job's samples in its place
    assert compare.row_samples(idx, meas.iloc[1]) == {}


def test_the_samples_table_keeps_the_job_and_reads_older_tables(tmp_path):
    from kernelbook import tables

    _, samp, _ = tuned_tables()
    samp = samp.assign(gpu_uuid="GPU-0")
    tables.write(samp, tmp_path / "new.parquet", "samples")
    assert set(tables.read(tmp_path / "new.parquet")["job"]) == {"c1", "t"}
    # an older job's table (no job column) is still written and read; gathered with a newer
    # one, its rows have no job
    tables.write(samp.drop(columns="job"), tmp_path / "old.parquet", "samples")
    both = tables.gather(
        [tmp_path / "old.parquet", tmp_path / "new.parquet"], tmp_path / "all.parquet", "samples"
    )
    assert both["job"].isna().sum() == len(samp) and not compare.has_jobs(both)
    published = tables.read(
        REPO / "worklogs" / "nvidia-h200" / "softmax" / "data" / "samples.parquet"
    )
    # measured since the job column: a tuned row's samples are its own job's
    assert "job" in published.columns and compare.indexed(published).exact
