"""kernelbook.tables (schemas, atomic writes, gather) and kernelbook.tune.select."""

from __future__ import annotations

import json
import math
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from kernelbook import config as cfg
from kernelbook import provenance, tables, tune
from kernelbook.build import nvcc as build
from kernelbook.problems import get as get_problem
from kernelbook.tables import TableError

REPO = Path(__file__).resolve().parents[1]
SIZES = ("M", "N", "K")
GEMM = get_problem("gemm")
T0 = datetime(2026, 11, 29, 12, 0, 0, 123456, tzinfo=timezone.utc)

REQUIRED_MEASUREMENT_COLUMNS = [
    "study", "variant", "M", "N", "K", "dtype", "median_ms", "q1_ms", "q3_ms", "n_samples",
    "baseline", "baseline_median_ms", "pct_of_baseline", "tflops", "gbps", "correct", "rel_err",
    "cache", "gpu_name", "gpu_uuid", "driver_version", "cuda_version", "sm_clock_mhz",
    "mem_clock_mhz", "temperature_c", "power_w", "throttle_reasons", "source_sha256", "defines",
    "nvcc_flags", "git_commit", "seed", "measured_at",
]  # fmt: skip


# ------------------------------------------------------------------------------------------
# Realistic rows


@pytest.fixture(scope="module")
def naive_build(tmp_path_factory):
    """A real compile of sgemm/01_naive: (variant, BuildResult, cubin)."""
    project = cfg.load_project_file(REPO / "config" / "config.yaml")
    v = project.study("sgemm").variant("01_naive")
    cubin = tmp_path_factory.mktemp("build") / "kernel.cubin"
    res = build.compile_variant(v, "sm_90", ["-O3", "-lineinfo"], REPO, cubin)
    return v, res, cubin


def build_row(naive_build) -> dict:
    v, res, cubin = naive_build
    r = res.resources
    return {
        "study": v.study,
        "variant": v.id,
        "tuned_from": v.tuned_from,
        "entry": v.entry,
        "source": v.source,
        "arch": "sm_90",
        "registers": r.registers,
        "barriers": r.barriers,
        "smem_static_bytes": r.smem_static_bytes,
        "stack_bytes": r.stack_bytes,
        "spill_store_bytes": r.spill_store_bytes,
        "spill_load_bytes": r.spill_load_bytes,
        "cmem0_bytes": r.cmem0_bytes,
        "sass_instructions": sum(res.sass.values()),
        "source_sha256": provenance.sha256_file(REPO / v.source),
        "spec_sha256": v.spec_sha256(),
        "cubin_sha256": provenance.sha256_file(cubin),
        "defines": json.dumps(v.defines),
        "nvcc_flags": "-O3 -lineinfo",
        "nvcc_version": res.nvcc_version,
        "nvcc_command": " ".join(res.command),
        "git_commit": "0123456789abcdef0123456789abcdef01234567",
        "built_at": T0,
    }


def sass_rows(naive_build) -> list[dict]:
    v, res, _ = naive_build
    return [
        {"study": v.study, "variant": v.id, "opcode": op, "op": op.split(".")[0], "count": n}
        for op, n in sorted(res.sass.items())
    ]


def measurement(variant="01_naive", n=1024, status="ok", median=None, **over) -> dict:
    """One measurements row as the bench writes it (ok rows measured, others blank)."""
    s = {"M": n, "N": n, "K": n}
    flop, nbytes = GEMM.flops(s), GEMM.min_bytes(s, "float32")
    row = {
        "study": "sgemm",
        "problem": "gemm",
        "variant": variant,
        "variant_kind": "variant",
        "tuned_from": None,
        "tune_point": None,
        **s,
        "size": GEMM.label(s),
        "dtype": "float32",
        "params": json.dumps({"alpha": 1.25, "beta": 0.75}),
        "status": status,
        "reason": None,
        "median_ms": None, "q1_ms": None, "q3_ms": None, "min_ms": None, "max_ms": None,
        "mean_ms": None, "rel_std": None, "rse_median": None, "n_samples": None,
        "converged": None,
        "flop": flop,
        "bytes_min": nbytes,
        "tflops": None, "gbps": None,
        "baseline": "cublas",
        "baseline_mode": None, "baseline_median_ms": None, "baseline_q1_ms": None,
        "baseline_q3_ms": None, "baseline_n_samples": None, "baseline_tflops": None,
        "baseline_gbps": None, "baseline_rel_err": None, "pct_of_baseline": None,
        "correct": None, "rel_err": None, "max_err": None,
        "tolerance": GEMM.tolerance(s, "float32"),
        "cache": "cold",
        "timing_method": "events",
        "flush_bytes": 2 * 60 * 1024 * 1024,
        "grid": None, "block": None, "smem_dynamic_bytes": None,
        "gpu_name": "NVIDIA H200",
        "gpu_uuid": "GPU-8f2c1d3e-0000-1111-2222-333344445555",
        "driver_version": "580.82.07",
        "cuda_version": "13.0",
        "cuda_driver_version": "13.0",
        "sm_clock_mhz": None, "sm_clock_min_mhz": None, "mem_clock_mhz": None,
        "temperature_c": None, "power_w": None, "throttle_reasons": None, "throttled": None,
        "source_sha256": "a" * 64,
        "spec_sha256": "b" * 64,
        "cubin_sha256": "c" * 64,
        "defines": json.dumps({"BS": 32}),
        "nvcc_flags": "-O3 -lineinfo",
        "nvcc_version": "13.0.88",
        "arch": "sm_90",
        "git_commit": "0123456789abcdef0123456789abcdef01234567",
        "seed": 20261129,
        "measured_at": T0,
        "hostname": "gpu-host-1",
        "kernelbook_version": "0.1.0",
        "software": "python 3.11.7, cupy 13.6.0, torch 2.9.0",
    }  # fmt: skip
    if status == "ok":
        median = 0.05 * (n / 1024) ** 3 if median is None else median
        base = median / 10
        row.update(
            median_ms=median, q1_ms=median * 0.99, q3_ms=median * 1.01, min_ms=median * 0.98,
            max_ms=median * 1.2, mean_ms=median * 1.005, rel_std=0.01, rse_median=0.002,
            n_samples=120, converged=True,
            tflops=flop / (median * 1e-3) / 1e12, gbps=nbytes / (median * 1e-3) / 1e9,
            baseline_mode="cuBLAS via torch 2.9.0 addmm_, float32, TF32 off",
            baseline_median_ms=base, baseline_q1_ms=base * 0.99, baseline_q3_ms=base * 1.01,
            baseline_n_samples=300, baseline_tflops=flop / (base * 1e-3) / 1e12,
            baseline_gbps=nbytes / (base * 1e-3) / 1e9, baseline_rel_err=3e-7,
            pct_of_baseline=100.0 * base / median, correct=True, rel_err=4.2e-7, max_err=1e-5,
            grid="32x32x1", block="32x32x1", smem_dynamic_bytes=0,
            sm_clock_mhz=1980.0, sm_clock_min_mhz=1965.0, mem_clock_mhz=3201.0,
            temperature_c=54.0, power_w=410.5, throttle_reasons="", throttled=False,
        )  # fmt: skip
    row.update(over)
    return row


def device_rows() -> list[dict]:
    common = {
        "gpu_name": "NVIDIA H200",
        "gpu_uuid": "GPU-8f2c1d3e-0000-1111-2222-333344445555",
        "driver_version": "580.82.07",
        "cuda_version": "13.0",
        "git_commit": "0123456789abcdef0123456789abcdef01234567",
        "hostname": "gpu-host-1",
        "measured_at": T0,
    }
    return [
        {**common, "quantity": "sm_count", "value": 132.0, "unit": "count", "kind": "fact",
         "method": "cudaDeviceProp.multiProcessorCount"},
        {**common, "quantity": "l2_bytes", "value": 62914560.0, "unit": "B", "kind": "fact",
         "method": "cudaDeviceProp.l2CacheSize"},
        {**common, "quantity": "dram_bandwidth", "value": 4.1e12, "unit": "B/s",
         "kind": "measured", "method": "device-to-device copy of 2 GiB, median of 20"},
        {**common, "quantity": "fp32_peak", "value": 6.7e13, "unit": "FLOP/s",
         "kind": "theoretical", "method": "SMs x 128 FMA x 2 x max SM clock"},
    ]  # fmt: skip


def generic_rows(table: str) -> tuple[list[dict], tuple[str, ...]]:
    """Two plausible rows for a table this file has no hand-written rows for."""
    defs = tables.definitions()[table]["columns"]
    sizes = SIZES if any(c.get("size") for c in defs.values()) else ()
    value = {
        "string": "text",
        "int32": 3,
        "int64": 7,
        "float32": 1.5,
        "float64": 2.5,
        "bool": True,
        "timestamp": T0,
    }
    rows = []
    for i in range(2):
        row = {}
        for name, col in defs.items():
            if col.get("size"):
                row.update({n: 256 * (i + 1) for n in sizes})
            elif col.get("nullable") and i == 1:
                row[name] = None
            else:
                row[name] = value[col["type"]]
        rows.append(row)
    return rows, sizes


def rows_for(table: str, naive_build) -> tuple[list[dict], tuple[str, ...]]:
    if table == "build":
        return [build_row(naive_build)], ()
    if table == "sass":
        return sass_rows(naive_build), ()
    if table == "device":
        return device_rows(), ()
    if table == "measurements":
        return [
            measurement(n=1024),
            measurement(n=4096, q1_ms=2.5),
            measurement(n=1000, status="skipped", reason="requires M % BS == 0"),
        ], SIZES
    return generic_rows(table)


def same(a, b) -> bool:
    if a is None or (isinstance(a, float) and math.isnan(a)):
        return (
            b is None
            or b is pd.NA
            or b is pd.NaT
            or (isinstance(b, float | np.floating) and math.isnan(b))
        )
    if isinstance(a, float):
        return math.isclose(a, b, rel_tol=0, abs_tol=0)
    if isinstance(a, datetime):
        return pd.Timestamp(b) == pd.Timestamp(a)
    return a == b


# ------------------------------------------------------------------------------------------
# Schemas


def test_tables_yaml_is_what_the_module_reads():
    defs = yaml.safe_load((REPO / "src" / "kernelbook" / "schemas" / "tables.yaml").read_text())
    assert tables.definitions() == defs
    assert {"measurements", "build", "sass", "device"} <= set(defs)


ALL_TABLES = list(tables.definitions())


@pytest.mark.parametrize("table", ALL_TABLES)
def test_every_table_and_column_is_described(table):
    defs = tables.definitions()[table]
    assert defs.get("description"), f"table {table} has no description"
    self_explanatory = {
        "study", "variant", "problem", "dtype", "baseline", "correct", "tolerance", "grid",
        "block", "gpu_name", "gpu_uuid", "driver_version", "arch", "git_commit", "seed",
        "hostname", "entry", "source", "registers", "barriers", "count", "value", "unit",
        "quantity", "defines", "nvcc_flags", "nvcc_command", "tuned_from", "n_samples",
        "tflops", "gbps", "rel_err", "sass_instructions", "size", "warnings", "exit_code",
        "registers_per_thread", "known_reason", "smem_bank_conflicts_ld",
        "smem_bank_conflicts_st", "global_ld_sectors_per_request",
        "global_st_sectors_per_request",
    }  # fmt: skip
    unit_suffixes = (
        "_ms", "_mhz", "_bytes", "_sha256", "_version", "_at", "_c", "_w", "_pct", "_gbps",
    )  # fmt: skip
    cols = defs["columns"]
    undocumented = []
    for name, col in cols.items():
        assert col["type"] in tables._TYPES, (name, col)
        if col.get("size"):
            continue  # stands for the problem's size names
        base = name.removeprefix("baseline_")
        stem = name.rsplit("_", 1)[0]
        if col.get("description") or name in self_explanatory or base in self_explanatory:
            continue
        if name.endswith(unit_suffixes) or (base != name and base in cols):
            continue
        # one of a family documented once (ai_dram / ai_l2, top_stall / top_stall_ratio)
        if (stem in cols and cols[stem].get("description")) or any(
            other != name and other.rsplit("_", 1)[0] == stem and cols[other].get("description")
            for other in cols
        ):
            continue
        undocumented.append(name)
    assert not undocumented, f"{table}: columns without a description: {undocumented}"


def test_column_definitions_have_only_known_keys():
    bad = {
        f"{table}.{name}": sorted(set(col) - {"type", "description", "nullable", "size"})
        for table, defs in tables.definitions().items()
        for name, col in defs["columns"].items()
        if set(col) - {"type", "description", "nullable", "size"}
    }
    assert not bad, f"column definitions with unknown keys (a description cut at a comma?): {bad}"


def test_measurements_table_has_every_required_column():
    names = tables.schema("measurements", SIZES).names
    missing = [c for c in REQUIRED_MEASUREMENT_COLUMNS if c not in names]
    assert not missing
    assert len(names) == len(set(names))
    # size columns sit where the size placeholder is, in the problem's order
    i = names.index("M")
    assert names[i : i + 3] == ["M", "N", "K"]
    assert "_sizes" not in names


def test_schema_types_and_nullability():
    sch = tables.schema("measurements", SIZES)
    assert sch.field("M").type == pa.int64() and not sch.field("M").nullable
    assert sch.field("median_ms").type == pa.float64() and sch.field("median_ms").nullable
    assert sch.field("correct").type == pa.bool_()
    assert sch.field("measured_at").type == pa.timestamp("us", tz="UTC")
    assert not sch.field("gpu_uuid").nullable
    assert tables.schema("build").field("cmem0_bytes").nullable
    with pytest.raises(TableError, match="no table 'nope'"):
        tables.schema("nope")


# ------------------------------------------------------------------------------------------
# Writing and reading


@pytest.mark.parametrize("table", ALL_TABLES)
def test_round_trip(table, naive_build, tmp_path):
    rows, sizes = rows_for(table, naive_build)
    path = tmp_path / "sub" / f"{table}.parquet"
    tables.write(rows, path, table, sizes, metadata={"note": {"run": 1}})
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]

    df = tables.read(path)
    assert list(df.columns) == tables.schema(table, sizes).names
    # a file's bytes (what `git show REV:PATH` prints) read to the same frame
    pd.testing.assert_frame_equal(tables.read(path.read_bytes()), df)
    assert len(df) == len(rows)
    for i, row in enumerate(rows):
        for col, value in row.items():
            assert same(value, df[col].iloc[i]), (table, i, col, value, df[col].iloc[i])
    meta = pq.read_schema(path).metadata
    assert meta[b"kernelbook.table"] == table.encode()
    assert json.loads(meta[b"kernelbook.note"]) == {"run": 1}
    assert tables.table_sizes(path) == sizes
    # the file's types are the schema's, whatever pandas made of the rows
    assert pq.read_schema(path).remove_metadata().equals(tables.schema(table, sizes))


def test_build_table_from_the_real_compile(naive_build, tmp_path):
    path = tmp_path / "build.parquet"
    tables.write([build_row(naive_build)], path, "build")
    row = tables.read(path).iloc[0]
    assert row["registers"] > 0
    assert row["spill_store_bytes"] == 0
    assert row["sass_instructions"] > 0
    assert pd.isna(row["cmem0_bytes"]) or row["cmem0_bytes"] >= 0
    assert row["built_at"] == pd.Timestamp(T0)
    assert str(row["built_at"].tz) == "UTC"


def test_measurement_timestamps_kept_in_utc(tmp_path):
    local = datetime(2026, 11, 29, 13, 0, 0, tzinfo=timezone(timedelta(hours=1)))
    path = tmp_path / "m.parquet"
    tables.write([measurement(measured_at=local)], path, "measurements", SIZES)
    got = tables.read(path)["measured_at"].iloc[0]
    assert got == pd.Timestamp("2026-11-29T12:00:00Z")


def test_missing_column_rejected(tmp_path):
    row = measurement()
    del row["gpu_uuid"]
    with pytest.raises(TableError, match=r"missing columns \['gpu_uuid'\]"):
        tables.write([row], tmp_path / "m.parquet", "measurements", SIZES)
    assert list(tmp_path.iterdir()) == []


def test_size_columns_checked(tmp_path):
    row = measurement()
    del row["K"]
    with pytest.raises(TableError, match=r"missing columns \['K'\]"):
        tables.to_arrow([row], "measurements", SIZES)
    # size columns are columns only for a table written with size names
    with pytest.raises(TableError, match=r"unknown columns \['M', 'N', 'K'\]"):
        tables.to_arrow([measurement()], "measurements", ())


def test_unknown_column_rejected(tmp_path):
    row = {**measurement(), "colour": "blue"}
    with pytest.raises(TableError, match=r"unknown columns \['colour'\]"):
        tables.write([row], tmp_path / "m.parquet", "measurements", SIZES)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "col, value", [("gpu_name", None), ("flop", float("nan")), ("seed", None), ("M", None)]
)
def test_null_in_non_nullable_column_rejected(tmp_path, col, value):
    rows = [measurement(), measurement(n=256, **{col: value})]
    with pytest.raises(TableError, match=f"column {col} has empty values"):
        tables.write(rows, tmp_path / "m.parquet", "measurements", SIZES)


def test_nulls_allowed_where_nullable(tmp_path):
    path = tmp_path / "m.parquet"
    tables.write([measurement(status="skipped", reason="requires x")], path, "measurements", SIZES)
    df = tables.read(path)
    assert df["median_ms"].isna().all() and df["correct"].isna().all()
    assert df["n_samples"].isna().all()


def test_wrong_type_rejected(tmp_path):
    with pytest.raises((TableError, pa.ArrowInvalid, pa.ArrowTypeError)):
        tables.write(
            [measurement(seed="not a number")], tmp_path / "m.parquet", "measurements", SIZES
        )
    assert list(tmp_path.iterdir()) == []


def test_atomic_write_replaces_and_leaves_no_temp_files(tmp_path):
    path = tmp_path / "m.parquet"
    tables.write([measurement(n=128)], path, "measurements", SIZES)
    tables.write([measurement(n=256), measurement(n=512)], path, "measurements", SIZES)
    assert [p.name for p in tmp_path.iterdir()] == ["m.parquet"]
    assert list(tables.read(path)["M"]) == [256, 512]
    # a write that fails leaves the old file as it was
    with pytest.raises(TableError):
        tables.write([{"study": "x"}], path, "measurements", SIZES)
    assert list(tables.read(path)["M"]) == [256, 512]
    assert [p.name for p in tmp_path.iterdir()] == ["m.parquet"]


def test_failed_replace_removes_its_temp_file(tmp_path):
    # the target is a non-empty directory: the Parquet file is written, os.replace fails
    target = tmp_path / "m.parquet"
    target.mkdir()
    (target / "keep").write_text("x")
    with pytest.raises(OSError):
        tables.write([measurement()], target, "measurements", SIZES)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.parquet"]
    assert [p.name for p in target.iterdir()] == ["keep"]


# ------------------------------------------------------------------------------------------
# gather


def test_gather_concatenates_and_keeps_sizes(tmp_path):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    tables.write(
        [measurement("01_naive", 1024), measurement("01_naive", 4096)], a, "measurements", SIZES
    )
    tables.write([measurement("02_coalescing", 1024)], b, "measurements", SIZES)
    out = tmp_path / "all" / "measurements.parquet"
    df = tables.gather([a, b], out, "measurements")
    assert len(df) == 3
    got = tables.read(out)
    assert list(got["variant"]) == ["01_naive", "01_naive", "02_coalescing"]
    assert list(got["M"]) == [1024, 4096, 1024]
    assert got["M"].dtype == "int64"
    assert tables.table_sizes(out) == SIZES
    meta = pq.read_schema(out).metadata
    assert json.loads(meta[b"kernelbook.sizes"]) == ["M", "N", "K"]
    assert meta[b"kernelbook.table"] == b"measurements"


def test_gather_build_tables(naive_build, tmp_path):
    paths = []
    for vid in ("01_naive", "02_coalescing"):
        p = tmp_path / vid / "build.parquet"
        tables.write([{**build_row(naive_build), "variant": vid}], p, "build")
        paths.append(p)
    df = tables.gather(paths, tmp_path / "build.parquet", "build")
    assert list(df["variant"]) == ["01_naive", "02_coalescing"]
    assert list(tables.read(tmp_path / "build.parquet")["variant"]) == list(df["variant"])
    assert tables.table_sizes(tmp_path / "build.parquet") == ()


def test_gather_of_nothing_writes_an_empty_table(tmp_path):
    out = tmp_path / "sass.parquet"
    tables.gather([], out, "sass")
    df = tables.read(out)
    assert len(df) == 0
    assert list(df.columns) == tables.schema("sass").names


def test_gather_refuses_mixed_tables(naive_build, tmp_path):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    tables.write(sass_rows(naive_build), a, "sass")
    tables.write([build_row(naive_build)], b, "build")
    with pytest.raises(TableError):
        tables.gather([a, b], tmp_path / "out.parquet", "sass")
    assert not (tmp_path / "out.parquet").exists()


# ------------------------------------------------------------------------------------------
# Autotuning: kernelbook.tune.select


def candidate_rows() -> list[dict]:
    """Three candidates of 09_x at two sizes; 256^3 runs, 192^3 fails every requires."""
    rows = []
    medians = {"09_x__BM64_BN64": 0.030, "09_x__BM128_BN64": 0.021, "09_x__BM128_BN128": None}
    for cid, median in medians.items():
        bm, bn = cid.split("__")[1].replace("BM", "").replace("BN", "").split("_")
        common = dict(
            variant_kind="candidate",
            tuned_from="09_x",
            tune_point=json.dumps({"BM": int(bm), "BN": int(bn)}),
            defines=json.dumps({"BM": int(bm), "BN": int(bn)}),
        )
        reason = f"requires M % BM == 0 (BM={bm})"
        rows.append(measurement(cid, 192, status="skipped", reason=reason, **common))
        if median is None:
            rows.append(
                measurement(
                    cid, 256, status="failed", reason="wrong: relative error 3e-1", **common
                )
            )
        else:
            rows.append(measurement(cid, 256, median=median, **common))
    return rows


@pytest.mark.parametrize("via", ["dataframe", "parquet"])
def test_tune_select(via, tmp_path):
    rows = candidate_rows()
    if via == "dataframe":
        candidates = pd.DataFrame(rows)
    else:  # as the select job sees them: one table per candidate, read back and concatenated
        frames = []
        for cid in dict.fromkeys(r["variant"] for r in rows):
            p = tmp_path / f"{cid}.parquet"
            tables.write([r for r in rows if r["variant"] == cid], p, "measurements", SIZES)
            frames.append(tables.read(p))
        candidates = pd.concat(frames, ignore_index=True)

    out = tune.select(candidates, "09_x")
    assert len(out) == len(rows) + 2
    cand = out[out["variant_kind"] == "candidate"]
    assert len(cand) == len(rows)
    tuned = out[out["variant_kind"] == "tuned"].set_index("size")
    assert sorted(tuned.index) == ["192x192x192", "256x256x256"]
    assert (tuned["variant"] == "09_x").all()

    win = tuned.loc["256x256x256"]
    assert win["status"] == "ok"
    assert win["tuned_from"] == "09_x__BM128_BN64"  # a tuned row names the candidate that won
    assert win["median_ms"] == pytest.approx(0.021)
    assert json.loads(win["tune_point"]) == {"BM": 128, "BN": 64}
    assert bool(win["correct"]) is True

    skip = tuned.loc["192x192x192"]
    assert skip["status"] == "skipped"
    assert skip["reason"].startswith("no candidate ran: ")
    assert "requires M % BM == 0 (BM=64)" in skip["reason"]
    assert "requires M % BM == 0 (BM=128)" in skip["reason"]
    for col in (
        "median_ms",
        "tflops",
        "gbps",
        "pct_of_baseline",
        "rel_err",
        "n_samples",
        "tune_point",
        "correct",
    ):
        assert pd.isna(skip[col]), col
    assert skip["M"] == 192

    assert tune.winners(out) == {"256x256x256": "09_x__BM128_BN64"}

    # the candidates' own rows are passed through unchanged
    assert list(cand["variant"]) == [r["variant"] for r in rows]

    tbl = tables.to_arrow(out, "measurements", SIZES)
    assert tbl.num_rows == len(rows) + 2
    path = tmp_path / "tuned.parquet"
    tables.write(out, path, "measurements", SIZES)
    back = tables.read(path)
    assert back.loc[back["variant"] == "09_x", "status"].tolist().count("skipped") == 1


def test_tune_select_ignores_failed_even_if_faster():
    rows = candidate_rows()
    for r in rows:
        if r["variant"] == "09_x__BM128_BN128" and r["M"] == 256:
            r["median_ms"] = 0.001  # a failed candidate's (bogus) time must not win
    out = tune.select(pd.DataFrame(rows), "09_x")
    win = out[(out["variant_kind"] == "tuned") & (out["M"] == 256)].iloc[0]
    assert win["median_ms"] == pytest.approx(0.021)


def test_git_commit_prefers_the_commit_named_by_the_environment(monkeypatch, tmp_path):

    monkeypatch.setenv("KERNELBOOK_GIT_COMMIT", "0123abcd")
    assert provenance.git_commit(Path(__file__).resolve().parents[1]) == "0123abcd"
    monkeypatch.delenv("KERNELBOOK_GIT_COMMIT")
    here = provenance.git_commit(Path(__file__).resolve().parents[1])
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", here), here
    assert provenance.git_commit(tmp_path) == "unknown"  # no git, no variable
