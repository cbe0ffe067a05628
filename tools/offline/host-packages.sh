#!/usr/bin/env bash
# Run ON the GPU host: the Python distributions it already has (normalized names, one a
# line), then its interpreter as a comment. Bring the output to where wheelhouse.sh runs:
#
#   tools/offline/host-packages.sh > host-packages.txt        # on the GPU host
#   HOST_PACKAGES=host-packages.txt tools/offline/wheelhouse.sh .whl   # where there is network
set -euo pipefail
python3 -m pip list --format=freeze 2>/dev/null | cut -d= -f1 | tr 'A-Z_.' 'a-z--' | sort -u
python3 -c 'import platform, sys; print(f"# python {sys.version_info[0]}.{sys.version_info[1]} {platform.machine()}")'
