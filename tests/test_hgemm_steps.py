"""The hgemm ladder's steps 01-05 without a GPU: each kernel (and each 05 autotuning
candidate) through the real nvcc for sm_90 with the defines of config/studies/
hgemm.steps-01-05.yaml, checked for zero spills and no local memory, a register count that
fits the blocks per SM it asks for, and the SASS instructions its header promises (FFMA only
for 01; HMMA for 02-05; LDSM for 03-05; LDGSTS for 05 only)."""

from __future__ import annotations

import itertools
import math
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import REPO

from kernelbook import build, expr
from kernelbook import config as cfg

ARCH = "sm_90"
FLAGS = ["-O3", "-lineinfo"]
STEPS = REPO / "config" / "studies" / "hgemm.steps-01-05.yaml"
HEADLINE = {"M": 4096, "N": 4096, "K": 4096}
SMEM_OPTIN = 227 * 1024


def _variants() -> dict[str, cfg.Variant]:
    """The steps as Variants (05 as its tuning candidates), built the way the study loader
    builds them: defines resolved over each point, candidates filtered by the constraints."""
    out = {}
    for raw in cfg.read_yaml(STEPS)["variants"]:
        common = dict(
            study="hgemm",
            source=f"kernels/hgemm/{raw['id']}.cu",
            entry=raw["entry"],
            nvcc_flags=tuple(raw.get("nvcc_flags", [])),
            grid=tuple(raw["grid"]),
            block=tuple(raw["block"]),
            smem=raw.get("smem", 0),
            requires=tuple(raw.get("requires", [])),
            says=raw.get("says", ""),
            predict=dict(raw.get("predict", {})),
        )
        tune = raw.get("tune")
        if not tune:
            defines = cfg._resolve_defines(raw.get("defines", {}), {}, raw["id"])
            out[raw["id"]] = cfg.Variant(id=raw["id"], defines=defines, **common)
            continue
        space = tune["space"]
        for combo in itertools.product(*space.values()):
            point = dict(zip(space, combo, strict=True))
            defines = cfg._resolve_defines(raw.get("defines", {}), point, raw["id"])
            if all(expr.evaluate(c, defines) for c in tune["constraints"]):
                cid = raw["id"] + cfg.CANDIDATE_SEP + "_".join(f"{k}{v}" for k, v in point.items())
                out[cid] = cfg.Variant(
                    id=cid, defines=defines, tuned_from=raw["id"], tune_point=point, **common
                )
    return out


VARIANTS = _variants()


def _step(vid: str) -> str:
    return vid.split(cfg.CANDIDATE_SEP)[0]


def test_steps_config_is_complete():
    steps = cfg.read_yaml(STEPS)["variants"]
    assert [s["id"] for s in steps] == [
        "01_simt",
        "02_wmma",
        "03_mma_sync",
        "04_swizzle",
        "05_cp_async",
    ]
    for s in steps:
        assert (REPO / "kernels" / "hgemm" / f"{s['id']}.cu").is_file(), s["id"]
        assert s["says"] and "pct_of_baseline" in s["predict"], s["id"]
        assert "K % 8 == 0" in s["requires"], s["id"]
    # every 05 candidate launches at the headline size within the opt-in shared memory limit
    cands = [v for v in VARIANTS.values() if v.tuned_from == "05_cp_async"]
    assert len(cands) >= 8
    for v in cands:
        launch = v.launch(HEADLINE, smem_limit=SMEM_OPTIN)
        assert launch.smem == v.defines["STAGES"] * (v.defines["BM"] + v.defines["BN"]) * (
            v.defines["BK"] * 2
        )
        assert math.prod(launch.block) in (128, 256), v.id


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not on PATH")
    out = tmp_path_factory.mktemp("hgemm-steps-cubins")

    def one(vid):
        v = VARIANTS[vid]
        return vid, build.compile_variant(v, ARCH, FLAGS, REPO, out / vid / "kernel.cubin")

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, VARIANTS))


# what each step's SASS must (and must not) contain, by opcode prefix
EXPECT = {
    "01_simt": ({"FFMA", "LDG.E.128"}, {"HMMA", "LDSM", "LDGSTS"}),
    "02_wmma": ({"HMMA.16816.F32.BF16", "LDG.E.128"}, {"LDGSTS"}),
    "03_mma_sync": ({"HMMA.16816.F32.BF16", "LDSM.16.M88.4", "STS.128"}, {"LDGSTS"}),
    "04_swizzle": ({"HMMA.16816.F32.BF16", "LDSM.16.M88.4", "STS.128"}, {"LDGSTS"}),
    "05_cp_async": (
        {"HMMA.16816.F32.BF16", "LDSM.16.M88.4", "LDGSTS.E.BYPASS.128", "LDGDEPBAR"},
        {"STS", "LDG.E"},
    ),
}


@pytest.mark.parametrize("vid", list(VARIANTS))
def test_hgemm_step_compiles_clean(built, vid):
    res = built[vid]
    r = res.resources
    v = VARIANTS[vid]
    assert r.function == v.entry
    assert r.spill_store_bytes == 0 and r.spill_load_bytes == 0, res.log
    assert r.stack_bytes == 0, res.log
    ops = set(res.sass)
    assert not any(op.startswith(("LDL", "STL")) for op in ops), sorted(ops)
    must, must_not = EXPECT[_step(vid)]
    for op in must:
        assert any(o == op or o.startswith(op + ".") for o in ops), (op, sorted(ops))
    for op in must_not:
        assert not any(o == op or o.startswith(op + ".") for o in ops), (op, sorted(ops))
    # the blocks per SM that __launch_bounds__ asks for fit the register file
    threads = math.prod(v.launch(HEADLINE).block)
    min_blocks = v.defines.get("MIN_BLOCKS", 2 if _step(vid) != "05_cp_async" else 1)
    allocated = -(-r.registers // 8) * 8
    assert min_blocks * threads * allocated <= 65536, (r.registers, threads, min_blocks)
    # and the static shared memory stays under 48 KiB (05: dynamic only)
    assert r.smem_static_bytes <= 48 * 1024
    if _step(vid) == "05_cp_async":
        assert r.smem_static_bytes == 0


def test_mma_steps_issue_the_same_mmas(built):
    """03 and 04 differ only in where a chunk lives: same HMMA and LDSM counts."""
    a, b = built["03_mma_sync"].sass, built["04_swizzle"].sass
    for op in ("HMMA.16816.F32.BF16", "LDSM.16.M88.4", "STS.128"):
        assert a[op] == b[op] > 0, op


def test_kernels_share_the_abi():
    """Every step's entry point has the study's signature."""
    for vid in ("01_simt", "02_wmma", "03_mma_sync", "04_swizzle", "05_cp_async"):
        text = (REPO / "kernels" / "hgemm" / f"{vid}.cu").read_text()
        entry = (
            VARIANTS[vid].entry
            if vid in VARIANTS
            else next(v.entry for v in VARIANTS.values() if v.tuned_from == vid)
        )
        sig = text[text.index(entry + "(") :].split(")")[0]
        assert "int M, int N, int K" in " ".join(sig.split()), vid
        assert "const __nv_bfloat16* __restrict__ A" in sig, vid
        assert "const __nv_bfloat16* __restrict__ B" in sig, vid
        assert "__nv_bfloat16* __restrict__ C" in sig, vid
        assert 'extern "C" __global__' in text, vid


def test_sources_exist():
    for v in VARIANTS.values():
        assert Path(REPO / v.source).is_file(), v.source
