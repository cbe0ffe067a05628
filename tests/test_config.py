"""kernelbook.config: the real config and studies resolved, broken ones refused by name."""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import pytest
import yaml

from kernelbook import config as cfg
from kernelbook.config import ConfigError

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def project() -> cfg.Project:
    return cfg.load_project_file(REPO / "config" / "config.yaml")


@pytest.fixture(scope="module")
def sgemm(project) -> cfg.Study:
    return project.study("sgemm")


@pytest.fixture(scope="module")
def controls(project) -> cfg.Study:
    return cfg.load_study(REPO / "config" / "studies" / "controls.yaml", project.settings, REPO)


# ------------------------------------------------------------------------------------------
# The real files


def test_global_settings_resolved(project):
    s = project.settings
    assert project.root == REPO
    assert "sgemm" in s["studies"]
    assert s["arch"] == "sm_90"
    assert s["gpu"] in ("auto", "none")
    assert s["nvcc_flags"] == ["-O3", "-lineinfo"]
    assert s["seed"] == 20261129
    assert s["study_dir"] == "config/studies"  # default filled
    assert s["results"] == "results"  # default filled
    t = s["timing"]
    assert t["cache"] == "cold" and t["method"] == "events"
    assert t["graph_launches"] == 20  # default filled inside a nested mapping
    assert t["min_samples"] == 10 and t["max_samples"] == 5000
    assert set(project.studies) == set(s["studies"])


def test_sgemm_sizes_expanded_in_order(sgemm):
    cube = [{"M": n, "N": n, "K": n} for n in (128, 256, 512, 1024, 2048, 4096, 8192)]
    assert list(sgemm.sizes) == [
        *cube,
        {"M": 4096, "N": 4096, "K": 1000},
        {"M": 3000, "N": 3000, "K": 3000},
    ]
    # every size keeps the problem's name order
    assert all(tuple(s) == ("M", "N", "K") for s in sgemm.sizes)
    assert sgemm.size_names == ("M", "N", "K")


def test_sgemm_study_fields(sgemm, project):
    assert sgemm.name == "sgemm"
    assert sgemm.path == "config/studies/sgemm.yaml"
    assert sgemm.problem == "gemm" and sgemm.dtype == "float32"
    assert sgemm.baseline == "cublas"
    assert sgemm.params == {"alpha": 1.25, "beta": 0.75}
    assert sgemm.headline == {"M": 4096, "N": 4096, "K": 4096}
    assert sgemm.headline in sgemm.sizes
    # no study override of timing: the global settings apply
    assert sgemm.timing == project.settings["timing"]


def test_sgemm_variants(sgemm):
    ids = [v.id for v in sgemm.variants]
    assert ids[:2] == ["01_naive", "02_coalescing"]
    naive = sgemm.variant("01_naive")
    assert naive.study == "sgemm"
    assert naive.source == "kernels/sgemm/01_naive.cu"  # the default source path
    assert naive.entry == "sgemm_naive"
    assert naive.defines == {"BS": 32}
    assert naive.grid == ("cdiv(M, BS)", "cdiv(N, BS)")
    assert naive.block == ("BS", "BS")
    assert naive.smem == 0
    assert naive.requires == ("M <= 4096",)  # 2.2 s a launch at 8192^3: skipped there
    assert naive.predict == {"pct_of_baseline": 1.0}
    assert not naive.is_tuned and naive.tuned_from is None
    assert sgemm.variant("02_coalescing").block == ("BS * BS",)
    for v in sgemm.variants:
        assert (REPO / v.source).is_file()


def test_jobs_are_plain_variants_and_candidates(sgemm):
    jobs = sgemm.jobs()
    assert [j.id for j in jobs] == [v.id for v in sgemm.variants if not v.is_tuned] + [
        c.id for c in sgemm.candidates
    ]
    assert {"01_naive", "02_coalescing"} <= {j.id for j in jobs}


def test_unknown_variant_names_study_and_lists_variants(sgemm):
    with pytest.raises(ConfigError) as e:
        sgemm.variant("99_nope")
    msg = str(e.value)
    assert "config/studies/sgemm.yaml" in msg and "99_nope" in msg and "01_naive" in msg


def test_unknown_study():
    project = cfg.load_project_file(REPO / "config" / "config.yaml")
    with pytest.raises(ConfigError, match="no study 'nope'"):
        project.study("nope")


def test_launch_geometry_at_an_odd_size(sgemm):
    odd = {"M": 1001, "N": 3000, "K": 7}
    naive = sgemm.variant("01_naive").launch(odd)
    assert naive == cfg.Launch(grid=(32, 94, 1), block=(32, 32, 1), smem=0)
    coal = sgemm.variant("02_coalescing").launch(odd)
    assert coal == cfg.Launch(grid=(94, 32, 1), block=(1024, 1, 1), smem=0)
    # an exact multiple needs no extra block
    assert sgemm.variant("01_naive").launch({"M": 1024, "N": 64, "K": 1}).grid == (32, 2, 1)


def test_launch_refuses_impossible_geometry(sgemm):
    naive = sgemm.variant("01_naive")
    big = dataclasses.replace(naive, defines={"BS": 64})
    with pytest.raises(ConfigError, match=r"sgemm/01_naive: block \[64, 64, 1\] has 4096 threads"):
        big.launch({"M": 128, "N": 128, "K": 128})
    zero = dataclasses.replace(naive, grid=("M // 2048", "1"))
    with pytest.raises(ConfigError, match="sgemm/01_naive: grid .* has a zero"):
        zero.launch({"M": 128, "N": 128, "K": 128})
    neg = dataclasses.replace(naive, smem="0 - M")
    with pytest.raises(ConfigError, match="negative dynamic shared memory"):
        neg.launch({"M": 128, "N": 128, "K": 128})
    bad = dataclasses.replace(naive, grid=("M / 3",))
    with pytest.raises(ConfigError, match="sgemm/01_naive: launch geometry at"):
        bad.launch({"M": 128, "N": 128, "K": 128})


def test_unmet_requires(sgemm):
    v = dataclasses.replace(
        sgemm.variant("01_naive"), requires=("M % BS == 0", "K % 4 == 0", "N >= BS")
    )
    assert v.unmet({"M": 1024, "N": 1024, "K": 1024}) == []
    assert v.unmet({"M": 1000, "N": 1024, "K": 1024}) == ["M % BS == 0"]
    assert v.unmet({"M": 1000, "N": 16, "K": 1001}) == ["M % BS == 0", "K % 4 == 0", "N >= BS"]


def test_unmet_expression_error_names_the_variant(sgemm):
    v = dataclasses.replace(sgemm.variant("01_naive"), requires=("log2(M) >= 7",))
    with pytest.raises(ConfigError, match="sgemm/01_naive"):
        v.unmet({"M": 1000, "N": 1000, "K": 1000})


def test_spec_hash_follows_the_resolved_entry(sgemm):
    naive = sgemm.variant("01_naive")
    assert naive.spec_sha256() == naive.spec_sha256()
    assert re.fullmatch(r"[0-9a-f]{64}", naive.spec_sha256())
    changed = dataclasses.replace(naive, defines={"BS": 16})
    assert changed.spec_sha256() != naive.spec_sha256()
    # what does not change the build or launch does not change the hash
    assert dataclasses.replace(naive, says="other words").spec_sha256() == naive.spec_sha256()
    claimed = dataclasses.replace(naive, claims={"previous": "slower"})
    assert claimed.spec_sha256() == naive.spec_sha256()


def test_claims_of_the_real_studies(sgemm):
    """A step's claims, resolved to {against: verdict}; study.json carries them and its
    hash follows them (a changed claim rewrites study.json, reruns no bench)."""
    from kernelbook.report import meta

    assert sgemm.variant("01_naive").claims == {}
    assert sgemm.variant("02_coalescing").claims == {"previous": "faster"}
    assert sgemm.variant("08_bank_padding").claims == {
        "06_vectorized": "faster",
        "07_bank_relayout": "same",
    }
    got = {v["id"]: v["claims"] for v in meta.study_meta(sgemm, REPO)["variants"]}
    assert got["08_bank_padding"] == {"06_vectorized": "faster", "07_bank_relayout": "same"}
    v = sgemm.variant("02_coalescing")
    other = dataclasses.replace(v, claims={"previous": "same"})
    changed = dataclasses.replace(
        sgemm, variants=tuple(other if x.id == v.id else x for x in sgemm.variants)
    )
    assert meta.spec_hash(changed) != meta.spec_hash(sgemm)


def test_controls_study(controls):
    assert controls.name == "controls"
    assert controls.path == "config/studies/controls.yaml"
    assert list(controls.sizes) == [
        {"M": 256, "N": 256, "K": 256},
        {"M": 1000, "N": 1000, "K": 1000},
    ]
    assert controls.timing["min_time_s"] == 0.02  # study override
    assert controls.timing["max_time_s"] == 2
    assert controls.timing["launch_timeout_s"] == 10
    assert controls.timing["cache"] == "cold"  # the rest from the global settings
    expects = {v.id: v.expect for v in controls.variants}
    assert expects == {
        "02_coalescing": None,
        "90_wrong": "wrong",
        "91_nan": "nonfinite",
        "92_oob": "out_of_bounds",
        "93_race": "race",
        "94_crash": "crash",
        "95_hang": "hang",
    }
    race = controls.variant("93_race")
    assert race.source == "kernels/controls/93_race.cu"
    assert race.entry == "control_race"
    assert race.launch({"M": 1000, "N": 1000, "K": 1000}).block == (1024, 1, 1)
    assert controls.variant("02_coalescing").source == "kernels/sgemm/02_coalescing.cu"
    assert controls.variant("95_hang").launch({"M": 1, "N": 1, "K": 1}).grid == (1, 1, 1)


# ------------------------------------------------------------------------------------------
# Broken configs, written into a temporary root


BASE = """\
problem: gemm
dtype: float32
sizes:
  - {M: [128, 256], N: M, K: M}
baseline: cublas
variants:
  - id: 01_naive
    source: kernels/sgemm/01_naive.cu
    entry: sgemm_naive
    defines: {BS: 32}
    grid: ["cdiv(M, BS)", "cdiv(N, BS)"]
    block: [BS, BS]
"""
VARIANT_2 = """\
  - id: 02_coalescing
    source: kernels/sgemm/02_coalescing.cu
    entry: sgemm_coalescing
    defines: {BS: 32}
    grid: ["cdiv(N, BS)", "cdiv(M, BS)"]
    block: ["BS * BS"]
"""
STUDY = "config/studies/t.yaml"


@pytest.fixture
def root(tmp_path) -> Path:
    """A repository root with the real config/ and kernels/ (sources resolve against it)."""
    shutil.copytree(REPO / "config", tmp_path / "config")
    shutil.copytree(REPO / "kernels", tmp_path / "kernels")
    return tmp_path


def load_text(root: Path, text: str) -> cfg.Study:
    (root / STUDY).write_text(text)
    return cfg.load_project({"studies": ["t"]}, root=root, source="config/config.yaml").study("t")


def sub(old: str, new: str, text: str = BASE) -> str:
    assert old in text, old
    return text.replace(old, new)


def test_minimal_study_loads(root):
    study = load_text(root, BASE + VARIANT_2)
    assert [v.id for v in study.variants] == ["01_naive", "02_coalescing"]
    assert study.path == STUDY
    assert list(study.sizes) == [{"M": 128, "N": 128, "K": 128}, {"M": 256, "N": 256, "K": 256}]
    assert study.title == "t"


def test_sources_resolve_against_the_root_argument(root):
    # the default source is kernels/<study>/<id>.cu under the given root
    (root / "kernels" / "t").mkdir()
    shutil.copy(root / "kernels" / "sgemm" / "01_naive.cu", root / "kernels" / "t" / "01_naive.cu")
    study = load_text(root, sub("    source: kernels/sgemm/01_naive.cu\n", ""))
    assert study.variant("01_naive").source == "kernels/t/01_naive.cu"
    (root / "kernels" / "t" / "01_naive.cu").unlink()
    with pytest.raises(ConfigError, match="source kernels/t/01_naive.cu not found"):
        load_text(root, sub("    source: kernels/sgemm/01_naive.cu\n", ""))


def test_sanitize_sizes_each_variant_at_the_first_it_accepts(root):
    """sanitize.size as a list: a variant runs at the first size its `requires` accept; one
    that accepts none of them falls back to its smallest runnable size of the study, as
    does every variant of a study that names no sanitize size."""
    sized = BASE.replace(
        "baseline: cublas\n",
        "baseline: cublas\nsanitize:\n  size: [{M: 100, N: 64, K: 64}, {M: 200, N: 64, K: 64}]\n",
    )
    two = VARIANT_2 + '    requires: ["M >= 128"]\n'
    three = VARIANT_2.replace("id: 02_coalescing", "id: 03_big") + '    requires: ["M >= 256"]\n'
    study = load_text(root, sized + two + three)
    at = {v.id: study.sanitize_size_for(v) for v in study.variants}
    assert at == {
        "01_naive": {"M": 100, "N": 64, "K": 64},
        "02_coalescing": {"M": 200, "N": 64, "K": 64},
        "03_big": {"M": 256, "N": 256, "K": 256},  # neither: the study's smallest it runs
    }
    single = "baseline: cublas\nsanitize: {size: {M: 200, N: 200, K: 200}}\n"
    one = load_text(root, sub("baseline: cublas\n", single))
    assert one.sanitize_sizes == ({"M": 200, "N": 200, "K": 200},)
    bad = sized.replace("{M: 200, N: 64, K: 64}", "{M: 200, N: 64, Q: 64}")
    with pytest.raises(ConfigError, match=r"t\.yaml: sanitize\.size\[1\]"):
        load_text(root, bad)
    plain = load_text(root, BASE + two)
    assert plain.sanitize_size_for(plain.variant("02_coalescing")) == {"M": 128, "N": 128, "K": 128}


def test_sanitize_also_adds_every_path_size_a_variant_accepts(root):
    """sanitize.also: sizes each variant is sanitized at besides its first (the odd size
    that runs the guards, the aligned one that reaches a fast path): in order, only where its
    `requires` accept them, none twice; a size the problem refuses is one error naming it."""
    sized = BASE.replace(
        "baseline: cublas\n",
        "baseline: cublas\nsanitize:\n  size: {M: 100, N: 64, K: 64}\n"
        "  also: [{M: 256, N: 64, K: 64}, {M: 100, N: 64, K: 64}, {M: 64, N: 64, K: 64}]\n",
    )
    two = VARIANT_2 + '    requires: ["M >= 128"]\n'
    study = load_text(root, sized + two)
    assert study.sanitize_also == (
        {"M": 256, "N": 64, "K": 64},
        {"M": 100, "N": 64, "K": 64},
        {"M": 64, "N": 64, "K": 64},
    )
    at = {v.id: study.sanitize_sizes_for(v) for v in study.variants}
    assert at == {
        # its first, then the also sizes not yet in the list
        "01_naive": [
            {"M": 100, "N": 64, "K": 64},
            {"M": 256, "N": 64, "K": 64},
            {"M": 64, "N": 64, "K": 64},
        ],  # fmt: skip
        # the first it accepts is none of `size`: the study's smallest, then 256 (M >= 128)
        "02_coalescing": [{"M": 128, "N": 128, "K": 128}, {"M": 256, "N": 64, "K": 64}],
    }
    plain = load_text(root, BASE)  # no also: the one size, as before
    assert plain.sanitize_sizes_for(plain.variant("01_naive")) == [
        plain.sanitize_size_for(plain.variant("01_naive"))
    ]
    # the sanitize job's entries: one a size, each labelled with its variant
    from kernelbook.profile.job import _sanitize_entries

    entries = _sanitize_entries(study, study.variant("02_coalescing"), {}, None, cubin="k.cubin")
    assert [(e[0], e[1].id, str(e[2]), e[3]) for e in entries] == [
        ("02_coalescing", "02_coalescing", "k.cubin", size) for size in at["02_coalescing"]
    ]
    bad = sized.replace("{M: 64, N: 64, K: 64}]", "{M: 64, N: 64, Q: 64}]")
    with pytest.raises(ConfigError, match=r"t\.yaml: sanitize\.also\[2\]"):
        load_text(root, bad)


# (id, study text, regexes the message must match besides the file name)
BROKEN = [
    ("unknown top-level key", BASE + "bogus: 1\n", [r"\(top level\)", r"unknown key", "bogus"]),
    ("missing variants", BASE.split("variants:")[0], [r"'variants' is required"]),
    ("wrong dtype", sub("dtype: float32", "dtype: int8"), [r"dtype", "int8"]),
    (
        "dtype the problem lacks",
        sub("dtype: float32", "dtype: float16"),
        [r"dtype: problem 'gemm' supports float32, not float16"],
    ),
    (
        "unknown problem",
        sub("problem: gemm", "problem: conv"),
        [r"problem", r"unknown problem 'conv'"],
    ),
    ("unknown baseline", sub("baseline: cublas", "baseline: cutlass"), [r"baseline", "cutlass"]),
    (
        "unknown params key",
        BASE + "params: {alpha: 1.0, gamma: 2}\n",
        [r"params", "gamma", r"known: alpha, beta"],
    ),
    (
        "variant missing entry",
        sub("    entry: sgemm_naive\n", ""),
        [r"variants\[0\]", r"'entry' is required"],
    ),
    ("bad id pattern", sub("id: 01_naive", "id: -bad id"), [r"variants\[0\]\.id", "-bad id"]),
    ("id with candidate separator", sub("id: 01_naive", "id: 01__naive"), [r"01__naive", "'__'"]),
    (
        "duplicate variant id",
        BASE + VARIANT_2.replace("02_coalescing", "01_naive", 1),
        [r"variants\[1\] \(01_naive\)", "duplicate id"],
    ),
    (
        "source file missing",
        sub("kernels/sgemm/01_naive.cu", "kernels/sgemm/nope.cu"),
        [r"variants\[0\] \(01_naive\)", r"source kernels/sgemm/nope\.cu not found"],
    ),
    (
        "grid cut at commas (unquoted flow style)",
        sub('["cdiv(M, BS)", "cdiv(N, BS)"]', "[cdiv(N, BS), cdiv(M, BS)]"),
        [r"variants\[0\] \(01_naive\)\.grid", "cut at their commas", "quote"],
    ),
    (
        "requires cut at commas",
        BASE + "    requires: [max(M, N) > 0]\n",
        [r"variants\[0\] \(01_naive\)\.requires", "cut at their commas"],
    ),
    (
        "grid uses an unknown name",
        sub('"cdiv(M, BS)"', '"cdiv(M, TILE)"'),
        [
            r"variants\[0\] \(01_naive\)",
            r"grid\[0\]",
            r"unknown name\(s\) TILE",
            "known: BS, K, M, N",
        ],
    ),
    (
        "hostile expression in block",
        sub("block: [BS, BS]", "block: [\"__import__('os').system('x')\"]"),
        [r"variants\[0\] \(01_naive\)", r"block\[0\]", "not allowed"],
    ),
    (
        "requires with attribute access",
        BASE + '    requires: ["M.real > 0"]\n',
        [r"variants\[0\] \(01_naive\)", r"requires\[0\]", "Attribute is not allowed"],
    ),
    (
        "hostile define",
        sub("{BS: 32}", '{BS: 32, X: "().__class__"}'),
        [r"variants\[0\] \(01_naive\)", r"defines\.X", "not allowed"],
    ),
    (
        "define clashing with a size name",
        sub("{BS: 32}", "{BS: 32, M: 4}"),
        [r"variants\[0\] \(01_naive\)", "M clash with size names"],
    ),
    (
        "smem with unknown name",
        BASE + '    smem: "BS * WORDS"\n',
        [r"variants\[0\] \(01_naive\)", r"smem\[0\]", "WORDS"],
    ),
    ("invalid YAML", sub("dtype: float32", "dtype: [float32"), [r"not valid YAML", r"line \d+"]),
    (
        "sizes with unknown size name",
        sub("K: M}", "K: M, Q: 3}"),
        [r"sizes\[0\]", r"unknown size name\(s\) Q", "M, N, K"],
    ),
    (
        "sizes with undefined derived name",
        sub("K: M}", "K: L}"),
        [r"sizes\[0\]", r"K: 'L' uses undefined L"],
    ),
    (
        "sizes missing a size name",
        sub("{M: [128, 256], N: M, K: M}", "{M: [128, 256], N: M}"),
        [r"sizes\[0\]", r"missing size name\(s\) K"],
    ),
    (
        "derived size not an integer",
        sub("K: M}", 'K: "M / 3"}'),
        [r"sizes\[0\]", "K", "expected an integer"],
    ),
    (
        "headline not among sizes",
        BASE + "headline: {M: 4096, N: 4096, K: 4096}\n",
        [r"headline \{'M': 4096, 'N': 4096, 'K': 4096\} is not one of the study's sizes"],
    ),
    (
        "timing override with a bad value",
        BASE + "timing: {warmup: 0}\n",
        [r"timing\.warmup", "less than the minimum of 1"],
    ),
    (
        "timing override with a bad enum",
        BASE + "timing: {cache: lukewarm}\n",
        [r"timing\.cache", "lukewarm"],
    ),
    (
        "timing override graph with cold cache",
        BASE + "timing: {method: graph}\n",
        [r"timing\.method 'graph' needs timing\.cache 'warm'"],
    ),
    (
        "timing override host with the default (cold) cache",
        BASE + "timing: {method: host}\n",
        [r"timing\.method 'host' needs timing\.cache 'warm'", "no L2 flush", "cache: warm"],
    ),
    (
        "timing override host batch of no time",
        BASE + "timing: {method: host, cache: warm, host_batch_s: 0}\n",
        [r"timing\.host_batch_s", "less than or equal to the minimum of 0"],
    ),
    (
        "tune space with no valid point",
        sub(
            "    defines: {BS: 32}\n",
            "    defines: {BS: 32}\n    tune: {space: {TM: [4, 8]}, constraints: ['TM > 64']}\n",
        ),
        [r"variants\[0\] \(01_naive\)", "no point of the space satisfies the constraints"],
    ),
    (
        "tune constraint over a size name",
        sub(
            "    defines: {BS: 32}\n",
            "    defines: {BS: 32}\n"
            "    tune: {space: {TM: [4, 8]}, constraints: ['M % TM == 0']}\n",
        ),
        [r"variants\[0\] \(01_naive\)", r"tune\.constraints\[0\]", r"unknown name\(s\) M"],
    ),
    (
        "tune parameter also a define",
        sub(
            "    defines: {BS: 32}\n",
            "    defines: {BS: 32}\n    tune: {space: {BS: [16, 32]}}\n",
        ),
        [r"variants\[0\] \(01_naive\)", r"defines\.BS is also a tuning parameter"],
    ),
    (
        "tune sizes not among sizes",
        sub(
            "    defines: {BS: 32}\n",
            "    defines: {BS: 32}\n    tune: {space: {TM: [4]}, sizes: [{M: 64, N: 64, K: 64}]}\n",
        ),
        [r"variants\[0\] \(01_naive\)", r"tune\.sizes", "not one of the study's sizes"],
    ),
    ("empty file", "", ["expected a mapping at the top level"]),
]


@pytest.mark.parametrize("case, text, patterns", BROKEN, ids=[c[0] for c in BROKEN])
def test_broken_study_names_file_and_key(root, case, text, patterns):
    with pytest.raises(ConfigError) as e:
        load_text(root, text)
    msg = str(e.value)
    assert STUDY in msg, msg
    for p in patterns:
        assert re.search(p, msg), f"{case}: /{p}/ not in: {msg}"


def test_broken_study_messages_are_distinct(tmp_path):
    shutil.copytree(REPO / "config", tmp_path / "config")
    shutil.copytree(REPO / "kernels", tmp_path / "kernels")
    messages = {}
    for case, text, _ in BROKEN:
        with pytest.raises(ConfigError) as e:
            load_text(tmp_path, text)
        messages[case] = str(e.value)
    seen: dict[str, str] = {}
    for case, msg in messages.items():
        assert msg not in seen, f"'{case}' and '{seen.get(msg)}' give the same message: {msg}"
        seen[msg] = case


def test_invalid_yaml_points_at_the_line(root):
    text = BASE.replace("baseline: cublas\n", "baseline: cublas\n  oops: [1\n")
    with pytest.raises(ConfigError) as e:
        load_text(root, text)
    msg = str(e.value)
    assert "t.yaml" in msg
    m = re.search(r"line (\d+)", msg)
    assert m, msg
    assert int(m.group(1)) == 6, msg  # the line with the unclosed flow sequence


def test_headline_with_unknown_size_name_rejected(root):
    with pytest.raises(ConfigError, match="Q"):
        load_text(root, BASE + "headline: {M: 128, N: 128, K: 128, Q: 7}\n")


def test_study_timing_override_max_below_min_rejected(root):
    with pytest.raises(ConfigError, match="max_samples"):
        load_text(root, BASE + "timing: {min_samples: 50, max_samples: 20}\n")


def test_timing_override_with_unknown_key_names_it(root):
    with pytest.raises(ConfigError) as e:
        load_text(root, BASE + "timing: {warmpu: 3}\n")
    assert STUDY in str(e.value) and "warmpu" in str(e.value)


# ------------------------------------------------------------------------------------------
# Launch geometry, checked at load for every size a variant claims (not first on a GPU)

# (case, study text, arch, regexes the message must match besides the file name)
BAD_LAUNCH = [
    (
        "2048 threads",
        sub("block: [BS, BS]", "block: [2048]"),
        "sm_90",
        [r"variants\[0\] \(01_naive\)", r"block \[2048, 1, 1\] has 2048 threads", "M=128"],
    ),
    (
        "block z over 64",
        sub("block: [BS, BS]", "block: [4, 2, 128]"),
        "sm_90",
        [r"\(01_naive\)", r"block \[4, 2, 128\] exceeds CUDA's limit \[1024, 1024, 64\]"],
    ),
    (
        "grid y over 65535",
        sub('"cdiv(N, BS)"', '"N * 1000"'),
        "sm_90",
        [r"\(01_naive\)", r"grid \[4, 128000, 1\] exceeds", r"size M=128, N=128, K=128"],
    ),
    (
        "zero grid at the second size only",
        BASE.replace("[128, 256]", "[256, 128]").replace('"cdiv(M, BS)"', '"M // 256"'),
        "sm_90",
        [r"\(01_naive\)", r"grid \[0, 4, 1\] has a zero", r"size M=128, N=128, K=128"],
    ),
    (
        "smem over the sm_90 opt-in limit",
        BASE + "    smem: 232449\n",
        "sm_90a",
        [r"\(01_naive\)", r"dynamic shared memory 232449 bytes exceeds the 232448 bytes"],
    ),
    (
        "smem within sm_90 but over sm_80",
        BASE + "    smem: 232448\n",
        "sm_80",
        [r"\(01_naive\)", r"232448 bytes exceeds the 166912 bytes"],
    ),
    (
        "one tuned candidate with too many threads",
        sub(
            "    defines: {BS: 32}\n",
            "    defines: {BS: 32}\n    tune: {space: {TY: [1, 2]}}\n",
        ).replace("block: [BS, BS]", "block: [BS, BS, TY]"),
        "sm_90",
        [r"\(01_naive\)", r"candidate 01_naive__TY2", "2048 threads", "M=128"],
    ),
    (
        "dynamic smem expression per size",
        BASE + '    smem: "M * 1024"\n',
        "sm_90",
        [r"\(01_naive\)", r"262144 bytes exceeds", r"size M=256"],
    ),
]


@pytest.mark.parametrize("case, text, arch, patterns", BAD_LAUNCH, ids=[c[0] for c in BAD_LAUNCH])
def test_impossible_launch_refused_at_load(root, case, text, arch, patterns):
    (root / STUDY).write_text(text)
    with pytest.raises(ConfigError) as e:
        cfg.load_project({"studies": ["t"], "arch": arch}, root=root)
    msg = str(e.value)
    assert msg.startswith(f"{STUDY}: "), msg
    for p in patterns:
        assert re.search(p, msg), f"{case}: /{p}/ not in: {msg}"


def test_launch_checked_only_at_the_sizes_a_variant_claims(root):
    # grid 0 at M=128, but requires keeps the variant off that size
    text = BASE.replace('"cdiv(M, BS)"', '"M // 256"') + '    requires: ["M >= 256"]\n'
    study = load_text(root, text)
    assert study.variant("01_naive").unmet({"M": 128, "N": 128, "K": 128}) == ["M >= 256"]
    # the largest opt-in dynamic shared memory of sm_90 is allowed
    load_text(root, BASE + "    smem: 232448\n")
    # an arch without a tabled limit is not checked for shared memory (the GPU still is)
    (root / STUDY).write_text(BASE + "    smem: 300000\n")
    cfg.load_project({"studies": ["t"], "arch": "sm_53"}, root=root)


def test_smem_limits_per_arch():
    assert cfg.smem_optin_limit("sm_90") == cfg.smem_optin_limit("sm_90a") == 232448
    assert cfg.smem_optin_limit("compute_90") == 232448
    assert cfg.smem_optin_limit("sm_80") == 163 * 1024
    assert cfg.smem_optin_limit("sm_53") is None


def test_schema_errors_name_the_variant_by_id(root):
    with pytest.raises(ConfigError) as e:
        load_text(root, BASE + VARIANT_2 + "    bogus: 1\n")
    assert str(e.value) == (
        f"{STUDY}: variants[1] (02_coalescing): unknown key ('bogus' was unexpected)"
    )
    with pytest.raises(ConfigError) as e:
        load_text(root, BASE + "    says: [1]\n")
    assert str(e.value).startswith(f"{STUDY}: variants[0] (01_naive).says: "), str(e.value)


def test_claims_refused_by_name(root):
    """`claims:` is a verdict against the step before it, or a mapping from previous,
    baseline or a variant id to one; anything else is refused, naming file, variant and
    key."""
    where = f"{STUDY}: variants[1] (02_coalescing).claims"
    for bad, says in (
        ("quicker", "'quicker' is not a valid value here (faster, same or slower"),
        ("[faster]", "['faster'] is not a valid value here"),
        ("{previous: quicker}", "previous: 'quicker' is not one of ['faster', 'same', 'slower']"),
        ("{}", "{} should be non-empty"),
        (
            "{03_gone: faster}",
            "'03_gone' is not previous, baseline or a variant of this study "
            "(known: previous, baseline, 01_naive)",
        ),
        ("{02_coalescing: same}", "02_coalescing is this variant itself"),
    ):
        with pytest.raises(ConfigError) as e:
            load_text(root, BASE + VARIANT_2 + f"    claims: {bad}\n")
        assert str(e.value).startswith(where), str(e.value)
        assert says in str(e.value), str(e.value)
    with pytest.raises(ConfigError) as e:
        load_text(root, BASE + "    claims: faster\n" + VARIANT_2)
    assert str(e.value) == (
        f"{STUDY}: variants[0] (01_naive).claims: the first variant has no step before it; "
        "name what it is against (baseline or a variant id)"
    )
    control = VARIANT_2.replace("id: 02_coalescing", "id: 90_w") + "    expect: wrong\n"
    with pytest.raises(ConfigError) as e:
        load_text(root, BASE + control + "    claims: {baseline: slower}\n")
    assert str(e.value) == (
        f"{STUDY}: variants[1] (90_w).claims: a negative control (expect: wrong) is not timed, "
        "so it can claim no speed"
    )
    study = load_text(
        root, BASE + "    claims: {baseline: slower}\n" + VARIANT_2 + "    claims: same\n"
    )
    assert [v.claims for v in study.variants] == [{"baseline": "slower"}, {"previous": "same"}]
    study = load_text(root, BASE + VARIANT_2 + "    claims: {01_naive: faster, baseline: same}\n")
    assert study.variant("02_coalescing").claims == {"01_naive": "faster", "baseline": "same"}


# ------------------------------------------------------------------------------------------
# The global config


GLOBAL_BROKEN = [
    ("unknown key", {"studies": [], "colour": "blue"}, [r"\(top level\)", "colour"]),
    ("missing studies", {"arch": "sm_90"}, [r"'studies' is required"]),
    (
        "graph with cold cache",
        {"studies": [], "timing": {"method": "graph", "cache": "cold"}},
        [r"timing\.method 'graph' needs timing\.cache 'warm'"],
    ),
    ("graph with default cache", {"studies": [], "timing": {"method": "graph"}}, ["graph"]),
    (
        "host with cold cache",
        {"studies": [], "timing": {"method": "host", "cache": "cold"}},
        [r"timing\.method 'host' needs timing\.cache 'warm'"],
    ),
    ("arch pattern", {"studies": [], "arch": "sm90"}, [r"arch", "sm90", "does not match"]),
    ("arch pattern 2", {"studies": [], "arch": "gfx90a"}, [r"arch", "gfx90a"]),
    (
        "max below min samples",
        {"studies": [], "timing": {"min_samples": 50, "max_samples": 20}},
        [r"max_samples is below timing\.min_samples"],
    ),
    ("gpu value", {"studies": [], "gpu": "yes"}, [r"gpu", "yes"]),
    ("study name pattern", {"studies": ["SGEMM"]}, [r"studies\[0\]", "SGEMM"]),
    ("not a mapping", ["sgemm"], ["expected a mapping"]),
]


@pytest.mark.parametrize("case, data, patterns", GLOBAL_BROKEN, ids=[c[0] for c in GLOBAL_BROKEN])
def test_broken_global_config(root, case, data, patterns):
    with pytest.raises(ConfigError) as e:
        cfg.load_project(data, root=root, source="config/config.yaml")
    msg = str(e.value)
    assert msg.startswith("config/config.yaml: "), msg
    for p in patterns:
        assert re.search(p, msg), f"{case}: /{p}/ not in: {msg}"


def test_global_config_graph_with_warm_cache_is_fine(root):
    p = cfg.load_project({"studies": [], "timing": {"method": "graph", "cache": "warm"}}, root=root)
    assert p.settings["timing"]["method"] == "graph"
    assert p.studies == {}


def test_missing_study_file_named(root):
    with pytest.raises(ConfigError, match=r"config/studies/nope\.yaml: file not found"):
        cfg.load_project({"studies": ["nope"]}, root=root)


def test_config_file_overrides(root):
    (root / STUDY).write_text(BASE)
    p = cfg.load_project_file(
        root / "config" / "config.yaml", overrides={"studies": ["t"], "arch": "sm_80"}
    )
    assert p.root == root
    assert list(p.studies) == ["t"]
    assert p.settings["arch"] == "sm_80"


# ------------------------------------------------------------------------------------------
# Autotuning


TUNED = """\
problem: gemm
dtype: float32
sizes:
  - {M: [128, 256], N: M, K: M}
baseline: cublas
variants:
  - id: 01_naive
    source: kernels/sgemm/01_naive.cu
    entry: sgemm_naive
    defines: {BS: 32}
    grid: ["cdiv(M, BS)", "cdiv(N, BS)"]
    block: [BS, BS]
  - id: 09_x
    source: kernels/sgemm/09_autotuned.cu
    entry: sgemm_autotuned
    defines: {BK: 8, TM: 8, TN: 8, THREADS: "BM * BN // (TM * TN)", WIDE: "BM > BN"}
    grid: ["cdiv(N, BN)", "cdiv(M, BM)"]
    block: [THREADS]
    requires: ["M % BM == 0"]
    tune:
      space: {BM: [64, 128], BN: [64, 128]}
      constraints: ["BM >= BN"]
      sizes: [{M: 256, N: M, K: M}]
"""


def test_tune_space_expands_into_candidates(root):
    study = load_text(root, TUNED)
    ids = [c.id for c in study.candidates]
    assert ids == ["09_x__BM64_BN64", "09_x__BM128_BN64", "09_x__BM128_BN128"]
    by_id = {c.id: c for c in study.candidates}
    assert by_id["09_x__BM64_BN64"].defines == {
        "BM": 64,
        "BN": 64,
        "BK": 8,
        "TM": 8,
        "TN": 8,
        "THREADS": 64,
        "WIDE": False,
    }
    assert by_id["09_x__BM128_BN64"].defines["THREADS"] == 128
    assert by_id["09_x__BM128_BN64"].defines["WIDE"] is True
    assert by_id["09_x__BM128_BN128"].defines["THREADS"] == 256
    for c in study.candidates:
        assert c.tuned_from == "09_x"
        assert c.tune_point == {"BM": c.defines["BM"], "BN": c.defines["BN"]}
        assert c.entry == "sgemm_autotuned" and c.source == "kernels/sgemm/09_autotuned.cu"
        assert c.tune_sizes == ({"M": 256, "N": 256, "K": 256},)
        assert not c.is_tuned
    s = {"M": 256, "N": 256, "K": 256}
    assert by_id["09_x__BM128_BN64"].launch(s) == cfg.Launch((4, 2, 1), (128, 1, 1), 0)
    assert by_id["09_x__BM64_BN64"].unmet({"M": 192, "N": 192, "K": 192}) == []
    assert by_id["09_x__BM128_BN128"].unmet({"M": 192, "N": 192, "K": 192}) == ["M % BM == 0"]
    # candidates' specs differ, so each has its own build
    assert len({c.spec_sha256() for c in study.candidates}) == 3

    parent = study.variant("09_x")
    assert parent.is_tuned
    assert parent.candidates == tuple(ids)
    assert study.variant("09_x__BM128_BN64") is by_id["09_x__BM128_BN64"]

    jobs = [j.id for j in study.jobs()]
    assert jobs == ["01_naive", *ids]
    assert "09_x" not in jobs


def test_tune_space_of_one_point(root):
    text = TUNED.replace("{BM: [64, 128], BN: [64, 128]}", "{BM: [128], BN: [64]}")
    study = load_text(root, text)
    assert [c.id for c in study.candidates] == ["09_x__BM128_BN64"]


def test_tune_constraint_expression_error_named(root):
    text = TUNED.replace('constraints: ["BM >= BN"]', 'constraints: ["BM // (BN - 64) > 0"]')
    with pytest.raises(ConfigError) as e:
        load_text(root, text)
    msg = str(e.value)
    assert STUDY in msg and "09_x" in msg and "tune.constraints" in msg
    assert "division by zero" in msg


def test_study_yaml_round_trip_through_pyyaml_is_equivalent(root):
    # a study written by a program (block style, quoted) resolves like the hand-written one
    data = yaml.safe_load(TUNED)
    a = load_text(root, TUNED)
    b = load_text(root, yaml.safe_dump(data, sort_keys=False))
    assert [c.spec_sha256() for c in a.candidates] == [c.spec_sha256() for c in b.candidates]


def test_tuned_sweep_runs_the_headline_winner_at_the_other_sizes(sgemm):
    from kernelbook import tune

    head = {"M": 4096, "N": 4096, "K": 4096}
    for vid in ("09_autotuned", "10_warptiling", "12_best"):
        v = sgemm.variant(vid)
        assert v.is_tuned and head in v.tune_sizes
        assert tune.sweep_pick(sgemm, v) == head
        rest = tune.sweep_sizes(sgemm, v)
        assert rest == [s for s in sgemm.sizes if s not in v.tune_sizes]
        assert len(rest) == len(sgemm.sizes) - len(v.tune_sizes) > 0
    # every candidate of 10 and 12 obeys its kernel's static_asserts (the build would fail)
    for c in (*sgemm.variant("10_warptiling").candidates, *sgemm.variant("12_best").candidates):
        d = sgemm.variant(c).defines
        assert d["NUM_THREADS"] == (d["BM"] // d["WM"]) * (d["BN"] // d["WN"]) * 32


def test_tuned_sweep_without_tune_sizes_or_headline(root):
    from kernelbook import tune

    study = load_text(root, TUNED)
    v = study.variant("09_x")
    assert tune.sweep_pick(study, v) == {"M": 256, "N": 256, "K": 256}  # the first tune size
    assert tune.sweep_sizes(study, v) == [s for s in study.sizes if s not in v.tune_sizes]
    bare = load_text(root, TUNED.replace("      sizes: [{M: 256, N: M, K: M}]\n", ""))
    assert tune.sweep_sizes(bare, bare.variant("09_x")) == []  # tuned at every size


def test_winner_runs_confirm_each_tune_size_and_sweep_the_pick(sgemm, root):
    from kernelbook import tune

    v = sgemm.variant("10_warptiling")
    won = {"4096x4096x4096": v.candidates[0], "4096x4096x1000": v.candidates[1]}
    plan = dict(tune.winner_runs(sgemm, v, won))
    head, tall = {"M": 4096, "N": 4096, "K": 4096}, {"M": 4096, "N": 4096, "K": 1000}
    # each winner re-timed where it won; the headline's winner also at every other size
    assert plan[v.candidates[1]] == [tall]
    assert plan[v.candidates[0]] == [head] + tune.sweep_sizes(sgemm, v)
    # the same candidate winning at both: one run over all sizes
    both = dict(tune.winner_runs(sgemm, v, dict.fromkeys(won, v.candidates[0])))
    assert list(both) == [v.candidates[0]]
    assert sorted(map(str, both[v.candidates[0]])) == sorted(map(str, sgemm.sizes))
    # no winner at the headline: its confirmation is left out, the sweep has no winner
    plan = dict(tune.winner_runs(sgemm, v, {"4096x4096x1000": v.candidates[1]}))
    assert plan == {v.candidates[1]: [tall], None: tune.sweep_sizes(sgemm, v)}
    # tuned at every size (no tune.sizes): every size confirmed, nothing swept
    bare = load_text(root, TUNED.replace("      sizes: [{M: 256, N: M, K: M}]\n", ""))
    bv = bare.variant("09_x")
    won = {bare_label(s): bv.candidates[0] for s in bare.sizes}
    assert dict(tune.winner_runs(bare, bv, won)) == {bv.candidates[0]: list(bare.sizes)}


def test_profile_and_sanitize_sizes_outside_the_tuning_run_the_sweep_pick_winner(project, tmp_path):
    """w8a8's 03 is tuned at two M = 16 shapes and profiled at M = 1 and 16 on N = 14336,
    neither of them tuned: profile and sanitize run the candidate that the variant's own job
    ran there (the pick size's winner), not nothing."""
    import pandas as pd

    from kernelbook import problems, tune
    from kernelbook.profile import job

    study = cfg.load_study(REPO / "config" / "studies" / "w8a8.yaml", project.settings, REPO)
    v = study.variant("03_mma_deep")
    label = problems.get(study.problem).label
    pick = tune.sweep_pick(study, v)
    other = next(s for s in v.tune_sizes if s != pick)
    won = {label(pick): v.candidates[1], label(other): v.candidates[2]}
    assert all(s not in v.tune_sizes for s in study.profile_sizes)
    for s in study.profile_sizes:
        assert tune.candidate_at(study, v, won, s) == v.candidates[1]
    assert tune.candidate_at(study, v, won, other) == v.candidates[2]
    assert tune.candidate_at(study, v, {label(other): v.candidates[2]}, study.headline) is None
    rows = [
        {"size": label(s), "variant": v.id, "variant_kind": "tuned", "status": "ok",
         "tuned_from": c, "median_ms": 1.0}
        for s, c in ((pick, v.candidates[1]), (other, v.candidates[2]))
    ]  # fmt: skip
    path = tmp_path / "tuned.parquet"
    pd.DataFrame(rows).to_parquet(path)
    runs = job.targets(study, v, list(study.profile_sizes), tmp_path, tuned_table=path)
    assert [(r.id, p.parent.name, z) for r, p, z in runs] == [
        (v.candidates[1], v.candidates[1], [s]) for s in study.profile_sizes
    ]


def bare_label(s):
    return "x".join(str(s[k]) for k in ("M", "N", "K"))


def test_confirmed_rows_replace_the_selection():
    import pandas as pd

    from kernelbook import tune

    rows = pd.DataFrame(
        [
            # the selection's rows (tune job) and the candidates'
            {"variant": "t", "variant_kind": "tuned", "size": "a", "median_ms": 1.0},
            {"variant": "t", "variant_kind": "tuned", "size": "b", "median_ms": 2.0},
            {"variant": "t__x", "variant_kind": "candidate", "size": "a", "median_ms": 1.0},
            # the variant's own job: a confirmed at a, a sweep row at c
            {"variant": "t", "variant_kind": "tuned", "size": "a", "median_ms": 1.1},
            {"variant": "t", "variant_kind": "tuned", "size": "c", "median_ms": 3.0},
        ]
    ).assign(selected_median_ms=[None, None, None, 1.0, None])
    out = tune.confirmed(rows)
    got = sorted(zip(out["variant"], out["size"], out["median_ms"], strict=True))
    # a's selection row is gone, b (not confirmed) keeps its selection row, c stays
    assert got == [("t", "a", 1.1), ("t", "b", 2.0), ("t", "c", 3.0), ("t__x", "a", 1.0)]
    # tables from before confirmation existed pass unchanged
    old = rows.drop(columns="selected_median_ms")
    assert tune.confirmed(old).equals(old)
