"""Publishing worklogs, their index, and the check that published numbers are still current.

    results/<gpu>/<study>/            what a run on a GPU wrote (not committed)
    worklogs/<gpu>/<study>/           what publish copies there (committed):
        README.md                     the page (named so that the folder shows it)
        worklog.html                  the same page, standalone
        figures/                      PNG + SVG of every figure on the page
        data/                         the tables (Parquet) and study.json the page was made from
    worklogs/README.md                the index: studies x GPUs with their headline numbers

Published measurements carry each kernel's source hash (source_sha256) and its config
entry's hash (spec_sha256); :func:`stale` compares them with the current sources and config.

Entry point for the rules (and anyone without the DAG):
    python -m kernelbook.report.publish publish GPU/STUDY ... copy results into worklogs/, re-index
    python -m kernelbook.report.publish render GPU/STUDY ...  render published pages again
    python -m kernelbook.report.publish index                 regenerate worklogs/README.md
    python -m kernelbook.report.publish check                 list stale studies (exit 1)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kernelbook.layout import (
    DATA_TABLES,
    WORKLOGS,
    published,
    published_paths,
    result_paths,
)

OPTIONAL = ("profile", "roofline", "sanitizer", "samples", "stages")
# Read by the page only, not by a study's own figures notebook: the stages table holds the
# time of the study_figures job, so it cannot be that job's input.
PAGE_ONLY = ("samples", "stages")


class PublishError(RuntimeError):
    """Something to publish is missing; the message names the file."""


def measured_dates(path: str | Path) -> tuple[str, str]:
    """First and last measurement date (YYYY-MM-DD) in a measurements table."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    col = pq.read_table(path, columns=["measured_at"]).column("measured_at")
    if len(col) == 0:
        return "", ""
    lo, hi = pc.min(col).as_py(), pc.max(col).as_py()
    return f"{lo:%Y-%m-%d}", f"{hi:%Y-%m-%d}"


# ------------------------------------------------------------------------------------------
# Publish


def publish(results: str | Path, worklogs: str | Path, gpu: str, study: str) -> Path:
    """Copy one study's tables, figures and worklog from results/ into worklogs/ (replacing)."""
    src = result_paths(results, gpu, study)
    required = ("measurements", "device", "build", "sass", "meta", "md", "html", "figures")
    missing = [str(src[k]) for k in required if not src[k].exists()]
    if missing:
        raise PublishError(
            f"cannot publish {gpu}/{study}: missing {', '.join(missing)} (run "
            "`snakemake --cores 1 all` on the GPU first)"
        )
    dest = Path(worklogs) / gpu / study
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{study}.", dir=dest.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; published data is for everyone
    try:
        (tmp / "data").mkdir()
        for name in DATA_TABLES:
            if src[name].is_file():
                shutil.copyfile(src[name], tmp / "data" / f"{name}.parquet")
        shutil.copy2(src["meta"], tmp / "data" / "study.json")
        shutil.copytree(src["figures"], tmp / "figures")
        shutil.copy2(src["md"], tmp / "README.md")
        shutil.copy2(src["html"], tmp / "worklog.html")
        old = None
        if dest.exists():
            old = dest.parent / f".{study}.old"
            if old.exists():
                shutil.rmtree(old)
            os.replace(dest, old)
        os.replace(tmp, dest)
        if old is not None:
            shutil.rmtree(old)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def render_tables(tables: dict[str, Path], outdir: Path, study: str, analysis="analysis"):
    """<outdir>/worklog.md, worklog.html and figures/ as measured, from these tables, with the
    study's own figures when analysis/<study>.ipynb exists: the page rule worklog makes."""
    from kernelbook.report import notebook, worklog

    tables = {k: Path(v) for k, v in tables.items() if Path(v).exists()}
    study_nb = Path(analysis) / f"{study}.ipynb"
    with tempfile.TemporaryDirectory(prefix="kernelbook-render-") as tmp:
        extra = None
        if study_nb.is_file():
            extra = Path(tmp) / "study_figures"
            own = {k: v for k, v in tables.items() if k not in PAGE_ONLY}  # as rule study_figures
            job = notebook.job(own, {"figures": extra}, {"mode": "measured"})
            notebook.run(study_nb, job, Path(tmp) / f"{study}.ipynb")
        worklog.render(tables, outdir, mode="measured", study_figures=extra)


def render_results(results, gpu: str, study: str, configfile="config/config.yaml") -> Path:
    """Render results/<gpu>/<study>/worklog.* without Snakemake, as measured."""
    from kernelbook import config as cfg
    from kernelbook.report import worklog

    paths = result_paths(results, gpu, study)
    if not paths["measurements"].is_file():
        raise PublishError(f"cannot render {gpu}/{study}: {paths['measurements']} not found")
    project = cfg.load_project_file(configfile, overrides={"studies": [study]})
    if not paths["meta"].is_file():
        worklog.write_meta(project.study(study), project.root, paths["meta"])
    names = (*DATA_TABLES, "meta")
    tables = {k: paths[k] for k in names}
    render_tables(tables, paths["md"].parent, study, project.root / "analysis")
    return paths["md"]


def render_published(worklogs, gpu: str, study: str, analysis="analysis", out=None) -> Path:
    """Render a published page again from its data/ with the current code, in place (or
    into ``out``): README.md, worklog.html and figures/. Returns the page."""
    p = published_paths(worklogs, gpu, study)
    if not p["measurements"].is_file():
        raise PublishError(f"cannot render {gpu}/{study}: {p['measurements']} not found")
    dest = Path(out) if out is not None else p["md"].parent
    with tempfile.TemporaryDirectory(prefix="kernelbook-render-") as tmp:
        tmp = Path(tmp)
        render_tables({k: p[k] for k in (*DATA_TABLES, "meta")}, tmp, study, analysis)
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tmp / "worklog.md", dest / "README.md")
        shutil.copyfile(tmp / "worklog.html", dest / "worklog.html")
        if (dest / "figures").exists():
            shutil.rmtree(dest / "figures")
        shutil.copytree(tmp / "figures", dest / "figures")
    return dest / "README.md"


# ------------------------------------------------------------------------------------------
# Index


def study_summary(worklogs: str | Path, gpu: str, study: str) -> dict:
    from kernelbook.report import worklog

    p = published_paths(worklogs, gpu, study)
    data = worklog.load({k: p[k] for k in (*DATA_TABLES, "meta")}, mode="replay")
    return worklog.summary(data)


def index(worklogs: str | Path = WORKLOGS) -> str:
    """worklogs/README.md: every published study on every GPU with its headline number."""
    from kernelbook.report.worklog import _isnull, fmt, md_table

    pairs = published(worklogs)
    lines = [
        "# Published worklogs",
        "",
        "Each study measured on each GPU. The headline number is the best variant's throughput "
        "as a percentage of the study's baseline, timed side by side at the study's headline "
        "size; for bandwidth studies, first as a percentage of a same-bytes device copy timed "
        "in the same job. Regenerated by `snakemake --cores 1 publish`; "
        "`snakemake --cores 1 all` renders every one of them from its `data/` on a machine "
        "without a GPU, and `kernelbook check` lists those whose kernels or config changed "
        "since they were measured.",
        "",
    ]
    if not pairs:
        lines.append("Nothing is published yet.")
        return "\n".join(lines) + "\n"
    sums = {(g, s): study_summary(worklogs, g, s) for g, s in pairs}
    gpus = sorted({g for g, _ in pairs})
    studies = sorted({s for _, s in pairs})
    grid = []
    for s in studies:
        title = next(sums[g, s]["title"] for g in gpus if (g, s) in sums)
        row = [f"**{s}**: {title}"]
        for g in gpus:
            if (g, s) not in sums:
                row.append("—")
                continue
            sm = sums[g, s]
            b = sm["best"]
            if not b:
                head = "no ok measurement at the headline size"
            elif not _isnull(b.get("pct_of_copy")):  # bandwidth studies: the copy roofline first
                head = (
                    f"**{fmt(b['pct_of_copy'])} %** of copy, {fmt(b['pct_of_baseline'])} % of "
                    f"{sm['baseline']} ({b['variant']})"
                )
            else:
                head = f"**{fmt(b['pct_of_baseline'])} %** of {sm['baseline']} ({b['variant']})"
            row.append(f"{head} · [worklog]({g}/{s}/README.md)")
        grid.append(row)
    lines += [md_table(["study", *gpus], grid, "l" * (len(gpus) + 1)), "", "## Details", ""]
    rows = []
    for g, s in pairs:
        sm = sums[g, s]
        b = sm["best"] or {}
        fom = "tflops" if "tflops" in b else ("gbps" if "gbps" in b else "tflops")
        dates = sm["measured_from"] + (
            f" to {sm['measured_to']}" if sm["measured_to"] != sm["measured_from"] else ""
        )
        rows.append(
            [
                s,
                sm["gpu"] or g,
                sm["headline"],
                b.get("variant", "—"),
                fmt(b.get("pct_of_baseline")),
                fmt(b.get("pct_of_copy")) if not _isnull(b.get("pct_of_copy")) else "—",
                f"{fmt(b.get(fom))} / {fmt(b.get('baseline_' + fom))}",
                str(sm["variants"]),
                dates,
                f"[page]({g}/{s}/README.md) · [html]({g}/{s}/worklog.html) · [data]({g}/{s}/data/)",
            ]
        )
    lines.append(
        md_table(
            [
                "study",
                "GPU",
                "headline size",
                "best variant",
                "% of baseline",
                "% of copy",
                "best / baseline TFLOP/s (GB/s)",
                "variants",
                "measured",
                "links",
            ],
            rows,
            "llllrrrrll",
        )
    )
    return "\n".join(lines) + "\n"


def write_index(worklogs: str | Path = WORKLOGS) -> Path:
    path = Path(worklogs) / "README.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(index(worklogs))
    return path


# ------------------------------------------------------------------------------------------
# Staleness


@dataclass(frozen=True)
class Change:
    """One way a published study no longer matches the current sources and config."""

    gpu: str
    study: str
    variant: str
    change: str  # source changed | config entry changed | added (not measured) | removed
    detail: str = ""

    def describe(self) -> str:
        """``not yet measured on nvidia-h200``, ``source changed``, ..."""
        return f"{ADDED} on {self.gpu}" if self.change == ADDED else self.change

    def as_dict(self) -> dict:
        return {
            "gpu": self.gpu,
            "study": self.study,
            "variant": self.variant,
            "change": self.change,
            "detail": self.detail,
        }


SOURCE = "source changed"
CONFIG = "config entry changed"
ADDED = "not yet measured"  # a variant added since: nothing published is wrong, just missing
REMOVED = "removed"
# How published numbers are brought up to date, said the same way by check, README and pages.
MEASURE_AND_PUBLISH = "`snakemake --cores 1 all`, then `snakemake --cores 1 publish`"


def _short(h: str) -> str:
    return str(h)[:12]


_CODE_TOKENS = re.compile(
    r'("(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\')|//[^\n]*|/\*.*?\*/', re.DOTALL
)


def strip_comments(text: str) -> str:
    """C/C++/CUDA source without comments, runs of blanks or empty lines (strings kept)."""
    code = _CODE_TOKENS.sub(lambda m: m.group(1) or " ", text)
    return "\n".join(" ".join(line.split()) for line in code.splitlines() if line.strip())


def comments_only_change(root: str | Path, rel: str, measured: list[str], depth: int = 200) -> bool:
    """Whether every measured version of ``rel`` (by SHA-256) is in git's history and differs
    from the current file in comments and blank space only: then the measurement still holds.
    False whenever that cannot be shown (no git, a version not found, a code change)."""
    import hashlib
    import subprocess

    path = Path(root) / rel
    if not measured or not path.is_file():
        return False
    now = strip_comments(path.read_text(errors="replace"))

    def git(*args):
        return subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, timeout=60, check=True
        ).stdout

    try:
        commits = git("log", f"-{depth}", "--format=%H", "--", rel).decode().split()
        found: dict[str, bytes] = {}
        for c in commits:
            blob = git("show", f"{c}:{rel}")
            h = hashlib.sha256(blob).hexdigest()
            if h in measured:
                found[h] = blob
            if len(found) == len(set(measured)):
                break
    except (OSError, subprocess.SubprocessError):
        return False
    if len(found) != len(set(measured)):
        return False
    return all(strip_comments(b.decode(errors="replace")) == now for b in found.values())


def study_changes(root: str | Path, study, meas, gpu: str) -> list[Change]:
    """What changed in one study's variants since ``meas`` (its published rows) was measured."""
    from kernelbook.build.nvcc import sha256_source

    root = Path(root)
    out: list[Change] = []
    kinds = meas["variant_kind"]
    tuned_from = meas["tuned_from"]

    def add(vid, change, detail=""):
        out.append(Change(gpu, study.name, vid, change, detail))

    def source_check(v, rows):
        path = root / v.source
        now = sha256_source(path) if path.is_file() else "missing"
        then = sorted(set(rows["source_sha256"].dropna()))
        if then != [now] and not comments_only_change(root, v.source, then):
            add(
                v.id,
                SOURCE,
                f"{v.source}: measured {', '.join(_short(h) for h in then)}, now {_short(now)}",
            )

    for v in study.variants:
        if v.is_tuned:
            rows = meas[(tuned_from == v.id) | (meas["variant"] == v.id)]
            if rows.empty:
                add(v.id, ADDED, f"{len(v.candidates)} candidates")
                continue
            source_check(v, rows)
            now = {c.id: c.spec_sha256() for c in study.candidates if c.tuned_from == v.id}
            cand = rows[kinds.loc[rows.index] == "candidate"]
            if len(cand):
                then = dict(zip(cand["variant"], cand["spec_sha256"], strict=True))
                new = sorted(set(now) - set(then))
                gone = sorted(set(then) - set(now))
                changed = sorted(c for c in set(now) & set(then) if now[c] != then[c])
                parts = []
                if new:
                    parts.append(f"{len(new)} candidate(s) not measured (e.g. {new[0]})")
                if gone:
                    parts.append(f"{len(gone)} measured candidate(s) no longer in the space")
                if changed:
                    parts.append(f"{len(changed)} candidate entries changed")
                if parts:
                    add(v.id, CONFIG, "; ".join(parts))
            else:
                specs = set(rows["spec_sha256"].dropna())
                if not specs <= set(now.values()):
                    add(v.id, CONFIG, "the tuned winner is no longer a candidate of the space")
        else:
            rows = meas[(meas["variant"] == v.id) & (kinds != "candidate")]
            if rows.empty:
                add(v.id, ADDED)
                continue
            source_check(v, rows)
            then = sorted(set(rows["spec_sha256"].dropna()))
            now = v.spec_sha256()
            if then != [now]:
                add(
                    v.id,
                    CONFIG,
                    f"{study.path}: measured {', '.join(_short(h) for h in then)}, "
                    f"now {_short(now)}",
                )
    known = {v.id for v in study.variants}
    main = meas[kinds != "candidate"]
    for vid in dict.fromkeys(main["variant"]):
        if vid not in known:
            add(vid, REMOVED, f"not in {study.path} any more")
    return out


def study_for(project, name: str):
    """The study from the project, else from its file in study_dir, else None."""
    from kernelbook import config as cfg

    if name in project.studies:
        return project.studies[name]
    path = project.root / project.settings["study_dir"] / f"{name}.yaml"
    if not path.is_file():
        return None
    return cfg.load_study(path, project.settings, project.root)


def stale(project, worklogs_dir: str | Path = WORKLOGS) -> list[Change]:
    """Every published (gpu, study, variant) that no longer matches the current sources.

    ``project`` is a kernelbook.config.Project; a published study missing from its config
    is still checked against config/studies/<study>.yaml, and reported removed without one.
    """
    from kernelbook import tables

    worklogs_dir = Path(worklogs_dir)
    if not worklogs_dir.is_absolute():
        worklogs_dir = Path(project.root) / worklogs_dir
    out: list[Change] = []
    for gpu, name in published(worklogs_dir):
        meas = tables.read(published_paths(worklogs_dir, gpu, name)["measurements"])
        study = study_for(project, name)
        if study is None:
            main = meas[meas["variant_kind"] != "candidate"]
            for vid in dict.fromkeys(main["variant"]):
                out.append(Change(gpu, name, vid, REMOVED, f"study '{name}' has no config"))
            continue
        out += study_changes(project.root, study, meas, gpu)
    return out


def check(project, worklogs_dir: str | Path = WORKLOGS, out=None) -> int:
    """Print the stale published studies by variant; 1 when any is stale, else 0."""
    out = out or sys.stdout
    worklogs_dir = Path(worklogs_dir)
    root = worklogs_dir if worklogs_dir.is_absolute() else Path(project.root) / worklogs_dir
    pairs = published(root)
    if not pairs:
        print(f"kernelbook check: nothing published under {worklogs_dir}/", file=out)
        return 0
    changes = stale(project, root)
    by: dict[tuple[str, str], list[Change]] = {}
    for c in changes:
        by.setdefault((c.gpu, c.study), []).append(c)
    for gpu, study in pairs:
        cs = by.get((gpu, study), [])
        if not cs:
            print(f"{gpu}/{study}: up to date", file=out)
            continue
        changed = {c.variant for c in cs if c.change != ADDED}
        new = {c.variant for c in cs if c.change == ADDED}
        head = [f"STALE ({len(changed)} variant(s))"] if changed else []
        head += [f"{len(new)} variant(s) {ADDED} on {gpu}"] if new else []
        print(f"{gpu}/{study}: {'; '.join(head)}", file=out)
        width = max(len(c.variant) for c in cs)
        for c in cs:
            detail = f": {c.detail}" if c.detail else ""
            print(f"  {c.variant:<{width}}  {c.describe()}{detail}", file=out)
    if changes:
        stale_pairs = {k for k, cs in by.items() if any(c.change != ADDED for c in cs)}
        new_pairs = {k for k, cs in by.items() if any(c.change == ADDED for c in cs)}
        parts = [f"{len(stale_pairs)} stale"] if stale_pairs else []
        parts += [f"{len(new_pairs)} with variants {ADDED}"] if new_pairs else []
        print(
            f"kernelbook check: {' and '.join(parts)} of {len(pairs)} published study/GPU "
            f"pair(s); on that GPU run {MEASURE_AND_PUBLISH}",
            file=out,
        )
        return 1
    print(f"kernelbook check: all {len(pairs)} published study/GPU pair(s) up to date", file=out)
    return 0


# ------------------------------------------------------------------------------------------
# The analysis stage's view: which pages to render, from which tables, what to publish


class Worklogs:
    """Input functions of workflow/rules/analysis.smk (kept here: a rules file holds rules).

    A (gpu, study) is *measured here* when this run has that GPU and the study is
    configured: its worklog reads results/. Any other (gpu, study) is rendered from its
    published data in worklogs/<gpu>/<study>/data/, not re-measured. Either way the page
    goes to results/<gpu>/<study>/, so no output pattern is shared with the measuring rules.
    """

    REQUIRED = ("measurements", "device", "build", "sass", "meta")
    OWN_RULES = frozenset({"worklog", "study_figures", "study_meta", "publish"})

    def __init__(
        self,
        results: str,
        gpu_slug: str | None,
        project,
        workflow=None,
        worklogs: str = WORKLOGS,
        analysis: str | Path = "analysis",
        no_gpu_why: str = "",
    ):
        self.results = results
        self.gpu = gpu_slug if gpu_slug and gpu_slug != "none" else None
        self.project = project
        self.workflow = workflow
        self.worklogs = worklogs
        self.analysis = Path(analysis)
        self.no_gpu_why = no_gpu_why

    # -- where tables come from
    def measured_here(self, gpu: str, study: str) -> bool:
        return self.gpu is not None and gpu == self.gpu and study in self.project.studies

    def producible(self, path: str) -> bool:
        """Some other rule makes ``path`` (profile and sanitize stages may be absent)."""
        rules = getattr(self.workflow, "rules", None) or ()
        return any(r.name not in self.OWN_RULES and r.is_producer(path) for r in rules)

    def study_tables(self, wildcards, page: bool = False) -> dict[str, str]:
        """The tables a study's figures (and with ``page``, its page) are made from."""
        gpu, study = wildcards.gpu, wildcards.study
        optional = OPTIONAL if page else tuple(n for n in OPTIONAL if n not in PAGE_ONLY)
        if self.measured_here(gpu, study):
            paths = result_paths(self.results, gpu, study)
            named = {k: str(paths[k]) for k in self.REQUIRED}
            for name in optional:
                if self.producible(str(paths[name])) or paths[name].is_file():
                    named[name] = str(paths[name])
            return named
        # published data: only the measurements are required (older publications may lack
        # a table; the page then says what it could not show)
        paths = published_paths(self.worklogs, gpu, study)
        named = {"measurements": str(paths["measurements"])}
        for name in (*self.REQUIRED, *optional):
            if name != "measurements" and paths[name].is_file():
                named[name] = str(paths[name])
        return named

    def worklog_inputs(self, wildcards) -> dict[str, str]:
        """The tables, plus the study notebook's figures when analysis/<study>.ipynb exists."""
        named = self.study_tables(wildcards, page=True)
        if (self.analysis / f"{wildcards.study}.ipynb").is_file():
            named["study_figures"] = (
                f"{self.results}/{wildcards.gpu}/{wildcards.study}/study_figures"
            )
        return named

    def mode(self, wildcards) -> str:
        return "measured" if self.measured_here(wildcards.gpu, wildcards.study) else "replay"

    def stale(self, wildcards) -> str:
        """JSON of what changed since a published study was measured ([] when measured here)."""
        if self.measured_here(wildcards.gpu, wildcards.study):
            return "[]"
        from kernelbook import tables

        path = published_paths(self.worklogs, wildcards.gpu, wildcards.study)["measurements"]
        study = study_for(self.project, wildcards.study)
        if study is None or not path.is_file():
            return "[]"
        changes = study_changes(self.project.root, study, tables.read(path), wildcards.gpu)
        return json.dumps([c.as_dict() for c in changes], sort_keys=True)

    # -- study.json
    def study_spec(self, wildcards) -> str:
        """Hash of what study.json is made of: a change to any of it rewrites the file."""
        import hashlib

        study = self.project.study(wildcards.study)
        text = json.dumps(
            {
                "title": study.title,
                "question": study.question,
                "headline": study.headline,
                "sizes": study.sizes,
                "references": study.references,
                "variants": [
                    {**v.spec(), "id": v.id, "says": v.says, "predict": v.predict}
                    for v in (*study.variants, *study.candidates)
                ],
            },
            sort_keys=True,
            default=str,
        )
        return hashlib.sha256(text.encode()).hexdigest()

    def study_sources(self, wildcards) -> list[str]:
        return sorted({v.source for v in self.project.study(wildcards.study).variants})

    # -- targets
    def pairs(self) -> list[tuple[str, str]]:
        """(gpu, study) rendered by default: measured ones with a GPU, else all published."""
        if self.gpu is not None:
            return [(self.gpu, s) for s in self.project.studies]
        return published(self.worklogs)

    def targets(self, gpu_slug: str | None = "") -> list[str]:
        """worklog.md and .html for rule all.

        With a GPU (its slug): the studies this run measures. Without (None or "none"):
        every study published under worklogs/, rendered from its data.
        """
        if gpu_slug == "":
            pairs = self.pairs()
        elif gpu_slug and gpu_slug != "none":
            pairs = [(gpu_slug, s) for s in self.project.studies]
        else:
            pairs = published(self.worklogs)
        return [f"{self.results}/{g}/{s}/worklog.{ext}" for g, s in pairs for ext in ("md", "html")]

    def publish_pairs(self) -> list[tuple[str, str]]:
        """What `snakemake publish` copies: the studies measured on this machine's GPU."""
        return [(self.gpu, s) for s in self.project.studies] if self.gpu else []

    def publish_inputs(self, wildcards=None) -> list[str]:
        out = []
        for gpu, study in self.publish_pairs():
            paths = result_paths(self.results, gpu, study)
            out += [str(paths["md"]), str(paths["html"])]
        return out

    def publish_args(self, wildcards=None) -> str:
        import shlex

        if not self.publish_pairs():
            return "--why-none " + shlex.quote(self.no_gpu_why or "no GPU here")
        return " ".join(f"{g}/{s}" for g, s in self.publish_pairs())

    def announce(self, file=None) -> str:
        """Say, once per run, which published worklogs are rendered without measuring."""
        if self.gpu is not None:
            return ""
        pairs = published(self.worklogs)
        if not pairs:
            return ""
        when = []
        for g, s in pairs:
            lo, hi = measured_dates(published_paths(self.worklogs, g, s)["measurements"])
            when.append(f"{g}/{s} (measured {lo}{'' if hi == lo else ' to ' + hi})")
        text = (
            f"kernelbook: rendering {len(pairs)} published worklog(s) from {self.worklogs}/ "
            f"(measured elsewhere, not re-measured here): {', '.join(when)}"
        )
        print(text, file=file or sys.stderr)
        return text


# ------------------------------------------------------------------------------------------
# python -m kernelbook.report.publish ...


def main(argv=None) -> int:
    from kernelbook import config as cfg

    p = argparse.ArgumentParser(
        prog="python -m kernelbook.report.publish",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--configfile", default="config/config.yaml")
    p.add_argument("--settings", help="JSON overriding keys of the config file")
    p.add_argument("--worklogs", default=WORKLOGS)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("publish", help="copy results/<gpu>/<study> into worklogs/, re-index")
    s.add_argument("--results", default="results")
    s.add_argument("--why-none", default="", help="said when there is nothing to publish")
    s.add_argument(
        "--render",
        action="store_true",
        help="render the worklog from the results' tables first, without Snakemake (for "
        "results measured on a GPU host and brought here); the page is the one rule worklog "
        "makes, the study's own notebook figures included",
    )
    s.add_argument("pairs", nargs="*", metavar="GPU/STUDY")
    s = sub.add_parser("render", help="render published pages again from their data/")
    s.add_argument("pairs", nargs="+", metavar="GPU/STUDY")
    sub.add_parser("index", help="regenerate worklogs/README.md")
    s = sub.add_parser("check", help="list published studies stale against current sources")
    s.add_argument("--json", action="store_true", help="print the changes as JSON")
    args = p.parse_args(argv)
    try:
        if args.command == "publish":
            if not args.pairs:
                print(
                    "kernelbook publish: nothing measured here to publish"
                    + (f" ({args.why_none})" if args.why_none else "")
                )
            for pair in args.pairs:
                gpu, _, study = pair.partition("/")
                if args.render:
                    render_results(args.results, gpu, study, args.configfile)
                dest = publish(args.results, args.worklogs, gpu, study)
                print(f"kernelbook publish: {gpu}/{study} -> {dest}/")
            path = write_index(args.worklogs)
            print(
                f"kernelbook publish: index of {len(published(args.worklogs))} worklog(s): {path}"
            )
            return 0
        if args.command == "render":
            analysis = Path(args.configfile).resolve().parent.parent / "analysis"
            for pair in args.pairs:
                gpu, _, study = pair.partition("/")
                page = render_published(args.worklogs, gpu, study, analysis)
                print(f"kernelbook publish: {gpu}/{study} rendered again: {page}")
            return 0
        if args.command == "index":
            print(write_index(args.worklogs))
            return 0
        overrides = json.loads(args.settings) if args.settings else None
        project = cfg.load_project_file(args.configfile, overrides=overrides)
        if args.json:
            changes = stale(project, args.worklogs)
            print(json.dumps([c.as_dict() for c in changes], indent=1))
            return 1 if changes else 0
        return check(project, args.worklogs)
    except (cfg.ConfigError, PublishError) as e:
        print(f"kernelbook: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
