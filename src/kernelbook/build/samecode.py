"""Whether a kernel whose source changed since it was measured still compiles to the machine
code that was measured: the staleness check's last question before it calls a variant stale.

A shared header folded, a helper renamed, a macro spelt out: the source hash
(provenance.sha256_source) changes, but the SASS ptxas makes may not. For each build the
published rows record (source hash, defines, nvcc flags, target, git commit), the measured
files are read back from git at that commit (the kernel and the headers it includes with
quotes; their hash must be the recorded one) and both versions are compiled here with the
recorded command, by one nvcc. Equal ``cuobjdump -sass`` listings mean the same instructions
in the same order, so the measurement still holds. Anything that cannot be shown (no git, no
nvcc, a dirty or unknown commit, a build that fails) answers no.

Answers are kept in a cache folder (KERNELBOOK_SAME_CODE_CACHE, else
$XDG_CACHE_HOME/kernelbook/same-code) by the two source hashes, the command and nvcc's
version, so that asking again (every page's staleness in a Snakemake run) compiles nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

CACHE_ENV = "KERNELBOOK_SAME_CODE_CACHE"
TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Build:
    """One measured build of a kernel, as its rows record it."""

    source_sha256: str
    defines: str  # JSON object
    nvcc_flags: str  # space-separated
    arch: str  # the target: sm_90, sm_90a
    git_commit: str


def builds(rows) -> list[Build]:
    """The distinct builds behind a variant's published rows (a tuned variant's candidates
    each their own); none where a column is missing."""
    cols = ["source_sha256", "defines", "nvcc_flags", "arch", "git_commit"]
    if rows.empty or any(c not in rows for c in cols):
        return []
    found = rows[cols].dropna().drop_duplicates()
    return [Build(*(str(r[c]) for c in cols)) for _, r in found.iterrows()]


def _cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kernelbook" / "same-code"


def _git_files(root: Path, commit: str, rel: str) -> dict[str, bytes] | None:
    """``rel`` and what it includes with quotes, as they were at ``commit`` (paths relative
    to the root); None where git cannot say."""
    from kernelbook.provenance import commit_reader, quoted_includes

    read = commit_reader(root, commit)
    try:
        if read(Path(rel)) is None:
            return None
        quoted_includes(Path(rel), read)
    except (OSError, subprocess.SubprocessError):
        return None
    return {k: b for k, b in read.blobs.items() if b is not None}


def _sass(source: Path, build: Build, out: Path) -> str:
    """``cuobjdump -sass`` of ``source`` compiled as ``build`` records (raises on failure)."""
    from kernelbook.build import nvcc

    defines = json.loads(build.defines or "{}")
    cmd = [
        "nvcc",
        "-cubin",
        *nvcc.gencode(build.arch),
        *build.nvcc_flags.split(),
        f"-I{source.parent}",
        *nvcc.define_flags(defines),
        "-o",
        str(out),
        str(source),
    ]
    subprocess.run(cmd, capture_output=True, timeout=TIMEOUT_S, check=True)
    dump = subprocess.run(
        [nvcc.tool("cuobjdump"), "-sass", str(out)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=True,
        env=nvcc.tool_env(),
    )
    return dump.stdout


def _same(root: Path, rel: str, now_hash: str, build: Build, version: str) -> bool:
    from kernelbook.provenance import sha256_source

    key = hashlib.sha256(
        json.dumps([rel, now_hash, build.__dict__, version], sort_keys=True).encode()
    ).hexdigest()
    memo = _cache_dir() / key
    if memo.is_file():
        return memo.read_text() == "same"
    files = _git_files(root, build.git_commit, rel)
    if not files:
        return False
    with tempfile.TemporaryDirectory(prefix="kernelbook-same-code-") as tmp:
        tmp = Path(tmp)
        for k, b in files.items():
            (tmp / k).parent.mkdir(parents=True, exist_ok=True)
            (tmp / k).write_bytes(b)
        if sha256_source(tmp / rel) != build.source_sha256:
            return False  # git's version at that commit is not what was measured
        try:
            then = _sass(tmp / rel, build, tmp / "then.cubin")
            now = _sass(root / rel, build, tmp / "now.cubin")
        except (OSError, ValueError, subprocess.SubprocessError, RuntimeError):
            return False
    answer = "same" if then == now else "differs"
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        memo.write_text(answer)
    except OSError:
        pass
    return answer == "same"


def same_machine_code(root: str | Path, rel: str, measured: list[Build]) -> bool:
    """Whether every build in ``measured`` of kernel source ``rel`` (relative to the git
    checkout ``root``) gives the same SASS from its measured files as from the current ones.
    """
    from kernelbook.build import nvcc
    from kernelbook.provenance import sha256_source

    root = Path(root).resolve()
    if not measured or not (root / rel).is_file() or Path(rel).suffix == ".py":
        return False
    try:
        version = nvcc.nvcc_version()
    except nvcc.CompileError:  # no nvcc here: nothing can be shown
        return False
    now_hash = sha256_source(root / rel)
    with ThreadPoolExecutor(max_workers=max(1, min(len(measured), os.cpu_count() or 1))) as ex:
        return all(ex.map(lambda b: _same(root, rel, now_hash, b, version), measured))
