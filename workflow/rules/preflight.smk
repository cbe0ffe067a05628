# Read before `configfile:`: Snakemake's own reader says only "not valid JSON or YAML" of a
# broken config/config.yaml; kernelbook's names the file, the line and the column.

import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "src"))

from kernelbook import config as kb_config  # noqa: E402

if Path("config/config.yaml").is_file():
    try:
        kb_config.read_yaml(Path("config/config.yaml"))
    except kb_config.ConfigError as e:
        print(f"kernelbook: {e}", file=sys.stderr)
        sys.exit(1)
