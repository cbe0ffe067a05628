"""Compile a variant with nvcc, read ptxas's resource report, count SASS opcodes."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from kernelbook.config import Variant
from kernelbook.procs import ToolTimeout, run_tool
from kernelbook.provenance import quoted_includes

NVCC_TIMEOUT_S = 600.0  # timeouts.nvcc_s's default


class CompileError(RuntimeError):
    """nvcc failed or ran out of time, or the entry point is not in what it built."""

    kind = "compile"


@dataclass(frozen=True)
class Resources:
    function: str
    registers: int
    barriers: int
    smem_static_bytes: int
    stack_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    cmem0_bytes: int | None


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PROPS = re.compile(r"Function properties for (\S+)")
_USED = re.compile(r"Used (\d+) registers")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM0 = re.compile(r"(\d+) bytes cmem\[0\]")


def parse_ptxas(log: str) -> dict[str, Resources]:
    """ptxas -v output (as nvcc prints it) into resources per entry function."""
    out: dict[str, Resources] = {}
    current: str | None = None
    fields: dict[str, int | None] = {}

    def close():
        if current is not None and "registers" in fields:
            out[current] = Resources(current, **fields)  # type: ignore[arg-type]

    properties_of: str | None = None  # 'Function properties for X' names whose line follows
    for line in log.splitlines():
        m = _PROPS.search(line)
        if m:
            properties_of = m.group(1)
            continue
        m = _ENTRY.search(line)
        if m:
            close()
            current = m.group(1)
            properties_of = None
            fields = {
                "barriers": 0,
                "smem_static_bytes": 0,
                "stack_bytes": 0,
                "spill_store_bytes": 0,
                "spill_load_bytes": 0,
                "cmem0_bytes": None,
            }
            continue
        if current is None:
            continue
        m = _FRAME.search(line)
        if m and properties_of in (None, current):
            fields["stack_bytes"], fields["spill_store_bytes"], fields["spill_load_bytes"] = (
                int(g) for g in m.groups()
            )
        m = _USED.search(line)
        if m:
            fields["registers"] = int(m.group(1))
            for rx, key in (
                (_BARRIERS, "barriers"),
                (_SMEM, "smem_static_bytes"),
                (_CMEM0, "cmem0_bytes"),
            ):
                mm = rx.search(line)
                if mm:
                    fields[key] = int(mm.group(1))
    close()
    return out


_SASS_FUNC = re.compile(r"^\s*Function : (\S+)")
# the whole mnemonic: upper case, digits and dots, and the lower-case shape of the Hopper
# warpgroup MMAs (HGMMA.64x128x16.F32.BF16, QGMMA.64x128x32.F32.E4M3.E4M3)
_SASS_INSN = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Za-z0-9_.]*)")


def sass_text(cubin: Path, timeout: float, where: str) -> str:
    """cuobjdump -sass of ``cubin``, as text; CompileError where cuobjdump fails."""
    try:
        dump = run_tool(
            [tool("cuobjdump"), "-sass", str(cubin)],
            timeout=timeout,
            what=where,
            setting="timeouts.nvcc_s",
            env=tool_env(),
        )
    except ToolTimeout as e:
        raise CompileError(str(e)) from None
    if dump.returncode != 0:
        raise CompileError(f"{where}: cuobjdump -sass failed: {dump.stderr.strip()}")
    return dump.stdout


def sass_of(cubin: Path, timeout: float, where: str) -> dict[str, Counter]:
    """cuobjdump -sass of a freshly built ``cubin``: opcode counts per function. On failure
    the cubin is removed (it is a temporary file, never a result) and CompileError raised."""
    try:
        return parse_sass(sass_text(cubin, timeout, where))
    except CompileError:
        cubin.unlink(missing_ok=True)
        raise


def parse_sass(text: str) -> dict[str, Counter]:
    """cuobjdump -sass output into opcode counts per function (full mnemonics: LDS.128)."""
    out: dict[str, Counter] = {}
    current = None
    for line in text.splitlines():
        m = _SASS_FUNC.match(line)
        if m:
            current = out.setdefault(m.group(1), Counter())
            continue
        if current is None:
            continue
        m = _SASS_INSN.match(line)
        if m:
            current[m.group(1)] += 1
    return out


def _nvidia_bin_dirs() -> list[str]:
    dirs = []
    try:
        import nvidia  # namespace package of NVIDIA's PyPI wheels

        for base in nvidia.__path__:
            for sub in ("cu13", "cu12", "cuda_cuobjdump", "cuda_nvdisasm"):
                d = Path(base) / sub / "bin"
                if d.is_dir():
                    dirs.append(str(d))
    except ImportError:
        pass
    return dirs


def tool(name: str) -> str:
    """Find a CUDA tool on PATH or in NVIDIA's PyPI wheels (cuobjdump, nvdisasm)."""
    found = shutil.which(name) or shutil.which(name, path=os.pathsep.join(_nvidia_bin_dirs()))
    if not found:
        raise CompileError(
            f"{name} not found on PATH nor in the nvidia-cuda-{name} wheel; install the CUDA "
            f"toolkit or `pip install nvidia-cuda-{name}`"
        )
    return found


def tool_env() -> dict[str, str]:
    """Environment in which cuobjdump finds nvdisasm even when both come from wheels."""
    env = dict(os.environ)
    extra = _nvidia_bin_dirs()
    if extra:
        env["PATH"] = os.pathsep.join([env.get("PATH", ""), *extra])
    return env


def nvcc_version() -> str:
    try:
        proc = run_tool(
            ["nvcc", "--version"], timeout=60, what="nvcc --version", setting="a fixed 60 s"
        )
        if proc.returncode != 0:
            raise subprocess.CalledProcessError(proc.returncode, proc.args, proc.stdout)
        text = proc.stdout
    except (OSError, subprocess.CalledProcessError, ToolTimeout) as e:
        raise CompileError(f"nvcc is not usable: {e}") from None
    m = re.search(r"release [\d.]+, V([\d.]+)", text)
    return m.group(1) if m else text.strip().splitlines()[-1]


def gencode(arch: str) -> list[str]:
    num = arch.split("_", 1)[1]
    return [f"-gencode=arch=compute_{num},code=sm_{num}"]


def define_flags(defines: dict) -> list[str]:
    return [f"-D{k}={v}" for k, v in defines.items()]


def nvcc_command(
    variant: Variant, arch: str, flags: list[str], source: Path, out: Path
) -> list[str]:
    return [
        "nvcc",
        "-cubin",
        *gencode(variant.target(arch)),
        *flags,
        *variant.nvcc_flags,
        "-Xptxas",
        "-v",
        f"-I{source.parent}",
        *define_flags(variant.defines),
        "-o",
        str(out),
        str(source),
    ]


@dataclass(frozen=True)
class BuildResult:
    resources: Resources
    sass: Counter
    log: str
    command: list[str]
    nvcc_version: str


# A folder of cubins by content, for builds repeated in several copies of the repository
# (the test suite): a build whose nvcc binary, command, source and quoted includes are
# byte-identical to a cached one takes its cubin and ptxas report. Unset: nvcc every time.
CACHE_ENV = "KERNELBOOK_CUBIN_CACHE"


def _cache_key(cmd: list[str], source: Path, out: Path) -> str:
    same = {str(out): "<out>", str(source): "<source>", f"-I{source.parent}": "-I<dir>"}
    exe = os.path.realpath(shutil.which(cmd[0]) or cmd[0])  # this nvcc, without running it
    st = os.stat(exe) if os.path.exists(exe) else None
    nvcc = [exe, st.st_size, st.st_mtime_ns] if st else [exe]
    h = hashlib.sha256(json.dumps([nvcc, [same.get(a, a) for a in cmd]]).encode())
    if source.is_file():  # the source and what it includes with quotes, by content
        for name, path in [("", source), *quoted_includes(source)]:
            h.update(f"{name}\0".encode() + path.read_bytes())
    return h.hexdigest()


def _nvcc_cached(cmd: list[str], source: Path, tmp: Path, nvcc) -> tuple[int, str]:
    """``nvcc()`` (or the cache's copy of its output): (exit status, what it printed)."""
    cache = os.environ.get(CACHE_ENV)
    entry = Path(cache) / _cache_key(cmd, source, tmp) if cache else None
    if entry is not None and (entry / "nvcc.log").is_file():
        shutil.copyfile(entry / "kernel.cubin", tmp)
        return 0, (entry / "nvcc.log").read_text()
    returncode, log = nvcc()
    if entry is not None and returncode == 0:
        entry.parent.mkdir(parents=True, exist_ok=True)
        part = Path(tempfile.mkdtemp(prefix=".part-", dir=entry.parent))
        shutil.copyfile(tmp, part / "kernel.cubin")
        (part / "nvcc.log").write_text(log)
        try:
            os.replace(part, entry)
        except OSError:  # another process stored it first
            shutil.rmtree(part, ignore_errors=True)
    return returncode, log


def compile_variant(
    variant: Variant,
    arch: str,
    flags: list[str],
    root: Path,
    cubin: Path,
    timeout: float = NVCC_TIMEOUT_S,
) -> BuildResult:
    """nvcc to ``cubin`` (written only on success), its resources and SASS histogram; nvcc
    and cuobjdump each get ``timeout`` seconds (timeouts.nvcc_s) before their process
    group is killed."""
    source = Path(root) / variant.source
    if not source.is_file():
        raise CompileError(f"{variant.study}/{variant.id}: source {variant.source} not found")
    cubin = Path(cubin)
    cubin.parent.mkdir(parents=True, exist_ok=True)
    tmp = cubin.with_name(cubin.name + ".tmp")
    cmd = nvcc_command(variant, arch, flags, source, tmp)
    where = f"{variant.study}/{variant.id}"

    def nvcc() -> tuple[int, str]:
        try:
            proc = run_tool(cmd, timeout=timeout, what=where, setting="timeouts.nvcc_s")
        except ToolTimeout as e:
            tmp.unlink(missing_ok=True)
            raise CompileError(
                f"{e}\n{e.output.strip()}\ncommand: {' '.join(cmd)}".strip()
            ) from None
        except OSError as e:
            raise CompileError(f"{where}: nvcc is not usable: {e}") from None
        return proc.returncode, proc.stdout + proc.stderr

    returncode, log = _nvcc_cached(cmd, source, tmp, nvcc)
    if returncode != 0:
        tmp.unlink(missing_ok=True)
        raise CompileError(
            f"{variant.study}/{variant.id}: nvcc failed on {variant.source} (exit "
            f"{returncode}):\n{log.strip()}\ncommand: {' '.join(cmd)}"
        )
    resources = parse_ptxas(log)
    missing = [e for e in variant.entries if e not in resources]
    if missing:
        tmp.unlink(missing_ok=True)
        found = ", ".join(resources) or "none"
        raise CompileError(
            f"{variant.study}/{variant.id}: entry '{missing[0]}' is not a kernel in "
            f'{variant.source} (kernels found: {found}; is it extern "C" __global__?)'
        )
    # a variant of several kernels (then:): the build row's resources are its first
    # kernel's, its SASS histogram counts every kernel's instructions
    per_kernel = sass_of(tmp, timeout, where)
    sass = sum((per_kernel.get(e, Counter()) for e in variant.entries), Counter())
    os.replace(tmp, cubin)
    return BuildResult(resources[variant.entry], sass, log, cmd, nvcc_version())
