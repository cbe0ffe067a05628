#!/usr/bin/env bash
# Run kernelbook on a GPU host that has no network access (docs/offline-gpu-host.md): install
# the carried wheel folder .whl/ (built by tools/offline/wheelhouse.sh) into a site folder,
# then run the given command with that folder and the library on PYTHONPATH. Without .whl/
# it only sets PYTHONPATH, so it is harmless on a host that has everything.
#
#   tools/offline/gpu-host.sh python3 -m snakemake --cores 1 --keep-going all
#   tools/offline/gpu-host.sh python3 -m pytest -m gpu
#
# KERNELBOOK_SITE (default /tmp/kernelbook-site) is where the wheels are installed, once per
# set of wheels. KERNELBOOK_GIT_COMMIT, if set, is recorded as the commit measured.
set -euo pipefail
cd "$(dirname "$0")/../.."
site=${KERNELBOOK_SITE:-/tmp/kernelbook-site}
if [ -d .whl ]; then
  stamp=$site/.kernelbook-wheels
  if [ "$(ls .whl | sha256sum)" != "$(cat "$stamp" 2>/dev/null)" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$site" .whl/*.whl
    ls .whl | sha256sum > "$stamp"
  fi
  export PATH=$site/bin:$PATH
fi
export PYTHONPATH=$site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
exec "$@"
