"""The commit recorded on a row is the project's own (no GPU)."""

from __future__ import annotations

import subprocess

from kernelbook import provenance


def _git(cwd, *args):
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )


def test_a_tree_inside_another_repository_records_unknown(tmp_path, monkeypatch):
    monkeypatch.delenv("KERNELBOOK_GIT_COMMIT", raising=False)
    outer = tmp_path / "outer"
    tree = outer / "copy"
    tree.mkdir(parents=True)
    (outer / "f").write_text("x")
    _git(outer, "init", "-q")
    _git(outer, "add", "f")
    _git(outer, "commit", "-qm", "outer")
    assert len(provenance.git_commit(outer)) == 40  # the outer repository's own commit
    assert provenance.git_commit(tree) == "unknown"  # not the outer repository's commit


def test_own_repository_and_explicit_commit(tmp_path, monkeypatch):
    monkeypatch.delenv("KERNELBOOK_GIT_COMMIT", raising=False)
    (tmp_path / "f").write_text("x")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "f")
    _git(tmp_path, "commit", "-qm", "one")
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True
    ).stdout.strip()
    assert provenance.git_commit(tmp_path) == head
    (tmp_path / "f").write_text("y")
    assert provenance.git_commit(tmp_path) == head + "-dirty"
    monkeypatch.setenv("KERNELBOOK_GIT_COMMIT", "abc123")
    assert provenance.git_commit(tmp_path / "nowhere") == "abc123"


def test_no_repository_records_unknown(tmp_path, monkeypatch):
    monkeypatch.delenv("KERNELBOOK_GIT_COMMIT", raising=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert provenance.git_commit(tmp_path) == "unknown"
