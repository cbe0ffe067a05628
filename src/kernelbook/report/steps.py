"""The ladder step by step: its table at the headline size, and one section per variant (what
changed and how its claims fared, prediction, model, measurement, profiler deltas, resources,
sanitizer)."""

from __future__ import annotations

import pandas as pd

from kernelbook import tables
from kernelbook.report import claims, compare
from kernelbook.report.data import (
    StudyData,
    candidate_id,
    copy_word,
    headline_size,
    metric_deltas,
    profiled_baselines,
    summary,
    variant_info,
)
from kernelbook.report.markdown import (
    DASH,
    as_float,
    esc,
    fmt,
    inline_code,
    is_true,
    isnull,
    md_table,
    point_label,
)


def interval(got: dict | None, what: str, scale: float = 1.0) -> str:
    """'[lo, hi]' of one of compare.ladder_intervals' ratios, times scale (100 for %)."""
    if not got:
        return DASH
    _, lo, hi = got[what]
    if isnull(lo) or isnull(hi):
        return DASH
    return f"[{fmt(lo * scale)}, {fmt(hi * scale)}]"


def ladder_table(data, order, head, base, unit, fom, cis=None, predicted=True) -> str:
    """The ladder's table at one size (head: its rows); ``predicted``: show the config's
    predictions (written for the headline size)."""
    # bandwidth studies also show the variant against a device copy of the same bytes
    copy = fom == "gbps" and "pct_of_copy" in head
    if cis is None:
        against = claims.named(data, order)
        cis = compare.ladder_intervals(head, order, data.table("samples"), against)
    # a study with several baselines: each variant as a % of the others too, timed in its job
    others = tables.extra_baseline_names(head)
    wide = tables.extra_baseline_columns(head).set_index("variant", drop=False) if others else None
    rows = []
    prev_ms = None
    for v in order:
        info = variant_info(data, v)
        pred = (info.get("predict") or {}).get("pct_of_baseline") if predicted else None
        if v not in head.index:
            rows.append(
                [v, "not measured", DASH, DASH, DASH, DASH, *([DASH] * 2 if copy else [])]
                + [DASH] * len(others)
                + [fmt(pred), DASH, DASH, DASH, DASH]
            )
            continue
        r = head.loc[v]
        ms = as_float(r["median_ms"])
        step = fmt(prev_ms / ms) if (prev_ms and ms) else DASH
        got = cis.get(v)
        rows.append(
            [
                v,
                r["status"] + (" (throttled)" if is_true(r.get("throttled")) else ""),
                fmt(r["median_ms"]),
                fmt(r.get(fom)),
                fmt(r["pct_of_baseline"]),
                interval(got, "baseline", 100.0),
                *([fmt(r.get("pct_of_copy")), interval(got, "copy", 100.0)] if copy else []),
                *(fmt(wide.loc[v].get(f"pct_of_{n}")) for n in others),
                fmt(pred),
                step,
                interval(got, "previous"),
                (got or {}).get("vs_previous") or DASH,
                (got or {}).get("vs_baseline") or DASH,
            ]
        )
        if r["status"] == "ok" and ms:
            prev_ms = ms
    heads = ["variant", "status", "median ms", unit, f"% of {base}", "interval"]
    word = copy_word(head)  # the same bytes copied, or read (bandwidth_reference)
    heads += [f"% of {word}", f"{word} interval"] if copy else []
    heads += [f"% of {n}" for n in others]
    heads += ["predicted %", "x previous", "previous interval", "vs previous", f"vs {base}"]
    if not predicted:
        i = heads.index("predicted %")
        heads.pop(i)
        rows = [r[:i] + r[i + 1 :] for r in rows]
    return md_table(heads, rows, "ll" + "r" * (len(heads) - 4) + "ll")


def variant_section(
    data, v, prev, head, base, unit, fom, cis=None, checks=(), second=None
) -> list[str]:
    """One step's section; ``checks``: the study's claim checks (kernelbook.report.claims);
    ``second``: (size, rows, intervals) at the study's second headline size, for a line of
    the step's measurement there, and its profile there (against the step before it there)
    where the headline has none."""
    info = variant_info(data, v)
    ci = (cis or {}).get(v)
    L = [f"### {v}", ""]
    if info.get("says"):
        L += [f"**What changed.** {info['says']}", ""]
    L += claims.section_lines(list(checks), v, headline_size(data))
    if info.get("header"):
        src = info.get("source") or ""
        L += [f"From `{src}`:" if src else "From the kernel file:", ""]
        L += ["```text", info["header"], "```", ""]
    if info.get("tuned"):
        space = info.get("tune_space") or {}
        dims = ", ".join(f"{k} in {vals}" for k, vals in space.items())
        meas = data.measurements
        conf = (
            meas[(meas["variant"] == v) & meas["selected_median_ms"].notna()]
            if "selected_median_ms" in meas.columns
            else meas.iloc[:0]
        )
        if len(conf):
            bias = ", ".join(
                f"{r['size']}: {r['selected_median_ms']:.4g} ms in its tuning job, "
                f"{r['median_ms']:.4g} ms again"
                for _, r in conf.iterrows()
            )
            picked = (
                f"; at {', '.join(info['tune_sizes'])} the fastest correct candidate wins and "
                "is timed again in the variant's own job, and that re-timing is the variant's "
                f"row, so the pick of the best of many does not favour a lucky sample ({bias})"
            )
        else:
            picked = (
                f"; at {', '.join(info['tune_sizes'])} the fastest correct candidate is the "
                "variant's row"
            )
        L += [
            f"**Autotuned** over {len(info.get('candidates', []))} candidates"
            + (f" ({dims})" if dims else "")
            + (
                f"{picked}, and at the other sizes the winner at {info['sweep_pick']} runs."
                if info.get("sweep_pick")
                else (
                    f"{picked}."
                    if len(conf)
                    else "; at each size the fastest correct candidate is the variant's row."
                )
            ),
            "",
        ]
    r = head.loc[v] if v in head.index else None
    size = headline_size(data)
    pred = info.get("predict") or {}
    if pred:
        parts = []
        for key, p in pred.items():
            got = as_float(r.get(key)) if r is not None and key in r.index else None
            label = f"% of {base}" if key == "pct_of_baseline" else key
            if got is None:
                parts.append(f"{fmt(p)} {label} (not measured)")
            else:
                parts.append(f"{fmt(p)} {label}, measured {fmt(got)} ({fmt(got / p, 3)}x)")
        L += ["**Prediction.** " + "; ".join(parts) + ".", ""]
    if r is not None and as_float(r.get("predicted_ms")) is not None:
        # the three-term model (kernelbook.report.prediction), from the device table
        got = as_float(r.get("median_ms"))
        L += [
            f"**Model at {size}.** {fmt(r['predicted_ms'])} ms, {r.get('predicted_bound')}-bound"
            + (f"; measured {fmt(got)} ms ({fmt(got / r['predicted_ms'], 3)}x)" if got else "")
            + ".",
            "",
        ]
    if r is None:
        L += [f"**Measurement.** Not measured at {size}.", ""]
    elif r["status"] != "ok":
        L += [f"**Measurement at {size}.** {r['status']}: {esc(r.get('reason'))}", ""]
    else:
        line = (
            f"**Measurement at {size}.** median {fmt(r['median_ms'])} ms "
            f"(n {int(r['n_samples'])}, rse {fmt(r['rse_median'] * 100)} %), "
            f"{fmt(r.get(fom))} {unit}, **{fmt(r['pct_of_baseline'])} % of {base}** "
            f"(interval {interval(ci, 'baseline', 100.0)} %"
            + (f", {ci['vs_baseline']}" if ci else "")
            + f"; {base} {fmt(r['baseline_median_ms'])} ms), rel err {fmt(r['rel_err'])}"
        )
        if prev is not None and prev in head.index:
            p_ms = as_float(head.loc[prev, "median_ms"])
            if p_ms:
                line += f"; {fmt(p_ms / float(r['median_ms']), 3)}x the speed of {prev}"
                if ci and ci.get("prev") == prev:
                    line += f" (interval {interval(ci, 'previous')}: {ci['vs_previous']})"
        if is_true(r.get("throttled")):
            line += f". **Measured while THROTTLED** ({esc(r.get('throttle_reasons'))})"
        if r.get("variant_kind") == "tuned" and not isnull(r.get("tune_point")):
            line += f". Winner here: {point_label(r['tune_point'])}"
        L += [line + ".", ""]
    if second is not None:
        L += _second_line(v, second, base, unit, fom)
    deltas, psize = metric_deltas(data, prev, v) if prev is not None else ([], None)
    prev2 = ((second[2] if second else {}).get(v) or {}).get("prev")
    if not deltas and prev2 is not None:
        prev = prev2  # e.g. a step that runs at the second size only
        deltas, psize = metric_deltas(data, prev, v, at=second[0])
    if prev is not None and deltas:
        L += [f"**Profiler, against {prev}** (at {psize}; largest changes by ratio):", ""]
        L.append(
            md_table(
                ["metric", prev, v, "ratio"],
                [[esc(n), fmt(a), fmt(b), fmt(q, 3) + "x"] for n, a, b, q in deltas],
                "lrrr",
            )
        )
        L.append("")
    L += _against_baseline(data, v)
    L += _resources(data, v, r)
    L += _hot_loop(data, v, r)
    L += _sanitizer(data, v, r)
    return L


def _against_baseline(data: StudyData, v: str) -> list[str]:
    """For the best step at the headline: its profile against the baseline's, profiled in
    the same run (data.profiled_baselines), the metrics that differ most; nothing
    for the other steps, or where the baseline was not profiled."""
    best = summary(data)["best"]
    prof = data.table("profile")
    if not best or best["variant"] != v or prof is None:
        return []
    L = []
    for vid, name in profiled_baselines(prof):
        deltas, psize = metric_deltas(data, vid, v)
        if not deltas:
            continue
        L += [
            f"**Profiler, against the baseline ({name})** (at {psize}, the same ncu run; "
            "largest differences by ratio):",
            "",
            md_table(
                ["metric", name, v, "ratio"],
                [[esc(n), fmt(a), fmt(b), fmt(q, 3) + "x"] for n, a, b, q in deltas],
                "lrrr",
            ),
            "",
        ]
    return L


def _second_line(v: str, second, base: str, unit: str, fom: str) -> list[str]:
    """The step at the study's second headline size, one line."""
    size, rows, cis = second
    if v not in rows.index:
        return [f"**At {size}.** Not measured.", ""]
    r = rows.loc[v]
    if r["status"] != "ok":
        return [f"**At {size}.** {r['status']}: {esc(r.get('reason'))}", ""]
    ci = cis.get(v)
    line = (
        f"**At {size}.** median {fmt(r['median_ms'])} ms, {fmt(r.get(fom))} {unit}, "
        f"**{fmt(r['pct_of_baseline'])} % of {base}** "
        f"(interval {interval(ci, 'baseline', 100.0)} %)"
    )
    wide = tables.extra_baseline_columns(rows.loc[[v]]).iloc[0]
    for n in tables.extra_baseline_names(rows.loc[[v]]):
        if not isnull(wide.get(f"pct_of_{n}")):
            line += f", {fmt(wide[f'pct_of_{n}'])} % of {n} ({fmt(wide.get(f'{n}_{fom}'))} {unit})"
    if ci and ci.get("prev"):
        p_ms = as_float(rows.loc[ci["prev"], "median_ms"])
        line += (
            f"; {fmt(p_ms / float(r['median_ms']), 3)}x the speed of {ci['prev']} "
            f"(interval {interval(ci, 'previous')}: {ci['vs_previous']})"
        )
    if is_true(r.get("throttled")):
        line += f". **Measured while THROTTLED** ({esc(r.get('throttle_reasons'))})"
    return [line + ".", ""]


def _build_row(data: StudyData, v: str, r) -> pd.Series | None:
    build = data.table("build")
    if build is None:
        return None
    # a tuned variant's row is its winning candidate's: find that candidate's build
    if r is not None and not isnull(r.get("tune_point")):
        hit = build[build["variant"] == candidate_id(v, r["tune_point"])]
        if len(hit):
            return hit.iloc[-1]
    hit = build[build["variant"] == v]
    if len(hit):
        return hit.iloc[-1]
    if r is not None and not isnull(r.get("cubin_sha256")):
        hit = build[build["cubin_sha256"] == r["cubin_sha256"]]
        if len(hit):
            return hit.iloc[-1]
    return None


def _resources(data, v, r) -> list[str]:
    b = _build_row(data, v, r)
    if b is None:
        return []
    if b.get("status") == "failed":
        return [f"**Build failed** ({b['variant']}): `{inline_code(str(b['reason'])[:600])}`", ""]
    if b.get("status") == "not_compiled":  # a torch variant: nothing of its own to count
        return [f"**Resources.** None of its own: {b['reason']}.", ""]
    spill = int(b["spill_store_bytes"]) + int(b["spill_load_bytes"])
    text = (
        f"**Resources** ({b['variant']}): {int(b['registers'])} registers/thread, "
        f"{int(b['smem_static_bytes'])} B static shared memory, "
        f"{int(b['spill_store_bytes'])} B spill stores / {int(b['spill_load_bytes'])} B spill "
        f"loads, {int(b['stack_bytes'])} B stack, {int(b['sass_instructions'])} SASS "
        "instructions."
    )
    if spill:
        text += " **Spills registers.**"
    if r is not None and not isnull(r.get("smem_dynamic_bytes")) and r["smem_dynamic_bytes"]:
        text += f" Dynamic shared memory at launch: {int(r['smem_dynamic_bytes'])} B."
    return [text, ""]


# the loop's instructions by kind, in the order a reader weighs them
LOOP_KINDS = ("math", "shared load", "shared store", "global load", "global store", "barrier")


def _hot_loop(data, v, r) -> list[str]:
    """The step's hot loop from its SASS (the loops table, kernelbook.build.loops): its
    instructions an iteration by kind, the math's share, and how much of the math carries an
    operand-reuse flag; nothing where the step has no loop or no table."""
    loops, b = data.table("loops"), _build_row(data, v, r)
    if loops is None or b is None:
        return []
    sub = loops[loops["variant"] == b["variant"]]
    if sub.empty:
        return []
    first = sub.iloc[0]
    n = int(first["instructions"])
    by_kind = sub.groupby("kind")["count"].sum()
    parts = []
    for k in (*LOOP_KINDS, "other"):
        c = int(by_kind.get(k, 0))
        if not c:
            continue
        ops = sub[sub["kind"] == k].sort_values("count", ascending=False)
        top = ", ".join(f"{o} {int(x)}" for o, x in zip(ops["opcode"], ops["count"], strict=True))
        part = f"{k} {c}"
        if k == "math":
            part += f" ({fmt(100 * c / n, 3)} %: {top})"
        elif k != "other" and len(ops) <= 3:
            part += f" ({top})"
        parts.append(part)
    where = f"{first['start']} to {first['end']} in {first['function']}"
    if int(first["loops"]) > 1:
        where += f", the hottest of {int(first['loops'])} loops"
    text = f"**Hot loop (SASS)** ({b['variant']}): {n} instructions an iteration ({where}): "
    text += "; ".join(parts) + "."
    math = sub[sub["kind"] == "math"]
    if len(math) and int(math["count"].sum()):
        share = 100 * int(math["reuse"].sum()) / int(math["count"].sum())
        text += f" {fmt(share, 3)} % of the math carries an operand-reuse flag."
    return [text, ""]


def _sanitizer(data, v, r) -> list[str]:
    san = data.table("sanitizer")
    if san is None:
        return []
    sub = san[san["variant"] == v]
    if sub.empty and r is not None and not isnull(r.get("tune_point")):
        sub = san[san["variant"] == candidate_id(v, r["tune_point"])]
    if sub.empty:
        return ["**Sanitizer.** Not run for this variant.", ""]
    parts = []
    for _, s in sub.iterrows():
        if s["verdict"] == "clean":
            parts.append(f"{s['tool']} clean")
        else:
            part = (
                f"{s['tool']} **{s['verdict']}** ({s['errors']} errors, {s['warnings']} warnings)"
            )
            if not isnull(s["first_finding"]):
                part += f": `{inline_code(s['first_finding'])}`"
            parts.append(part)
    sizes = ", ".join(dict.fromkeys(sub["size"]))
    return [f"**Sanitizer** (at {sizes}): " + "; ".join(parts) + ".", ""]
