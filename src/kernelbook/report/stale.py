"""Whether published numbers still hold: each published variant's source and config hashes
against the current kernels and config (a comment-only edit, shown through git, keeps them,
and so does an edit after which the measured builds compile to the same SASS:
kernelbook.build.samecode), and `kernelbook check`, which lists what changed."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from kernelbook.layout import WORKLOGS, published, published_paths


@dataclass(frozen=True)
class Change:
    """One way a published study no longer matches the current sources and config."""

    gpu: str
    study: str
    variant: str
    change: str  # source changed | config entry changed | added (not measured) | removed
    detail: str = ""

    def describe(self) -> str:
        """``not yet measured on nvidia-h200``, ``source changed``, ..."""
        return f"{ADDED} on {self.gpu}" if self.change == ADDED else self.change

    def as_dict(self) -> dict:
        return {
            "gpu": self.gpu,
            "study": self.study,
            "variant": self.variant,
            "change": self.change,
            "detail": self.detail,
        }


SOURCE = "source changed"
CONFIG = "config entry changed"
ADDED = "not yet measured"  # a variant added since: nothing published is wrong, just missing
REMOVED = "removed"
# not a change: the source changed, and every measured build compiles to the same SASS
SAME_CODE = "holds"
# How published numbers are brought up to date, said the same way by check, README and pages.
MEASURE_AND_PUBLISH = "`snakemake --cores 1 all`, then `snakemake --cores 1 publish`"


def _short(h: str) -> str:
    return str(h)[:12]


_CODE_TOKENS = re.compile(
    r'("(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\')|//[^\n]*|/\*.*?\*/', re.DOTALL
)


def strip_comments(text: str) -> str:
    """C/C++/CUDA source without comments, runs of blanks or empty lines (strings kept)."""
    code = _CODE_TOKENS.sub(lambda m: m.group(1) or " ", text)
    return "\n".join(" ".join(line.split()) for line in code.splitlines() if line.strip())


def comments_only_change(root: str | Path, rel: str, measured: list[str], depth: int = 200) -> bool:
    """Whether every measured version of ``rel`` (by its source hash: the file and the headers
    it includes, provenance.sha256_source) is in git's history and differs from the current
    files in comments and blank space only: then the measurement still holds. False whenever
    that cannot be shown (no git, a version not found, a code change, another set of headers).
    """
    import os
    import subprocess

    from kernelbook.provenance import commit_reader, quoted_includes, sha256_source

    root = Path(root).resolve()
    path = root / rel
    if not measured or not path.is_file():
        return False

    def key(p: Path) -> str:  # a file's path in git: relative to the root, '..' resolved
        return Path(os.path.normpath(p)).relative_to(root).as_posix()

    now = {key(p): strip_comments(p.read_text(errors="replace")) for p in [path] + [
        inc for _, inc in quoted_includes(path)
    ]}  # fmt: skip

    def git(*args):
        return subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, timeout=60, check=True
        ).stdout

    try:
        commits = git("log", f"-{depth}", "--format=%H", "--", *now).decode().split()
        found: dict[str, dict[str, bytes]] = {}
        for c in commits:
            read = commit_reader(root, c)
            h = sha256_source(path, read)
            if h in measured:
                found[h] = {k: b for k, b in read.blobs.items() if b is not None}
            if len(found) == len(set(measured)):
                break
    except (OSError, ValueError, subprocess.SubprocessError):
        return False
    if len(found) != len(set(measured)):
        return False
    return all(
        set(files) == set(now)
        and all(strip_comments(b.decode(errors="replace")) == now[k] for k, b in files.items())
        for files in found.values()
    )


def study_changes(
    root: str | Path, study, meas, gpu: str, held: list[Change] | None = None
) -> list[Change]:
    """What changed in one study's variants since ``meas`` (its published rows) was measured;
    a variant whose source changed but whose measured builds compile to the same SASS is no
    change, and is appended to ``held`` (SAME_CODE) where one is given."""
    from kernelbook.build.samecode import builds, same_machine_code
    from kernelbook.provenance import sha256_source

    root = Path(root)
    out: list[Change] = []
    kinds = meas["variant_kind"]
    tuned_from = meas["tuned_from"]

    def add(vid, change, detail=""):
        out.append(Change(gpu, study.name, vid, change, detail))

    def source_check(v, rows):
        path = root / v.source
        now = sha256_source(path) if path.is_file() else "missing"
        then = sorted(set(rows["source_sha256"].dropna()))
        if then == [now] or comments_only_change(root, v.source, then):
            return
        measured = builds(rows)
        if same_machine_code(root, v.source, measured):
            if held is not None:
                n = len(measured)
                detail = f"{v.source} changed; its {n} measured build(s) compile to the same SASS"
                held.append(Change(gpu, study.name, v.id, SAME_CODE, detail))
        else:
            add(
                v.id,
                SOURCE,
                f"{v.source}: measured {', '.join(_short(h) for h in then)}, now {_short(now)}",
            )

    for v in study.variants:
        if v.is_tuned:
            rows = meas[(tuned_from == v.id) | (meas["variant"] == v.id)]
            if rows.empty:
                add(v.id, ADDED, f"{len(v.candidates)} candidates")
                continue
            source_check(v, rows)
            now = {c.id: c.spec_sha256() for c in study.candidates if c.tuned_from == v.id}
            cand = rows[kinds.loc[rows.index] == "candidate"]
            if len(cand):
                then = dict(zip(cand["variant"], cand["spec_sha256"], strict=True))
                new = sorted(set(now) - set(then))
                gone = sorted(set(then) - set(now))
                changed = sorted(c for c in set(now) & set(then) if now[c] != then[c])
                parts = []
                if new:
                    parts.append(f"{len(new)} candidate(s) not measured (e.g. {new[0]})")
                if gone:
                    parts.append(f"{len(gone)} measured candidate(s) no longer in the space")
                if changed:
                    parts.append(f"{len(changed)} candidate entries changed")
                if parts:
                    add(v.id, CONFIG, "; ".join(parts))
            else:
                specs = set(rows["spec_sha256"].dropna())
                if not specs <= set(now.values()):
                    add(v.id, CONFIG, "the tuned winner is no longer a candidate of the space")
        else:
            rows = meas[(meas["variant"] == v.id) & (kinds != "candidate")]
            if rows.empty:
                add(v.id, ADDED)
                continue
            source_check(v, rows)
            then = sorted(set(rows["spec_sha256"].dropna()))
            now = v.spec_sha256()
            if then != [now]:
                add(
                    v.id,
                    CONFIG,
                    f"{study.path}: measured {', '.join(_short(h) for h in then)}, "
                    f"now {_short(now)}",
                )
    known = {v.id for v in study.variants}
    main = meas[kinds != "candidate"]
    for vid in dict.fromkeys(main["variant"]):
        if vid not in known:
            add(vid, REMOVED, f"not in {study.path} any more")
    return out


def study_for(project, name: str):
    """The study from the project, else from its file in study_dir, else None."""
    from kernelbook import config as cfg

    if name in project.studies:
        return project.studies[name]
    path = project.root / project.settings["study_dir"] / f"{name}.yaml"
    if not path.is_file():
        return None
    return cfg.load_study(path, project.settings, project.root)


def changes_json(project, worklogs_dir: str | Path, gpu: str, study: str) -> str:
    """JSON of what changed in one published study since it was measured ([] without it)."""
    from kernelbook import tables

    path = published_paths(worklogs_dir, gpu, study)["measurements"]
    found = study_for(project, study)
    if found is None or not path.is_file():
        return "[]"
    changes = study_changes(project.root, found, tables.read(path), gpu)
    return json.dumps([c.as_dict() for c in changes], sort_keys=True)


def stale(
    project, worklogs_dir: str | Path = WORKLOGS, held: list[Change] | None = None
) -> list[Change]:
    """Every published (gpu, study, variant) that no longer matches the current sources
    (those held by the same machine code appended to ``held``, where given).

    ``project`` is a kernelbook.config.Project; a published study missing from its config
    is still checked against config/studies/<study>.yaml, and reported removed without one.
    """
    from kernelbook import tables

    worklogs_dir = Path(worklogs_dir)
    if not worklogs_dir.is_absolute():
        worklogs_dir = Path(project.root) / worklogs_dir
    out: list[Change] = []
    for gpu, name in published(worklogs_dir):
        meas = tables.read(published_paths(worklogs_dir, gpu, name)["measurements"])
        study = study_for(project, name)
        if study is None:
            main = meas[meas["variant_kind"] != "candidate"]
            for vid in dict.fromkeys(main["variant"]):
                out.append(Change(gpu, name, vid, REMOVED, f"study '{name}' has no config"))
            continue
        out += study_changes(project.root, study, meas, gpu, held)
    return out


def check(project, worklogs_dir: str | Path = WORKLOGS, out=None) -> int:
    """Print the stale published studies by variant; 1 when any is stale, else 0."""
    out = out or sys.stdout
    worklogs_dir = Path(worklogs_dir)
    root = worklogs_dir if worklogs_dir.is_absolute() else Path(project.root) / worklogs_dir
    pairs = published(root)
    if not pairs:
        print(f"kernelbook check: nothing published under {worklogs_dir}/", file=out)
        return 0
    held: list[Change] = []
    changes = stale(project, root, held)
    by: dict[tuple[str, str], list[Change]] = {}
    kept: dict[tuple[str, str], list[Change]] = {}
    for c in changes:
        by.setdefault((c.gpu, c.study), []).append(c)
    for c in held:
        kept.setdefault((c.gpu, c.study), []).append(c)
    for gpu, study in pairs:
        cs, hs = by.get((gpu, study), []), kept.get((gpu, study), [])
        if cs:
            changed = {c.variant for c in cs if c.change != ADDED}
            new = {c.variant for c in cs if c.change == ADDED}
            head = [f"STALE ({len(changed)} variant(s))"] if changed else []
            head += [f"{len(new)} variant(s) {ADDED} on {gpu}"] if new else []
            print(f"{gpu}/{study}: {'; '.join(head)}", file=out)
        else:
            print(f"{gpu}/{study}: up to date", file=out)
        width = max((len(c.variant) for c in cs + hs), default=0)
        for c in cs + hs:
            detail = f": {c.detail}" if c.detail else ""
            print(f"  {c.variant:<{width}}  {c.describe()}{detail}", file=out)
    if changes:
        stale_pairs = {k for k, cs in by.items() if any(c.change != ADDED for c in cs)}
        new_pairs = {k for k, cs in by.items() if any(c.change == ADDED for c in cs)}
        parts = [f"{len(stale_pairs)} stale"] if stale_pairs else []
        parts += [f"{len(new_pairs)} with variants {ADDED}"] if new_pairs else []
        print(
            f"kernelbook check: {' and '.join(parts)} of {len(pairs)} published study/GPU "
            f"pair(s); on that GPU run {MEASURE_AND_PUBLISH}",
            file=out,
        )
        return 1
    print(f"kernelbook check: all {len(pairs)} published study/GPU pair(s) up to date", file=out)
    return 0
