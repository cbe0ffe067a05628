"""Run an analysis notebook (analysis/*.ipynb) for a rule, or for publish without Snakemake.

The notebook reads a ``snakemake`` object (``input``, ``output``, ``params``, ``scriptdir``),
set by a first cell inserted here as Snakemake's ``notebook:`` directive does; the executed
copy, outputs included, is written where the rule keeps its log. Run here rather than by
that directive, which probes for papermill through the shell on every job (printing
``papermill: command not found`` where it is not installed) and starts the kernel over TCP
(ipykernel then warns, on every job, that the traffic is not encrypted). This kernel talks
over IPC sockets inside a private temporary folder.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

PREAMBLE_TAG = "snakemake-job-properties"  # the tag Snakemake's directive gives its cell


def run(notebook: str | Path, snakemake: Any, executed: str | Path | None = None) -> None:
    """Execute ``notebook`` with ``snakemake`` set; write the executed copy to ``executed``.

    ``snakemake.scriptdir`` becomes the notebook's folder (as under the directive), so the
    notebook finds the library of its own checkout. A failing cell raises, naming it; the
    executed copy is written either way.
    """
    try:
        import nbformat
        from nbclient import NotebookClient
        from traitlets.config import Config
    except ImportError:  # no Jupyter here (a GPU host often has none): run it in this process
        return run_in_process(notebook, snakemake, executed)

    notebook = Path(notebook).resolve()
    nb = nbformat.read(notebook, as_version=4)
    snakemake.scriptdir = str(notebook.parent)
    src = str(
        Path(__file__).resolve().parents[2]
    )  # the folder holding this library, for unpickling
    cell = nbformat.v4.new_code_cell(
        f"import pickle, sys\nsys.path.insert(0, {src!r})\n"
        f"snakemake = pickle.loads({pickle.dumps(snakemake)!r})"
    )
    cell.metadata["tags"] = [PREAMBLE_TAG]
    nb.cells.insert(0, cell)
    kernel = nb.metadata.get("kernelspec", {}).get("name", "python3")
    with tempfile.TemporaryDirectory(prefix="kernelbook-nb-") as tmp:
        config = Config()
        config.KernelManager.transport = "ipc"
        config.KernelManager.ip = os.path.join(tmp, "k")
        # the client owns its kernel manager, so it shuts the kernel down when done
        client = NotebookClient(nb, config=config, timeout=None, kernel_name=kernel)
        env = {**os.environ, "IPYTHONDIR": tmp}  # no user profile or startup files
        try:
            client.execute(cwd=os.getcwd(), env=env)
        finally:
            if executed is not None:
                Path(executed).parent.mkdir(parents=True, exist_ok=True)
                nbformat.write(nb, executed)


class CellError(RuntimeError):
    """A cell of an analysis notebook raised; the message names the notebook and the cell."""


def run_in_process(notebook: str | Path, snakemake: Any, executed: str | Path | None = None):
    """Execute the notebook's code cells in this process, in order, in one namespace that
    holds ``snakemake``: where no Jupyter kernel is installed. The copy written to
    ``executed`` holds what each cell printed; a failing cell raises CellError naming it,
    after that copy is written."""
    notebook = Path(notebook).resolve()
    nb = json.loads(notebook.read_text())
    snakemake.scriptdir = str(notebook.parent)
    namespace: dict[str, Any] = {"__name__": "__main__", "snakemake": snakemake}
    failed = None
    for i, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        source = "".join(cell.get("source", []))
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                exec(compile(source, f"{notebook.name}, cell {i}", "exec"), namespace)
        except Exception as e:
            failed = CellError(f"{notebook.name}, cell {i}: {type(e).__name__}: {e}")
            failed.__cause__ = e
        outputs = [{"output_type": "stream", "name": "stdout", "text": printed.getvalue()}]
        cell["outputs"] = outputs if printed.getvalue() else []
        if failed is not None:
            break
    if executed is not None:
        Path(executed).parent.mkdir(parents=True, exist_ok=True)
        Path(executed).write_text(json.dumps(nb, indent=1) + "\n")
    if failed is not None:
        raise failed


class Named(list):
    """Values in order, also by name (``output[0]``, ``output.figures``, ``input.items()``):
    what the notebooks use of Snakemake's named lists."""

    def __init__(self, named: dict | None = None):
        named = dict(named or {})
        super().__init__(named.values())
        self._named = named

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._named[name]
        except KeyError:
            raise AttributeError(name) from None

    def items(self):
        return self._named.items()

    def keys(self):
        return self._named.keys()

    def get(self, name, default=None):
        return self._named.get(name, default)


def job(inputs: dict, outputs: dict, params: dict, log: dict | None = None) -> SimpleNamespace:
    """A ``snakemake`` object for a run outside Snakemake (publish --render)."""

    def paths(d):
        return Named({k: str(v) for k, v in d.items()})

    return SimpleNamespace(
        input=paths(inputs),
        output=paths(outputs),
        params=Named(params),
        log=paths(log or {}),
        wildcards=Named(),
        scriptdir="",
    )
