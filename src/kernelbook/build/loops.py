"""A kernel's hot loop, read from its SASS: where the time of a kernel with a main loop goes,
instruction by instruction, without a GPU.

cuobjdump -sass lists each function's instructions with their addresses. A backward branch
(a BRA whose target lies at or before it) closes a loop that starts at its target; several
branches back to one target (a `continue`) close one loop. A loop is innermost when no other
loop lies inside it. Of a cubin's innermost loops, the hot one is the one with the most math
instructions (FFMA, HMMA, HGMMA, ...), then the most memory instructions (a memory-bound
kernel's loop is loads and stores), then the fewest instructions in all (of two copies of a
loop, one with bounds checks and one without, the lean one: the one a launch inside the
matrices runs).

What a kernel engineer reads off it: the instructions an iteration and their mix (the math
share of the issue slots the loop can use at best), its shared and global loads and stores,
its barriers, and how many math instructions carry an operand-reuse flag (`.reuse`: the
operand is kept in the reuse cache, so that the next instruction reading it in that slot
takes it from there and not from a register-file bank).

    kernelbook loops sgemm results/build/sgemm/loops.parquet results/build/sgemm/*/kernel.cubin
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

_FUNC = re.compile(r"^\s*Function : (\S+)")
_INSN = re.compile(
    r"^\s*/\*(?P<addr>[0-9a-f]{4,})\*/\s+(?P<pred>@!?U?P[T0-9]+\s+)?"
    r"(?P<op>[A-Z][A-Z0-9_.]*)(?P<args>[^;]*);"
)
_TARGET = re.compile(r"0x([0-9a-f]+)")

# what an instruction is, by its opcode's first word (FFMA of FFMA.FTZ, LDS of LDS.128)
MATH = frozenset(
    {
        "FFMA", "FMUL", "FADD", "FFMA2", "FMUL2", "FADD2", "HFMA2", "HMUL2", "HADD2",
        "DFMA", "DMUL", "DADD", "HMMA", "HGMMA", "IMMA", "IGMMA", "QGMMA", "DMMA", "BMMA",
    }
)  # fmt: skip
SHARED_LOAD = frozenset({"LDS", "LDSM"})
SHARED_STORE = frozenset({"STS", "STSM"})
GLOBAL_LOAD = frozenset({"LDG", "LDGSTS", "LD", "UTMALDG", "UBLKCP", "UTMAPF", "UBLKPF"})
GLOBAL_STORE = frozenset({"STG", "ST", "UTMASTG", "RED", "ATOMG", "UTMAREDG"})
BARRIER = frozenset({"BAR", "SYNCS", "WARPSYNC", "DEPBAR", "LDGDEPBAR", "WARPGROUP"})
MEMORY = SHARED_LOAD | SHARED_STORE | GLOBAL_LOAD | GLOBAL_STORE


def base(op: str) -> str:
    return op.split(".", 1)[0]


@dataclass
class Insn:
    addr: int
    op: str  # the full mnemonic: LDS.128, FFMA, BAR.SYNC.DEFER_BLOCKING
    args: str
    predicated: bool

    @property
    def reuse(self) -> bool:
        return ".reuse" in self.args


@dataclass
class Loop:
    function: str
    start: int
    end: int  # the address of its last backward branch
    insns: list[Insn] = field(default_factory=list)

    @property
    def ops(self) -> Counter:
        return Counter(i.op for i in self.insns)

    def count(self, kinds: frozenset) -> int:
        return sum(base(i.op) in kinds and i.op != "HFMA2.MMA" for i in self.insns)

    @property
    def score(self) -> tuple[int, int, int]:
        return (self.count(MATH), self.count(MEMORY), -len(self.insns))


def parse(text: str) -> dict[str, list[Insn]]:
    """cuobjdump -sass output: each function's instructions, in address order."""
    out: dict[str, list[Insn]] = {}
    current = None
    for line in text.splitlines():
        m = _FUNC.match(line)
        if m:
            current = out.setdefault(m.group(1), [])
            continue
        m = _INSN.match(line)
        if m and current is not None:
            current.append(Insn(int(m["addr"], 16), m["op"], m["args"].strip(), bool(m["pred"])))
    return out


def innermost_loops(function: str, insns: list[Insn]) -> list[Loop]:
    """The function's loops that hold no other loop, in address order."""
    ends: dict[int, int] = {}  # loop start -> its last backward branch
    for i in insns:
        if base(i.op) != "BRA":
            continue
        t = _TARGET.search(i.args)
        if t and int(t.group(1), 16) <= i.addr:
            start = int(t.group(1), 16)
            ends[start] = max(ends.get(start, i.addr), i.addr)
    spans = sorted(ends.items())
    inner = [
        (s, e)
        for s, e in spans
        if not any((s2, e2) != (s, e) and s <= s2 and e2 <= e for s2, e2 in spans)
    ]
    return [Loop(function, s, e, [i for i in insns if s <= i.addr <= e]) for s, e in inner]


def hot_loop(text: str) -> tuple[Loop | None, int]:
    """The hot loop of a cubin's SASS (see the module's docstring) and how many innermost
    loops its functions have; (None, 0) for code without a loop."""
    loops = [lp for f, insns in parse(text).items() for lp in innermost_loops(f, insns)]
    if not loops:
        return None, 0
    return max(loops, key=lambda lp: lp.score), len(loops)


def rows(study: str, variant: str, text: str, cubin_sha256: str = "") -> list[dict]:
    """The loops table's rows for one cubin: one a distinct opcode of its hot loop, each with
    the loop's place and size, how many of that opcode carry a reuse flag, and its kind."""
    loop, n = hot_loop(text)
    if loop is None:
        return []
    reuse = Counter(i.op for i in loop.insns if i.reuse)
    common = {
        "study": study,
        "variant": variant,
        "cubin_sha256": cubin_sha256,
        "function": loop.function,
        "start": f"{loop.start:#06x}",
        "end": f"{loop.end:#06x}",
        "instructions": len(loop.insns),
        "innermost_loops": n,
    }
    return [
        {**common, "opcode": op, "op": base(op), "kind": kind(op), "count": c, "reuse": reuse[op]}
        for op, c in sorted(loop.ops.items(), key=lambda kv: (-kv[1], kv[0]))
    ]


def kind(op: str) -> str:
    if op == "HFMA2.MMA":  # ptxas's idiom for a register move on the MMA pipe, no math
        return "other"
    b = base(op)
    for name, ops in (
        ("math", MATH),
        ("shared load", SHARED_LOAD),
        ("shared store", SHARED_STORE),
        ("global load", GLOBAL_LOAD),
        ("global store", GLOBAL_STORE),
        ("barrier", BARRIER),
    ):
        if b in ops:
            return name
    return "other"


COLUMNS = (
    "study", "variant", "cubin_sha256", "function", "start", "end", "instructions",
    "innermost_loops", "opcode", "op", "kind", "count", "reuse",
)  # fmt: skip


def table(study: str, cubins: list[Path], timeout: float = 120.0) -> pd.DataFrame:
    """The loops table of a study's compiled variants (each cubin's folder names its variant;
    an empty cubin, a build that failed or a variant with no code of its own, is left out)."""
    from kernelbook.build.nvcc import CompileError, sass_text

    def one(cubin: Path) -> list[dict]:
        if not cubin.is_file() or cubin.stat().st_size == 0:
            return []
        try:
            text = sass_text(cubin, timeout, f"{study}/{cubin.parent.name}")
        except CompileError:
            return []  # cuobjdump could not read it: no loop to show, the build says why
        digest = hashlib.sha256(cubin.read_bytes()).hexdigest()
        return rows(study, cubin.parent.name, text, digest)

    with ThreadPoolExecutor(max_workers=8) as pool:
        found = [r for rs in pool.map(one, cubins) for r in rs]
    return pd.DataFrame(found, columns=list(COLUMNS))
