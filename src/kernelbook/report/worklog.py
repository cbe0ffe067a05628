"""A study's worklog put together: the figures its data allows, and its page's sections in
order, written as worklog.md, worklog.html and figures/.

The analysis notebook (analysis/worklog.ipynb) is a thin driver of this module:

    data = worklog.load(paths, mode="measured" | "replay")
    figs = worklog.make_figures(data, figures_dir, study_figures=None)
    worklog.write(data, figs, "worklog.md", "worklog.html")

Every number on the page is formatted from the tables by kernelbook.report.markdown.fmt
(four significant digits), so a reader can parse the page back and compare it with the
data. Nothing is hidden: skipped sizes, failed candidates, throttled or unconverged
measurements, wrong results and sanitizer findings are listed near the top and in the full
table.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from kernelbook.report import (
    claims,
    compare,
    diagnostics,
    figures,
    plot,
    quality,
    targets,
)
from kernelbook.report.data import (
    StudyData,
    baseline_label,
    candidate_rows,
    copy_word,
    figure_of_merit,
    headline_rows,
    headline_size,
    ladder_order,
    load,
    main_rows,
    metric_table,
    problem_attr,
    profile_size,
    rows_at,
    second_size,
    sizes_by_flop,
    summary,
)
from kernelbook.report.html import markdown_to_html
from kernelbook.report.markdown import as_float, esc, fmt, md_table
from kernelbook.report.sections import (
    attention,
    extra_baselines_lines,
    failures_section,
    full_table,
    provenance,
    regenerate_commands,
    sorted_rows,
)
from kernelbook.report.steps import interval as ci_text
from kernelbook.report.steps import ladder_table, variant_section

# ------------------------------------------------------------------------------------------
# Figures


def make_figures(
    data: StudyData, outdir: str | Path, study_figures: str | Path | None = None
) -> list[plot.Figure]:
    """Draw every standard figure the data allows; a figure it cannot draw says why."""
    import shutil

    plot.style()
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    order = ladder_order(data)
    size = headline_size(data)
    base = baseline_label(data)
    fom = figure_of_merit(data)
    head = headline_rows(data)
    main = main_rows(data)
    out: list[plot.Figure] = []

    def attempt(name: str, title: str, fn):
        try:
            out.append(fn())
        except plot.NoData as e:
            out.append(plot.Figure(name, title, skipped=str(e)))

    attempt(
        "ladder",
        f"% of {base} per variant",
        lambda: figures.ladder(
            head,
            order,
            outdir,
            size_label=size,
            baseline_label=base,
            references=data.meta.get("references", []),
        ),
    )
    second = data.meta.get("second_headline")
    if second:
        rows = main[main["size"] == second].drop_duplicates("variant", keep="last")
        name = f"ladder_{second}"
        attempt(
            name,
            f"% of {base} per variant at {second}",
            lambda: figures.ladder(
                rows.set_index("variant", drop=False),
                order,
                outdir,
                size_label=second,
                baseline_label=base,
                name=name,
            ),
        )
    attempt(
        "sweep",
        "throughput against problem size",
        lambda: figures.sweep(main, order, outdir, metric=fom, baseline_label=base),
    )
    facets = problem_attr(data, "sweep_facets", None)
    if facets:  # e.g. attention: against S, a panel per D and causal
        attempt(
            "sweep_facets",
            f"throughput against {facets[0]} per {', '.join(facets[1])}",
            lambda: figures.sweep_facets(
                main,
                order,
                outdir,
                x=facets[0],
                by=tuple(facets[1]),
                metric=fom,
                baseline_label=base,
            ),  # fmt: skip
        )

    def roof():
        r = data.table("roofline")
        if r is None:
            raise plot.NoData("no roofline table (roofline.parquet) for this study")
        s = profile_size(data, r)
        return figures.roofline(
            r[r["size"] == s].drop_duplicates("variant", keep="last"),
            order,
            outdir,
            ceil=figures.ceilings(data.table("device")),
            size_label=s,
            peak_kind=problem_attr(data, "peak", "fp32"),  # fp32 or bf16_tensor
        )

    attempt("roofline", "Hierarchical roofline", roof)

    def heat():
        t, s, _ = metric_table(data)
        if t is None:
            raise plot.NoData("no profile or roofline table for this study")
        return diagnostics.heatmap(t, outdir, size_label=s)

    attempt("metrics", "Profiler metrics per variant", heat)

    predicted = {
        v["id"]: float(v["predict"]["pct_of_baseline"])
        for v in data.meta.get("variants", [])
        if "pct_of_baseline" in (v.get("predict") or {})
    }
    measured = {v: as_float(head.loc[v, "pct_of_baseline"]) for v in head.index}
    measured = {k: v for k, v in measured.items() if v is not None}
    attempt(
        "prediction",
        "Prediction against measurement",
        lambda: diagnostics.prediction(
            predicted, measured, order, outdir, baseline_label=base, size_label=size
        ),
    )
    attempt(
        "distribution",
        "Sample distribution at the headline size",
        lambda: quality.distribution(
            data.measurements, data.table("samples"), order, outdir, size_label=size
        ),
    )
    attempt(
        "autotune",
        "Autotuning search",
        lambda: diagnostics.autotune(
            candidate_rows(data), main[main["variant_kind"] == "tuned"], outdir, metric=fom
        ),
    )
    if study_figures is not None and Path(study_figures).is_dir():
        for f in plot.read_manifest(study_figures):
            if f.drawn:
                for name in filter(None, (f.png, f.svg)):
                    shutil.copy2(Path(study_figures) / name, outdir / name)
            out.append(f)
    return out


# ------------------------------------------------------------------------------------------
# The page


def figure_md(f: plot.Figure, prefix: str = "figures") -> str:
    if not f.drawn:
        return f"*{f.title}: not drawn: {f.skipped}.*"
    img = f"![{f.title}]({prefix}/{f.png})"
    link = f"[{img}]({prefix}/{f.svg})" if f.svg else img
    return f"{link}\n\n*{f.caption}*" if f.caption else link


def second_ladder_lines(data, order, second, base, unit, fom, fig, prefix) -> list[str]:
    """The ladder at the study's second headline size: its best step, figure and table."""
    size2, head2, cis2 = second
    ok = head2[(head2["status"] == "ok") & head2["pct_of_baseline"].notna()]
    L = [f"## The ladder at {size2}", ""]
    if not ok.empty:
        best = ok.loc[ok["pct_of_baseline"].astype(float).idxmax()]
        ci = cis2.get(best["variant"])
        L += [
            f"**Best at {size2}: {best['variant']}**, {fmt(best.get(fom))} {unit}, "
            f"**{fmt(best['pct_of_baseline'])} % of {base}** ({fmt(best.get(f'baseline_{fom}'))} "
            f"{unit}; interval {ci_text(ci, 'baseline', 100)} %"
            + (f", {ci['vs_baseline']}" if ci else "")
            + ").",
            "",
        ]
        L += extra_baselines_lines(head2, best["variant"], fom, unit)
    if fig is not None:
        L += [figure_md(fig, prefix), ""]
    L += [ladder_table(data, order, head2, base, unit, fom, cis2, predicted=False), ""]
    return L


def render_markdown(
    data: StudyData,
    figs: list[plot.Figure],
    stale: list[dict] | None = None,
    figures_prefix: str = "figures",
) -> str:
    meta = data.meta
    order = ladder_order(data)
    size = headline_size(data)
    base = baseline_label(data)
    fom = figure_of_merit(data)
    unit = "TFLOP/s" if fom == "tflops" else "GB/s"
    head = headline_rows(data)
    prov = provenance(data)
    byname = {f.name: f for f in figs}
    s = summary(data)
    cis = compare.ladder_intervals(head, order, data.table("samples"), claims.named(data, order))
    checks = claims.checks(data, order, cis, head, base, size)
    L: list[str] = []
    L.append(f"# {meta.get('title') or data.study}")
    L.append("")
    if meta.get("question"):
        L.append(f"**Question.** {meta['question']}")
        L.append("")
    L += failures_section(data)
    if data.mode == "replay":
        L.append(
            f"> **Rendered from published data measured on {s['measured_from']}"
            + (f" to {s['measured_to']}" if s["measured_to"] != s["measured_from"] else "")
            + f" on an {prov['GPU']}, not re-measured here.** The tables are in `data/` of "
            f"this study's published folder."
        )
        L.append("")
    if s["best"]:
        b = s["best"]
        best = cis.get(b["variant"])
        vs_base = (
            f"; interval {ci_text(best, 'baseline', 100)} %, {best['vs_baseline']}" if best else ""
        )
        vs_copy = f" (interval {ci_text(best, 'copy', 100)} %)" if best else ""
        L.append(
            f"**Answer at {size}.** The best variant, **{b['variant']}**, reaches "
            f"**{fmt(b['pct_of_baseline'])} % of {base}** ({fmt(b.get(fom))} {unit} against "
            f"{fmt(b.get(f'baseline_{fom}'))} {unit}{vs_base})"
            + (
                f" and **{fmt(b['pct_of_copy'])} % of "
                f"{'a streaming read' if copy_word(b) == 'read' else 'a device copy'}** of the "
                f"same bytes timed beside it{vs_copy}."
                if b.get("pct_of_copy") is not None
                else "."
            )
        )
        L.append("")
        L += extra_baselines_lines(head, b["variant"], fom, unit)

    L.append("## Provenance")
    L.append("")
    L.append(md_table(["", ""], [[k, esc(v)] for k, v in prov.items()], "ll"))
    L.append("")
    L.append("How to regenerate:")
    L.append("")
    L.append("```sh\n" + regenerate_commands(data) + "\n```")
    L.append("")

    L.append("## Read this first")
    L.append("")
    found = targets.evaluate(data)
    notes = attention(data, stale) + targets.notes(found) + claims.notes(checks, size)
    if notes:
        L += [f"- {n}" for n in notes]
    else:
        L.append(
            "Nothing to flag: every measurement passed its correctness check, none was "
            "skipped, failed, throttled or stopped before converging."
        )
    L.append("")

    L.append(f"## The ladder at {size}")
    L.append("")
    if "ladder" in byname:
        L.append(figure_md(byname["ladder"], figures_prefix))
        L.append("")
    L.append(ladder_table(data, order, head, base, unit, fom, cis))
    L.append("")
    L.append(compare.method_note(data.table("samples")))
    L.append("")

    second = None
    if size2 := second_size(data):
        head2 = rows_at(data, size2)
        cis2 = compare.ladder_intervals(head2, order, data.table("samples"))
        second = (size2, head2, cis2)
        L += second_ladder_lines(
            data, order, second, base, unit, fom, byname.get(f"ladder_{size2}"), figures_prefix
        )

    L += targets.section_lines(data, found)
    L += quality.spread_section(data.measurements, base, fmt)

    L.append("## Step by step")
    L.append("")
    prev = None
    for v in order:
        L += variant_section(data, v, prev, head, base, unit, fom, cis, checks, second)
        if v in head.index and head.loc[v, "status"] == "ok":
            prev = v

    # the ladders are drawn in their own sections
    others = [f for f in figs if f.name != "ladder" and not f.name.startswith("ladder_")]
    if others:
        L.append("## Figures")
        L.append("")
        for f in others:
            if f.drawn:
                L.append(f"### {f.title}")
                L.append("")
            L.append(figure_md(f, figures_prefix))
            L.append("")

    L += quality.stages_section(
        data.table("stages"), fmt, data.run, data.table("measurements"), data.table("profile")
    )

    L.append("## All measurements")
    L.append("")
    L.append(
        f"Every (variant, size) row of the measurements table: medians over n timed launches "
        f"(rse: relative standard error of the median), {base} timed beside each one; "
        f"interval: the bootstrap interval of % of {base} (as in the ladder). "
        f"Skipped and failed rows keep their reason."
    )
    L.append("")
    samples = data.table("samples")
    L.append(full_table(data, sorted_rows(data, compare.with_intervals(main_rows(data), samples))))
    L.append("")
    cand = candidate_rows(data)
    if len(cand):
        L.append("## Autotuning candidates")
        L.append("")
        L.append(
            f"{len(cand)} rows: every candidate at every size it was benched at, fastest first "
            "per size."
        )
        L.append("")
        order_sz = {x: i for i, x in enumerate(sizes_by_flop(data.measurements))}
        cand = cand.assign(_s=cand["size"].map(order_sz)).sort_values(
            ["tuned_from", "_s", "median_ms"], kind="stable", na_position="last"
        )
        L.append(full_table(data, compare.with_intervals(cand.drop(columns="_s"), samples)))
        L.append("")
    return "\n".join(L).rstrip() + "\n"


def write(
    data: StudyData,
    figs: list[plot.Figure],
    md_path: str | Path,
    html_path: str | Path | None = None,
    stale: list[dict] | None = None,
) -> str:
    """Write worklog.md (and worklog.html); figures are linked as figures/<name> beside it."""
    md_path = Path(md_path)
    md = render_markdown(data, figs, stale)
    md_path.parent.mkdir(parents=True, exist_ok=True)
    md_path.write_text(md)
    if html_path is not None:
        title = data.meta.get("title") or data.study
        Path(html_path).write_text(markdown_to_html(md, md_path.parent, title))
    return md


def render(
    paths: Mapping[str, str | Path],
    outdir: str | Path,
    mode: str = "measured",
    study_figures: str | Path | None = None,
    stale: list[dict] | None = None,
) -> tuple[StudyData, list[plot.Figure]]:
    """What the notebook does, in one call: <outdir>/worklog.md, worklog.html, figures/."""
    outdir = Path(outdir)
    data = load(paths, mode=mode)
    figs = make_figures(data, outdir / "figures", study_figures=study_figures)
    write(data, figs, outdir / "worklog.md", outdir / "worklog.html", stale=stale)
    return data, figs
