# Input functions and targets of the analysis stage (workflow/rules/analysis.smk): which
# tables a page is made from (kernelbook.report.sources), measured here or published; what
# rule all renders and rule publish copies. Kept apart from the rules, as `snakemake --lint`
# asks. Every path is kernelbook.layout's.

from kernelbook import layout as kb_layout  # noqa: E402
from kernelbook.report import meta as kb_meta  # noqa: E402
from kernelbook.report import sources as kb_sources  # noqa: E402
from kernelbook.report import stale as kb_stale  # noqa: E402

# The notebooks run through kernelbook.report.notebook (workflow/scripts/notebook.py) rather than
# the notebook: directive, which prints a papermill probe and a kernel warning on every job.
ANALYSIS = str(Path(workflow.basedir) / "analysis")
WORKLOGS = kb_layout.WORKLOGS
# The GPU whose studies this run measures and renders from results/; None: render published.
PAGE_GPU = TARGET_GPU if TARGET_GPU and TARGET_GPU != "none" else None
# The rules of this file: a table one of them makes is not a measured table.
ANALYSIS_RULES = frozenset({"worklog", "study_figures", "study_meta", "publish"})


def measured_here(gpu, study):
    return PAGE_GPU is not None and gpu == PAGE_GPU and study in PROJECT.studies


def made_by_a_rule(path):
    """Some measuring rule makes ``path`` (profile and sanitize stages may be absent)."""
    return any(
        r.name not in ANALYSIS_RULES and r.is_producer(path) for r in workflow.rules
    )


def study_tables(wildcards, page=False):
    """The tables a study's figures (and with ``page``, its page) are made from."""
    gpu, study = wildcards.gpu, wildcards.study
    if measured_here(gpu, study):
        return kb_sources.measured_tables(R, gpu, study, page, made=made_by_a_rule)
    return kb_sources.published_tables(WORKLOGS, gpu, study, page)


def worklog_inputs(wildcards):
    """The tables, plus the study notebook's figures when analysis/<study>.ipynb exists."""
    named = study_tables(wildcards, page=True)
    if (Path(ANALYSIS) / f"{wildcards.study}.ipynb").is_file():
        named["study_figures"] = kb_layout.study_file(
            wildcards.gpu, wildcards.study, "study_figures", R
        )
    return named


def page_mode(wildcards):
    return "measured" if measured_here(wildcards.gpu, wildcards.study) else "replay"


def page_stale(wildcards):
    """JSON of what changed since a published study was measured ([] when measured here)."""
    if measured_here(wildcards.gpu, wildcards.study):
        return "[]"
    return kb_stale.changes_json(PROJECT, WORKLOGS, wildcards.gpu, wildcards.study)


def study_spec(wildcards):
    """Hash of what study.json is made of: a change to any of it rewrites the file."""
    return kb_meta.spec_hash(PROJECT.study(wildcards.study))


def study_sources(wildcards):
    return sorted({v.source for v in PROJECT.study(wildcards.study).variants})


def worklog_targets(gpu_slug=""):
    """worklog.md and .html for rule all.

    With a GPU (its slug): the studies this run measures. Without (None or "none"): every
    study published under worklogs/, rendered from its data. "": this run's GPU, if any.
    """
    if gpu_slug == "":
        gpu_slug = PAGE_GPU
    if gpu_slug and gpu_slug != "none":
        pairs = [(gpu_slug, s) for s in PROJECT.studies]
    else:
        pairs = kb_layout.published(WORKLOGS)
    return [
        kb_layout.study_file(g, s, f"worklog.{ext}", R)
        for g, s in pairs
        for ext in ("md", "html")
    ]


def publish_pairs():
    """What `snakemake publish` copies: the studies measured on this machine's GPU."""
    return [(PAGE_GPU, s) for s in PROJECT.studies] if PAGE_GPU else []


def publish_inputs(wildcards=None):
    return [
        kb_layout.study_file(g, s, f"worklog.{ext}", R)
        for g, s in publish_pairs()
        for ext in ("md", "html")
    ]


def publish_args(wildcards=None):
    if not publish_pairs():
        why = shlex.quote(NO_GPU_WHY or "no GPU here")
        return f"--why-none {why}"
    return " ".join(f"{g}/{s}" for g, s in publish_pairs())


# Say, once per run, which published worklogs are rendered without measuring.
REPLAY_NOTE = kb_sources.replay_note(WORKLOGS) if PAGE_GPU is None else ""
if REPLAY_NOTE:
    print(REPLAY_NOTE, file=sys.stderr)
