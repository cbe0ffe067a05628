"""Is it faster? The bootstrap interval of a ratio of medians and its verdict on synthetic
sample series, `kernelbook compare` and its exit status, and the page's verdicts. CPU only,
seconds."""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pandas as pd
import pytest
from conftest import REPO

from kernelbook import cli
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
    t = pd.read_parquet(tmp_path / "out" / "cmp.parquet")
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
    # a step that claims an improvement but is not faster is named before the ladder
    front = md.split("## The ladder", 1)[0]
    assert "**03_warp_shuffle** says it improves on 02_fused_block" in front
