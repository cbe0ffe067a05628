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


def _read(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


def quoted_includes(source: Path, read=_read) -> list[tuple[str, Path]]:
    """What ``source`` includes with quotes, and what those include, in the order found:
    (name as written, path beside its includer); files that do not exist are left out
    (nvcc reports them). A Python source (triton, torch) includes nothing. ``read`` gives a
    file's bytes, or None where there is none (default: the working tree; the staleness check
    passes one that reads a commit)."""
    if Path(source).suffix == ".py":
        return []
    out, todo, seen = [], [Path(source)], {Path(source)}
    while todo:
        path = todo.pop()
        text = read(path) or b""
        for name in _INCLUDE.findall(text.decode(errors="replace")):
            inc = path.parent / name
            if inc not in seen and read(inc) is not None:
                seen.add(inc)
                out.append((name, inc))
                todo.append(inc)
    return out


def sha256_source(source: Path, read=_read) -> str:
    """A kernel's source hash (``source_sha256``): the file's own sha256, or, where it includes
    headers of the repository with quotes, one hash over it and them, so that editing a
    shared header makes every kernel that includes it stale. ``read`` as for
    quoted_includes."""
    includes = quoted_includes(source, read)
    h = hashlib.sha256(read(Path(source)) or b"")
    for name, path in includes:
        h.update(f"\0{name}\0".encode() + read(path))
    return h.hexdigest()


def commit_reader(root: Path, commit: str):
    """A ``read`` for quoted_includes and sha256_source that gives a file's bytes as they were
    at git ``commit`` (None where it was not there, or git cannot say); a path is absolute
    under ``root`` or relative to it. ``read.blobs`` holds what it read, by path from the
    root."""
    root = Path(root).resolve()
    blobs: dict[str, bytes | None] = {}

    def read(path: Path) -> bytes | None:
        path = Path(os.path.normpath(path))
        key = (path.relative_to(root) if path.is_absolute() else path).as_posix()
        if key not in blobs:
            proc = subprocess.run(
                ["git", "-C", str(root), "show", f"{commit}:{key}"], capture_output=True, timeout=60
            )
            blobs[key] = proc.stdout if proc.returncode == 0 else None
        return blobs[key]

    read.blobs = blobs
    return read


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
