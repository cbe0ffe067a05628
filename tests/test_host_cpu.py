"""The host's CPU in every row's provenance: what a host-timed row (the regimes study: a
call's cost to its caller) and the device table's launch overheads depend on beside the GPU.
The real /proc/cpuinfo and real published tables, rendered by the real page code."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from conftest import REPO

from kernelbook import gpu, tables
from kernelbook.report import publish

GPU = "nvidia-h200"
CPUINFO = Path("/proc/cpuinfo")


@pytest.mark.skipif(not CPUINFO.is_file(), reason="needs /proc/cpuinfo (Linux)")
def test_host_cpu_names_the_model_and_the_logical_cpus():
    models = [
        " ".join(line.split(":", 1)[1].split())
        for line in CPUINFO.read_text().splitlines()
        if line.split(":")[0].strip() == "model name"
    ]
    got = gpu.host_cpu()
    assert got == f"{models[0] if models else got.rsplit(',', 1)[0]}, {os.cpu_count()} logical CPUs"
    assert gpu.host_provenance(REPO)["host_cpu"] == got


def test_rows_without_the_column_still_gather(tmp_path):
    """Rows measured before the column existed (a resumed run's older tables) gather into a
    table with it empty: it is nullable; rows with it keep it."""
    old = tables.read(REPO / "worklogs" / GPU / "regimes" / "data" / "measurements.parquet")
    old = old.drop(columns=[c for c in ("host_cpu",) if c in old])
    path = tmp_path / "m.parquet"
    tables.write(old, path, "measurements", size_names=("N",))
    back = tables.read(path)
    assert "host_cpu" in back and back["host_cpu"].isna().all()
    tables.write(old.assign(host_cpu="X, 2 logical CPUs"), path, "measurements", ("N",))
    assert set(tables.read(path)["host_cpu"]) == {"X, 2 logical CPUs"}


def _page(tmp_path: Path, study: str, cpu: str | None) -> str:
    """The published page of ``study`` rendered from a copy of its tables, its rows' host_cpu
    set to ``cpu``."""
    dest = tmp_path / "worklogs" / GPU / study
    shutil.copytree(REPO / "worklogs" / GPU / study / "data", dest / "data")
    path = dest / "data" / "measurements.parquet"
    m = tables.read(path)
    m["host_cpu"] = cpu
    m.to_parquet(path, index=False)
    page = publish.render_published(tmp_path / "worklogs", GPU, study, REPO / "analysis", dest)
    return page.read_text()


def test_a_host_timed_page_names_the_host_cpu_its_rows_hold_for(tmp_path):
    cpu = "Example CPU 9000, 16 logical CPUs"
    md = _page(tmp_path / "regimes", "regimes", cpu)
    host = next(ln for ln in md.splitlines() if ln.startswith("| host |"))
    assert host.endswith(f"({cpu}) |"), host
    first = md.split("## Read this first", 1)[1].split("\n## ", 1)[0]
    assert f"they hold for this host's CPU ({cpu}) and move with it" in first
    # a kernel-timed page names the CPU too, but has nothing to say of it first
    md = _page(tmp_path / "sgemm", "sgemm", cpu)
    assert any(ln.startswith("| host |") and cpu in ln for ln in md.splitlines())
    assert "host-timed rows" not in md
    # tables without it: the host as before, and no line
    md = _page(tmp_path / "old", "regimes", None)
    host = next(ln for ln in md.splitlines() if ln.startswith("| host |"))
    assert "(" not in host and "host-timed rows" not in md
