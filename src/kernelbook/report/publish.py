"""Publishing a study: its tables, figures and page copied from results/ into worklogs/, and
pages rendered again from published data.

    results/<gpu>/<study>/            what a run on a GPU wrote (not committed)
    worklogs/<gpu>/<study>/           what publish copies there (committed):
        README.md                     the page (named so that the folder shows it)
        worklog.html                  the same page, standalone
        figures/                      PNG + SVG of every figure on the page
        data/                         the tables (Parquet) and study.json the page was made from
    worklogs/README.md                the index (kernelbook.report.index)

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
import shutil
import sys
import tempfile
from pathlib import Path

from kernelbook.layout import (
    DATA_TABLES,
    WORKLOGS,
    published,
    published_paths,
    result_paths,
)
from kernelbook.report.data import measured_dates
from kernelbook.report.index import index, write_index  # noqa: F401  (index: tests/test_slurm.py)
from kernelbook.report.stale import check, stale, study_changes, study_for

OPTIONAL = ("profile", "roofline", "sanitizer", "samples", "stages")
# Read by the page only, not by a study's own figures notebook: the stages table holds the
# time of the study_figures job, so it cannot be that job's input.
PAGE_ONLY = ("samples", "stages")


class PublishError(RuntimeError):
    """Something to publish is missing; the message names the file."""


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
    from kernelbook.report import meta

    paths = result_paths(results, gpu, study)
    if not paths["measurements"].is_file():
        raise PublishError(f"cannot render {gpu}/{study}: {paths['measurements']} not found")
    project = cfg.load_project_file(configfile, overrides={"studies": [study]})
    if not paths["meta"].is_file():
        meta.write_meta(project.study(study), project.root, paths["meta"])
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
