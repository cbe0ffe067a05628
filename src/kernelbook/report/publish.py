"""Publishing a study: its tables, figures and page copied from results/ into worklogs/, and
pages rendered again from published data.

    results/<gpu>/<study>/            what a run on a GPU wrote (not committed)
    worklogs/<gpu>/<study>/           what publish copies there (committed):
        README.md                     the page (named so that the folder shows it)
        worklog.html                  the same page, standalone
        figures/                      PNG + SVG of every figure on the page
        data/                         the tables (Parquet) and study.json the page was made from
        before-after*.md              where made (kernelbook before-after): kept by a new publish
    worklogs/README.md                the index (kernelbook.report.index)

Through the command line (kernelbook.cli), for the rules and anyone without the DAG:
    kernelbook publish GPU/STUDY ...   copy results into worklogs/, re-index
    kernelbook render GPU/STUDY ...    render published pages again from their data/
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from kernelbook import runlog
from kernelbook.layout import (
    DATA_TABLES,
    benchmarks_dir,
    published,
    published_paths,
    result_paths,
    runs_dir,
)
from kernelbook.report.index import write_index
from kernelbook.report.sources import PAGE_ONLY

# Files of a published folder that no run writes (kernelbook before-after's records of a change
# of method, between two published revisions: before-after.md, before-after-NAME.md):
# publishing the study again keeps them.
KEPT = "before-after*.md"


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
        if src["run"].is_file():
            shutil.copy2(src["run"], tmp / "data" / "run.json")
        shutil.copytree(src["figures"], tmp / "figures")
        shutil.copy2(src["md"], tmp / "README.md")
        shutil.copy2(src["html"], tmp / "worklog.html")
        for kept in dest.glob(KEPT) if dest.is_dir() else ():  # made beside a page, not
            shutil.copy2(kept, tmp / kept.name)  # by the run: a new run keeps them
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
    # the run's wall time so far (kernelbook.runlog), for the page's pipeline cost
    runlog.write(runs_dir(gpu, results), benchmarks_dir(results), paths["run"], study)
    project = cfg.load_project_file(configfile, overrides={"studies": [study]})
    # study.json as rule study_meta writes it from the current config: a `snakemake tables`
    # run does not rewrite it, so one written before a variant was added would leave that
    # variant out of the page's ladder
    want = json.loads(json.dumps(meta.study_meta(project.study(study), project.root)))
    if not paths["meta"].is_file() or json.loads(paths["meta"].read_text()) != want:
        meta.write_meta(project.study(study), project.root, paths["meta"])
    names = (*DATA_TABLES, "meta", "run")
    tables = {k: paths[k] for k in names}
    render_tables(tables, paths["md"].parent, study, project.root / "analysis")
    return paths["md"]


def refresh_meta(worklogs, gpu: str, study: str, configfile="config/config.yaml") -> Path:
    """Write a published study's data/study.json again from the current config (its title,
    question, targets, variants' texts), so that its page shows them without measuring again.
    Refused while the study is stale: the page's numbers must be of the kernels it names."""
    from kernelbook import config as cfg
    from kernelbook.report import meta, stale

    p = published_paths(worklogs, gpu, study)
    if not p["measurements"].is_file():
        raise PublishError(f"cannot render {gpu}/{study}: {p['measurements']} not found")
    project = cfg.load_project_file(configfile)
    found = stale.study_for(project, study)
    if found is None:
        raise PublishError(f"{gpu}/{study}: no study file for it in this project")
    changed = json.loads(stale.changes_json(project, worklogs, gpu, study))
    if changed:
        what = "; ".join(f"{c['variant']}: {c['change']}" for c in changed)
        raise PublishError(
            f"{gpu}/{study} is stale ({what}): its study.json is not rewritten from the current "
            "config; measure it again (snakemake tables) and publish"
        )
    meta.write_meta(found, project.root, p["meta"])
    return p["meta"]


def render_published(worklogs, gpu: str, study: str, analysis="analysis", out=None) -> Path:
    """Render a published page again from its data/ with the current code, in place (or
    into ``out``): README.md, worklog.html and figures/. Returns the page."""
    p = published_paths(worklogs, gpu, study)
    if not p["measurements"].is_file():
        raise PublishError(f"cannot render {gpu}/{study}: {p['measurements']} not found")
    dest = Path(out) if out is not None else p["md"].parent
    with tempfile.TemporaryDirectory(prefix="kernelbook-render-") as tmp:
        tmp = Path(tmp)
        render_tables({k: p[k] for k in (*DATA_TABLES, "meta", "run")}, tmp, study, analysis)
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tmp / "worklog.md", dest / "README.md")
        shutil.copyfile(tmp / "worklog.html", dest / "worklog.html")
        if (dest / "figures").exists():
            shutil.rmtree(dest / "figures")
        shutil.copytree(tmp / "figures", dest / "figures")
    return dest / "README.md"


# ------------------------------------------------------------------------------------------
# The verbs `kernelbook publish` and `kernelbook render`


def publish_pairs(
    results: str | Path,
    worklogs: str | Path,
    pairs: list[str],
    render: bool = False,
    configfile: str | Path = "config/config.yaml",
    why_none: str = "",
) -> int:
    """Publish each GPU/STUDY of ``pairs`` (rendering it first with ``render``), then write the
    index; says what it did. 1 when something to publish is missing, else 0."""
    try:
        if not pairs:
            print(
                "kernelbook publish: nothing measured here to publish"
                + (f" ({why_none})" if why_none else "")
            )
        for pair in pairs:
            gpu, study = split_pair(pair)
            if render:
                render_results(results, gpu, study, configfile)
            dest = publish(results, worklogs, gpu, study)
            print(f"kernelbook publish: {gpu}/{study} -> {dest}/")
    except PublishError as e:
        print(f"kernelbook: error: {e}", file=sys.stderr)
        return 1
    path = write_index(worklogs)
    print(f"kernelbook publish: index of {len(published(worklogs))} worklog(s): {path}")
    return 0


def split_pair(pair: str) -> tuple[str, str]:
    """GPU/STUDY as (gpu, study); a trailing slash (what a shell completes) is dropped, and
    anything else than two names is refused by name."""
    parts = pair.strip("/").split("/")
    if len(parts) != 2 or not all(parts):
        raise PublishError(f"{pair!r} is not GPU/STUDY (e.g. nvidia-h200/sgemm)")
    return parts[0], parts[1]


def render_pairs(
    worklogs: str | Path,
    pairs: list[str],
    configfile: str | Path = "config/config.yaml",
    study_config: bool = False,
) -> int:
    """Render each published GPU/STUDY of ``pairs`` again from its data/, in place; with
    ``study_config``, its data/study.json is written again from the current config first."""
    analysis = Path(configfile).resolve().parent.parent / "analysis"
    try:
        for pair in pairs:
            gpu, study = split_pair(pair)
            if study_config:
                refresh_meta(worklogs, gpu, study, configfile)
            page = render_published(worklogs, gpu, study, analysis)
            print(f"kernelbook publish: {gpu}/{study} rendered again: {page}")
    except PublishError as e:
        print(f"kernelbook: error: {e}", file=sys.stderr)
        return 1
    return 0
