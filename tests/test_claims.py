"""A step's `claims:` on the page: the transpose study's published tables rendered with claims
written into their study.json, the read-first list naming each claim its interval does not
bear out and each step's section saying how its claims fared. CPU only, seconds."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from conftest import REPO

from kernelbook import tables
from kernelbook.report import publish
from kernelbook.report.markdown import fmt

GPU, STUDY = "nvidia-h200", "transpose"
HEAD = "16384x16384"
_MEAS = tables.read(REPO / "worklogs" / GPU / STUDY / "data" / "measurements.parquet")
_ROWS = _MEAS[(_MEAS["size"] == HEAD) & (_MEAS["variant_kind"] != "candidate")].set_index("variant")


def speed(v: str, against: str | None = None) -> float:
    """v's speed against another step (its median over v's), or against the baseline: the
    ratio the page states, from the published rows' medians (republishing moves it)."""
    r = _ROWS.loc[v]
    other = r["baseline_median_ms"] if against is None else _ROWS.loc[against, "median_ms"]
    return float(other) / float(r["median_ms"])


def stated(text: str, lead: str, value: float) -> str:
    """The claim's text after ``lead``: its ratio as the page formats it, then an interval
    that holds it; the verdict and what follows."""
    m = re.search(
        re.escape(lead)
        + re.escape(fmt(value))
        + r"x, interval \[([-0-9.e]+), ([-0-9.e]+)\]\)?(.*)",
        text,
    )
    assert m, (lead, fmt(value), text[:3000])
    lo, hi = float(m.group(1)), float(m.group(2))
    assert lo <= value <= hi or fmt(lo) == fmt(value) or fmt(hi) == fmt(value), (lo, value, hi)
    return m.group(3)


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
    assert speed("06_tuned", "05_vectorized") > 1.01, "the premise: 06 is faster than 05"
    first = front(page)
    assert "**06_tuned** claims" not in first
    assert "**02_smem_tiled** claims to be faster than 01_naive" not in first
    got = section(page, "06_tuned")
    x = speed("06_tuned", "05_vectorized")
    lead = f"**Claims at {HEAD}.** Faster than 05_vectorized: measured faster ("
    assert stated(got, lead, x).startswith(", as claimed.")
    # the same interval as the ladder's "vs previous" of the step
    ladder = next(ln for ln in page.splitlines() if ln.startswith("| 06_tuned |"))
    iv = re.search(r"interval (\[[^]]+\])", got[got.index(lead) :]).group(1)
    assert f"| {fmt(x)} | {iv} | faster |" in ladder


def test_claims_it_does_not_bear_out_are_named_first(page):
    # the premises the fixture's wrong claims rest on
    assert speed("02_smem_tiled") < 0.99 and speed("03_smem_padded", "00_copy") < 0.99
    assert speed("05_vectorized", "04_multi_element") > 1.01
    first = front(page)
    lead = (
        f"- **02_smem_tiled** claims to be faster than torch (the baseline), but at {HEAD} its "
        "speed against it is "
    )
    assert stated(first, lead, speed("02_smem_tiled")).startswith(": **slower**.")
    lead = (
        f"- **03_smem_padded** claims to be the same speed as 00_copy, but at {HEAD} its speed "
        "against it is "
    )
    assert stated(first, lead, speed("03_smem_padded", "00_copy")).startswith(": **slower**.")
    assert "- **05_vectorized** claims to be slower than 04_multi_element, but" in first
    assert "**05_vectorized** claims to be faster than 01_naive" not in first  # that one held
    s = section(page, "05_vectorized")
    assert "Faster than 01_naive: measured faster (" in s and "), as claimed." in s
    lead = "Slower than 04_multi_element: measured **faster** ("
    assert stated(s, lead, speed("05_vectorized", "04_multi_element")).startswith(
        ", not as claimed."
    )
    s = section(page, "02_smem_tiled")
    lead = "Faster than 01_naive: measured faster ("
    assert stated(s, lead, speed("02_smem_tiled", "01_naive")).startswith(", as claimed.")
    lead = "Faster than torch (the baseline): measured **slower** ("
    assert stated(s, lead, speed("02_smem_tiled")).startswith(", not as claimed.")


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
