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
from kernelbook.report.index import index, write_index  # noqa: F401  (index: tests/test_slurm.py)
from kernelbook.report.sources import PAGE_ONLY
from kernelbook.report.stale import check, stale


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
