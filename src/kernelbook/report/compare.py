"""Is it faster? A ratio of medians with a bootstrap interval from the raw samples, and a
verdict: faster, slower, same (the whole interval within the practical threshold) or
ambiguous. Used by the page (every ratio it shows) and by `kernelbook compare A B`.

The interval: resample each side's samples with replacement (independently), take the
ratio of the two medians, RESAMPLES times; the 2.5 and 97.5 percentiles bound it. Each
ratio's generator is seeded by SEED and a CRC of its key (study, variant, size, what), so a
row's interval does not depend on the order or number of other rows.
"""

from __future__ import annotations

import subprocess
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from kernelbook import tables

SEED = 20261201
RESAMPLES = 2000
LEVEL = 0.95
THRESHOLD = 0.01  # practical threshold: 'same' when the whole interval is within +-1 %
VERDICTS = ("faster", "slower", "same", "ambiguous", "no samples")


def rng_for(key: str, seed: int = SEED) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(key.encode())])


def boot_medians(x: np.ndarray, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """Medians of `resamples` resamples (with replacement) of x, which must be sorted.

    Vectorised without a sort per resample: count how often each sample was drawn (one
    bincount), and the k-th smallest of a resample is the first sample whose running count
    passes k."""
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    idx = rng.integers(0, n, size=(resamples, n))
    counts = np.bincount((idx + n * np.arange(resamples)[:, None]).ravel(), minlength=resamples * n)
    run = counts.reshape(resamples, n).cumsum(axis=1)
    lo = (run <= (n - 1) // 2).sum(axis=1)
    hi = (run <= n // 2).sum(axis=1)
    return 0.5 * (x[lo] + x[hi])


def ratio_interval(
    num, den, key: str = "", *, seed: int = SEED, resamples: int = RESAMPLES, level: float = LEVEL
) -> tuple[float, float, float]:
    """median(num) / median(den) and its percentile-bootstrap interval; NaNs when a side has
    no samples. For times, num = the reference's samples and den = the new one's gives a
    speed ratio (above 1: the new one is faster)."""
    num = np.asarray(num, dtype=np.float64)
    den = np.asarray(den, dtype=np.float64)
    # sorted: the resampling then does not depend on the order the samples come in
    num, den = np.sort(num[np.isfinite(num)]), np.sort(den[np.isfinite(den)])
    if len(num) == 0 or len(den) == 0:
        return (np.nan, np.nan, np.nan)
    point = float(np.median(num) / np.median(den))
    rng = rng_for(key, seed)
    r = boot_medians(num, rng, resamples) / boot_medians(den, rng, resamples)
    a = (1.0 - level) / 2.0
    lo, hi = np.quantile(r, [a, 1.0 - a])
    return (point, float(lo), float(hi))


def quartile_interval(ref: dict, new: dict, level: float = LEVEL) -> tuple[float, float, float]:
    """Without samples: a normal interval on the log of the speed ratio, from each side's
    median, quartiles and n (standard error of a median ~ 1.2533 sigma / sqrt(n), sigma ~
    IQR / 1.349)."""
    from statistics import NormalDist

    def rse(s):
        m, q1, q3, n = (s.get(k) for k in ("median_ms", "q1_ms", "q3_ms", "n_samples"))
        if any(pd.isna(x) for x in (m, q1, q3, n)) or not m or not n:
            return np.nan
        return 1.2533 * (q3 - q1) / 1.349 / m / np.sqrt(n)

    point = ref["median_ms"] / new["median_ms"]
    se = np.hypot(rse(ref), rse(new))
    if not np.isfinite(point) or not np.isfinite(se):
        return (float(point), np.nan, np.nan)
    z = NormalDist().inv_cdf(0.5 + level / 2.0)
    return (float(point), float(point * np.exp(-z * se)), float(point * np.exp(z * se)))


def verdict(lo: float, hi: float, threshold: float = THRESHOLD) -> str:
    """For a speed ratio's interval (above 1: faster): same when it lies within
    [1 - threshold, 1 + threshold], else faster when it lies above 1, slower below 1,
    ambiguous when it straddles 1."""
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return "no samples"
    if lo >= 1.0 - threshold and hi <= 1.0 + threshold:
        return "same"
    if lo > 1.0:
        return "faster"
    if hi < 1.0:
        return "slower"
    return "ambiguous"


class SampleIndex(dict):
    """(study, job, size) -> {function: sample array}; ``exact``: every sample names its job
    (the samples table's job column), so each measurements row finds exactly its own."""

    exact: bool = False


def has_jobs(samples: pd.DataFrame | None) -> bool:
    """Whether every sample names the bench job that took it (the samples table's job
    column; tables written before it have none)."""
    return (
        samples is not None
        and len(samples) > 0
        and "job" in samples.columns
        and bool(samples["job"].notna().all())
    )


def indexed(samples: pd.DataFrame | None) -> SampleIndex:
    """The samples by the bench job that took them, in one pass over the samples table.

    A job is the measurements row's variant: a plain variant's or a candidate's own job,
    or a tuned variant's job (its winners re-timed at the tune sizes, the pick size's winner
    at the other sizes), whose samples name the candidate that ran as their variant and the
    tuned variant as their job. Tables written before the job column (the published data up
    to then) do not say which sample is of which job: each sample's job is then taken to be
    its variant, and a tuned row pools its winner's tuning job with the re-timing
    (row_samples), the same kernel under the same conditions."""
    out = SampleIndex()
    if samples is None or samples.empty:
        return out
    job = samples["variant"]
    if "job" in samples.columns:
        out.exact = has_jobs(samples)
        job = samples["job"].where(samples["job"].notna(), samples["variant"])
    keyed = samples.assign(_job=job)
    for (st, j, size, fn), g in keyed.groupby(["study", "_job", "size", "function"], sort=False)[
        "ms"
    ]:
        out.setdefault((st, j, size), {})[fn] = g.to_numpy(dtype=np.float64)
    return out


def row_key(row, have, exact: bool) -> tuple:
    """(study, job, size) of the samples behind one measurements row, given the keys the
    samples table has (``have``) and whether it names every sample's job (``exact``). A
    row is of its own job; a tuned row is of the tuned variant's job where that job timed
    it, else (a selection row: the winner's best in its tuning job) of the winner's job
    (tuned_from). Without the job column a tuned row's samples are its winner's, both jobs
    pooled (indexed)."""
    key = (row.get("study"), row.get("variant"), row.get("size"))
    if row.get("variant_kind") != "tuned" or not isinstance(row.get("tuned_from"), str):
        return key
    winner = (row.get("study"), row["tuned_from"], row.get("size"))
    if exact:
        confirmed = pd.notna(row.get("selected_median_ms"))
        return key if key in have or confirmed else winner
    return key if key in have else winner


def row_samples(idx: SampleIndex, row) -> dict[str, np.ndarray]:
    """The samples behind one measurements row, by function (variant, baseline, copy): those
    of the job the row is of (row_key); empty when the table has none."""
    return idx.get(row_key(row, idx, idx.exact), {})


def anchored(got: tuple[float, float, float], shown) -> tuple[float, float, float]:
    """An interval moved onto the ratio the page shows (from the rows' medians): the same
    relative width. They differ by the samples' float32 rounding, and where samples were
    pooled (a tuned winner in tables without the job column)."""
    point, lo, hi = got
    if shown is None or pd.isna(shown) or not np.isfinite(point) or not point:
        return got
    k = float(shown) / point
    return (float(shown), lo * k, hi * k)


def ladder_intervals(
    head: pd.DataFrame,
    order: list[str],
    samples: pd.DataFrame | None,
    against: dict[str, list[str]] | None = None,
) -> dict:
    """For each ok variant of a ladder at one size (head: its rows indexed by variant):
    intervals of its speed against the baseline, the copy and the step before it (each
    (point, lo, hi)), and the verdicts against the step before and against the baseline;
    ``against`` (variant -> other variants) adds, under "named", (interval, verdict) against
    each of those measured ok in head."""
    idx = indexed(samples)
    out: dict[str, dict] = {}
    prev = None
    for v in order:
        if v not in head.index or head.loc[v, "status"] != "ok":
            continue
        r = head.loc[v]
        own = row_samples(idx, r)
        x = own.get("variant", [])
        key = f"{r.get('study')}|{v}|{r.get('size')}"
        got = {
            "baseline": anchored(
                ratio_interval(own.get("baseline", []), x, key + "|baseline"),
                r.get("pct_of_baseline") / 100.0 if pd.notna(r.get("pct_of_baseline")) else None,
            ),
            "copy": anchored(
                ratio_interval(own.get("copy", []), x, key + "|copy"),
                r.get("pct_of_copy") / 100.0 if pd.notna(r.get("pct_of_copy")) else None,
            ),
            "previous": (np.nan,) * 3,
            "prev": prev,
            "named": {},
        }
        if prev is not None:
            got["previous"] = _against(idx, head, prev, r, x, key + f"|previous|{prev}")
        for other in (against or {}).get(v, []):
            if other != v and other in head.index and head.loc[other, "status"] == "ok":
                ci = _against(idx, head, other, r, x, key + f"|named|{other}")
                got["named"][other] = (ci, verdict(*ci[1:]))
        got["vs_previous"] = verdict(*got["previous"][1:]) if prev is not None else None
        got["vs_baseline"] = verdict(*got["baseline"][1:])
        out[v] = got
        prev = v
    return out


def _against(idx, head, other: str, r, x, key: str) -> tuple[float, float, float]:
    """The speed of row r (samples x) against head's row of variant ``other``."""
    p = row_samples(idx, head.loc[other]).get("variant", [])
    return anchored(ratio_interval(p, x, key), head.loc[other, "median_ms"] / r["median_ms"])


def with_intervals(df: pd.DataFrame, samples: pd.DataFrame | None) -> pd.DataFrame:
    """df (measurements rows) with pct_of_baseline_lo/_hi and pct_of_copy_lo/_hi: each
    row's percentages' bootstrap bounds from its samples (empty without them)."""
    idx = indexed(samples)
    cols = {c: [] for c in ("pct_of_baseline_lo", "pct_of_baseline_hi")}
    cols |= {c: [] for c in ("pct_of_copy_lo", "pct_of_copy_hi")}
    for _, r in df.iterrows():
        own = row_samples(idx, r) if r.get("status") == "ok" else {}
        x = own.get("variant", [])
        key = f"{r.get('study')}|{r.get('variant')}|{r.get('size')}"
        for what, col in (("baseline", "pct_of_baseline"), ("copy", "pct_of_copy")):
            shown = r.get(col)
            shown = shown / 100.0 if shown is not None and pd.notna(shown) else None
            if shown is None:
                _, lo, hi = (np.nan,) * 3
            else:
                _, lo, hi = anchored(ratio_interval(own.get(what, []), x, f"{key}|{what}"), shown)
            cols[f"{col}_lo"].append(100.0 * lo)
            cols[f"{col}_hi"].append(100.0 * hi)
    return df.assign(**cols)


def method_note(samples: pd.DataFrame | None = None) -> str:
    """The page's line on how intervals and verdicts are made, for this samples table."""
    tuned = "; each is moved onto the row's ratio"
    if samples is not None and len(samples):
        tuned = (
            "; a tuned winner's interval is of its re-timing's samples alone"
            if has_jobs(samples)
            else "; a tuned winner's interval pools its tuning job's samples with its "
            "re-timing's, which this samples table (no job column) does not tell apart"
        ) + ", and each is moved onto the row's ratio"
    return (
        f"Intervals: {LEVEL:.0%} percentile bootstrap of the ratio of medians from the raw "
        f"samples ({RESAMPLES} resamples of each side, seed {SEED}{tuned}). Verdicts: *same* "
        f"when the whole interval lies within +-{THRESHOLD:.0%}, else *faster* or *slower* "
        "when it lies above or below 1, else *ambiguous*; *no samples* where the samples "
        "table has none."
    )


# ------------------------------------------------------------------------------------------
# kernelbook compare A B


def read_side(spec: str) -> tuple[pd.DataFrame, pd.DataFrame | None, str]:
    """A side of a comparison: a measurements.parquet, a folder holding one (or data/ with
    one), or REV:PATH for either as committed at git revision REV. Its samples.parquet
    beside it, where present."""

    def parquet(path: Path, rev: str | None) -> pd.DataFrame | None:
        if rev is None:
            return tables.read(path) if path.is_file() else None
        got = subprocess.run(["git", "show", f"{rev}:{path.as_posix()}"], capture_output=True)
        return tables.read(got.stdout) if got.returncode == 0 else None

    rev, path = None, spec
    if ":" in spec and not Path(spec).exists():
        rev, path = spec.split(":", 1)
    p = Path(path)
    for base in (p, p / "data") if p.suffix != ".parquet" else (p.parent,):
        meas = parquet(p if p.suffix == ".parquet" else base / "measurements.parquet", rev)
        if meas is not None:
            return meas, parquet(base / "samples.parquet", rev), spec
    raise tables.TableError(f"compare: no measurements table at {spec}")


def _flag(a, b, col: str, label: str, rel: float = 0.0) -> str | None:
    x, y = a.get(col), b.get(col)
    if pd.isna(x) and pd.isna(y):
        return None
    if isinstance(x, (int, float)) and isinstance(y, (int, float)) and rel:
        if pd.notna(x) and pd.notna(y) and abs(x - y) <= rel * max(abs(x), abs(y)):
            return None
    elif str(x) == str(y):
        return None
    return f"{label} {x} vs {y}"


def compare(
    a: pd.DataFrame,
    sa: pd.DataFrame | None,
    b: pd.DataFrame,
    sb: pd.DataFrame | None,
    *,
    seed: int = SEED,
    resamples: int = RESAMPLES,
    threshold: float = THRESHOLD,
) -> pd.DataFrame:
    """One row per (study, variant, size) measured ok on both sides: both medians, B's speed
    against A (A's median / B's: above 1, B is faster) with its interval and verdict, and
    flags where the two were measured under different conditions."""
    keys = ["study", "variant", "size"]
    ok = [t[(t["status"] == "ok") & t["median_ms"].notna()].drop_duplicates(keys, keep="last")
          for t in (a, b)]  # fmt: skip
    pairs = ok[0].merge(ok[1], on=keys, suffixes=("_a", "_b"))
    ia, ib = indexed(sa), indexed(sb)
    out = []
    for _, r in pairs.iterrows():
        ra = {c[:-2]: r[c] for c in r.index if c.endswith("_a")} | {k: r[k] for k in keys}
        rb = {c[:-2]: r[c] for c in r.index if c.endswith("_b")} | {k: r[k] for k in keys}
        xa = row_samples(ia, ra).get("variant", [])
        xb = row_samples(ib, rb).get("variant", [])
        if len(xa) and len(xb):
            key = "|".join(str(r[k]) for k in keys) + "|compare"
            point, lo, hi = anchored(
                ratio_interval(xa, xb, key, seed=seed, resamples=resamples),
                ra["median_ms"] / rb["median_ms"],
            )
            source = "samples"
        else:
            point, lo, hi = quartile_interval(ra, rb)
            source = "quartiles" if np.isfinite(lo) else "no samples"
        flags = [
            _flag(ra, rb, "sm_clock_mhz", "SM clock", rel=0.01),
            _flag(ra, rb, "throttled", "throttled"),
            _flag(ra, rb, "timing_method", "timer"),
            _flag(ra, rb, "cache", "cache"),
            _flag(ra, rb, "gpu_name", "GPU"),
        ]
        out.append(
            {
                "study": r["study"],
                "variant": r["variant"],
                "size": r["size"],
                "median_ms_a": float(ra["median_ms"]),
                "median_ms_b": float(rb["median_ms"]),
                "speed_b_over_a": point,
                "speed_lo": lo,
                "speed_hi": hi,
                "verdict": verdict(lo, hi, threshold),
                "interval_from": source,
                "timing_method_a": ra.get("timing_method"),
                "timing_method_b": rb.get("timing_method"),
                "sm_clock_mhz_a": ra.get("sm_clock_mhz"),
                "sm_clock_mhz_b": rb.get("sm_clock_mhz"),
                "flags": "; ".join(f for f in flags if f) or None,
                "ci_seed": seed,
                "ci_resamples": resamples,
                "ci_threshold": threshold,
            }
        )
    return pd.DataFrame(out, columns=COMPARE_COLUMNS)


COMPARE_COLUMNS = [
    "study",
    "variant",
    "size",
    "median_ms_a",
    "median_ms_b",
    "speed_b_over_a",
    "speed_lo",
    "speed_hi",
    "verdict",
    "interval_from",
    "timing_method_a",
    "timing_method_b",
    "sm_clock_mhz_a",
    "sm_clock_mhz_b",
    "flags",
    "ci_seed",
    "ci_resamples",
    "ci_threshold",
]


def _f(x, digits: int = 4) -> str:
    return "-" if x is None or pd.isna(x) else f"{x:.{digits}g}"


def as_rows(t: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    heads = ["study", "variant", "size", "A ms", "B ms", "A/B", "95 % interval", "verdict"]
    heads += ["from", "flags"]
    rows = [
        [
            r.study,
            r.variant,
            r.size,
            _f(r.median_ms_a),
            _f(r.median_ms_b),
            _f(r.speed_b_over_a),
            f"[{_f(r.speed_lo)}, {_f(r.speed_hi)}]",
            r.verdict,
            r.interval_from,
            r.flags or "",
        ]
        for r in t.itertuples()
    ]
    return heads, rows


def text_table(t: pd.DataFrame) -> str:
    heads, rows = as_rows(t)
    w = [max(len(h), *(len(x[i]) for x in rows)) if rows else len(h) for i, h in enumerate(heads)]
    line = lambda cells: "  ".join(c.ljust(w[i]) for i, c in enumerate(cells)).rstrip()  # noqa: E731
    return "\n".join([line(heads), line(["-" * n for n in w]), *map(line, rows)])


def markdown(t: pd.DataFrame, a: str, b: str) -> str:
    heads, rows = as_rows(t)
    counts = t["verdict"].value_counts()
    n = int(t["ci_resamples"].iloc[0]) if len(t) else RESAMPLES
    seed = int(t["ci_seed"].iloc[0]) if len(t) else SEED
    thr = 100.0 * (float(t["ci_threshold"].iloc[0]) if len(t) else THRESHOLD)
    lines = [
        f"# {a} (A) against {b} (B)",
        "",
        f"A/B: A's median over B's (above 1: B is faster). Interval: {LEVEL:.0%} percentile "
        f"bootstrap of the ratio of medians, {n} "
        f"resamples of each side's samples, seed {seed}; "
        f"same: the whole interval within +-{thr:.3g} %.",
        "",
        "Verdicts: " + ", ".join(f"{k} {v}" for k, v in counts.items()),
        "",
        "| " + " | ".join(heads) + " |",
        "|" + "---|" * len(heads),
    ]
    lines += ["| " + " | ".join(x.replace("|", "\\|") for x in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def run(
    a: str,
    b: str,
    out: str | None,
    fail_on: list[str],
    seed: int = SEED,
    resamples: int = RESAMPLES,
    threshold: float = THRESHOLD,
) -> int:
    """`kernelbook compare A B`: print the table; --out PREFIX writes PREFIX.md and
    PREFIX.parquet; exit 1 when a verdict of fail_on occurs."""
    unknown = sorted(set(fail_on) - set(VERDICTS))
    if unknown:
        raise tables.TableError(f"compare: --fail-on {unknown}: the verdicts are {list(VERDICTS)}")
    ma, sa, _ = read_side(a)
    mb, sb, _ = read_side(b)
    t = compare(ma, sa, mb, sb, seed=seed, resamples=resamples, threshold=threshold)
    print(text_table(t))
    counts = t["verdict"].value_counts()
    print("\nverdicts: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    keys = ["study", "variant", "size"]
    ka, kb = (set(map(tuple, m[m["status"] == "ok"][keys].to_numpy())) for m in (ma, mb))
    if ka != kb:
        print(f"unmatched (ok on one side only): {len(ka - kb)} in A, {len(kb - ka)} in B")
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(f"{out}.md").write_text(markdown(t, a, b))
        tables.write(t, f"{out}.parquet", "comparison")
        print(f"{out}.md\n{out}.parquet")
    hit = [v for v in fail_on if v in set(t["verdict"])]
    return 1 if hit else 0
