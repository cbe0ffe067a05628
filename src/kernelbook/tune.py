"""The autotuning reduce step: the best candidate per size becomes the tuned variant's row."""

from __future__ import annotations

import pandas as pd


def sweep_pick(study, variant) -> dict[str, int]:
    """The tune size whose winner also runs at the study's other sizes: the headline if it is
    a tune size, else the first tune size."""
    if study.headline is not None and study.headline in variant.tune_sizes:
        return study.headline
    return variant.tune_sizes[0]


def sweep_sizes(study, variant) -> list[dict[str, int]]:
    """The study's sizes no candidate is benched at (none when the tuning covers them all)."""
    if not variant.tune_sizes:
        return []
    return [s for s in study.sizes if s not in variant.tune_sizes]


def candidate_at(study, variant, won: dict[str, str], size: dict[str, int]) -> str | None:
    """The candidate whose numbers stand for the tuned variant at ``size``: a tune size's own
    winner; at any other size (the sweep's, a profile or sanitize size) the pick size's
    winner, the one the variant's job ran there. None where that size had no winner."""
    from kernelbook import problems

    label = problems.get(study.problem).label
    if not variant.tune_sizes or size in variant.tune_sizes:  # tuned at every size, or this
        return won.get(label(size))
    return won.get(label(sweep_pick(study, variant)))


def winner_runs(study, variant, won: dict[str, str]) -> list[tuple[str | None, list[dict]]]:
    """What the tuned variant's own job runs: (candidate, sizes) pairs. Each tune size's
    winner is re-timed at that size (confirmation); the pick size's winner also runs at the
    sizes no candidate was benched at. A tune size without a winner is left out (its
    selection row says why); no winner at the pick size gives (None, other sizes)."""
    from kernelbook import problems

    problem = problems.get(study.problem)
    plan: dict[str | None, list[dict]] = {}
    for s in variant.tune_sizes or study.sizes:
        cand = won.get(problem.label(s))
        if cand is not None:
            plan.setdefault(cand, []).append(s)
    others = sweep_sizes(study, variant)
    if others:
        plan.setdefault(won.get(problem.label(sweep_pick(study, variant))), []).extend(others)
    return list(plan.items())


def selected_ms(tuned_table: pd.DataFrame) -> dict[str, float]:
    """size label -> the winning candidate's median in its own tuning job."""
    rows = tuned_table[(tuned_table["variant_kind"] == "tuned") & (tuned_table["status"] == "ok")]
    return dict(zip(rows["size"], rows["median_ms"].astype(float), strict=True))


def confirmed(measurements: pd.DataFrame) -> pd.DataFrame:
    """The study's rows with each confirmed winner's selection row dropped: where a tuned
    variant's own job re-timed the winner at a size (``selected_median_ms`` set), that row is
    the variant's row there, and the selection's row (the candidate's own best) goes."""
    if "selected_median_ms" not in measurements.columns:
        return measurements
    tuned = measurements["variant_kind"] == "tuned"
    conf = measurements[tuned & measurements["selected_median_ms"].notna()]
    keys = set(zip(conf["variant"], conf["size"], strict=True))
    drop = tuned & measurements["selected_median_ms"].isna()
    pairs = zip(measurements["variant"], measurements["size"], strict=True)
    drop &= pd.Series([k in keys for k in pairs], index=measurements.index, dtype=bool)
    return measurements[~drop].reset_index(drop=True)


def winners(tuned_table: pd.DataFrame) -> dict[str, str]:
    """size label -> id of the candidate that won there."""
    rows = tuned_table[(tuned_table["variant_kind"] == "tuned") & (tuned_table["status"] == "ok")]
    return dict(zip(rows["size"], rows["tuned_from"], strict=True))


def select(candidates: pd.DataFrame, tuned: str) -> pd.DataFrame:
    """All candidate rows, plus one ``tuned`` row per size: the fastest correct candidate.

    This row is the winner's own measurement in its tuning job; with many candidates the pick
    leans to the luckiest, so the tuned variant's own job times the winner again and that
    confirmation replaces this row in the study's measurements (``confirmed``).
    """
    rows = [candidates]
    for _, group in candidates.groupby("size", sort=False):
        ok = group[group["status"] == "ok"]
        if len(ok):
            best = ok.loc[ok["median_ms"].idxmin()].copy()
            best["tuned_from"] = best["variant"]  # the winning candidate
            best["variant"] = tuned
            best["variant_kind"] = "tuned"
        else:
            best = group.iloc[0].copy()
            reasons = sorted(set(group["reason"].dropna()))
            for col in best.index:
                if col.endswith(("_ms", "tflops", "gbps", "_err")) or col in (
                    "rel_std",
                    "rse_median",
                    "n_samples",
                    "pct_of_baseline",
                    "baseline_n_samples",
                ):
                    best[col] = None
            best["variant"], best["variant_kind"], best["tuned_from"] = tuned, "tuned", tuned
            # candidates that failed (not merely ruled out by `requires`): the tuned variant
            # failed here, and the bench gate says so
            failed = (group["status"] == "failed").any()
            best["status"] = "failed" if failed else "skipped"
            best["failure"] = "no_winner" if failed else None
            best["reason"] = "no candidate ran: " + "; ".join(reasons)[:2000]
            best["tune_point"] = None
            best["correct"] = None
        rows.append(best.to_frame().T)
    return pd.concat(rows, ignore_index=True)


def used_candidates(variant, published: list[pd.DataFrame]) -> list[str]:
    """The candidates of a tuned variant that published pages show: the winners recorded in
    each published measurements table (a confirmed row's ``tuned_from``), in the variant's
    order; its first candidate where none is published (its source is still compiled)."""
    won = set()
    for meas in published:
        if {"variant", "variant_kind", "tuned_from"} <= set(meas.columns):
            rows = meas[(meas["variant"] == variant.id) & (meas["variant_kind"] == "tuned")]
            won |= set(rows["tuned_from"].dropna())
    used = [c for c in variant.candidates if c in won]
    return used or list(variant.candidates[:1])


def jobs_without_gpu(study, published: list[pd.DataFrame]) -> list[str]:
    """What a run without a GPU compiles of a study: every plain variant, and each tuned
    variant's used candidates (``used_candidates``)."""
    out = [v.id for v in study.variants if not v.is_tuned]
    for v in study.variants:
        if v.is_tuned:
            out += used_candidates(v, published)
    return out
