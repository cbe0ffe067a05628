"""Provenance: source hashes (a kernel and the headers it includes), the commit measured, the
time of a row."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from datetime import datetime, timezone
from pathlib import Path


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def quoted_includes(source: Path) -> list[tuple[str, Path]]:
    """What ``source`` includes with quotes, and what those include, in the order found:
    (name as written, path beside its includer); files that do not exist are left out
    (nvcc reports them). A Python source (triton, torch) includes nothing."""
    if Path(source).suffix == ".py":
        return []
    out, todo, seen = [], [Path(source)], {Path(source)}
    while todo:
        path = todo.pop()
        for name in _INCLUDE.findall(path.read_bytes().decode(errors="replace")):
            inc = path.parent / name
            if inc not in seen and inc.is_file():
                seen.add(inc)
                out.append((name, inc))
                todo.append(inc)
    return out


def sha256_source(source: Path) -> str:
    """A kernel's source hash (``source_sha256``): the file's own sha256, or, where it includes
    headers of the repository with quotes, one hash over it and them, so that editing a
    shared header makes every kernel that includes it stale."""
    includes = quoted_includes(source)
    if not includes:
        return sha256_file(source)
    h = hashlib.sha256(Path(source).read_bytes())
    for name, path in includes:
        h.update(f"\0{name}\0".encode() + path.read_bytes())
    return h.hexdigest()


def git_commit(root: Path) -> str:
    """The commit measured: KERNELBOOK_GIT_COMMIT if set (a tree copied to a GPU host may
    carry a .git whose HEAD is not the code that was sent), else the HEAD (+ -dirty) of the
    repository whose top level is ``root``, else 'unknown'."""
    env = os.environ.get("KERNELBOOK_GIT_COMMIT")
    if env:
        return env
    try:
        # The project's own repository only: a tree without .git placed inside another
        # repository must not record the outer repository's commit.
        top = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--show-toplevel"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if top.returncode != 0 or Path(top.stdout.strip()).resolve() != Path(root).resolve():
            return "unknown"
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if out.returncode == 0:
            commit = out.stdout.strip()
            dirty = subprocess.run(
                ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
            return commit + ("-dirty" if dirty else "")
    except (OSError, subprocess.TimeoutExpired):
        pass
    return "unknown"


def now() -> datetime:
    return datetime.now(timezone.utc)
