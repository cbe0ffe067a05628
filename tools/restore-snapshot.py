#!/usr/bin/env python3
"""Resume a GPU run on another machine from a snapshot (tools/snapshot.sh) of a run cut
short: the tables, cubins and Snakemake state come back into this checkout, and the next
`snakemake ... tables` runs only what the snapshot lacks (missing outputs, and the jobs
Snakemake marked incomplete), re-measuring nothing it holds.

    tools/restore-snapshot.py SNAPSHOT_DIR

Snakemake decides what to rerun from its own records (.snakemake/metadata, in the snapshot):
a fresh checkout's files are all newer than the snapshot, and Snakemake 9 then compares
their checksums with the recorded ones, so only a job whose inputs really changed (a kernel
edited since the snapshot was made, say) runs again. So a snapshot without Snakemake's
records is refused, and one made at another commit is restored with a note.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("results", "build", "state")
# tools/snapshot.sh writes each part xz-compressed (.txz), or gzip (.tgz) where the host has
# no xz; tarfile reads both
SUFFIXES = (".txz", ".tgz")


def fail(msg: str) -> None:
    print(f"restore-snapshot: {msg}", file=sys.stderr)
    raise SystemExit(1)


def current_commit() -> str:
    env = os.environ.get("KERNELBOOK_GIT_COMMIT")
    if env:
        return env
    proc = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    return proc.stdout.strip() if proc.returncode == 0 else "unknown"


def _open(part: Path) -> tarfile.TarFile:
    """A part as a tar archive. An interpreter built without lzma cannot read .txz itself:
    the xz tool then decompresses it (a part is tens of MB)."""
    if part.suffix == ".txz":
        try:
            import lzma  # noqa: F401
        except ImportError:
            try:
                proc = subprocess.run(["xz", "-dc", str(part)], capture_output=True, check=False)
            except OSError as e:
                fail(f"{part}: this Python has no lzma and there is no xz to read it ({e})")
            if proc.returncode != 0:
                fail(f"{part}: xz -dc failed: {proc.stderr.decode(errors='replace').strip()}")
            return tarfile.open(fileobj=io.BytesIO(proc.stdout))
    return tarfile.open(part)


def _part(snapshot: Path, name: str) -> Path | None:
    """The snapshot's file for one part, either compression; both at once is refused (which
    one is the newer cannot be told from the names)."""
    there = [snapshot / f"{name}{s}" for s in SUFFIXES if (snapshot / f"{name}{s}").is_file()]
    if len(there) > 1:
        fail(f"{snapshot}: both {there[0].name} and {there[1].name}; keep the one to restore")
    return there[0] if there else None


def restore(snapshot: Path, root: Path = ROOT) -> dict:
    meta_path = snapshot / "snapshot.json"
    if not meta_path.is_file():
        fail(f"{meta_path}: no snapshot.json (not a tools/snapshot.sh folder)")
    try:
        meta = json.loads(meta_path.read_text())
        made_at = meta["commit"]
    except (ValueError, KeyError) as e:
        fail(f"{meta_path}: unreadable ({e})")
    here = current_commit()
    note = ""
    if made_at != here:
        note = (
            f"made at commit {made_at}, this checkout is {here}: jobs whose inputs changed "
            "since will run again"
        )
    found = {name: _part(snapshot, name) for name in PARTS}
    if found["state"] is None:
        fail(
            f"{snapshot}: no state.txz or state.tgz (Snakemake's records of its outputs): "
            "without them every job would run again; nothing restored"
        )
    if found["results"] is None:
        fail(f"{snapshot}: no results.txz or results.tgz")
    parts = [p for p in found.values() if p is not None]
    restored: list[float] = []
    for part in parts:
        try:
            with _open(part) as tar:
                members = tar.getmembers()
                for m in members:
                    top = Path(m.name).parts[0] if Path(m.name).parts else ""
                    if m.name.startswith("/") or ".." in Path(m.name).parts:
                        fail(f"{part}: unsafe path {m.name}")
                    if top not in ("results", ".snakemake"):
                        fail(f"{part}: {m.name} is outside results/ and .snakemake/")
                tar.extractall(root, filter="tar")
                restored += [m.mtime for m in members if m.isfile()]
        except tarfile.TarError as e:
            fail(f"{part}: not a readable compressed tar ({e})")
    if not restored:
        fail(f"{snapshot}: the snapshot holds no files")
    return {"files": len(restored), "commit": made_at, "note": note}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        print("usage: tools/restore-snapshot.py SNAPSHOT_DIR", file=sys.stderr)
        return 2
    snap = Path(argv[0])
    if not snap.is_dir():
        fail(f"{snap}: no such folder")
    out = restore(snap)
    print(f"restore-snapshot: {out['files']} file(s) from {snap} (commit {out['commit']})")
    if out["note"]:
        print(f"restore-snapshot: {out['note']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
