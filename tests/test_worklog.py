"""The worklog stage: figures, the page, publish, the index, replay without a GPU, staleness.

Real parts only. The measurement, device, build and SASS tables in tests/data/worklog/ are
the H200 run of variants 01 and 02; profile, roofline and sanitizer tables (no real ones
yet) and the extra rows of a larger ladder (skipped size, throttled run, autotuning
candidates) are made here through kernelbook.tables, so the schemas check them. The
pipeline runs for real, notebooks included, in copies of the repository.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import shutil
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import REPO, copy_repo, kernelbook_cli, run_in, snakemake

from kernelbook import config as cfg
from kernelbook import layout, tables, tune
from kernelbook.provenance import sha256_file
from kernelbook.report import (
    diagnostics,
    figures,
    markdown,
    meta,
    plot,
    publish,
    sources,
    stale,
    worklog,
)
from kernelbook.report.data import candidate_id, ladder_order, ladder_sass
from kernelbook.report.sections import attention

FIXTURE = REPO / "tests" / "data" / "worklog"
GPU = "nvidia-h200"
STUDY = "sgemm"
FIXTURE_VARIANTS = ("01_naive", "02_coalescing")
SIZES = ("M", "N", "K")
HEADLINE = "4096x4096x4096"


def output(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout + proc.stderr


# ------------------------------------------------------------------------------------------
# Building repository copies with published data


def include_analysis(root: Path) -> None:
    """The Snakefile edits the analysis stage needs (include + rule all), if not yet made."""
    path = root / "Snakefile"
    text = path.read_text()
    if "analysis.smk" not in text:
        includes = list(re.finditer(r'^include: "workflow/rules/\w+\.smk"\n', text, re.M))
        at = includes[-1].end()
        text = text[:at] + 'include: "workflow/rules/analysis.smk"\n' + text[at:]
    if "worklog_targets(" not in text:
        m = re.search(r"^rule all:\n(?:    .*\n)*?    input:\n", text, re.M)
        at = m.end()
        text = text[:at] + "        worklog_targets(GPU_SLUG if GPU else None),\n" + text[at:]
    path.write_text(text)


def trim_study(root: Path, keep=FIXTURE_VARIANTS) -> None:
    """Keep only the variants the fixture measured, so that 'added' means what a test adds."""
    path = root / "config" / "studies" / f"{STUDY}.yaml"
    data = yaml.safe_load(path.read_text())
    data["variants"] = [v for v in data["variants"] if v["id"] in keep]
    # and the targets held against a variant left out
    data["targets"] = [t for t in data.get("targets", []) if t.get("variant", keep[0]) in keep]
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def project_of(root: Path) -> cfg.Project:
    return cfg.load_project_file(root / "config" / "config.yaml")


def current_hashes(root: Path, df: pd.DataFrame) -> pd.DataFrame:
    """Rows re-stamped with the copy's source and config hashes: published 'as of now'."""
    study = project_of(root).study(STUDY)
    df = df.copy()
    for vid in df["variant"].unique():
        try:
            v = study.variant(vid)
        except cfg.ConfigError:
            continue
        rows = df["variant"] == vid
        df.loc[rows, "source_sha256"] = sha256_file(root / v.source)
        df.loc[rows, "spec_sha256"] = v.spec_sha256()
    return df


def synthetic_profile(meas: pd.DataFrame, variants, size: str = HEADLINE) -> dict:
    """Schema-valid profile, roofline and sanitizer rows for ``variants`` at ``size``."""
    rows = meas[(meas["size"] == size) & meas["variant"].isin(variants)]
    now = pd.Timestamp("2026-11-29 18:00", tz="UTC")
    common = {"gpu_name": "NVIDIA H200", "gpu_uuid": rows["gpu_uuid"].iloc[0]}
    prof, roof, san = [], [], []
    # ncu-like numbers: each step moves fewer bytes per FLOP and issues more FFMA per load
    traffic = {0: (2.2e10, 1.1e11, 5.5e11), 1: (1.1e9, 8.8e9, 1.4e11)}
    for i, (_, r) in enumerate(rows.iterrows()):
        dram, l2, l1 = traffic.get(i, (5e8 / (i + 1), 4e9 / (i + 1), 4e10 / (i + 1)))
        t_ms = float(r["median_ms"]) / 1.01
        flop = float(r["flop"])
        sizes = {n: int(r[n]) for n in SIZES}
        metrics = {
            "gpu__time_duration.sum": (t_ms * 1e6, "ns"),
            "dram__bytes.sum": (dram, "byte"),
            "lts__t_bytes.sum": (l2, "byte"),
            "l1tex__t_bytes.sum": (l1, "byte"),
            "sm__throughput.avg.pct_of_peak_sustained_elapsed": (20.0 + 30 * i, "%"),
            "sm__warps_active.avg.pct_of_peak_sustained_active": (95.0 - 5 * i, "%"),
            "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": (flop / (16 * (i + 1)), "sector"),
        }
        for name, (value, unit) in metrics.items():
            prof.append(
                {
                    "study": STUDY,
                    "variant": r["variant"],
                    **sizes,
                    "size": size,
                    "metric": name,
                    "value": value,
                    "unit": unit,
                    "kernel": "sgemm_" + r["variant"].split("_", 1)[1],
                    "clock_control": "none",
                    "report": f"{r['variant']}.ncu-rep",
                    "driver_version": r["driver_version"],
                    "ncu_version": "2025.3.1",
                    "source_sha256": r["source_sha256"],
                    "git_commit": r["git_commit"],
                    "measured_at": now,
                    **common,
                }
            )
        roof.append(
            {
                "study": STUDY,
                "variant": r["variant"],
                **sizes,
                "size": size,
                "flop": flop,
                "flop_expected": flop,
                "dram_bytes": dram,
                "l2_bytes": l2,
                "l1_bytes": l1,
                "ncu_time_ms": t_ms,
                "ai_dram": flop / dram,
                "ai_l2": flop / l2,
                "ai_l1": flop / l1,
                "tflops": flop / (t_ms * 1e-3) / 1e12,
                "dram_gbps": dram / (t_ms * 1e-3) / 1e9,
                "l2_gbps": l2 / (t_ms * 1e-3) / 1e9,
                "l1_gbps": l1 / (t_ms * 1e-3) / 1e9,
                "event_median_ms": float(r["median_ms"]),
                "event_over_ncu": 1.01,
                "sm_throughput_pct": 20.0 + 30 * i,
                "memory_throughput_pct": 80.0 - 10 * i,
                "achieved_occupancy_pct": 95.0 - 5 * i,
                "registers_per_thread": 32.0,
                "smem_bank_conflicts_ld": 0.0,
                "smem_bank_conflicts_st": 0.0,
                "global_ld_sectors_per_request": 32.0 / (8 * i + 1),
                "global_st_sectors_per_request": 32.0 / (8 * i + 1),
                "top_stall": "long_scoreboard",
                "top_stall_ratio": 10.0 / (i + 1),
                "bound": "l1",
                **common,
            }
        )
        for tool in ("memcheck", "racecheck"):
            dirty = tool == "racecheck" and i == 1
            san.append(
                {
                    "study": STUDY,
                    "variant": r["variant"],
                    "M": 256,
                    "N": 256,
                    "K": 256,
                    "size": "256x256x256",
                    "tool": tool,
                    "errors": 2 if dirty else 0,
                    "warnings": 0,
                    "first_finding": "Race reported between Write access at sgemm.cu:42 | and Read"
                    if dirty
                    else None,
                    "verdict": "findings" if dirty else "clean",
                    "known_reason": None,
                    "exit_code": 0,
                    "source_sha256": r["source_sha256"],
                    "git_commit": r["git_commit"],
                    "measured_at": now,
                    **common,
                }
            )
    return {"profile": prof, "roofline": roof, "sanitizer": san}


def write_synthetic_profile(folder: Path, meas: pd.DataFrame, variants) -> None:
    for name, rows in synthetic_profile(meas, variants).items():
        tables.write(rows, folder / f"{name}.parquet", name, SIZES)


def device_with_cache_ceilings(folder: Path) -> None:
    """The fixture's device table plus L2/L1 bandwidth rows (the micro-benchmarks' quantities)."""
    dev = tables.read(FIXTURE / "device.parquet")
    extra = dev[dev["quantity"] == "copy_gbps"].copy()
    rows = [extra.assign(quantity="l2_gbps", value=11500.0), extra.assign(quantity="l1_gbps")]
    rows[1]["value"] = 38000.0
    tables.write(pd.concat([dev, *rows], ignore_index=True), folder / "device.parquet", "device")


def publish_fixture(root: Path, with_profile: bool = True) -> Path:
    """worklogs/nvidia-h200/sgemm/data/ as `snakemake publish` leaves it, from the fixture."""
    data = root / "worklogs" / GPU / STUDY / "data"
    data.mkdir(parents=True, exist_ok=True)
    meas = current_hashes(root, tables.read(FIXTURE / "measurements.parquet"))
    tables.write(meas, data / "measurements.parquet", "measurements", SIZES)
    build = current_hashes(root, tables.read(FIXTURE / "build.parquet"))
    tables.write(build, data / "build.parquet", "build")
    shutil.copy2(FIXTURE / "sass.parquet", data / "sass.parquet")
    device_with_cache_ceilings(data)
    if with_profile:
        write_synthetic_profile(data, meas, FIXTURE_VARIANTS)
    meta.write_meta(project_of(root).study(STUDY), root, data / "study.json")
    return data


def make_repo(dest: Path) -> Path:
    """A repository copy: analysis stage included, ladder trimmed to the fixture's variants."""
    root = copy_repo(dest)
    shutil.copytree(REPO / "analysis", root / "analysis", ignore=shutil.ignore_patterns(".*"))
    include_analysis(root)
    trim_study(root)
    return root


def touch_later(path: Path, text: str) -> None:
    path.write_text(text)
    later = time.time() + 2
    os.utime(path, (later, later))


@pytest.fixture(scope="session")
def rendered(tmp_path_factory, nogpu_args):
    """A copy with published data, after `snakemake --cores 1 all` on this GPU-less machine."""
    root = make_repo(tmp_path_factory.mktemp("rendered") / "repo")
    # the one study published here; every study's compile is built_repo's (test_workflow)
    conf = root / "config" / "config.yaml"
    conf.write_text(re.sub(r"(?ms)^studies: \[.*?\]", f"studies: [{STUDY}]", conf.read_text()))
    publish_fixture(root)
    targets = (
        ["all"]
        if shutil.which("nvcc")
        else [
            f"results/{GPU}/{STUDY}/worklog.md",
            f"results/{GPU}/{STUDY}/worklog.html",
        ]
    )
    proc = snakemake(root, "--cores", "1", *targets, *nogpu_args, timeout=600)
    return root, proc


@pytest.fixture
def rendered_ok(rendered):
    root, proc = rendered
    if proc.returncode != 0:
        pytest.fail(f"rendering the published worklog failed:\n{output(proc)}")
    return root, proc


# ------------------------------------------------------------------------------------------
# The notebooks


@pytest.mark.parametrize("name", ["worklog", STUDY])
def test_notebooks_are_stored_without_outputs(name):
    nb = json.loads((REPO / "analysis" / f"{name}.ipynb").read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code
    for cell in code:
        assert cell["outputs"] == [] and cell["execution_count"] is None
    assert "kernelbook" in "".join("".join(c["source"]) for c in code)


def test_leading_comment_of_a_kernel():
    text = (REPO / "kernels" / STUDY / "02_coalescing.cu").read_text()
    head = meta.leading_comment(text)
    assert head.startswith("02 global-memory coalescing")
    assert "#ifndef" not in head and "//" not in head
    assert meta.leading_comment("/* one\n * two\n */\nint x;") == "one\ntwo"
    assert meta.leading_comment("\n\nint x;") == ""


# ------------------------------------------------------------------------------------------
# Rendering without a GPU, through Snakemake and the notebook (published data)


def test_replay_renders_every_published_study(rendered_ok):
    root, proc = rendered_ok
    notes = [ln for ln in proc.stderr.splitlines() if "published worklog(s)" in ln]
    assert len(notes) == 1, proc.stderr
    assert f"{GPU}/{STUDY} (measured 2026-11-29)" in notes[0]
    assert "not re-measured here" in notes[0]
    out = root / "results" / GPU / STUDY
    md = (out / "worklog.md").read_text()
    assert "Rendered from published data measured on 2026-11-29" in md
    assert "not re-measured here" in md
    # the notebook ran (its executed copy is the rule's log) and the study's own one too
    assert (root / "results" / "logs" / STUDY / "worklog" / f"{GPU}.ipynb").is_file()
    assert (root / "results" / "logs" / STUDY / "study_figures" / f"{GPU}.ipynb").is_file()


def test_notebook_jobs_print_no_tool_noise(rendered_ok):
    """A successful run says nothing misleading: no papermill probe, no kernel warnings."""
    root, proc = rendered_ok
    out = output(proc)
    for noise in ("papermill", "command not found", "IPKernelApp", "without encryption"):
        assert noise not in out, out
    log = root / "results" / "logs" / STUDY / "worklog" / f"{GPU}.ipynb"
    cells = json.loads(log.read_text())["cells"]
    assert "snakemake-job-properties" in cells[0]["metadata"]["tags"]
    assert any(c.get("outputs") for c in cells[1:])  # executed, outputs kept in the log


def test_figures_are_written_png_and_svg(rendered_ok):
    root, _ = rendered_ok
    figs = root / "results" / GPU / STUDY / "figures"
    expected = ["ladder", "sweep", "roofline", "metrics", "prediction", "sass_mix"]
    for name in expected:
        png, svg = figs / f"{name}.png", figs / f"{name}.svg"
        assert png.stat().st_size > 8_000, name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        tree = ET.parse(svg)
        assert tree.getroot().tag.endswith("svg"), name
    md = (root / "results" / GPU / STUDY / "worklog.md").read_text()
    for name in expected:
        assert f"](figures/{name}.png)" in md
    # no autotuned variant in this data: the figure is skipped, and the page says so
    assert not (figs / "autotune.png").exists()
    assert "Autotuning search: not drawn: no autotuning candidates were measured" in md


def test_page_table_equals_the_data(rendered_ok):
    root, _ = rendered_ok
    md = (root / "results" / GPU / STUDY / "worklog.md").read_text()
    data = tables.read(root / "worklogs" / GPU / STUDY / "data" / "measurements.parquet")
    check_full_table(md, data)
    check_ladder_table(md, data)


def parse_num(cell: str) -> float:
    return math.nan if cell == markdown.DASH else float(cell)


def same(cell: str, value) -> bool:
    if value is None or (isinstance(value, float) and math.isnan(value)) or pd.isna(value):
        return cell == markdown.DASH
    return math.isclose(parse_num(cell), float(value), rel_tol=6e-4, abs_tol=0)


def find_table(md: str, first_header: str, must: str) -> list[dict]:
    for t in markdown.parse_tables(md):
        if t and next(iter(t[0])) == first_header and must in t[0]:
            return t
    raise AssertionError(f"no table with headers {first_header}, {must}")


def check_full_table(md: str, data: pd.DataFrame) -> None:
    table = find_table(md, "variant", "rse %")
    main = data[data["variant_kind"] != "candidate"]
    assert len(table) == len(main)
    base = [h for h in table[0] if h.startswith("% of ")][0]
    by_key = {(r["variant"], r["size"]): r for r in table}
    for _, row in main.iterrows():
        cell = by_key[(row["variant"], row["size"])]
        assert cell["status"] == row["status"]
        for header, col in [
            ("median ms", "median_ms"),
            ("TFLOP/s", "tflops"),
            ("GB/s", "gbps"),
            (base, "pct_of_baseline"),
            ("baseline ms", "baseline_median_ms"),
            ("rel err", "rel_err"),
            ("SM MHz min", "sm_clock_min_mhz"),
        ]:
            assert same(cell[header], row[col]), (row["variant"], row["size"], header)
        rse = row["rse_median"] * 100 if pd.notna(row["rse_median"]) else None
        assert same(cell["rse %"], rse)
        n = row["n_samples"]
        assert cell["n"] == (markdown.DASH if pd.isna(n) else str(int(n)))
        if row["status"] != "ok":
            assert str(row["reason"]).replace("|", "\\|")[:20] in cell["notes"].replace("|", "\\|")
        if row["throttled"] is True:
            assert "THROTTLED" in cell["notes"]


def check_ladder_table(md: str, data: pd.DataFrame) -> None:
    table = find_table(md, "variant", "x previous")
    head = data[(data["size"] == HEADLINE) & (data["variant_kind"] != "candidate")]
    base = [h for h in table[0] if h.startswith("% of ")][0]
    for r in table:
        row = head[head["variant"] == r["variant"]]
        if row.empty:
            assert r["status"] == "not measured"
            continue
        row = row.iloc[0]
        assert same(r["median ms"], row["median_ms"])
        assert same(r[base], row["pct_of_baseline"])
    # the answer line quotes the best variant at the headline size
    ok = head[head["status"] == "ok"]
    best = ok.loc[ok["pct_of_baseline"].idxmax()]
    assert f"**{best['variant']}**, reaches **{markdown.fmt(best['pct_of_baseline'])} % of" in md


def test_profiler_sections_when_profile_tables_exist(rendered_ok):
    root, _ = rendered_ok
    md = (root / "results" / GPU / STUDY / "worklog.md").read_text()
    section = md.split("### 02_coalescing", 1)[1].split("\n## ", 1)[0]
    assert "**Profiler, against 01_naive**" in section
    deltas = find_table(section, "metric", "ratio")
    names = [r["metric"] for r in deltas]
    assert "DRAM bytes" in names or "dram__bytes.sum" in names
    # the ratio shown is the data's ratio
    roof = tables.read(root / "worklogs" / GPU / STUDY / "data" / "roofline.parquet")
    r = roof.set_index("variant")
    want = r.loc["02_coalescing", "dram_bytes"] / r.loc["01_naive", "dram_bytes"]
    got = next(x for x in deltas if x["metric"] in ("DRAM bytes", "dram__bytes.sum"))
    assert math.isclose(float(got["ratio"].rstrip("x")), want, rel_tol=1e-2)
    # sanitizer: the finding is on the page, in the variant's section and up front
    assert "racecheck **findings**" in section
    assert "compute-sanitizer racecheck FINDINGS" in md.split("## The ladder", 1)[0]
    assert "**Resources** (02_coalescing): 32 registers/thread" in section


def test_html_is_standalone(rendered_ok):
    root, _ = rendered_ok
    page = (root / "results" / GPU / STUDY / "worklog.html").read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "<table>" in page and "data:image/png;base64," in page
    assert 'src="figures/' not in page  # every PNG is embedded


def test_snakemake_report(rendered_ok, tmp_path):
    root, _ = rendered_ok
    clone = tmp_path / "repo"
    shutil.copytree(root, clone, symlinks=True)
    proc = snakemake(clone, "--report", "report.html", f"results/{GPU}/{STUDY}/worklog.md")
    assert proc.returncode == 0, output(proc)
    assert (clone / "report.html").stat().st_size > 100_000


def test_lint_with_the_analysis_stage(rendered_ok):
    root, _ = rendered_ok
    proc = snakemake(root, "--lint")
    assert proc.returncode == 0, output(proc)


def test_replayed_page_names_stale_variants(rendered_ok, tmp_path):
    root, _ = rendered_ok
    clone = tmp_path / "repo"
    shutil.copytree(root, clone, symlinks=True)
    cu = clone / "kernels" / STUDY / "02_coalescing.cu"
    touch_later(cu, cu.read_text() + "\n// a later edit\n")
    target = f"results/{GPU}/{STUDY}/worklog.md"
    proc = snakemake(clone, "--cores", "1", target)
    assert proc.returncode == 0, output(proc)
    md = (clone / target).read_text()
    assert "**02_coalescing** is stale: source changed" in md
    assert "01_naive** is stale" not in md


# ------------------------------------------------------------------------------------------
# Publishing (measured here) and the index


def results_from_fixture(root: Path, results: Path) -> dict[str, Path]:
    """results/ as a measuring run leaves it (tables, study.json), from the fixture."""
    paths = layout.result_paths(results, GPU, STUDY)
    pub = layout.published_paths(root / "worklogs", GPU, STUDY)
    for name in ("measurements", "device", "build", "sass", "profile", "roofline", "sanitizer"):
        paths[name].parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(pub[name], paths[name])
    meta.write_meta(project_of(root).study(STUDY), root, paths["meta"])
    return paths


def test_publish_copies_everything_and_indexes(rendered_ok, tmp_path):
    src, _ = rendered_ok
    root = tmp_path / "repo"
    shutil.copytree(src, root, symlinks=True, ignore=shutil.ignore_patterns("results"))
    results = tmp_path / "gpu-results"  # as a GPU host's run leaves them, brought here
    paths = results_from_fixture(root, results)
    # a study.json from before the last variant was added (a `snakemake tables` run does not
    # rewrite it): rendering writes it again from the config
    stale = json.loads(paths["meta"].read_text())
    ids = [v["id"] for v in stale["variants"]]
    stale["variants"] = stale["variants"][:-1]
    paths["meta"].write_text(json.dumps(stale))
    shutil.rmtree(root / "worklogs")
    args = [
        "-m",
        "kernelbook",
        "publish",
        "--results",
        str(results),
        f"{GPU}/{STUDY}",
    ]
    proc = run_in(root, args)
    assert proc.returncode == 1 and "worklog.md" in proc.stderr  # nothing rendered yet
    proc = run_in(root, [*args[:3], "--render", *args[3:]])
    assert proc.returncode == 0, output(proc)
    md = paths["md"].read_text()
    assert "Rendered from published data" not in md  # rendered as measured
    dest = root / "worklogs" / GPU / STUDY
    assert (dest / "README.md").read_text() == md
    assert not (dest / "worklog.md").exists()  # one page per folder
    # rendered as rule worklog renders it: the study notebook's own figures included
    assert "### SASS instruction mix" in md and (dest / "figures" / "sass_mix.png").is_file()
    assert (dest / "worklog.html").is_file()
    for name in ("measurements", "device", "build", "sass", "profile", "roofline", "sanitizer"):
        assert tables.read(dest / "data" / f"{name}.parquet").equals(tables.read(paths[name]))
    published = json.loads((dest / "data" / "study.json").read_text())
    assert published["study"] == STUDY and [v["id"] for v in published["variants"]] == ids
    assert "is not in the study config" not in md
    assert sorted(p.name for p in (dest / "figures").iterdir()) == sorted(
        p.name for p in paths["figures"].iterdir()
    )
    # relative figure links of the page resolve inside the published folder
    for link in re.findall(r"\]\((figures/[^)]+)\)", md):
        assert (dest / link).is_file(), link
    # the index: the study on this GPU with its headline number and a working link
    index = (root / "worklogs" / "README.md").read_text()
    meas = tables.read(dest / "data" / "measurements.parquet")
    head = meas[(meas["size"] == HEADLINE) & (meas["status"] == "ok")]
    best = head.loc[head["pct_of_baseline"].idxmax()]
    grid = find_table(index, "study", GPU)
    assert len(grid) == 1 and grid[0]["study"].startswith(f"**{STUDY}**")
    assert f"**{markdown.fmt(best['pct_of_baseline'])} %** of cuBLAS" in grid[0][GPU]
    assert f"({best['variant']})" in grid[0][GPU]
    for link in re.findall(r"\]\(([^)]+)\)", index):
        assert (root / "worklogs" / link).exists(), link
    details = find_table(index, "study", "best variant")
    assert same(details[0]["% of baseline"], best["pct_of_baseline"])
    # republishing replaces the folder whole (no stale figure survives), but keeps the
    # record of a change of method that `kernelbook before-after` wrote beside the page
    (dest / "figures" / "old.png").write_bytes(b"x")
    (dest / "before-after.md").write_text("# before and after\n")
    (dest / "before-after-batches.md").write_text("# a second change\n")
    proc = run_in(root, args)
    assert proc.returncode == 0, output(proc)
    assert not (dest / "figures" / "old.png").exists()
    assert (dest / "before-after.md").read_text() == "# before and after\n"
    assert (dest / "before-after-batches.md").read_text() == "# a second change\n"


def test_before_after_between_two_published_revisions_survives_a_republish(published_repo):
    """`before-after REV --after REV2` compares two committed pages and names both commits,
    so the file and its regenerate line stay true once data/ holds a newer run."""
    root = published_repo
    folder = Path("worklogs") / GPU / STUDY
    data = root / folder / "data" / "measurements.parquet"

    def git(*a):
        proc = subprocess.run(["git", *a], cwd=root, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()

    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "before", "--allow-empty")
    git("add", "-f", str(folder))
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "before")
    first = git("rev-parse", "--short", "HEAD")
    meas = tables.read(data)
    tables.write(
        meas.assign(pct_of_baseline=meas["pct_of_baseline"] * 2), data, "measurements", SIZES
    )
    git("add", "-f", str(folder))
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "after")
    second = git("rev-parse", "--short", "HEAD")
    proc = kernelbook_cli(root, "before-after", "HEAD~1", "--after", "HEAD", str(folder))
    assert proc.returncode == 0, output(proc)
    text = (root / folder / "before-after.md").read_text()
    assert f"published at {first} " in text and f"those published at {second} " in text
    assert f"`kernelbook before-after {first} --after {second} {folder}`" in text
    row = meas[(meas["status"] == "ok") & (meas["size"] == HEADLINE)].iloc[0]
    pct = float(row["pct_of_baseline"])
    assert f"{pct:.1f} -> {2 * pct:.1f}" in text
    # a newer run in data/ (not committed) changes nothing the pinned command writes
    tables.write(meas.assign(pct_of_baseline=0.5), data, "measurements", SIZES)
    proc = kernelbook_cli(root, "before-after", first, "--after", second, str(folder))
    assert proc.returncode == 0, output(proc)
    assert (root / folder / "before-after.md").read_text() == text
    proc = kernelbook_cli(root, "before-after", "nosuchrev", str(folder))
    assert proc.returncode != 0 and "'nosuchrev' is not a git revision" in output(proc)
    # a second change of method gets a file of its own; the first one's stays as it was
    proc = kernelbook_cli(root, "before-after", first, "--name", "batches", str(folder))
    assert proc.returncode == 0, output(proc)
    named = (root / folder / "before-after-batches.md").read_text()
    assert f"`kernelbook before-after {first} --name batches {folder}`" in named
    assert (root / folder / "before-after.md").read_text() == text
    proc = kernelbook_cli(root, "before-after", first, "--name", "Bad Name", str(folder))
    assert proc.returncode != 0 and "--name 'Bad Name'" in output(proc)


PUBLISHED = layout.published(REPO / "worklogs")


def test_published_folders_hold_one_page():
    assert PUBLISHED
    for gpu, study in PUBLISHED:
        names = {p.name for p in (REPO / "worklogs" / gpu / study).iterdir()}
        assert {"README.md", "data", "figures", "worklog.html"} <= names
        assert "worklog.md" not in names  # the page is README.md, once


@pytest.mark.slow
@pytest.mark.parametrize("gpu, study", PUBLISHED, ids=[f"{g}/{s}" for g, s in PUBLISHED])
def test_published_page_is_what_its_data_renders_today(gpu, study, tmp_path):
    """The committed page equals the current code's page of its data/: a renderer change is
    published with the pages it changes (kernelbook render GPU/STUDY)."""
    published = REPO / "worklogs" / gpu / study
    page = publish.render_published(REPO / "worklogs", gpu, study, REPO / "analysis", tmp_path)

    def body(md: str) -> list[str]:  # a page rendered from data/ has no 'rendered' banner
        return [ln for ln in md.splitlines() if not ln.startswith("> **Rendered from published")]

    assert body(page.read_text()) == body((published / "README.md").read_text())
    assert sorted(p.name for p in (tmp_path / "figures").iterdir()) == sorted(
        p.name for p in (published / "figures").iterdir()
    )


def test_publish_refuses_what_was_not_rendered(tmp_path):
    with pytest.raises(publish.PublishError, match="measurements.parquet"):
        publish.publish(tmp_path / "results", tmp_path / "worklogs", GPU, STUDY)


def test_snakemake_publish_without_gpu_reindexes(rendered_ok, tmp_path):
    src, _ = rendered_ok
    root = tmp_path / "repo"
    shutil.copytree(src, root, symlinks=True)
    (root / "worklogs" / "README.md").unlink(missing_ok=True)
    proc = snakemake(root, "--cores", "1", "publish")
    assert proc.returncode == 0, output(proc)
    assert "nothing measured here to publish" in output(proc)
    index = (root / "worklogs" / "README.md").read_text()
    assert f"[worklog]({GPU}/{STUDY}/README.md)" in index


# ------------------------------------------------------------------------------------------
# Staleness: kernelbook check


def check_cmd(root: Path) -> subprocess.CompletedProcess:
    return kernelbook_cli(root, "check")


@pytest.fixture
def published_repo(tmp_path):
    root = make_repo(tmp_path / "repo")
    publish_fixture(root, with_profile=False)
    return root


def test_check_up_to_date(published_repo):
    proc = check_cmd(published_repo)
    assert proc.returncode == 0, output(proc)
    assert f"{GPU}/{STUDY}: up to date" in proc.stdout


def test_check_reports_an_edited_kernel(published_repo):
    cu = published_repo / "kernels" / STUDY / "02_coalescing.cu"
    cu.write_text(cu.read_text().replace("float acc = 0.0f;", "float acc = 0.0f;  // edited"))
    proc = check_cmd(published_repo)
    assert proc.returncode == 1, output(proc)
    assert f"{GPU}/{STUDY}: STALE (1 variant(s))" in proc.stdout
    lines = [ln.split() for ln in proc.stdout.splitlines() if ln.startswith("  ")]
    assert [ln[:3] for ln in lines] == [["02_coalescing", "source", "changed:"]]
    changes = stale.stale(project_of(published_repo), published_repo / "worklogs")
    assert [(c.variant, c.change) for c in changes] == [("02_coalescing", stale.SOURCE)]


def test_check_says_which_edited_kernels_hold_by_their_machine_code(published_repo, monkeypatch):
    """An edited kernel whose measured builds compile to the same SASS (kernelbook.build.
    samecode, tested with nvcc in test_samecode) is no change: the study is up to date and
    check names the variant as holding; a code edit elsewhere is still stale."""
    from kernelbook.build import samecode

    asked = []

    def same(root, rel, measured):
        asked.append((rel, len(measured)))
        return rel.endswith("02_coalescing.cu")

    monkeypatch.setattr(samecode, "same_machine_code", same)
    cu = published_repo / "kernels" / STUDY / "02_coalescing.cu"
    cu.write_text(cu.read_text().replace("float acc = 0.0f;", "float acc = 0.0f + 0.0f;"))
    out = io.StringIO()
    assert stale.check(project_of(published_repo), published_repo / "worklogs", out=out) == 0
    lines = out.getvalue().splitlines()
    assert f"{GPU}/{STUDY}: up to date" in lines, lines
    (held,) = [ln for ln in lines if ln.startswith("  ")]
    assert held.split()[:2] == ["02_coalescing", "holds:"], held
    assert "compile to the same SASS" in held
    assert asked and all(n >= 1 for _, n in asked)
    assert stale.stale(project_of(published_repo), published_repo / "worklogs") == []
    naive = published_repo / "kernels" / STUDY / "01_naive.cu"
    naive.write_text(naive.read_text().replace("float acc = 0.0f;", "float acc = -0.0f;"))
    changes = stale.stale(project_of(published_repo), published_repo / "worklogs")
    assert [(c.variant, c.change) for c in changes] == [("01_naive", stale.SOURCE)]


def test_check_reports_added_changed_and_removed_variants(published_repo):
    path = published_repo / "config" / "studies" / f"{STUDY}.yaml"
    data = yaml.safe_load(path.read_text())
    naive = next(v for v in data["variants"] if v["id"] == "01_naive")
    data["variants"] = [
        {**naive, "defines": {"BS": 16}},  # config entry changed
        {
            "id": "03_smem_blocking",
            "entry": "sgemm_smem_blocking",
            "defines": {"BLOCKSIZE": 32},
            "grid": ["cdiv(N, BLOCKSIZE)", "cdiv(M, BLOCKSIZE)"],
            "block": ["BLOCKSIZE * BLOCKSIZE"],
        },
    ]  # 02 removed, 03 added
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    changes = stale.stale(project_of(published_repo), published_repo / "worklogs")
    got = {(c.variant, c.change) for c in changes}
    assert got == {
        ("01_naive", stale.CONFIG),
        ("03_smem_blocking", stale.ADDED),
        ("02_coalescing", stale.REMOVED),
    }
    proc = check_cmd(published_repo)
    assert proc.returncode == 1
    assert f"{GPU}/{STUDY}: STALE (2 variant(s)); 1 variant(s) not yet measured on {GPU}" in (
        proc.stdout
    )
    assert re.search(rf"^  03_smem_blocking +not yet measured on {GPU}$", proc.stdout, re.M)


SMEM_BLOCKING = {
    "id": "03_smem_blocking",
    "entry": "sgemm_smem_blocking",
    "defines": {"BLOCKSIZE": 32},
    "grid": ["cdiv(N, BLOCKSIZE)", "cdiv(M, BLOCKSIZE)"],
    "block": ["BLOCKSIZE * BLOCKSIZE"],
}


def test_a_new_variant_is_not_yet_measured_rather_than_stale(published_repo):
    path = published_repo / "config" / "studies" / f"{STUDY}.yaml"
    data = yaml.safe_load(path.read_text())
    data["variants"].append(SMEM_BLOCKING)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    # kernelbook check
    proc = check_cmd(published_repo)
    assert proc.returncode == 1, output(proc)  # something to measure before publishing
    assert "stale" not in proc.stdout.lower(), proc.stdout
    assert f"{GPU}/{STUDY}: 1 variant(s) not yet measured on {GPU}\n" in proc.stdout
    assert re.search(rf"^  03_smem_blocking +not yet measured on {GPU}$", proc.stdout, re.M)
    # the same command as the README and the pages
    assert "snakemake --cores 1 all`, then `snakemake --cores 1 publish`" in proc.stdout
    # the page rendered from the published data
    worklogs = published_repo / "worklogs"
    paths = layout.published_paths(worklogs, GPU, STUDY)
    page = worklog.load({k: paths[k] for k in (*layout.DATA_TABLES, "meta")}, mode="replay")
    changes = json.loads(stale.changes_json(project_of(published_repo), worklogs, GPU, STUDY))
    notes = attention(page, changes)
    assert "**03_smem_blocking** is not yet measured on NVIDIA H200." in notes, notes
    assert not [n for n in notes if "stale" in n], notes


def test_one_wording_for_measuring_and_publishing():
    readme = (REPO / "README.md").read_text()
    assert stale.MEASURE_AND_PUBLISH in " ".join(readme.split())
    for path in [REPO / "README.md", *sorted((REPO / "src").rglob("*.py"))]:
        assert not re.search(r"snakemake --cores \w+ all publish", path.read_text()), path


# ------------------------------------------------------------------------------------------
# A longer ladder: skipped sizes, throttling, autotuning (library level, no Snakemake)


@pytest.fixture
def ladder_repo(tmp_path):
    """A copy whose study has 01, 02, 03 and an autotuned 09 with a 3-point space."""
    root = make_repo(tmp_path / "repo")
    path = root / "config" / "studies" / f"{STUDY}.yaml"
    data = yaml.safe_load(path.read_text())
    data["variants"] += [
        {
            "id": "03_smem_blocking",
            "entry": "sgemm_smem_blocking",
            "defines": {"BLOCKSIZE": 32},
            "grid": ["cdiv(N, BLOCKSIZE)", "cdiv(M, BLOCKSIZE)"],
            "block": ["BLOCKSIZE * BLOCKSIZE"],
            "says": "tiles staged in shared memory",
            "predict": {"pct_of_baseline": 12},
        },
        {
            "id": "09_autotuned",
            "entry": "sgemm_autotuned",
            "defines": {"BK": 8, "TM": 8, "TN": 8},
            "grid": ["cdiv(N, BN)", "cdiv(M, BM)"],
            "block": ["BM * BN // (TM * TN)"],
            "requires": ["K % 4 == 0", "N % 4 == 0"],
            "says": "tile shape swept",
            "predict": {"pct_of_baseline": 75},
            "tune": {"space": {"BM": [64, 128], "BN": [64, 128]}, "constraints": ["BM <= BN"]},
        },
    ]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return root


def ladder_tables(root: Path) -> pd.DataFrame:
    """The fixture's rows plus derived ones for 03 and the 09 candidates, through tune.select."""
    study = project_of(root).study(STUDY)
    real = tables.read(FIXTURE / "measurements.parquet")
    base = real[real["variant"] == "02_coalescing"].reset_index(drop=True)

    def derive(vid, speedup, kind="variant", tuned_from=None, point=None):
        v = study.variant(vid)
        d = base.copy()
        d["variant"], d["variant_kind"], d["tuned_from"] = vid, kind, tuned_from
        d["tune_point"] = json.dumps(point) if point else None
        for c in ("median_ms", "q1_ms", "q3_ms", "min_ms", "max_ms", "mean_ms"):
            d[c] = d[c] / speedup
        d["tflops"] = d["flop"] / (d["median_ms"] * 1e-3) / 1e12
        d["gbps"] = d["bytes_min"] / (d["median_ms"] * 1e-3) / 1e9
        d["pct_of_baseline"] = 100 * d["baseline_median_ms"] / d["median_ms"]
        d["source_sha256"] = sha256_file(root / v.source)
        d["spec_sha256"] = v.spec_sha256()
        return d

    s03 = derive("03_smem_blocking", 1.5)
    skip = s03["size"] == "3000x3000x3000"
    for c in [*(c for c in s03 if c.endswith("_ms")), "tflops", "gbps", "pct_of_baseline"]:
        s03.loc[skip, c] = None
    for c in ("n_samples", "rse_median", "rel_err", "max_err", "correct", "converged"):
        s03[c] = s03[c].astype(object)
        s03.loc[skip, c] = None
    s03.loc[skip, ["status", "reason"]] = ["skipped", "requires K % 32 == 0 (K=3000)"]
    thr = s03["size"] == "1024x1024x1024"
    s03.loc[thr, ["throttled", "throttle_reasons"]] = [True, "sw_power_cap|hw_slowdown"]
    cands = []
    for i, cid in enumerate(study.variant("09_autotuned").candidates):
        c = study.variant(cid)
        d = derive(cid, 4.0 + i, "candidate", "09_autotuned", c.tune_point)
        if i == 0:
            bad = d["size"] == HEADLINE
            for col in ("median_ms", "tflops", "gbps", "pct_of_baseline"):
                d.loc[bad, col] = None
            d.loc[bad, ["status", "reason"]] = ["failed", "wrong result: rel err 3.1e-02"]
        cands.append(d)
    tuned = tune.select(pd.concat(cands, ignore_index=True), "09_autotuned")
    return pd.concat([real, s03, tuned], ignore_index=True)


def test_longer_ladder_page_hides_nothing(ladder_repo, tmp_path):
    root = ladder_repo
    meas = ladder_tables(root)
    folder = tmp_path / "tables"
    tables.write(meas, folder / "measurements.parquet", "measurements", SIZES)
    device_with_cache_ceilings(folder)
    shutil.copy2(FIXTURE / "build.parquet", folder / "build.parquet")
    shutil.copy2(FIXTURE / "sass.parquet", folder / "sass.parquet")
    write_synthetic_profile(folder, meas, ["01_naive", "02_coalescing", "03_smem_blocking"])
    meta.write_meta(project_of(root).study(STUDY), root, folder / "study.json")
    names = [*layout.DATA_TABLES]
    paths = {n: folder / f"{n}.parquet" for n in names} | {"meta": folder / "study.json"}
    data = worklog.load(paths, mode="measured")
    out = tmp_path / "out"
    figs = worklog.make_figures(data, out / "figures")
    md = worklog.write(data, figs, out / "worklog.md", out / "worklog.html")

    drawn = {f.name for f in figs if f.drawn}
    assert {"ladder", "sweep", "roofline", "metrics", "prediction", "autotune"} <= drawn
    assert (out / "figures" / "autotune.png").stat().st_size > 8_000
    assert ladder_order(data) == [
        "01_naive",
        "02_coalescing",
        "03_smem_blocking",
        "09_autotuned",
    ]
    # the tuned variant appears once in the ladder, as its winner at the headline size
    ladder = find_table(md, "variant", "x previous")
    assert [r["variant"] for r in ladder].count("09_autotuned") == 1
    head = data.measurements
    win = head[(head["variant"] == "09_autotuned") & (head["size"] == HEADLINE)].iloc[0]
    assert win["variant_kind"] == "tuned"
    row = next(r for r in ladder if r["variant"] == "09_autotuned")
    assert same(row["median ms"], win["median_ms"])
    # skipped, throttled and failed are visible up front and in the tables
    front = md.split("## The ladder", 1)[0]
    assert "**03_smem_blocking** skipped at 3000x3000x3000: requires K % 32 == 0" in front
    assert "03_smem_blocking** at 1024x1024x1024 was measured while THROTTLED" in front
    assert "**09_autotuned**: 1 of" in front and "did not run or failed" in front
    check_full_table(md, data.measurements)
    cand_table = find_table(md.split("## Autotuning candidates", 1)[1], "variant", "rse %")
    n_cand = (data.measurements["variant_kind"] == "candidate").sum()
    assert len(cand_table) == n_cand
    failed = [r for r in cand_table if r["status"] == "failed"]
    assert len(failed) == 1 and "wrong result" in failed[0]["notes"]
    assert "tuned: BM" in md  # the tuned rows name their winning point
    # the SASS mix shows an autotuned variant through its winning candidate
    cid = candidate_id("09_autotuned", win["tune_point"])
    sass = pd.DataFrame(
        [{"study": STUDY, "variant": cid, "opcode": "FFMA", "op": "FFMA", "count": 512}]
    )
    data.tables["sass"] = pd.concat([data.tables["sass"], sass], ignore_index=True)
    mix = ladder_sass(data)
    assert mix[mix["variant"] == "09_autotuned"]["count"].tolist() == [512]
    assert cid not in set(mix["variant"])
    # predictions on the page are the config's, measured beside them
    section = md.split("### 03_smem_blocking", 1)[1].split("### ", 1)[0]
    got = head[(head["variant"] == "03_smem_blocking") & (head["size"] == HEADLINE)].iloc[0]
    assert f"**Prediction.** 12 % of cuBLAS, measured {markdown.fmt(got['pct_of_baseline'])}" in (
        section
    )


def test_figures_from_the_tables_only(tmp_path):
    """Each figure function draws from rows it is given and refuses empty ones by name."""
    plot.style()
    real = tables.read(FIXTURE / "measurements.parquet")
    order = list(FIXTURE_VARIANTS)
    with pytest.raises(figures.NoData, match="no measured tflops"):
        figures.sweep(real.iloc[0:0], order, tmp_path)
    with pytest.raises(figures.NoData, match="roofline"):
        figures.roofline(pd.DataFrame(), order, tmp_path, ceil={}, size_label=HEADLINE)
    sass = tables.read(FIXTURE / "sass.parquet")
    groups = diagnostics.sass_groups(sass, order)
    assert groups.sum(axis=1).tolist() == sass.groupby("variant")["count"].sum()[order].tolist()
    f = diagnostics.sass_mix(sass, order, tmp_path)
    assert (tmp_path / f.png).stat().st_size > 8_000
    ceil = figures.ceilings(tables.read(FIXTURE / "device.parquet"))
    assert ceil["copy_gbps"] > 1000 and ceil["fp32_peak_tflops"] > 10


def test_study_meta_from_config(tmp_path):
    project = project_of(REPO)
    got = meta.study_meta(project.study(STUDY), REPO)
    ids = [v["id"] for v in got["variants"]]
    assert ids == [v.id for v in project.study(STUDY).variants]
    assert got["headline"] == HEADLINE
    assert got["figure_of_merit"] == "tflops"
    naive = got["variants"][0]
    assert naive["header"].startswith("01 naive")
    assert naive["spec_sha256"] == project.study(STUDY).variants[0].spec_sha256()
    proc = kernelbook_cli(REPO, "meta", STUDY, "--out", str(tmp_path / "s.json"))
    assert proc.returncode == 0, output(proc)
    assert json.loads((tmp_path / "s.json").read_text()) == got


def test_where_a_worklog_reads_its_tables(published_repo, monkeypatch):
    """Measured here: results/ (optional tables once made); elsewhere: published data."""
    import io
    from contextlib import redirect_stderr

    from conftest import planned_jobs

    monkeypatch.chdir(published_repo)  # rules resolve paths from the workflow's directory
    named = sources.measured_tables("results", GPU, STUDY)
    assert named["measurements"] == f"results/{GPU}/{STUDY}/measurements.parquet"
    assert named["meta"] == f"results/build/{STUDY}/study.json"
    assert "profile" not in named  # no rule makes it here, and no file is there
    made = sources.measured_tables("results", GPU, STUDY, made=lambda path: True)
    assert "profile" in made and "samples" not in made  # samples: read by the page only
    assert "samples" in sources.measured_tables("results", GPU, STUDY, True, lambda p: True)

    named = sources.published_tables("worklogs", GPU, STUDY)
    data = f"worklogs/{GPU}/{STUDY}/data"
    assert named["measurements"] == f"{data}/measurements.parquet"
    assert named["meta"] == f"{data}/study.json"
    assert set(named) == {"measurements", "device", "build", "sass", "meta"}
    assert "nvidia-h200/sgemm (measured 2026-11-29)" in sources.replay_note("worklogs")
    with redirect_stderr(io.StringIO()):
        assert stale.changes_json(project_of(published_repo), "worklogs", GPU, STUDY) == "[]"

    # the rules (analysis.smk): with a GPU, this run's studies, as measured ...
    project = project_of(published_repo)
    proc = snakemake(published_repo, "-n", "--config", "gpu_model=h200", "--", "all", "publish")
    assert proc.returncode == 0, output(proc)
    jobs = planned_jobs(output(proc))
    pages = sorted((w["gpu"], w["study"]) for r, w in jobs if r == "worklog")
    assert pages == sorted(("h200", s) for s in project.studies)
    assert "rendering" not in proc.stderr
    # ... without one, every published study, from its data; publish says why not
    proc = snakemake(published_repo, "-n", "-p", "--config", "gpu=none", "--", "all", "publish")
    assert proc.returncode == 0, output(proc)
    jobs = planned_jobs(output(proc))
    published = layout.published(published_repo / "worklogs")
    assert (GPU, STUDY) in published
    pages = sorted((w["gpu"], w["study"]) for r, w in jobs if r == "worklog")
    assert pages == published
    assert "nvidia-h200/sgemm (measured 2026-11-29)" in proc.stderr
    assert "--why-none 'config says gpu: none'" in proc.stdout


# ------------------------------------------------------------------------------------------
# A comment-only edit keeps a measurement current


def test_comment_only_source_change_is_not_stale(tmp_path):
    import hashlib
    import subprocess

    from kernelbook.report.stale import comments_only_change, strip_comments

    repo = tmp_path / "r"
    (repo / "k").mkdir(parents=True)
    src = repo / "k" / "a.cu"

    def git(*args):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)

    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    v1 = (
        "// header\n__global__ void f(float* x) { x[0] = 1.0f; /* one */ }\n"
        'const char* s = "//x";\n'
    )
    src.write_text(v1)
    git("add", ".")
    git("commit", "-q", "-m", "v1")
    measured = [hashlib.sha256(v1.encode()).hexdigest()]

    # comments reworded and added, blank lines and indentation changed: still current
    src.write_text(
        "// header, now with what ncu measured\n//   (2 lines)\n\n"
        "__global__ void f(float* x) {   x[0] = 1.0f; /* the one */ }\n"
        'const char* s = "//x";\n'
    )
    assert comments_only_change(repo, "k/a.cu", measured)
    # a change inside a string literal, or to the code, is a change
    src.write_text(v1.replace('"//x"', '"//y"'))
    assert not comments_only_change(repo, "k/a.cu", measured)
    src.write_text(v1.replace("1.0f", "2.0f"))
    assert not comments_only_change(repo, "k/a.cu", measured)
    # a measured version git does not know, or no git at all: cannot be shown, so stale
    assert not comments_only_change(repo, "k/a.cu", ["0" * 64])
    src.write_text(v1)
    assert not comments_only_change(tmp_path / "nogit", "k/a.cu", measured)
    assert strip_comments("a /* x\n y */ b // z\n\n c") == "a b\nc"


def test_comment_only_change_to_a_kernel_with_shared_headers_is_not_stale(tmp_path):
    """A kernel that includes headers is hashed with them (sha256_source): a comment edit to
    the kernel or to a header it includes keeps its measurement, a code edit to either does
    not, and neither does a header it did not include when measured."""
    import subprocess

    from kernelbook.provenance import sha256_source
    from kernelbook.report.stale import comments_only_change

    repo = tmp_path / "r"
    (repo / "k" / "att").mkdir(parents=True)
    (repo / "k" / "common").mkdir()
    src, head, deep = repo / "k/att/a.cu", repo / "k/att/body.cuh", repo / "k/common/sm.cuh"

    def git(*args):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)

    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    src.write_text('// step\n#include "body.cuh"\nENTRY(f)\n')
    head.write_text('#include "../common/sm.cuh"\n#define ENTRY(n) void n() { g(); }\n')
    deep.write_text("inline void g() {}  // shared\n")
    git("add", ".")
    git("commit", "-q", "-m", "measured")
    measured = [sha256_source(src)]
    git("commit", "-q", "--allow-empty", "-m", "later")

    src.write_text('// step, with what ncu measured\n#include "body.cuh"\nENTRY(f)\n')
    deep.write_text("inline void g() {}  // shared, reworded\n")
    assert sha256_source(src) not in measured
    assert comments_only_change(repo, "k/att/a.cu", measured)
    deep.write_text("inline void g() { return; }\n")  # code, two includes down
    assert not comments_only_change(repo, "k/att/a.cu", measured)
    deep.write_text("inline void g() {}\n")
    (repo / "k/att/extra.cuh").write_text("// nothing but a comment\n")
    head.write_text('#include "../common/sm.cuh"\n#include "extra.cuh"\n'
                    "#define ENTRY(n) void n() { g(); }\n")  # fmt: skip
    assert not comments_only_change(repo, "k/att/a.cu", measured)


def test_kernels_without_flops_get_the_bandwidth_roofline(tmp_path):
    """A transpose does no arithmetic: its roofline is each level's GB/s under that level's
    ceiling, drawn from the published H200 tables; without bandwidths it is refused."""
    plot.style()
    data = REPO / "worklogs" / GPU / "transpose" / "data"
    roof = tables.read(data / "roofline.parquet")
    assert (roof["flop"] == 0).all()
    ceil = figures.ceilings(tables.read(data / "device.parquet"))
    order = list(roof["variant"])
    f = figures.roofline(roof, order, tmp_path, ceil=ceil, size_label="16384x16384")
    assert f.title == "Bandwidth roofline" and "intensity 0" in f.caption
    assert (tmp_path / f.png).stat().st_size > 8_000 and (tmp_path / f.svg).is_file()
    svg = (tmp_path / f.svg).read_text()
    best = roof.set_index("variant")["dram_gbps"].max()
    assert f"{best:,.0f}" in svg  # the bars are labelled with the measured GB/s
    bare = roof.drop(columns=["dram_gbps", "l2_gbps", "l1_gbps"])
    with pytest.raises(figures.NoData, match="FLOP rate or a bandwidth"):
        figures.roofline(bare, order, tmp_path, ceil=ceil, size_label="16384x16384")


def _reordered_copy(worklogs: Path, gpu: str, study: str, dest: Path, seed: int) -> Path:
    """The published study's data/ with every table's rows in another order (seeded)."""
    import numpy as np

    src = layout.published_paths(worklogs, gpu, study)
    out = layout.published_paths(dest, gpu, study)
    out["meta"].parent.mkdir(parents=True)
    shutil.copyfile(src["meta"], out["meta"])
    if src["run"].is_file():  # the run's record, as published beside the tables
        shutil.copyfile(src["run"], out["run"])
    for name in layout.DATA_TABLES:
        if src[name].is_file():
            df = tables.read(src[name])
            order = (
                np.random.default_rng(seed).permutation(len(df)) if seed else range(len(df))[::-1]
            )
            df.iloc[list(order)].reset_index(drop=True).to_parquet(out[name])
    return dest


@pytest.mark.parametrize("seed", [7])
def test_a_page_does_not_depend_on_the_order_of_its_rows_or_on_jupyter(tmp_path, monkeypatch, seed):
    """Every sort behind the page and its figures has a total order (numpy's unstable sort
    breaks ties one way with AVX-512 and another without it), and the notebooks give the
    same page in-process as through a kernel (a GPU host often has no Jupyter): the
    published tables with their rows shuffled, rendered in-process, are the committed page
    byte for byte, figures included (test_published_page_is_what_its_data_renders_today
    checks the committed page against the kernel's rendering)."""
    from kernelbook.report import notebook

    gpu, study = "nvidia-h200", "transpose"  # ties among its profile metrics' ratios
    root = _reordered_copy(REPO / "worklogs", gpu, study, tmp_path / "w", seed)
    monkeypatch.setattr(notebook, "run", notebook.run_in_process)
    out = tmp_path / "page"
    publish.render_published(root, gpu, study, REPO / "analysis", out)
    published = REPO / "worklogs" / gpu / study

    def body(md: str) -> list[str]:  # a page rendered from data/ has no 'rendered' banner
        return [ln for ln in md.splitlines() if not ln.startswith("> **Rendered from published")]

    assert body((out / "README.md").read_text()) == body((published / "README.md").read_text())
    figs = sorted(p.name for p in (published / "figures").glob("*.svg"))
    assert figs == sorted(p.name for p in (out / "figures").glob("*.svg")) and figs
    for name in figs:
        assert (out / "figures" / name).read_bytes() == (published / "figures" / name).read_bytes()


def test_a_failing_cell_is_named_without_jupyter(tmp_path):
    from types import SimpleNamespace

    from kernelbook.report import notebook

    nb = {
        "cells": [
            {"cell_type": "code", "source": ["print('one')\n"]},
            {"cell_type": "markdown", "source": ["text"]},
            {"cell_type": "code", "source": ["1 / 0\n"]},
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path = tmp_path / "bad.ipynb"
    path.write_text(json.dumps(nb))
    with pytest.raises(notebook.CellError, match=r"bad\.ipynb, cell 2: ZeroDivisionError"):
        notebook.run_in_process(path, SimpleNamespace(), tmp_path / "out.ipynb")
    done = json.loads((tmp_path / "out.ipynb").read_text())
    assert done["cells"][0]["outputs"][0]["text"] == "one\n"


def test_the_page_says_where_the_two_instruments_differ():
    from kernelbook.report import quality, sections

    m = pd.DataFrame(
        [
            # 128^3: the events add ~2.3 us to a 7.4 us kernel (measured on the H200)
            {"variant": "03_smem", "size": "128x128x128", "status": "ok", "timing_method": "cupti",
             "median_ms": 0.00736, "event_median_ms": 0.00966, "timing_note": None},
            {"variant": "03_smem", "size": "4096x4096x4096", "status": "ok",
             "timing_method": "cupti", "median_ms": 3.963, "event_median_ms": 3.965,
             "timing_note": None},
            {"variant": "04_x", "size": "128x128x128", "status": "ok", "timing_method": "events",
             "median_ms": 0.01, "event_median_ms": 0.01,
             "timing_note": "CUPTI could not attach (insufficient privileges)"},
        ]
    )  # fmt: skip
    notes = sections.instrument_notes(m)
    assert len(notes) == 2, notes
    assert notes[0].startswith("**03_smem** at 128x128x128: CUDA events read 9.66 µs against")
    assert "(+31 %)" in notes[0]
    assert "1 row(s) timed with CUDA events, not kernel time: CUPTI could not attach" in notes[1]
    # several sizes of one variant: one line, the added time's range and the largest gap
    more = {"variant": "03_smem", "size": "256x256x256", "status": "ok", "timing_method": "cupti",
            "median_ms": 0.02, "event_median_ms": 0.0224, "timing_note": None}  # fmt: skip
    notes = sections.instrument_notes(pd.concat([m, pd.DataFrame([more])]))
    assert len(notes) == 2, notes
    assert notes[0] == (
        "**03_smem** at 2 sizes: CUDA events read 2.3 to 2.4 µs more than kernel time (+12 to "
        "+31 %; most: 128x128x128, 9.66 µs against 7.36 µs of kernel time): the GPU's own "
        "work around the launch, which the events count and the kernel does not."
    )
    said = quality.timer_description(m)
    assert said.startswith("kernel time from CUPTI") and "CUDA events" in said
    # the launch's few µs in rows of several variants: one line for them all, and a row the
    # launch does not explain (events 40 µs over a 20 µs kernel) on a line of its own
    rows = [
        ("05_tiled", "64x64x64", 0.0040, 0.0071),
        ("05_tiled", "128x128x128", 0.0090, 0.0122),
        ("06_async", "128x128x128", 0.0080, 0.0109),
        ("06_async", "256x256x256", 0.0200, 0.0600),
    ]
    more = pd.DataFrame(
        [
            {"variant": v, "size": s, "status": "ok", "timing_method": "cupti", "median_ms": k,
             "event_median_ms": e, "timing_note": None}
            for v, s, k, e in rows
        ]
    )  # fmt: skip
    notes = sections.instrument_notes(pd.concat([m, more]))
    assert len(notes) == 3, notes
    assert notes[0].startswith(
        "4 rows of 3 variants: CUDA events read 2.3 to 3.2 µs more than kernel time (+31 to "
        "+78 %; most: **05_tiled**, 64x64x64, 7.1 µs against 4 µs of kernel time): the GPU's "
        "own work around the launch"
    ), notes[0]
    assert notes[0].endswith("(3 µs at the median over all 6 rows)."), notes[0]
    assert notes[1] == (
        "**06_async** at 256x256x256: CUDA events read 60 µs against 20 µs of kernel time "
        "(+200 %): not the launch's work (3 µs, what the events add to this study's rows at "
        "the median)."
    )
    assert notes[2].startswith("1 row(s) timed with CUDA events")


def test_a_read_bound_study_names_its_streaming_read_where_others_name_the_copy(tmp_path):
    """Rows whose same-bytes reference was a streaming read (copy_kind read: a study with
    bandwidth_reference: read) say so in the answer, the ladder and the index; rows of a
    device copy (the published softmax page) and tables from before the column read as
    copies."""
    from kernelbook.report import data as report_data
    from kernelbook.report import index

    gpu, study = "nvidia-h200", "softmax"
    worklogs = tmp_path / "worklogs"
    src = REPO / "worklogs" / gpu / study / "data"
    dst = worklogs / gpu / study / "data"
    shutil.copytree(src, dst)
    m = tables.read(dst / "measurements.parquet")
    assert set(m["copy_kind"].dropna()) == {"copy"}  # softmax reads and writes: a copy
    m.assign(copy_kind="read").to_parquet(dst / "measurements.parquet")
    page = publish.render_published(worklogs, gpu, study, REPO / "analysis", tmp_path / "out")
    text = page.read_text()
    answer = next(ln for ln in text.splitlines() if ln.startswith("**Answer at"))
    assert "% of a streaming read** of the same bytes timed beside it" in answer
    assert "device copy" not in answer
    header = next(ln for ln in text.splitlines() if ln.startswith("| variant | status |"))
    assert "| % of read | read interval |" in header and "% of copy" not in header
    assert index.study_summary(worklogs, gpu, study)["best"]["copy_kind"] == "read"
    assert "%** of read, " in index.index(worklogs)
    published = (REPO / "worklogs" / gpu / study / "README.md").read_text()
    assert "% of a device copy** of the same bytes" in published
    assert report_data.copy_word(m) == "copy"
    assert report_data.copy_word(m.drop(columns="copy_kind")) == "copy"  # tables before it


def test_a_throttled_row_says_what_the_throttle_did_to_each_side():
    """A throttled row's note gives each timed function's SM clock over its own samples
    (the published hgemm table: both sides throttle at 16384^3), median and minimum, from the
    samples of the job that measured it, a tuned winner's re-timing included."""
    from kernelbook.layout import DATA_TABLES, published_paths
    from kernelbook.report import data as report_data
    from kernelbook.report import sections

    p = published_paths(REPO / "worklogs", "nvidia-h200", "hgemm")
    d = report_data.load({k: p[k] for k in (*DATA_TABLES, "meta")}, mode="replay")
    s = d.table("samples")
    size = "16384x16384x16384"
    for job in ("06_wgmma_tma", "10_best"):
        mine = s[(s["job"] == job) & (s["size"] == size)]
        said = sections.side_clocks(d, job, size)
        for func, name in (("variant", job), ("baseline", "cuBLAS")):
            c = mine.loc[mine["function"] == func, "sm_clock_mhz"]
            assert len(c) > 3
            assert f"{name} {sections.fmt(c.median())} ({sections.fmt(c.min())})" in said
    assert sections.side_clocks(d, "10_best", "1x1x1") == ""
    text = "\n".join(sections.attention(d))
    line = next(ln for ln in text.splitlines() if f"06_wgmma_tma** at {size}" in ln)
    assert "THROTTLED" in line and "cuBLAS " in line


def test_reproduce_names_the_newest_of_several_measuring_commits():
    """A run resumed from an earlier one holds rows of two commits: the page's `git checkout`
    is the newest (by measured_at), and the page says the rows span commits."""
    from kernelbook.report.data import StudyData
    from kernelbook.report.sections import regenerate_commands

    m = tables.read(REPO / "worklogs" / GPU / STUDY / "data" / "measurements.parquet")
    early = m.assign(git_commit="a" * 40, measured_at="2026-01-01T00:00:00Z")
    late = m.assign(git_commit="b" * 40, measured_at="2026-02-01T00:00:00Z")
    one = regenerate_commands(StudyData(meta={"study": STUDY}, tables={"measurements": late}))
    assert f"git checkout {'b' * 40}" in one and "commits" not in one
    both = pd.concat([late.iloc[:1], early, late.iloc[1:]])
    cmds = regenerate_commands(StudyData(meta={"study": STUDY}, tables={"measurements": both}))
    assert f"git checkout {'b' * 40}" in cmds
    assert "rows measured at 2 commits (aaaaaaa, bbbbbbb)" in cmds


def test_gpu_study_pairs_take_a_trailing_slash_and_refuse_anything_else(tmp_path):
    """`kernelbook render nvidia-h200/sgemm/` (a shell's completion) is nvidia-h200/sgemm:
    the study's own figures are drawn by its name; a pair that is not GPU/STUDY is named."""
    assert publish.split_pair("nvidia-h200/sgemm/") == ("nvidia-h200", "sgemm")
    assert publish.split_pair("nvidia-h200/sgemm") == ("nvidia-h200", "sgemm")
    for bad in ("sgemm", "nvidia-h200/", "a/b/c"):
        with pytest.raises(publish.PublishError, match="is not GPU/STUDY"):
            publish.split_pair(bad)
    proc = kernelbook_cli(REPO, "render", "--worklogs", str(tmp_path), "sgemm")
    assert proc.returncode == 1 and "'sgemm' is not GPU/STUDY" in proc.stderr


def test_a_variant_measured_but_not_profiled_or_sanitized_is_said_first(tmp_path):
    """A variant measured but without sanitizer rows (w8a8's 03_mma_deep as first published:
    its sanitize job ran nothing, before tune.candidate_at) is said at the top of the page; the
    pages as published now, every variant with its rows, say nothing of the kind."""
    from kernelbook.report import data as report_data
    from kernelbook.report.sections import attention

    def said(d):
        paths = {p.stem: p for p in d.glob("*.parquet")} | {"meta": d / "study.json"}
        return [b for b in attention(report_data.load(paths)) if "measured, but no" in b]

    published = REPO / "worklogs" / GPU / "w8a8" / "data"
    assert said(published) == [] and said(REPO / "worklogs" / GPU / "sgemm" / "data") == []
    cut = tmp_path / "data"
    shutil.copytree(published, cut)
    san = tables.read(cut / "sanitizer.parquet")
    assert (san["variant"] == "03_mma_deep").any()
    keep = san[san["variant"] != "03_mma_deep"]
    tables.write(keep, cut / "sanitizer.parquet", "sanitizer", ("M", "N", "K"))
    assert said(cut) == [
        "**03_mma_deep**: measured, but no compute-sanitizer rows (the sanitizer job ran "
        "nothing for it; its log says why)."
    ]
