"""A kernel's hot loop, read from its SASS: where the time of a kernel with a main loop goes,
instruction by instruction, without a GPU.

cuobjdump -sass lists each function's instructions with their addresses. A backward branch
(a BRA whose target lies before it) closes a loop that starts at its target; several
branches back to one target (a `continue`) close one loop; the branch to itself that ends
every function (after its EXIT) is none. A loop's work is the floating-point operations of
one pass (flops(): an FFMA 64 a warp, an HMMA.16816 4096, an HGMMA its share of 2 m n k). A
loop that holds a loop doing a tenth of its work or more is a loop around the main one (a
persistent grid's tile loop, with the main loop, its peeled passes and the epilogue; a
stream-K segment loop with two copies of the main loop) and is not a candidate. Of the
others, the hot loop is the one with the most work; without math, the most memory
instructions (a memory-bound kernel's loop is loads and stores); then the fewest
instructions (of two copies of a loop, one with bounds checks and one without, the lean one:
the one a launch inside the matrices runs). A main loop may hold small loops of its own (the
spin of an mbarrier wait, an elect loop): they count as its code, each instruction once.

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
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

_FUNC = re.compile(r"^\s*Function : (\S+)")
_INSN = re.compile(
    r"^\s*/\*(?P<addr>[0-9a-f]{4,})\*/\s+(?P<pred>@!?U?P[T0-9]+\s+)?"
    r"(?P<op>[A-Z][A-Za-z0-9_.]*)(?P<args>[^;]*);"
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
# ptxas's idiom for a register move on the MMA pipe: an HFMA2 that does no math
MOVE = "HFMA2.MMA"


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
        return sum(base(i.op) in kinds and i.op != MOVE for i in self.insns)

    @property
    def work(self) -> int:
        """Floating-point operations of one pass, a warp's share (flops())."""
        return sum(flops(i.op) for i in self.insns)

    @property
    def score(self) -> tuple[int, int, int]:
        """Most work; without math, most memory instructions; then the fewest instructions
        (the tightest loop around that work)."""
        work = self.work
        return (work, 0 if work else self.count(MEMORY), -len(self.insns))

    def holds(self, other: Loop) -> bool:
        return other is not self and self.start <= other.start and other.end <= self.end


_GMMA = re.compile(r"^[HIQ]GMMA\.(\d+)x(\d+)x(\d+)")  # HGMMA.64x128x16: a warpgroup's
# a warp instruction's operations: 32 lanes, an FMA 2 and an add or a multiply 1 a lane,
# twice that for a packed pair
_LANE_OPS = {
    "FFMA": 64, "DFMA": 64, "FMUL": 32, "FADD": 32, "DMUL": 32, "DADD": 32,
    "HFMA2": 128, "FFMA2": 128, "HMUL2": 64, "HADD2": 64, "FMUL2": 64, "FADD2": 64,
}  # fmt: skip


def flops(op: str) -> int:
    """The floating-point (or integer MMA) operations one warp's instruction does: 2 a lane
    for an FMA, 1 for an add or a multiply, twice that for a packed pair; an MMA's 2 m n k
    (HMMA.16816: m16 n8 k16; a warpgroup MMA's, HGMMA.64x128x16, shared by its 4 warps); 0
    for anything else (ptxas's HFMA2.MMA register move included)."""
    b = base(op)
    if op == MOVE or b not in MATH:
        return 0
    if b in ("HGMMA", "IGMMA", "QGMMA"):
        g = _GMMA.match(op)
        return 2 * int(g[1]) * int(g[2]) * int(g[3]) // 4 if g else 0
    if b in ("HMMA", "IMMA", "DMMA", "BMMA"):
        shape = op.split(".")[1] if "." in op else ""
        if shape.startswith("16") and len(shape) >= 4:  # 16816, 1688, 16832: m16 n8 k..
            m, n, k = 16, int(shape[2]), int(shape[3:])
        elif len(shape) == 3 and shape.isdigit():  # 884
            m, n, k = (int(c) for c in shape)
        else:
            return 0
        return 2 * m * n * k
    return _LANE_OPS.get(b, 0)


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


def function_loops(function: str, insns: list[Insn]) -> list[Loop]:
    """The function's loops, in address order (nested ones each on their own)."""
    ends: dict[int, int] = {}  # loop start -> its last backward branch
    for i in insns:
        if base(i.op) != "BRA":
            continue
        t = _TARGET.search(i.args)
        if t and int(t.group(1), 16) < i.addr:
            start = int(t.group(1), 16)
            ends[start] = max(ends.get(start, i.addr), i.addr)
    return [
        Loop(function, s, e, [i for i in insns if s <= i.addr <= e])
        for s, e in sorted(ends.items())
    ]


def hot_loop(text: str) -> tuple[Loop | None, int]:
    """The hot loop of a cubin's SASS (see the module's docstring) and how many loops its
    functions have; (None, 0) for code without a loop."""
    loops = [lp for f, insns in parse(text).items() for lp in function_loops(f, insns)]
    if not loops:
        return None, 0
    # a loop around the main one (a persistent grid's tile loop with the main loop, its
    # peeled passes and its epilogue; a stream-K segment loop with two copies of the main
    # loop) is not a candidate: one that holds a loop doing a tenth of its work or more
    inner = [lp for lp in loops if not any(lp.holds(o) and _share(o, lp) >= 0.1 for o in loops)]
    return max(inner, key=lambda lp: lp.score), len(loops)


def _share(inner: Loop, outer: Loop) -> float:
    """The part of the outer loop's work (or, without math, its memory instructions) that a
    loop inside it does."""
    if outer.work:
        return inner.work / outer.work
    mem = outer.count(MEMORY)
    return inner.count(MEMORY) / mem if mem else 0.0


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
        "loops": n,
    }
    return [
        {**common, "opcode": op, "op": base(op), "kind": kind(op), "count": c, "reuse": reuse[op]}
        for op, c in sorted(loop.ops.items(), key=lambda kv: (-kv[1], kv[0]))
    ]


def kind(op: str) -> str:
    if op == MOVE:
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
    "study", "variant", "cubin_sha256", "function", "start", "end", "instructions", "loops",
    "opcode", "op", "kind", "count", "reuse",
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
        except CompileError as e:  # no loop to show for it; the others are still read
            print(f"kernelbook loops: {e}", file=sys.stderr)
            return []
        digest = hashlib.sha256(cubin.read_bytes()).hexdigest()
        return rows(study, cubin.parent.name, text, digest)

    with ThreadPoolExecutor(max_workers=8) as pool:
        found = [r for rs in pool.map(one, cubins) for r in rs]
    return pd.DataFrame(found, columns=list(COLUMNS))
