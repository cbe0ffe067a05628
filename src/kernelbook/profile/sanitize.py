"""compute-sanitizer: run each tool on one variant at a small size, read its findings."""

from __future__ import annotations

import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from kernelbook import provenance
from kernelbook.config import tool_limit
from kernelbook.launch.process import launch_command
from kernelbook.procs import ToolTimeout, run_tool

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
# Bench failures after which the sanitizer is not run: nothing would come of it but a
# time-out (hang) or the same error (no cubin, no kernel to load).
NOT_RERUN = frozenset({"hang", "compile", "launch", "no_winner"})

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


def failed_exit(found: Findings, code: int) -> bool:
    """A launch that exited non-zero with nothing found (an API error the launch helper
    raised, a crash outside a kernel): ``failed``, not ``clean``. With findings, they
    decide (a faulting kernel's launch exits non-zero too)."""
    return code != 0 and not found.errors and not found.warnings


def exit_reason(code: int, text: str) -> str:
    """The launch's last words: its exit status and the last line that is not the tool's."""
    own = [line.strip() for line in text.splitlines() if line.strip()]
    last = next((line for line in reversed(own) if not line.startswith("=")), "no output")
    return f"the launch exited {code}: {last[:300]}"


def sanitizer_exe() -> str:
    exe = shutil.which("compute-sanitizer")
    if not exe:
        raise SanitizeError("compute-sanitizer is not on PATH")
    return exe


def sanitizer_command(exe: str, tool: str, launch: list[str], padding: int = 0) -> list[str]:
    """compute-sanitizer running one tool on a launch; memcheck pads every allocation.

    Host API errors are not the sanitizer's to report here (``--report-api-errors no``): the
    launch helper checks every call it makes and exits non-zero on an error, which reads as
    ``failed`` (``verdict``). Left on, memcheck counts the libraries' own probing as errors:
    cuda-bindings asks the driver for entry points newer than it has, and on an H200 host
    with driver 580 every TMA variant read 34 "errors", all CUDA_ERROR_INVALID_VALUE from
    cuGetProcAddress_v2, with no device-side finding among them."""
    cmd = [exe, "--tool", tool, "--print-limit", "20", "--report-api-errors", "no"]
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
    skip: tuple[str, str] | None = None,
    expect: str | None = None,
    failed: tuple[str, str] | None = None,
) -> list[dict]:
    """Each tool on ``variant`` at ``size``, in its own process group, within
    timeouts.sanitizer_s. ``skip`` (kind, reason): the bench found it hangs or cannot run,
    so each tool gets a ``not_run`` row instead. ``failed`` (kind, reason): the bench found
    it failing at some size; the tools run once to say where, within the shorter
    timeouts.failed_sanitizer_s, and a tool still running then gets a ``not_run`` row that
    says so. ``expect``: the declared variant's `expect` (a negative control's findings are
    ``expected``, not ``findings``)."""
    from kernelbook import gpu, problems

    problem = problems.get(study.problem)
    label = problem.label(size)
    facts = gpu.device_facts(slot_uuid)
    env = {**os.environ, gpu.SLOT_HELD_ENV: "1", "CUDA_VISIBLE_DEVICES": slot_uuid}
    known = variant.known_findings
    timeout = tool_limit(project.settings, "sanitizer_s")
    setting = "timeouts.sanitizer_s"
    if failed is not None:
        timeout = min(timeout, tool_limit(project.settings, "failed_sanitizer_s"))
        setting = "timeouts.failed_sanitizer_s"
    where = f"{study.name}/{variant.id} at {label}"

    def sanitize_with(tool) -> tuple[Findings, int, str | None]:
        """(findings, exit code, verdict when not read from the findings)."""
        if skip is not None:
            return Findings(tool, 0, 0, f"not run: the bench failed ({skip[1]})"), -1, "not_run"
        launch = launch_command(project, study, variant, label, cubin, "--exact")
        padding = project.settings["sanitize"]["padding_bytes"]
        cmd = sanitizer_command(sanitizer_exe(), tool, launch, padding)
        try:
            proc = run_tool(
                cmd,
                timeout=timeout,
                what=f"{where}: {tool}",
                setting=setting,
                env=env,
            )
        except ToolTimeout as e:
            if failed is not None:  # the bench's failure is the finding; this is no hang
                why = f"stopped after {timeout:g} s ({setting}): the bench found it failing"
                return Findings(tool, 0, 0, f"{why} ({failed[0]}: {failed[1]})"), -1, "not_run"
            return Findings(tool, 0, 0, str(e)), -1, "hang"
        text = proc.stdout + proc.stderr
        try:
            found = parse(tool, text)
        except SanitizeError as e:
            return Findings(tool, 0, 0, f"{where}: {e}"), proc.returncode, "failed"
        if failed_exit(found, proc.returncode):
            why = f"{where}: {tool}: {exit_reason(proc.returncode, text)}"
            return Findings(tool, 0, 0, why), proc.returncode, "failed"
        return found, proc.returncode, None

    # The tools check correctness, not time: they run side by side, each its own process
    # group with its own time limit.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(tools) or 1) as pool:
        results = list(pool.map(sanitize_with, tools))
    rows = []
    for tool, (f, code, verdict) in zip(tools, results, strict=True):
        if verdict is None:
            if f.errors == 0 and f.warnings == 0:
                verdict = "clean"
            elif tool in known:
                verdict = "known"
            elif expect is not None:
                verdict = "expected"
            else:
                verdict = "findings"
        rows.append(_row(project, study, variant, size, tool, f, code, verdict, facts, log))
    return rows


def _row(project, study, variant, size, tool, f: Findings, code, verdict, facts, log) -> dict:
    """One row of the sanitizer table: ``tool`` on ``variant`` at ``size``."""
    from kernelbook import problems
    from kernelbook.provenance import sha256_source

    label = problems.get(study.problem).label(size)
    log(
        f"{study.name}/{variant.id} at {label}: {tool}: {f.errors} errors, {f.warnings} "
        f"warnings -> {verdict}" + (f" ({f.first})" if f.first else "")
    )
    return {
        "study": study.name,
        "variant": variant.id,
        **size,
        "size": label,
        "tool": tool,
        "errors": f.errors,
        "warnings": f.warnings,
        "first_finding": f.first,
        "verdict": verdict,
        "known_reason": variant.known_findings.get(tool),
        "exit_code": code,
        "gpu_name": facts["gpu_name"],
        "gpu_uuid": facts["gpu_uuid"],
        "source_sha256": sha256_source(project.root / variant.source),
        "git_commit": provenance.git_commit(project.root),
        "measured_at": provenance.now(),
    }


def split_runs(entries) -> tuple[list, list]:
    """(together, alone): the sanitize entries (job, variant, cubin, size, skip, failed,
    expect) that run in one process a tool, and those that run on their own: a variant the
    bench found failing (skip, failed), one whose findings are expected (a negative control)
    or known. Fewer than two together gain nothing: then all run alone."""
    together, alone = [], []
    for e in entries:
        _, variant, _, _, skip, failed, expect = e
        plain = skip is None and failed is None and expect is None and not variant.known_findings
        (together if plain else alone).append(e)
    if len(together) < 2:
        return [], together + alone
    return together, alone


def sanitize_study(
    project,
    study,
    entries,
    slot_uuid,
    tools=TOOLS,
    log=lambda s: print(s, file=sys.stderr, flush=True),
) -> list[dict]:
    """Each tool on a study's variants in one process (the launch helper runs a plan of every
    variant at its sanitize size, --exact): ``entries`` are (job, variant, cubin, size, skip,
    failed, expect), as sanitize_variant takes them, ``job`` the declared variant each row is
    labelled with; that process has timeouts.sanitizer_s for each variant it holds. A tool
    that finds nothing there, and exits 0, is clean for every variant of the run; one that
    finds anything, fails or runs past its limit is run again on each
    variant alone (sanitize_variant), so that each finding is its variant's. Variants whose
    findings are expected or known, or that the bench found failing, always run alone."""
    import tempfile
    from concurrent.futures import ThreadPoolExecutor

    from kernelbook import gpu, problems
    from kernelbook.launch.process import plan_command, write_plan

    problem = problems.get(study.problem)
    facts = gpu.device_facts(slot_uuid)
    env = {**os.environ, gpu.SLOT_HELD_ENV: "1", "CUDA_VISIBLE_DEVICES": slot_uuid}
    timeout = tool_limit(project.settings, "sanitizer_s")
    padding = project.settings["sanitize"]["padding_bytes"]
    together, alone = split_runs(entries)

    def study_run(tool, plan) -> bool:
        """Whether ``tool`` ran the whole plan and found nothing."""
        launch = plan_command(project, study, plan, "--exact")
        cmd = sanitizer_command(sanitizer_exe(), tool, launch, padding)
        what = f"{study.name}: {tool} on {len(together)} variants"
        try:
            # each variant keeps its own allowance (timeouts.sanitizer_s a variant)
            proc = run_tool(cmd, timeout=timeout * len(together), what=what,
                            setting="timeouts.sanitizer_s a variant", env=env)  # fmt: skip
            found = parse(tool, proc.stdout + proc.stderr)
        except (ToolTimeout, SanitizeError) as e:
            log(f"{what}: {e}: each variant on its own now")
            return False
        if proc.returncode != 0 or found.errors or found.warnings:
            log(f"{what}: {found.errors} errors, {found.warnings} warnings, exit "
                f"{proc.returncode}: each variant on its own now")  # fmt: skip
            return False
        return True

    rows: list[dict] = []
    redo = list(tools)
    if together:
        with tempfile.TemporaryDirectory() as tmp:
            plan = write_plan(
                Path(tmp) / "plan.json",
                [(v.id, cubin, [problem.label(size)]) for _, v, cubin, size, *_ in together],
            )
            with ThreadPoolExecutor(max_workers=len(tools) or 1) as pool:
                clean = dict(zip(tools, pool.map(lambda t: study_run(t, plan), tools), strict=True))
        redo = [t for t in tools if not clean[t]]
        for job, variant, _, size, *_ in together:
            for tool in tools:
                if clean[tool]:
                    row = _row(project, study, variant, size, tool, Findings(tool, 0, 0, None),
                               0, "clean", facts, log)  # fmt: skip
                    rows.append({**row, "variant": job})
    for job, variant, cubin, size, *_ in together if redo else []:
        part = sanitize_variant(project, study, variant, cubin, size, slot_uuid,
                                tools=tuple(redo), log=log)  # fmt: skip
        rows += [{**r, "variant": job} for r in part]
    for job, variant, cubin, size, skip, failed, expect in alone:
        part = sanitize_variant(project, study, variant, cubin, size, slot_uuid, tools=tools,
                                log=log, skip=skip, expect=expect, failed=failed)  # fmt: skip
        rows += [{**r, "variant": job} for r in part]
    order = {t: i for i, t in enumerate(tools)}
    return sorted(rows, key=lambda r: (r["variant"], order.get(r["tool"], 0)))
