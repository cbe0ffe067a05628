#!/usr/bin/env python3
"""One line a test of a pytest process's JUnit XML, for tools/gpu-tests.sh's summary:

    tools/junit-summary.py REPORT.xml PROCESS_EXIT_STATUS SECONDS NODE_ID...

prints "node id<TAB>status<TAB>seconds<TAB>outcome" for each NODE_ID asked for, in that
order: status 0 passed or skipped, 1 failed or errored, 2 not run (the process ended before
it: a crash, a hang cut by the timeout; or no report at all). seconds is the test's own
time in the report (its set-up included: the first test of a shared fixture carries it).
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def case_key(node_id: str) -> tuple[str, str]:
    """(classname, name) as pytest's JUnit XML writes a node id's test case."""
    path, *inner = node_id.split("::")
    module = path.removesuffix(".py").replace("/", ".")
    return ".".join([module, *inner[:-1]]), inner[-1] if inner else ""


def outcomes(report: Path) -> dict[tuple[str, str], tuple[str, float]]:
    """{(classname, name): (outcome, seconds)} of every test case in the report."""
    try:
        root = ET.parse(report).getroot()
    except (OSError, ET.ParseError):
        return {}
    found = {}
    for case in root.iter("testcase"):
        tags = {child.tag for child in case}
        if tags & {"failure", "error"}:
            outcome = "failed"
        elif "skipped" in tags:
            outcome = "skipped"
        else:
            outcome = "passed"
        key = (case.get("classname", ""), case.get("name", ""))
        # a test that failed in its teardown appears twice: the worse verdict stands
        if found.get(key, ("passed",))[0] != "failed":
            found[key] = (outcome, float(case.get("time") or 0.0))
    return found


def main(argv: list[str]) -> int:
    if len(argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    report, rc, _seconds, *ids = argv
    got = outcomes(Path(report))
    for node in ids:
        outcome, secs = got.get(case_key(node), (f"not run (pytest exit {rc})", 0.0))
        status = {"passed": 0, "skipped": 0, "failed": 1}.get(outcome, 2)
        print(f"{node}\t{status}\t{round(secs)}\t{outcome}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
