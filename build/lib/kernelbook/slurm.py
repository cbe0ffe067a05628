"""What a batch scheduler refused, said in one line per job (the Snakefile's onerror).

The SLURM executor plugin reports a refused submission inside a long block that quotes the
whole sbatch call; a GPU job refused because no node offers the GPU it asks for deserves a
line that says so, and where to look.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

_REFUSED = re.compile(
    r"Error in rule (?P<rule>\w+):\n"
    r"\s+message: SLURM sbatch failed\. The error message was '(?P<error>.*?)'\.\n"
    r"\s+sbatch call:\n\s+(?P<call>sbatch [^\n]*)"
)


def _flag(call: str, pattern: str) -> str:
    m = re.search(pattern, call)
    return m.group(1) if m else ""


def refusals(text: str) -> list[str]:
    """One line per job whose sbatch submission was refused, from Snakemake's log text."""
    out: list[str] = []
    for m in _REFUSED.finditer(text):
        rule, call = m["rule"], m["call"].split(' --wrap="')[0]
        error = re.sub(r"^(sbatch: error: )?(Batch job submission failed: )?", "", m["error"])
        comment = _flag(call, r"--comment (\S+)")
        what = comment.split("_wildcards_", 1)[1] if "_wildcards_" in comment else ""
        partition = _flag(call, r" -p '?([^' ]+)'?")
        where = f" in partition {partition}" if partition else ""
        gpus = _flag(call, r"(--gpus=\S+)") or _flag(call, r"(--gres=\S*gpu\S*)")
        job = rule + (f" ({what})" if what else "")
        if gpus:
            line = (
                f"kernelbook: the scheduler refused GPU job {job} at submission: {error} "
                f"(it asked {gpus}{where}): has a node there such a GPU? "
                "`sinfo -o '%P %G'` lists each partition's GPUs; choose "
                "--config gpu_model=<one of their types> or KERNELBOOK_SLURM_GPU_PARTITION"
            )
        else:
            line = f"kernelbook: the scheduler refused job {job} at submission: {error}{where}"
        if line not in out:
            out.append(line)
    return out


def explain(logs, file=None) -> list[str]:
    """Print :func:`refusals` of Snakemake's log file(s) (nothing when there are none)."""
    if isinstance(logs, (str, Path)):
        logs = [logs]
    text = ""
    for log in logs or ():
        try:
            text += Path(log).read_text(errors="replace")
        except OSError:
            continue
    lines = refusals(text)
    for line in lines:
        print(line, file=file or sys.stderr)
    return lines
