#!/usr/bin/env bash
# Run kernelbook on a GPU host that has no network access (see ../shared/gpu/README.md of the
# team's workspace): install the carried wheel folder .whl/ into /tmp/site, then run the
# given command with the library on PYTHONPATH. Everything the host lacks travels in .whl/.
#
#   scripts/gpu-host.sh python3 -m snakemake --cores 1 --keep-going all
#   scripts/gpu-host.sh python3 -m pytest -m gpu
#
# KERNELBOOK_GIT_COMMIT, if set, is recorded as the commit where the tree has no .git.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -d .whl ]; then
  stamp=/tmp/site/.kernelbook-wheels
  if [ "$(ls .whl | sha256sum)" != "$(cat "$stamp" 2>/dev/null)" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
    ls .whl | sha256sum > "$stamp"
  fi
  export PATH=/tmp/site/bin:$PATH
fi
export PYTHONPATH=/tmp/site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
exec "$@"
