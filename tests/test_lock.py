"""constraints.txt, the lock (tools/lock.sh), still fits pyproject.toml: every requirement
of the project and of its test and slurm extras is pinned there, at one exact version that the
requirement allows. A dependency added or tightened without refreshing the lock fails here."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).parents[1]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)$")


def lock() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = PIN.match(line.strip())
        assert m, f"constraints.txt: not an exact pin: {line!r}"
        name = canonicalize_name(m.group(1))
        assert name not in pins, f"constraints.txt pins {name} twice"
        pins[name] = m.group(2)
    return pins


def test_lock_pins_every_requirement_of_the_test_install():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    own = canonicalize_name(project["name"])
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in ("slurm", "test"):
        reqs += [Requirement(r) for r in project["optional-dependencies"][extra]]
    pins = lock()
    assert own not in pins, "the project itself is installed by -e ., not by the lock"
    missing, outside = [], []
    for req in reqs:
        name = canonicalize_name(req.name)
        if name == own or (req.marker and not req.marker.evaluate()):
            continue
        if name not in pins:
            missing.append(str(req))
        elif not req.specifier.contains(pins[name], prereleases=True):
            outside.append(f"{req} (locked: {pins[name]})")
    assert not missing and not outside, (
        f"constraints.txt is behind pyproject.toml; run tools/lock.sh. "
        f"Not pinned: {missing}; pinned outside the range: {outside}"
    )
    # torch's CPU build and the triton the variants were measured with
    assert pins["torch"] == "2.13.0" and pins["triton"] == "3.6.0"


@pytest.mark.xdist_group("loadgroup_check")
def test_xdist_keeps_a_group_on_one_worker(request):
    """The locked pytest and pytest-xdist honour `--dist loadgroup` (pyproject's addopts): the
    suite's long session fixtures (conftest.END_TO_END) are made once only because their tests
    share a group. pytest 9.2 with pytest-xdist 3.8.0 ignores the groups without a word."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker or not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not run by pytest-xdist with --dist loadgroup")
    assert request.node.nodeid.endswith("@loadgroup_check"), (
        f"{request.node.nodeid}: --dist loadgroup did not put this test in its group "
        "(pytest-xdist issue #1386 with pytest 9.2: see pyproject.toml)"
    )
