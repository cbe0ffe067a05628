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


def winners(tuned_table: pd.DataFrame) -> dict[str, str]:
    """size label -> id of the candidate that won there."""
    rows = tuned_table[(tuned_table["variant_kind"] == "tuned") & (tuned_table["status"] == "ok")]
    return dict(zip(rows["size"], rows["tuned_from"], strict=True))


def select(candidates: pd.DataFrame, tuned: str) -> pd.DataFrame:
    """All candidate rows, plus one ``tuned`` row per size: the fastest correct candidate.

    The winner's row is its own measurement (not re-timed), so with many candidates the
    pick leans slightly to the luckiest; the stopping rule keeps that within ~rse_median.
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
