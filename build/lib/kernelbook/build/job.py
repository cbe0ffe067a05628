"""One compile job: a variant built into its cubin, its build row and its SASS table; a torch
variant's row says it has no compile step, a variant that does not compile a failed row."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from kernelbook import provenance, tables
from kernelbook.build import nvcc
from kernelbook.build import triton as triton_build
from kernelbook.config import Project, Study, Variant, tool_limit


@dataclass(frozen=True)
class BuildInfo:
    """What the bench and the launcher need of a build."""

    cubin: Path
    nvcc_version: str
    nvcc_flags: str
    failed: str | None = None  # why there is nothing to run (a failed compile's message)
    failed_kind: str = "compile"
    smem: int | None = None  # a triton kernel's dynamic shared memory (its build row)


def _eprint(*a):
    print(*a, file=sys.stderr, flush=True)


def nvcc_flags_text(project: Project, variant: Variant) -> str:
    """The nvcc flags a CUDA C variant is built with (global, then its own); '' otherwise."""
    if variant.kind != "cuda":
        return ""
    return " ".join(list(project.settings["nvcc_flags"]) + list(variant.nvcc_flags))


def build_row(project: Project, study: Study, variant: Variant, status: str, **fields) -> dict:
    """A build-table row: what every row holds, then the status's own fields."""
    source = project.root / variant.source
    return {
        "study": study.name,
        "variant": variant.id,
        "tuned_from": variant.tuned_from,
        "status": status,
        "reason": None,
        "kind": variant.kind,
        "entry": variant.entry,
        "source": variant.source,
        "arch": variant.target(project.settings["arch"]),
        **fields,
        "source_sha256": provenance.sha256_source(source) if source.is_file() else "",
        "spec_sha256": variant.spec_sha256(),
        "cubin_sha256": fields.get("cubin_sha256", ""),
        "defines": json.dumps(variant.defines),
        "git_commit": provenance.git_commit(project.root),
        "built_at": provenance.now(),
    }


def _write(rows: list[dict], build_out, sass_rows, sass_out) -> None:
    import pandas as pd

    if build_out:
        tables.write(rows, build_out, "build")
    if sass_out:
        tables.write(
            sass_rows or pd.DataFrame(columns=tables.schema("sass").names), sass_out, "sass"
        )


def _empty_cubin(cubin: Path) -> None:
    cubin.parent.mkdir(parents=True, exist_ok=True)
    cubin.write_bytes(b"")


def compile_job(
    project: Project,
    study: Study,
    variant: Variant,
    cubin: Path,
    build_out=None,
    sass_out=None,
    record_failure: bool = False,
) -> int:
    """Build ``variant`` into ``cubin``; write its build row and SASS table. A compile error
    raises, or with ``record_failure`` becomes a failed row beside an empty cubin (bench,
    profile and sanitize recognise it through the row), so the study's tables and page are
    still made and the bench gate reports it at the end of the run."""
    s = project.settings
    cubin = Path(cubin)
    flags = list(s["nvcc_flags"]) if variant.kind == "cuda" else []
    if variant.kind == "torch":
        # no compile step: the cubin is left empty, as for a failed build, so the DAG's
        # files stay the same
        _empty_cubin(cubin)
        reason = (
            "torch variant: no compile step (torch launches its own kernels; no cubin, no SASS)"
        )
        row = build_row(
            project, study, variant, "not_compiled", reason=reason, arch=s["arch"],
            nvcc_flags="", nvcc_version="", nvcc_command="",
        )  # fmt: skip
        _eprint(f"{study.name}/{variant.id}: {reason}")
        _write([row], build_out, None, sass_out)
        return 0
    try:
        if variant.kind == "triton":
            res = triton_build.compile_triton(
                variant, s["arch"], project.root, study.dtype, study.problem, cubin,
                tool_limit(s, "nvcc_s"),
            )  # fmt: skip
        else:
            res = nvcc.compile_variant(
                variant, s["arch"], flags, project.root, cubin, tool_limit(s, "nvcc_s")
            )
    except nvcc.CompileError as e:
        if not record_failure:
            raise
        _eprint(f"kernelbook: error: {e}")
        _eprint(f"{study.name}/{variant.id}: recorded as a failed build; the run goes on")
        _empty_cubin(cubin)
        row = build_row(
            project, study, variant, "failed", reason=f"compile: {e}",
            nvcc_flags=" ".join(flags + list(variant.nvcc_flags)),
            nvcc_version=_version(variant),
            nvcc_command=" ".join(_command(project, variant, flags, cubin)),
        )  # fmt: skip
        _write([row], build_out, None, sass_out)
        return 0
    r = res.resources
    row = build_row(
        project, study, variant, "ok",
        arch=getattr(res, "arch", "") or variant.target(s["arch"]),
        registers=r.registers, barriers=r.barriers, smem_static_bytes=r.smem_static_bytes,
        stack_bytes=r.stack_bytes, spill_store_bytes=r.spill_store_bytes,
        spill_load_bytes=r.spill_load_bytes, cmem0_bytes=r.cmem0_bytes,
        smem_dynamic_bytes=getattr(res, "smem_dynamic", None),
        sass_instructions=sum(res.sass.values()),
        cubin_sha256=provenance.sha256_file(cubin),
        nvcc_flags=" ".join(flags + list(variant.nvcc_flags)),
        nvcc_version=res.nvcc_version, nvcc_command=" ".join(res.command),
    )  # fmt: skip
    _eprint(res.log.strip())
    _eprint(
        f"{study.name}/{variant.id}: {r.registers} registers, {r.smem_static_bytes} B static smem, "
        f"{_dynamic_smem(project, study, variant, res)}, "
        f"{r.spill_store_bytes}/{r.spill_load_bytes} B spilled, {row['sass_instructions']} SASS"
    )
    sass = [
        {
            "study": study.name,
            "variant": variant.id,
            "opcode": op,
            "op": op.split(".")[0],
            "count": n,
        }
        for op, n in sorted(res.sass.items())
    ]
    _write([row], build_out, sass, sass_out)
    return 0


def _dynamic_smem(project: Project, study: Study, variant: Variant, res) -> str:
    """The dynamic shared memory a launch passes: Triton's own, or the config's smem at the
    headline size (it may depend on the size)."""
    if getattr(res, "smem_dynamic", None) is not None:
        return f"{res.smem_dynamic} B dynamic smem"
    size = study.headline or study.sizes[-1]
    try:
        return f"{variant.launch(size).smem} B dynamic smem at {study.name}'s headline size"
    except Exception:  # the variant does not run at that size
        return "dynamic smem by size"


def _version(variant: Variant) -> str:
    try:
        if variant.kind == "triton":
            return f"triton {triton_build.triton_version()}"
        return nvcc.nvcc_version()
    except nvcc.CompileError:
        return "unknown"


def _command(project: Project, variant: Variant, flags, cubin: Path) -> list[str]:
    if variant.kind == "triton":
        return [f"triton.compile({variant.entry}) for {project.settings['arch']}"]
    source = project.root / variant.source
    return nvcc.nvcc_command(variant, project.settings["arch"], flags, source, cubin)


def compile_now(project: Project, study: Study, variant: Variant, cubin: Path) -> BuildInfo:
    """Build a variant for a command run outside the pipeline (bench, launch without
    --cubin): nvcc or Triton into ``cubin``; a torch variant has nothing to build."""
    s = project.settings
    flags = nvcc_flags_text(project, variant)
    if variant.kind == "torch":
        return BuildInfo(cubin, "", "")
    if variant.kind == "triton":
        res = triton_build.compile_triton(
            variant,
            s["arch"],
            project.root,
            study.dtype,
            study.problem,
            cubin,
            tool_limit(s, "nvcc_s"),
        )
        return BuildInfo(cubin, res.nvcc_version, "", smem=res.smem_dynamic)
    res = nvcc.compile_variant(
        variant, s["arch"], list(s["nvcc_flags"]), project.root, cubin, tool_limit(s, "nvcc_s")
    )
    return BuildInfo(cubin, res.nvcc_version, flags)


def sibling_build_row(cubin: Path):
    """The build row the compile job wrote beside a cubin (None where there is none)."""
    path = Path(cubin).parent / "build.parquet"
    return tables.read(path).iloc[0] if path.is_file() else None


def row_smem(row) -> int | None:
    """A build row's dynamic shared memory (a triton kernel's), None where it has none."""
    import pandas as pd

    if row is None:
        return None
    v = row.get("smem_dynamic_bytes")
    return None if v is None or pd.isna(v) else int(v)
