"""A step's `claims:` on the page: the transpose study's published tables rendered with claims
written into their study.json, the read-first list naming each claim its interval does not
bear out and each step's section saying how its claims fared. CPU only, seconds."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import REPO

from kernelbook.report import publish

GPU, STUDY = "nvidia-h200", "transpose"
HEAD = "16384x16384"


def render_with(tmp_path, claims: dict[str, dict] | None, says: dict[str, str] | None = None):
    """The published transpose page rendered from its data/ with each variant's claims set
    to ``claims`` (None: study.json without the key, as written before it); the page text."""
    worklogs = tmp_path / "worklogs"
    shutil.copytree(REPO / "worklogs" / GPU / STUDY / "data", worklogs / GPU / STUDY / "data")
    path = worklogs / GPU / STUDY / "data" / "study.json"
    meta = json.loads(path.read_text())
    for v in meta["variants"]:
        if claims is None:
            v.pop("claims", None)
        else:
            v["claims"] = claims.get(v["id"], {})
        v["says"] = (says or {}).get(v["id"], v["says"])
    path.write_text(json.dumps(meta, indent=1) + "\n")
    page = publish.render_published(worklogs, GPU, STUDY, REPO / "analysis", tmp_path / "out")
    return page.read_text()


def front(md: str) -> str:
    """The read-first list."""
    return md.split("## Read this first", 1)[1].split("## The ladder", 1)[0]


def section(md: str, v: str) -> str:
    return md.split(f"### {v}\n", 1)[1].split("\n### ", 1)[0]


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    return render_with(
        tmp_path_factory.mktemp("claims"),
        {
            "00_copy": {"previous": "same"},  # the first step: nothing before it
            "02_smem_tiled": {"previous": "faster", "baseline": "faster"},
            "03_smem_padded": {"00_copy": "same"},  # 0.40x the copy
            "04_multi_element": {"09_gone": "faster"},  # no such row at the headline
            "05_vectorized": {"01_naive": "faster", "previous": "slower"},
            "06_tuned": {"previous": "faster"},
        },
    )


def test_claims_the_interval_bears_out_are_said_in_the_section_only(page):
    first = front(page)
    assert "**06_tuned** claims" not in first
    assert "**02_smem_tiled** claims to be faster than 01_naive" not in first
    got = section(page, "06_tuned")
    assert (
        f"**Claims at {HEAD}.** Faster than 05_vectorized: measured faster (1.139x, interval "
        "[1.137, 1.142]), as claimed." in got
    )
    # the same interval as the ladder's "vs previous" of the step
    ladder = next(ln for ln in page.splitlines() if ln.startswith("| 06_tuned |"))
    assert "| 1.139 | [1.137, 1.142] | faster |" in ladder


def test_claims_it_does_not_bear_out_are_named_first(page):
    first = front(page)
    assert (
        f"- **02_smem_tiled** claims to be faster than torch (the baseline), but at {HEAD} its "
        "speed against it is 0.8606x, interval [0.86, 0.8617]: **slower**." in first
    )
    assert (
        f"- **03_smem_padded** claims to be the same speed as 00_copy, but at {HEAD} its speed "
        "against it is 0.3986x, interval [0.3981, 0.399]: **slower**." in first
    )
    assert "- **05_vectorized** claims to be slower than 04_multi_element, but" in first
    assert "**05_vectorized** claims to be faster than 01_naive" not in first  # that one held
    s = section(page, "05_vectorized")
    assert "Faster than 01_naive: measured faster (" in s and "), as claimed." in s
    assert "Slower than 04_multi_element: measured **faster** (1.025x" in s
    assert "not as claimed." in s
    s = section(page, "02_smem_tiled")
    assert "Faster than 01_naive: measured faster (2.015x" in s
    assert "Faster than torch (the baseline): measured **slower** (0.8606x" in s


def test_a_claim_that_cannot_be_checked_says_why(page):
    first = front(page)
    assert (
        "- **00_copy** claims to be the same speed as the step before it; not checked: no step "
        f"before it was measured ok at {HEAD}." in first
    )
    assert (
        "- **04_multi_element** claims to be faster than 09_gone; not checked: 09_gone was not "
        f"measured ok at {HEAD}." in first
    )
    assert "Faster than 09_gone: not checked, 09_gone was not measured ok" in section(
        page, "04_multi_element"
    )


def test_a_step_without_claims_shows_none(page):
    assert "**Claims" not in section(page, "01_naive")


def test_says_alone_claims_nothing(tmp_path):
    """The page reads `claims:` only: a says full of comparatives is not a claim (the regex
    over says that decided it once is gone), and a study.json written before the key renders
    without claims."""
    says = {"03_smem_padded": "faster, fewer conflicts, more loads in flight, no barrier"}
    for claims in (None, {}):
        md = render_with(tmp_path / str(claims), claims, says)
        assert "claims to be" not in md and "**Claims at" not in md
        assert "faster, fewer conflicts" in section(md, "03_smem_padded")
