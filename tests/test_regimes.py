"""The regimes study: config, problem costs, the three-term model, crossovers, figures/page.

CPU tests use the ceilings of the published H200 device tables (worklogs/nvidia-h200/*/
data/device.parquet), with the two launch-overhead rows replaced by stated values
(LAUNCH_US, LAUNCH_GRAPH_US, per op, made by the device table's own row builder,
measure.device.overhead_rows), so that the model's arithmetic is fixed; they check
that a table without them, or with the old GPU-only ones, is refused by name. GPU tests
(-m gpu) measure the rows and run every variant at a small and an odd size.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from kernelbook import gpu, problems, tables
from kernelbook.measure import device
from kernelbook.problems.regimes import matmul_n
from kernelbook.report import prediction

REPO = Path(__file__).resolve().parents[1]
STUDY = REPO / "config" / "studies" / "regimes.yaml"
DEVICE = REPO / "worklogs" / "nvidia-h200" / "sgemm" / "data" / "device.parquet"
LAUNCH_US, LAUNCH_GRAPH_US = 2.5, 0.8  # stated, not measured: see the module docstring
INFO, WHY = gpu.detect()
needs_gpu = pytest.mark.skipif(INFO is None, reason=f"no GPU here: {WHY}")


def raw_study() -> dict:
    return yaml.safe_load(STUDY.read_text())


OPS = len(device.OVERHEAD_OPS)


def device_table(with_launch: bool = True) -> pd.DataFrame:
    """The published H200 table with the launch rows stated (or none): its measured launch
    rows (a table from after they existed) are replaced, so the tests' arithmetic holds."""
    d = tables.read(DEVICE)
    measured = device.overhead_rows(1e-3, 1e-3, 1, 1, OPS)
    d = d[~d["quantity"].isin(list(measured))].reset_index(drop=True)
    if not with_launch:
        return d
    rows = device.overhead_rows(LAUNCH_US * OPS * 1e-3, LAUNCH_GRAPH_US * OPS * 1e-3, 200, 600, OPS)
    extra = d.iloc[:2].copy()
    extra["quantity"] = list(rows)
    extra["value"] = [v for v, _ in rows.values()]
    extra["method"] = [m for _, m in rows.values()]
    extra["unit"] = "us"
    return pd.concat([d, extra], ignore_index=True)


def meta() -> dict:
    raw = raw_study()
    return {
        "study": "regimes",
        "title": raw["title"],
        "question": raw["question"],
        "problem": "regimes",
        "baseline": raw["baseline"],
        "params": raw["params"],
        "figure_of_merit": "gbps",
        "headline": str(raw["headline"]["N"]),
        "references": [],
        "variants": [
            {
                "id": v["id"],
                "source": v["source"],
                "says": v["says"],
                "predict": v["predict"],
                "header": "",
                "tuned": False,
                **({"computes": v["computes"]} if "computes" in v else {}),
            }
            for v in raw["variants"]
        ],
    }


# ------------------------------------------------------------------------------------------
# Config


def test_study_file_is_consistent_with_its_problem():
    raw = raw_study()
    prob = problems.get(raw["problem"])
    assert raw["dtype"] in prob.dtypes and raw["baseline"] in prob.baselines
    assert set(raw["params"]) <= set(prob.default_params)
    ns = raw["sizes"][0]["N"]
    assert min(ns) == 1000 and max(ns) == 10**9 and ns == sorted(ns)
    # about a decade or half a decade apart
    assert all(2.9 < b / a <= 10.01 for a, b in zip(ns, ns[1:], strict=False))
    ops = set()
    for v in raw["variants"]:
        assert v["kind"] == "torch" and v["entry"] == "run"
        src = REPO / v["source"]
        assert src.is_file() and src.name == f"{v['id']}.py"
        assert "def run(case, **defines)" in src.read_text()
        assert v.get("computes") is None or v["computes"] in prob.alternatives
        assert set(v["predict"]) <= {"launches", "traffic", "graph"}
        ops.add(v.get("computes") or "scale")
    assert ops == set(problems.regimes.OPS)
    assert prediction.graph_pair(meta()) == ("02_chain_eager", "04_chain_graph")


def _schema_has_kinds() -> bool:
    from kernelbook import config

    return "kind" in config.schema("study")["$defs"]["variant"]["properties"]


def test_study_loads_with_studies_override(tmp_path):
    from kernelbook import config

    root = REPO
    if not _schema_has_kinds():
        # SHIM until `kind: torch` is merged (kinds branch): the same file without the kind
        # keys, with a placeholder launch geometry, loaded from a copy of config/
        root = tmp_path
        (root / "config" / "studies").mkdir(parents=True)
        (root / "config" / "config.yaml").write_text((REPO / "config/config.yaml").read_text())
        raw = raw_study()
        for v in raw["variants"]:
            del v["kind"]
            v.update(grid=[1], block=[1])
        (root / "config" / "studies" / "regimes.yaml").write_text(yaml.safe_dump(raw))
        (root / "kernels").symlink_to(REPO / "kernels")
    project = config.load_project_file(
        root / "config" / "config.yaml", root, overrides={"studies": ["regimes"]}
    )
    study = project.study("regimes")
    assert study.dtype == "bfloat16" and study.baseline == "eager"
    assert study.params == {"hidden": 1024} and study.headline == {"N": 10**6}
    assert len(study.sizes) == 10 and study.timing["max_time_s"] == 1.0
    assert [v.id for v in study.variants][:2] == ["01_scale_eager", "02_chain_eager"]
    assert study.variant("06_matmul_eager").computes == "matmul"
    assert study.variant("04_chain_graph").predict == {"launches": 4, "traffic": 4.5, "graph": 1}


# ------------------------------------------------------------------------------------------
# The problem's cost per op


def test_cost_per_op():
    p = problems.get("regimes")
    s = {"N": 10**6}
    assert p.cost(s, "bfloat16") == (1e6, 4e6)
    assert p.cost(s, "bfloat16", "chain") == (4e6, 4e6)
    assert p.cost(s, "bfloat16", "sum") == (1e6, 2e6 + 2)
    assert p.cost(s, "bfloat16", "matmul") == (2.0 * 1000**3, 6.0 * 1000**2)
    # layernorm: H = 1024, R = 976 rows
    assert p.cost(s, "bfloat16", "layernorm", {"hidden": 1024}) == (
        8.0 * 976 * 1024,
        (2.0 * 976 * 1024 + 2 * 1024) * 2,
    )
    assert matmul_n(10**9) == 31623 and matmul_n(1000) == 32
    with pytest.raises(KeyError, match="no op 'conv'"):
        p.cost(s, "bfloat16", "conv")


@pytest.mark.parametrize("op", problems.regimes.OPS)
def test_reference_of_each_op_on_the_cpu(op):
    """build_case with NumPy: the shapes, guard bands and float64 reference of every op."""
    p = problems.get("regimes")
    rng = np.random.default_rng(1)
    case = p.build_case(np, {"N": 12345}, "bfloat16", {}, 1, rng, op, 16, True)
    (_, out), (_, ref) = next(iter(case.outputs.items())), next(iter(case.reference.items()))
    assert out.view.dtype == np.uint16 and out.view.size == ref.size
    assert (out.view == 0x7FC0).all()  # poisoned with bf16 NaN
    from kernelbook.problems.bf16 import bf16_values

    x = {k: bf16_values(np, v).astype(np.float64) for k, v in case.inputs.items()}
    if op == "scale":
        np.testing.assert_allclose(ref, 2.5 * x["x"])
    elif op == "chain":
        np.testing.assert_allclose(ref, np.tanh(1.5 * x["x"] + 0.5) * x["x"])
    elif op == "sum":
        assert ref.shape == (1,) and (x["x"] >= 0).all()
        assert ref[0] == pytest.approx(x["x"].sum())
    elif op == "matmul":
        assert case.shape == (111, 111)
        np.testing.assert_allclose(ref.reshape(111, 111), x["A"] @ x["B"], rtol=1e-12)
    else:
        assert case.shape == (12, 1024)
        rows = ((ref.reshape(12, 1024) - x["b"]) / x["w"]).reshape(12, 1024)
        np.testing.assert_allclose(rows.mean(axis=1), 0, atol=1e-9)
        np.testing.assert_allclose(rows.std(axis=1), 1, atol=1e-3)


# ------------------------------------------------------------------------------------------
# The model on the published H200 ceilings


def test_device_table_without_launch_rows_is_refused_by_name():
    with pytest.raises(prediction.RegimesError, match="launch_overhead_us"):
        prediction.Ceilings.of(device_table(with_launch=False))


def test_old_gpu_only_launch_rows_are_refused_by_name():
    d = device_table()
    launch = d["quantity"].isin(prediction.LAUNCH_ROWS)
    d.loc[launch, "method"] = (
        "an empty kernel (1 thread) launched once per sample, blocking-kernel event-timed "
        "median, warm"
    )  # what the rows said before they were host time
    with pytest.raises(prediction.RegimesError, match="launch_overhead_us.*run the device rule"):
        prediction.Ceilings.of(d, "results/nvidia-h200/device.parquet")


def test_launch_rows_are_per_op_host_time():
    """The device table's launch rows: per call over ops, each method saying host wall
    time (what the model checks for), with the calls of a batch."""
    rows = device.overhead_rows(0.0431, 0.0082, 120, 640, 5)
    assert rows["launch_overhead_us"][0] == pytest.approx(8.62)
    assert rows["launch_overhead_graph_us"][0] == pytest.approx(1.64)
    for _, method in rows.values():
        assert prediction.HOST_INCLUSIVE in method and "N=1000" in method
    assert "120 calls a batch" in rows["launch_overhead_us"][1]
    assert "640 replays a batch" in rows["launch_overhead_graph_us"][1]
    assert device.per_op_us(0.0112, 1) == pytest.approx(11.2)
    with pytest.raises(ValueError, match="at least one op"):
        device.per_op_us(0.01, 0)


def test_the_study_is_host_timed_with_a_warm_cache():
    from kernelbook import config

    timing = raw_study()["timing"]
    assert timing["method"] == "host" and timing["cache"] == "warm"
    text = STUDY.read_text()
    assert "Timing: host time" in text and "keeps host time out" not in text
    p = config.load_project_file(
        REPO / "config" / "config.yaml", overrides={"studies": ["regimes"]}
    )
    t = p.study("regimes").timing
    assert t["method"] == "host" and t["cache"] == "warm" and t["host_batch_s"] > 0


def test_prediction_and_binding_term_on_h200_numbers():
    d = device_table()
    c = prediction.Ceilings.of(d)
    copy = float(d.loc[d["quantity"] == "copy_gbps", "value"].iloc[0])
    bf16 = float(d.loc[d["quantity"] == "cublas_bf16_tflops", "value"].iloc[0])
    assert c.copy_gbps == copy and 4000 < copy < 4800 and c.bf16_tflops == bf16
    p = problems.get("regimes")
    scale = prediction.Shape()
    ms, bound = prediction.predict(*p.cost({"N": 1000}, "bfloat16"), scale, c)
    assert bound == "overhead" and ms == pytest.approx(LAUNCH_US * 1e-3)
    ms, bound = prediction.predict(*p.cost({"N": 10**9}, "bfloat16"), scale, c)
    assert bound == "memory" and ms == pytest.approx(4e9 / (copy * 1e9) * 1e3)
    mm = prediction.Shape(op="matmul")
    flop, nbytes = p.cost({"N": 10**9}, "bfloat16", "matmul")
    ms, bound = prediction.predict(flop, nbytes, mm, c)
    assert bound == "compute" and ms == pytest.approx(flop / (bf16 * 1e12) * 1e3)
    # eager chain: four launches and 4.5x the bytes; the graph replays them for less
    eager = prediction.Shape("chain", 4, 4.5)
    graph = prediction.Shape("chain", 4, 4.5, graph=True)
    t_e = prediction.terms(4000.0, 4000.0, eager, c)
    t_g = prediction.terms(4000.0, 4000.0, graph, c)
    assert t_e["overhead"] == pytest.approx(4 * LAUNCH_US * 1e-3)
    assert t_g["overhead"] == pytest.approx(4 * LAUNCH_GRAPH_US * 1e-3)
    assert t_e["memory"] == t_g["memory"] == pytest.approx(4.5 * 4000 / (copy * 1e9) * 1e3)


def test_crossovers_where_the_terms_meet():
    c = prediction.Ceilings.of(device_table())
    # scale: launch = 4 N bytes / copy bandwidth
    cross = prediction.crossover(prediction.Shape(), c, prediction.op_cost("scale"))
    assert list(cross) == ["overhead->memory"]
    assert cross["overhead->memory"] == pytest.approx(LAUNCH_US * 1e-6 * c.copy_gbps * 1e9 / 4)
    # sum moves half the bytes: twice the N
    s = prediction.crossover(prediction.Shape("sum"), c, prediction.op_cost("sum"))[
        "overhead->memory"
    ]
    assert s == pytest.approx(2 * cross["overhead->memory"], rel=1e-6)
    # the graph moves the eager chain's crossover down by its overhead ratio
    e = prediction.crossover(prediction.Shape("chain", 4, 4.5), c, prediction.op_cost("chain"))
    g = prediction.crossover(
        prediction.Shape("chain", 4, 4.5, True), c, prediction.op_cost("chain")
    )
    ratio = LAUNCH_US / LAUNCH_GRAPH_US  # per op, host-inclusive, eager and graph alike
    assert e["overhead->memory"] / g["overhead->memory"] == pytest.approx(ratio, rel=1e-6)
    # matmul: from overhead straight to compute, 2 n^3 / peak = launch
    m = prediction.crossover(prediction.Shape("matmul"), c, prediction.op_cost("matmul"))
    assert list(m) == ["overhead->compute"]
    n = (LAUNCH_US * 1e-6 * c.bf16_tflops * 1e12 / 2) ** (1 / 3)
    assert m["overhead->compute"] == pytest.approx(n * n, rel=1e-6)


def test_measured_knee():
    n = np.array([1e3, 1e4, 1e5, 1e6, 1e7])
    ms = np.array([0.002, 0.002, 0.0021, 0.004, 0.03])
    assert prediction.measured_knee(n, ms) == pytest.approx(1e6, rel=1e-9)
    ms2 = np.array([0.002, 0.002, 0.0021, 0.003, 0.006])
    knee = prediction.measured_knee(n, ms2)
    assert 1e6 < knee < 1e7
    assert math.log(knee / 1e6) / math.log(10) == pytest.approx(math.log(4 / 3) / math.log(2))
    assert prediction.measured_knee(n, np.full(5, 0.002)) is None


# ------------------------------------------------------------------------------------------
# Rows, figures and the page from a real Parquet table


def measurement_rows(error: float = 0.1) -> pd.DataFrame:
    """Rows of the measurements schema for every variant and size, timed at the model's
    prediction x (1 + error) at one size in two and x (1 - error) at the others."""
    m, d = meta(), device_table()
    c = prediction.Ceilings.of(d)
    p = problems.get("regimes")
    sch = tables.schema("measurements", ("N",))
    fill = {"string": "x", "double": 0.0, "int64": 0, "bool": False}
    base = {}
    for f in sch:
        if not f.nullable:
            base[f.name] = (
                pd.Timestamp("2026-12-01", tz="UTC")
                if "timestamp" in str(f.type)
                else fill.get(str(f.type), "x")
            )
    rows = []
    for v in m["variants"]:
        shape = prediction.Shape.of(v)
        for i, n in enumerate(raw_study()["sizes"][0]["N"]):
            flop, nbytes = p.cost({"N": n}, "bfloat16", v.get("computes"), {"hidden": 1024})
            ms, _ = prediction.predict(flop, nbytes, shape, c)
            got = ms * (1 + (error if i % 2 else -error))
            rows.append(
                {
                    **base,
                    "study": "regimes",
                    "problem": "regimes",
                    "variant": v["id"],
                    "variant_kind": "variant",
                    "N": n,
                    "size": str(n),
                    "dtype": "bfloat16",
                    "status": "ok",
                    "baseline": "eager",
                    "flop": flop,
                    "bytes_min": nbytes,
                    "median_ms": got,
                    "baseline_median_ms": got,
                    "pct_of_baseline": 100.0,
                    "gbps": nbytes / (got * 1e-3) / 1e9,
                    "n_samples": 10,
                    "rse_median": 0.001,
                    "converged": True,
                    "correct": True,
                    "rel_err": 1e-3,
                    "timing_method": "host",  # as the study measures (timing.method host)
                    "batch_calls": 100,
                    "baseline_batch_calls": 100,
                }
            )
    return pd.DataFrame(rows)


@pytest.fixture
def regimes_tables(tmp_path):
    rows = measurement_rows()
    parts = tmp_path / "bench"
    for vid, df in rows.groupby("variant", sort=False):
        tables.write(df, parts / f"{vid}.parquet", "measurements", ("N",))
    device = tmp_path / "device.parquet"
    tables.write(device_table(), device, "device")
    meta_path = tmp_path / "study.json"
    meta_path.write_text(json.dumps(meta()))
    build = tmp_path / "build.parquet"  # as compile_job writes for a torch variant
    proto = {f.name: None for f in tables.schema("build")}
    torch_rows = [
        {**proto, "study": "regimes", "variant": v["id"], "status": "not_compiled",
         "reason": "torch variant: no compile step (torch launches its own kernels)",
         "kind": "torch", "entry": "run", "source": f"kernels/regimes/{v['id']}.py",
         "arch": "sm_90", "git_commit": "0" * 40, "source_sha256": "0" * 64,
         "spec_sha256": "0" * 64, "cubin_sha256": "", "defines": "{}", "nvcc_flags": "",
         "nvcc_version": "", "nvcc_command": "",
         "built_at": pd.Timestamp("2026-12-01", tz="UTC")}
        for v in meta()["variants"]
    ]  # fmt: skip
    tables.write(pd.DataFrame(torch_rows), build, "build")
    out = tmp_path / "measurements.parquet"
    cmd = [sys.executable, "-m", "kernelbook", "gather", "measurements", str(out)]
    cmd += sorted(str(p) for p in parts.glob("*.parquet"))
    cmd += ["--device", str(device), "--meta", str(meta_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return {"measurements": out, "device": device, "meta": meta_path, "build": build}


def test_gather_stores_prediction_on_the_rows(regimes_tables):
    df = tables.read(regimes_tables["measurements"])
    assert tables.table_sizes(regimes_tables["measurements"]) == ("N",)
    assert len(df) == 7 * 10 and df["predicted_ms"].notna().all()
    assert set(df["predicted_bound"]) == {"overhead", "memory", "compute"}
    np.testing.assert_allclose(np.abs(df["prediction_error"]), 0.1, rtol=1e-9)
    small = df[(df["variant"] == "01_scale_eager") & (df["N"] == 1000)].iloc[0]
    assert small["predicted_bound"] == "overhead"
    assert small["predicted_ms"] == pytest.approx(LAUNCH_US * 1e-3)
    big = df[(df["variant"] == "06_matmul_eager") & (df["N"] == 10**9)].iloc[0]
    assert big["predicted_bound"] == "compute"


def test_gather_without_launch_rows_names_the_table(regimes_tables, tmp_path):
    device = tmp_path / "old_device.parquet"
    tables.write(device_table(with_launch=False), device, "device")
    cmd = [sys.executable, "-m", "kernelbook", "gather", "measurements", str(tmp_path / "m.pq")]
    cmd += [str(regimes_tables["measurements"]), "--device", str(device)]
    cmd += ["--meta", str(regimes_tables["meta"])]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert proc.returncode != 0
    assert "old_device.parquet" in proc.stderr and "launch_overhead_us" in proc.stderr


def test_figures_and_page(regimes_tables, tmp_path):
    from kernelbook.report import publish

    out = tmp_path / "page"
    publish.render_tables(regimes_tables, out, "regimes", analysis=REPO / "analysis")
    manifest = (
        json.loads((out / "figures" / "figures.json").read_text())
        if (out / "figures" / "figures.json").is_file()
        else None
    )
    for name in ("regimes", "prediction_error", "graph"):
        assert (out / "figures" / f"{name}.png").stat().st_size > 10_000
        assert (out / "figures" / f"{name}.svg").is_file()
    page = (out / "worklog.md").read_text()
    assert "Three regimes: time against size" in page
    # the page names the instrument: host time, never kernel time
    assert "| timing | host: host wall time per call over batches of back-to-back calls" in page
    assert "kernel time from CUPTI" not in page and "of kernel time" not in page
    assert "Crossovers. 01_scale_eager: model overhead->memory at N = " in page
    assert "CUDA graph against eager launches" in page
    # a torch variant's build row says it has no compile step, and the page says so
    assert "**Resources.** None of its own: torch variant: no compile step" in page
    assert "**Model at 1000000.** 0.0025 ms, overhead-bound; measured 0.00275 ms (1.1x)." in page
    del manifest


# ------------------------------------------------------------------------------------------
# GPU


def _torch_case(case):
    """Test-only stand-in for the torch kind's case (kinds branch): torch views of the
    problem Case's device arrays, with sizes, params and dtype."""
    from types import SimpleNamespace

    import torch

    def as_torch(a):  # uint16 bits, as the torch kind may hand them over
        return torch.as_tensor(a.view("int16"), device="cuda").view(torch.uint16)

    return SimpleNamespace(
        inputs={k: as_torch(v) for k, v in case.inputs.items()},
        outputs={k: as_torch(g.view) for k, g in case.outputs.items()},
        sizes=case.sizes,
        params={"hidden": 1024},
        dtype=case.dtype,
    )


@pytest.mark.gpu
@pytest.mark.gpu_exclusive  # host-timed in this process
@needs_gpu
@pytest.mark.parametrize("n", [1000, 12347])
@pytest.mark.parametrize("vid", [v["id"] for v in raw_study()["variants"]])
def test_variant_is_correct_and_timed(vid, n):
    import importlib.util

    import cupy as cp
    import torch

    from kernelbook.measure.timing import Timer

    v = next(x for x in raw_study()["variants"] if x["id"] == vid)
    spec = importlib.util.spec_from_file_location(f"regimes_{vid}", REPO / v["source"])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    p = problems.get("regimes")
    case = p.setup({"N": n}, "bfloat16", {"hidden": 1024}, 7, computes=v.get("computes"))
    ts = torch.cuda.Stream()
    stream = cp.cuda.ExternalStream(ts.cuda_stream)
    with stream, torch.cuda.stream(ts):
        fn = getattr(mod, v["entry"])(_torch_case(case))
        case.reset()
        fn()
        ts.synchronize()
        res = p.check(case, p.tolerance({"N": n}, "bfloat16"), f"regimes/{vid} at N={n}")
        assert res.rel_err < 1e-2
        base = p.baseline(case, "eager", {"hidden": 1024})
        assert base.rel_err < 1e-2
        policy = {
            "cache": "warm", "method": "events", "warmup": 2, "min_samples": 5,
            "max_samples": 50, "target_rse": 0.05, "min_time_s": 0.01, "max_time_s": 2,
            "launch_timeout_s": 30, "graph_launches": 20,
        }  # fmt: skip
        timer = Timer(policy, 0, stream, ts)
        try:
            stats = timer.measure({"variant": fn, "baseline": base.run}, vid)
        finally:
            timer.close()
    assert 0 < stats["variant"].median < 100


@pytest.mark.parametrize("op", problems.regimes.OPS)
def test_eager_op_on_cpu_tensors_meets_the_tolerance(op):
    """The baseline's (and eager variants') calls, run by torch on the CPU over the case's
    bfloat16 bits, against the float64 reference: each op's shape and call are right."""
    import torch

    from kernelbook.problems.bf16 import bf16_values
    from kernelbook.problems.regimes import eager

    p = problems.get("regimes")
    case = p.build_case(np, {"N": 12345}, "bfloat16", {}, 1, np.random.default_rng(2), op, 0, True)
    t = {
        k: torch.from_numpy(v.view(np.int16).copy()).view(torch.bfloat16)
        for k, v in case.inputs.items()
    }
    ref = next(iter(case.reference.values()))
    y = torch.full((ref.size,), float("nan"), dtype=torch.bfloat16)
    eager(op, t, y, case.shape, {"hidden": 1024})()
    got = bf16_values(np, y.view(torch.int16).numpy().view(np.uint16)).astype(np.float64)
    rel = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    assert rel < p.tolerance({"N": 12345}, "bfloat16") / 3
