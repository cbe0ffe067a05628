"""The Parquet tables: schemas from src/kernelbook/schemas/tables.yaml, atomic writes, gather."""

from __future__ import annotations

import json
import os
import re
import tempfile
from functools import cache
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from kernelbook.config import SCHEMA_DIR, ConfigError, read_yaml

_TYPES = {
    "string": pa.string(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "bool": pa.bool_(),
    "timestamp": pa.timestamp("us", tz="UTC"),
}


class TableError(ValueError):
    """Rows that do not fit their table's schema (a harness bug, not a user error)."""


@cache
def definitions() -> dict:
    try:
        return read_yaml(SCHEMA_DIR / "tables.yaml")
    except ConfigError as e:
        raise TableError(str(e)) from None


def schema(table: str, size_names: tuple[str, ...] = ()) -> pa.Schema:
    defs = definitions()
    if table not in defs:
        raise TableError(f"no table '{table}' in tables.yaml")
    fields = []
    for name, col in defs[table]["columns"].items():
        nullable = bool(col.get("nullable", False))
        if col.get("size"):
            fields += [pa.field(n, _TYPES[col["type"]], nullable=False) for n in size_names]
        else:
            fields.append(pa.field(name, _TYPES[col["type"]], nullable=nullable))
    return pa.schema(fields)


def to_arrow(rows: list[dict] | pd.DataFrame, table: str, size_names=()) -> pa.Table:
    sch = schema(table, tuple(size_names))
    df = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    # a nullable column added to the schema later reads as empty in older rows
    absent = [f.name for f in sch if f.name not in df.columns and f.nullable]
    if absent:
        df = df.assign(**dict.fromkeys(absent))
    missing = [f.name for f in sch if f.name not in df.columns]
    extra = [c for c in df.columns if c not in sch.names]
    if missing or extra:
        raise TableError(f"table {table}: missing columns {missing}, unknown columns {extra}")
    df = df[sch.names]
    for f in sch:
        if not f.nullable and df[f.name].isna().any():
            raise TableError(f"table {table}: column {f.name} has empty values")
    for f in sch:
        if pa.types.is_timestamp(f.type):
            df = df.assign(**{f.name: pd.to_datetime(df[f.name], utc=True)})
    return pa.Table.from_pandas(df, schema=sch, preserve_index=False)


# Tables with many rows of few distinct strings (raw samples) are written with zstd.
_COMPRESSION = {"samples": "zstd"}


def write(rows, path: str | Path, table: str, size_names=(), metadata: dict | None = None) -> None:
    """Write rows as Parquet, atomically: a reader never sees a half-written file."""
    tbl = to_arrow(rows, table, size_names)
    meta = {
        b"kernelbook.table": table.encode(),
        b"kernelbook.sizes": json.dumps(list(size_names)).encode(),
    }
    for k, v in (metadata or {}).items():
        meta[f"kernelbook.{k}".encode()] = json.dumps(v).encode()
    tbl = tbl.replace_schema_metadata({**(tbl.schema.metadata or {}), **meta})
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it private; a table is for every reader
    try:
        pq.write_table(tbl, tmp, compression=_COMPRESSION.get(table, "snappy"))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read(source: str | Path | bytes) -> pd.DataFrame:
    """A table from a path or from a file's bytes (as `git show` prints them). Both are read
    by Arrow's own file readers: a Python file object (what pandas.read_parquet opens, and
    io.BytesIO) can leave Arrow's reader threads alive into interpreter teardown, where they
    abort the process ("terminate called without an active exception") after its work is
    done."""
    if isinstance(source, bytes):
        source = pa.BufferReader(source)
    return pq.read_table(source).to_pandas()


def table_sizes(path: str | Path) -> tuple[str, ...]:
    meta = pq.read_schema(path).metadata or {}
    return tuple(json.loads(meta.get(b"kernelbook.sizes", b"[]")))


def gather(inputs: list[str | Path], out: str | Path, table: str, post=None) -> pd.DataFrame:
    """Concatenate per-job tables of one kind into one file (empty inputs are fine);
    ``post`` (frame -> frame) runs on the concatenation before it is written."""
    frames, sizes = [], ()
    for p in inputs:
        frames.append(read(p))
        sizes = table_sizes(p) or sizes
    df = (
        pd.concat(frames, ignore_index=True)
        if frames
        else pd.DataFrame(columns=schema(table, sizes).names)
    )
    if post is not None:
        df = post(df)
    write(df, out, table, sizes)
    return df


def extra_baseline_columns(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of measurement rows with the ``extra_baselines`` JSON spread into columns, for
    each baseline name n: ``n_median_ms``, ``n_tflops``, ``n_gbps``, ``n_rel_err`` and
    ``pct_of_n`` (100 x its median / the variant's). Rows of single-baseline studies (no such
    column, or null) gain nothing."""
    if "extra_baselines" not in df.columns or df["extra_baselines"].isna().all():
        return df.copy()
    out = df.copy()
    parsed = [json.loads(x) if isinstance(x, str) and x else {} for x in df["extra_baselines"]]
    names = list(dict.fromkeys(n for p in parsed for n in p))
    for n in names:
        for key in ("median_ms", "tflops", "gbps", "rel_err"):
            out[f"{n}_{key}"] = [p.get(n, {}).get(key) for p in parsed]
        out[f"pct_of_{n}"] = [p.get(n, {}).get("pct") for p in parsed]
    return out


def extra_baseline_names(df: pd.DataFrame) -> list[str]:
    """The extra baselines named in measurement rows, in first-seen order."""
    if "extra_baselines" not in df.columns:
        return []
    names: dict[str, None] = {}
    for x in df["extra_baselines"].dropna():
        names.update(dict.fromkeys(json.loads(x)))
    return list(names)


# The columns that identify a row, in the order ``canonical`` sorts by them; every other
# column follows as a tie-breaker, so the order is total.
ROW_KEYS = (
    "study", "variant", "tuned_from", "function", "size", "sample", "metric", "kernel",
    "tool", "quantity", "stage", "rule", "job", "opcode", "op",
)  # fmt: skip
_DIGITS = re.compile(r"\d+")


def _sort_key(col: pd.Series) -> pd.Series:
    if pd.api.types.is_numeric_dtype(col) or pd.api.types.is_datetime64_any_dtype(col):
        return col
    # text in natural order: 256x256x256 before 1024x1024x1024
    return col.map(lambda x: "" if x is None else _DIGITS.sub(lambda m: m[0].zfill(20), str(x)))


def canonical(df: pd.DataFrame) -> pd.DataFrame:
    """The rows in one order, whatever order they were written in (a page made from them
    is then the same bytes on every machine): by the identifying columns, then the rest."""
    if len(df) < 2:
        return df.reset_index(drop=True)
    cols = [c for c in ROW_KEYS if c in df.columns]
    cols += [c for c in df.columns if c not in ROW_KEYS]
    key = pd.DataFrame({i: _sort_key(df[c]) for i, c in enumerate(cols)}, index=df.index)
    order = key.sort_values(list(key.columns), kind="mergesort", na_position="last").index
    return df.loc[order].reset_index(drop=True)


def device_values(device: pd.DataFrame | None) -> dict[str, float]:
    """The device table as one number per quantity (the median of its rows, should a table
    hold several): the ceilings every roofline, prediction and page reads."""
    if device is None or device.empty:
        return {}
    values = pd.to_numeric(device["value"], errors="coerce")
    med = values.groupby(device["quantity"]).median().dropna()
    return {str(k): float(v) for k, v in med.items()}
