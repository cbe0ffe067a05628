# Runs a rule's analysis notebook (params.notebook) through kernelbook.report.notebook; the executed
# copy is the rule's log (log.notebook). `snakemake` is set by Snakemake's script preamble.
import sys
from pathlib import Path

snakemake = globals()["snakemake"]
sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))

from kernelbook.report import notebook  # noqa: E402

notebook.run(snakemake.params.notebook, snakemake, snakemake.log.notebook)
