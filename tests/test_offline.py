"""The offline GPU host's tools (docs/offline-gpu-host.md): the wheel folder that travels
with a checkout, and the wrapper that installs it there."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
WHEELHOUSE = REPO / "tools" / "offline" / "wheelhouse.sh"
GPU_HOST = REPO / "tools" / "offline" / "gpu-host.sh"


def _pypi_reachable() -> bool:
    try:
        urllib.request.urlopen("https://pypi.org/simple/six/", timeout=10).close()
    except OSError:
        return False
    return True


@pytest.fixture(scope="module")
def wheel_folder(tmp_path_factory) -> Path:
    if not _pypi_reachable():
        pytest.skip("PyPI is not reachable: tools/offline/wheelhouse.sh downloads wheels")
    out = tmp_path_factory.mktemp("wheels")
    proc = subprocess.run(
        ["bash", str(WHEELHOUSE), str(out), "six", "pulp"],
        env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "GPU_HOST_REQUIREMENTS": ""},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert "left out pulp-" in proc.stdout, proc.stdout
    return out


def test_the_wheel_folder_leaves_out_pulp_and_lists_what_it_keeps(wheel_folder):
    wheels = sorted(p.name for p in wheel_folder.glob("*.whl"))
    assert [w.split("-")[0] for w in wheels] == ["six"], wheels
    manifest = dict(
        reversed(line.split(None, 1))
        for line in (wheel_folder / "MANIFEST.txt").read_text().splitlines()
    )
    assert set(manifest) == set(wheels)
    for name, digest in manifest.items():
        assert hashlib.sha256((wheel_folder / name).read_bytes()).hexdigest() == digest


def test_gpu_host_installs_the_folder_once_and_runs_the_command_with_it(wheel_folder, tmp_path):
    checkout = tmp_path / "checkout"
    (checkout / "tools" / "offline").mkdir(parents=True)
    (checkout / "src").mkdir()
    shutil.copy(GPU_HOST, checkout / "tools" / "offline" / "gpu-host.sh")
    shutil.copytree(wheel_folder, checkout / ".whl")
    site = tmp_path / "site"
    run = [
        "bash",
        str(checkout / "tools" / "offline" / "gpu-host.sh"),
        sys.executable,
        "-c",
        "import os, six; print(six.__file__); print(os.getcwd())",
    ]
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "KERNELBOOK_SITE": str(site)}
    first = subprocess.run(run, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    where, cwd = first.stdout.split()
    assert Path(where).is_relative_to(site) and Path(cwd) == checkout
    stamp = (site / ".kernelbook-wheels").stat().st_mtime_ns
    again = subprocess.run(run, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and again.stdout == first.stdout
    assert (site / ".kernelbook-wheels").stat().st_mtime_ns == stamp, "installed once"


def test_snakemake_schedules_gpu_jobs_without_pulp(tmp_path):
    # What leaving pulp out of the wheel folder costs: Snakemake's ILP scheduler has no
    # solver, and a run that limits a resource (the GPU jobs' gpu=N) still completes.
    (tmp_path / "Snakefile").write_text(
        textwrap.dedent(
            """\
            rule all:
                input:
                    expand("out/{i}.txt", i=range(4)),


            rule job:
                output:
                    "out/{i}.txt",
                resources:
                    gpu=1,
                shell:
                    "echo {wildcards.i} > {output}"
            """
        )
    )
    run = textwrap.dedent(
        """\
        import sys
        sys.modules["pulp"] = None  # import pulp raises ImportError, as where it is absent
        from snakemake.cli import main
        sys.argv = ["snakemake", "--cores", "2", "--resources", "gpu=1", "--", "all"]
        main()
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", run], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.read_text() for p in (tmp_path / "out").iterdir()) == [
        f"{i}\n" for i in range(4)
    ]


def test_the_default_wheel_folder_carries_the_report_reader_the_profile_needs():
    """The host ncu's own extras/python ncu_report made profile jobs exit silently on the H200
    (Python 3.12): the default requirements must bring the ncu-report wheel, at the lock's
    version, and never pulp's 16 MB beside it."""
    reqs = [
        line.split("#")[0].strip()
        for line in (REPO / "tools" / "offline" / "requirements.txt").read_text().splitlines()
    ]
    names = {r.split(">")[0].split("=")[0].split("<")[0].strip().lower() for r in reqs if r}
    assert "ncu-report" in names, names
    assert "pulp" not in names
    locked = (REPO / "constraints.txt").read_text()
    assert "ncu-report==" in locked
