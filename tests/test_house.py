"""The library's shape: stage packages with one job each, imports pointing downwards, no
cycle, no module over 600 lines, nothing of Snakemake, every results/ path composed in
kernelbook.layout. Read from the sources (ast), so a violation fails here, on the CPU."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "kernelbook"
MAX_LINES = 600

# What each part of the library may import (besides itself and the standard library).
# problems, procs, provenance, layout, tables, gate, tune and runlog are the shared ground.
SHARED = {"problems", "procs", "provenance", "layout", "tables", "gate", "tune", "runlog"}
ALLOWED = {
    "cli": None,  # the command line may import everything
    "__main__": {"cli"},
    "measure": {"launch", "build", "config", "gpu", *SHARED},
    "profile": {"launch", "config", "gpu", *SHARED},
    "launch": {"build", "config", "gpu", *SHARED},
    "build": {"config", *SHARED},
    # rendering runs without a GPU: never measure, gpu, profile or launch; it may compile
    # (the staleness check asks whether an edited kernel still builds to what was measured)
    "report": {"config", "build", *SHARED},
    "config": {"problems"},
    "problems": set(),
    "tables": {"config"},
    "layout": set(),
    "gate": {"tables"},
    "tune": {"problems"},
    "gpu": {"provenance", "locks"},
    "locks": set(),  # the GPU locks: files and flock, nothing else
    "provenance": set(),
    "procs": set(),
    "slurm": set(),
    "jobserver": set(),
    "runlog": set(),  # imports the library by name (its preload), never from it
    "ledger": set(),
}


def modules() -> dict[str, Path]:
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        parts = p.relative_to(SRC).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = p
    return out


MODULES = modules()


def _resolve(name: str) -> str:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def imports_of(path: Path) -> set[str]:
    """The kernelbook modules a source imports, at its top level or inside functions."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kernelbook"):
            for a in node.names:
                full = f"{node.module}.{a.name}"
                out.add(full if full in MODULES else _resolve(node.module))
        elif isinstance(node, ast.Import):
            out |= {_resolve(a.name) for a in node.names if a.name.startswith("kernelbook")}
    return out - {"kernelbook"}


GRAPH = {name: imports_of(p) - {name} for name, p in MODULES.items()}


def part(module: str) -> str:
    return module.split(".")[1] if "." in module else module


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one node: each is an import cycle."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_between_modules_or_packages():
    assert strongly_connected(GRAPH) == []
    packages: dict[str, set[str]] = {}
    for a, deps in GRAPH.items():
        packages.setdefault(part(a), set()).update(part(b) for b in deps if part(b) != part(a))
    assert strongly_connected(packages) == []


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m != "kernelbook"))
def test_imports_point_downwards(module):
    allowed = ALLOWED[part(module)]
    if allowed is None:
        return
    wrong = sorted(b for b in GRAPH[module] if part(b) != part(module) and part(b) not in allowed)
    assert wrong == [], f"{module} may import only {sorted(allowed)}"


def test_the_cycle_finder_finds_a_cycle():
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("path", sorted(PKG.rglob("*.py")), ids=lambda p: str(p.relative_to(SRC)))
def test_no_module_over_600_lines(path):
    assert len(path.read_text().splitlines()) <= MAX_LINES


@pytest.mark.parametrize("init", sorted(PKG.rglob("__init__.py")), ids=lambda p: p.parent.name)
def test_every_package_states_its_job(init):
    doc = ast.get_docstring(ast.parse(init.read_text()))
    assert doc, f"{init} has no docstring"


def test_the_library_imports_nothing_of_snakemake():
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] + [getattr(node, "module", "") or ""]
                assert not any(n.split(".")[0] == "snakemake" for n in names), name


# A path under results/ or worklogs/ composed outside layout: a string that is a path
# ("results/x", no spaces: not prose) or an f-string with a folder of the results layout.
PATH_WORD = re.compile(r"^(results|worklogs)/\S*$")
LAYOUT_FOLDER = re.compile(r"/(build|bench|tuned|sweep|samples|logs|benchmarks|data)/")


def spelled_paths(tree: ast.AST) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if PATH_WORD.match(node.value):
                out.append(node.value)
        elif isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
            if " " not in text and LAYOUT_FOLDER.search(text):
                out.append(text)
    return out


def test_only_layout_composes_results_paths():
    spelled = {
        name: found
        for name, path in MODULES.items()
        if name != "kernelbook.layout" and (found := spelled_paths(ast.parse(path.read_text())))
    }
    assert spelled == {}


def test_the_path_finder_finds_a_spelled_path():
    tree = ast.parse('a = f"{r}/{gpu}/{study}/bench/{v}.parquet"\nb = "results/build"\nc = "see x"')
    assert spelled_paths(tree) == ["{}/{}/{}/bench/{}.parquet", "results/build"]


def test_auto_workers_are_four_for_the_gpu_tier_on_a_gpu_machine(monkeypatch):
    """`-n auto` gives the GPU tier (a run that selects gpu tests, on a machine with a GPU)
    conftest.GPU_WORKERS workers; every other run, xdist's default (None: one a core)."""
    import conftest

    class Config:
        def __init__(self, expr):
            self.expr = expr

        def getoption(self, name, default=None):
            return self.expr if name == "markexpr" else default

    for found in (True, False):
        monkeypatch.setattr(conftest, "has_gpu", lambda found=found: found)
        for expr in ("gpu", "gpu and slow", "slow and gpu", "not gpu", "not slow", ""):
            want = 4 if found and expr.startswith(("gpu", "slow and")) else None
            assert conftest.pytest_xdist_auto_num_workers(Config(expr)) == want, (found, expr)
