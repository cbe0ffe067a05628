"""compute-sanitizer: run each tool on one variant at a small size, read its findings."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")

_SUMMARY = re.compile(r"=+ ERROR SUMMARY: (\d+) errors?")
_RACE_SUMMARY = re.compile(
    r"=+ RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)"
)
_FINDING = re.compile(
    r"^=+ (Invalid .*|Error: .*|Warning: .*|Uninitialized .*|Barrier .*|.*[Hh]azard.*|"
    r"Program hit .*|Race reported .*)$"
)
_AT = re.compile(r"^=+\s+at (.+)$")


class SanitizeError(RuntimeError):
    """compute-sanitizer could not run, or printed no summary to read."""


@dataclass(frozen=True)
class Findings:
    tool: str
    errors: int
    warnings: int
    first: str | None


def parse(tool: str, text: str) -> Findings:
    """compute-sanitizer's output (one tool) into counts and the first finding with its line."""
    lines = [line.rstrip() for line in text.splitlines()]
    first = None
    for i, line in enumerate(lines):
        m = _FINDING.match(line)
        if m and "SUMMARY" not in line:
            where = next(
                (_AT.match(nxt).group(1) for nxt in lines[i + 1 : i + 4] if _AT.match(nxt)), None
            )
            first = m.group(1).strip() + (f" at {where}" if where else "")
            break
    race = _RACE_SUMMARY.search(text)
    if race:
        return Findings(tool, int(race.group(2)), int(race.group(3)), first)
    summary = _SUMMARY.search(text)
    if summary:
        return Findings(tool, int(summary.group(1)), 0, first)
    raise SanitizeError(f"{tool}: no summary line in compute-sanitizer's output:\n{text[-2000:]}")


def sanitizer_exe() -> str:
    exe = shutil.which("compute-sanitizer")
    if not exe:
        raise SanitizeError("compute-sanitizer is not on PATH")
    return exe


def sanitizer_command(exe: str, tool: str, launch: list[str], padding: int = 0) -> list[str]:
    """compute-sanitizer running one tool on a launch; memcheck pads every allocation."""
    cmd = [exe, "--tool", tool, "--print-limit", "20"]
    if tool == "memcheck" and padding:
        cmd += ["--padding", str(padding)]
    return cmd + list(launch)


def sanitize_variant(
    project,
    study,
    variant,
    cubin,
    size,
    slot_uuid,
    tools=TOOLS,
    log=lambda s: print(s, file=sys.stderr, flush=True),
) -> list[dict]:

    from kernelbook import gpu, problems
    from kernelbook.build import sha256_file
    from kernelbook.cli import launch_command

    problem = problems.get(study.problem)
    label = problem.label(size)
    facts = gpu.device_facts(slot_uuid)
    env = {**os.environ, "KERNELBOOK_SLOT_HELD": "1", "CUDA_VISIBLE_DEVICES": slot_uuid}
    known = variant.known_findings
    limit = max(300.0, 20 * float(study.timing["launch_timeout_s"]))

    def run_tool(tool):
        launch = launch_command(project, study, variant, label, cubin, "--exact")
        padding = project.settings["sanitize"]["padding_bytes"]
        cmd = sanitizer_command(sanitizer_exe(), tool, launch, padding)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=limit)
            return parse(tool, proc.stdout + proc.stderr), proc.returncode
        except subprocess.TimeoutExpired:
            return Findings(tool, 1, 0, f"did not finish within {limit:.0f} s (hang?)"), -1

    # The tools check correctness, not time: they run side by side, each its own process.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(tools) or 1) as pool:
        results = list(pool.map(run_tool, tools))
    rows = []
    for tool, (f, code) in zip(tools, results, strict=True):
        verdict = (
            "clean"
            if f.errors == 0 and f.warnings == 0
            else ("known" if tool in known else "findings")
        )
        log(
            f"{study.name}/{variant.id} at {label}: {tool}: {f.errors} errors, {f.warnings} "
            f"warnings -> {verdict}" + (f" ({f.first})" if f.first else "")
        )
        rows.append(
            {
                "study": study.name,
                "variant": variant.id,
                **size,
                "size": label,
                "tool": tool,
                "errors": f.errors,
                "warnings": f.warnings,
                "first_finding": f.first,
                "verdict": verdict,
                "known_reason": known.get(tool),
                "exit_code": code,
                "gpu_name": facts["gpu_name"],
                "gpu_uuid": facts["gpu_uuid"],
                "source_sha256": sha256_file(project.root / variant.source),
                "git_commit": gpu.git_commit(project.root),
                "measured_at": gpu.now(),
            }
        )
    return rows


def gate(table, study_name: str) -> list[str]:
    """Unexplained findings in a study's sanitizer table, one line each (empty: all clean)."""
    bad = table[table["verdict"] == "findings"]
    return [
        f"{study_name}/{r.variant} at {r.size}: {r.tool} reports {r.errors} error(s), "
        f"{r.warnings} warning(s): {r.first_finding or 'see its log'}"
        for r in bad.itertuples()
    ]
