#!/usr/bin/env bash
# Refresh constraints.txt, the lock: every package that `pip install -c constraints.txt -e
# '.[test]'` installs (the project's dependencies, its test and slurm extras, and everything
# they need), each at one exact version, resolved by pip-tools' pip-compile for CPython 3.11
# (CI's) on Linux x86_64.
#
#   tools/lock.sh                          # re-resolve everything at the newest versions
#   tools/lock.sh --upgrade-package NAME   # bump one package, keep the other pins
#   tools/lock.sh --no-upgrade             # after a pyproject.toml edit: keep what still fits
#
# pip-compile resolves through pip, with pip's own configuration, so it sees the same wheels
# `pip install` does (on these machines, torch's CPU build on the local disk). It runs from a
# venv of its own (KERNELBOOK_LOCK_VENV, default /tmp/kernelbook-pip-tools) with a pinned
# pip-tools. Two pins are held whatever the newest versions are (PINS below).
set -euo pipefail
cd "$(dirname "$0")/.."

PIP_TOOLS=pip-tools==7.6.2
# torch 2.13.0: a CPU-only machine takes the CPU build (2.13.0+cpu, no nvidia-* runtime
# wheels) instead of a multi-GB CUDA build; a GPU machine brings its own torch 2.13.0.
# triton 3.6.0: the version the triton variants were written and measured with (its wheel is
# self-contained and installs on a CPU-only machine, where it still compiles for sm_90).
PINS=(torch==2.13.0 triton==3.6.0)
LOCK=constraints.txt

py=${PYTHON:-python3}
ver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$ver" != 3.11 ]; then
  echo "tools/lock.sh: $py is Python $ver; the lock is made with Python 3.11 (CI's)." >&2
  echo "  PYTHON=/path/to/python3.11 tools/lock.sh" >&2
  exit 1
fi
venv=${KERNELBOOK_LOCK_VENV:-/tmp/kernelbook-pip-tools}
if ! "$venv/bin/pip-compile" --version 2>/dev/null | grep -q "version ${PIP_TOOLS#*==}$"; then
  rm -rf "$venv"
  "$py" -m venv "$venv"
  "$venv/bin/python" -m pip install -q "$PIP_TOOLS"
fi

[ $# -gt 0 ] || set -- --upgrade
pin_args=()
for p in "${PINS[@]}"; do pin_args+=(--upgrade-package "$p"); done

CUSTOM_COMPILE_COMMAND=tools/lock.sh "$venv/bin/pip-compile" --quiet \
  --extra test --strip-extras --allow-unsafe \
  --no-emit-index-url --no-emit-find-links --no-emit-trusted-host \
  "${pin_args[@]}" "$@" \
  --output-file "$LOCK" pyproject.toml

# Two edits of pip-compile's output, both to keep the lock portable:
# - `.[test]` names `kernelbook[slurm]`, and pip-compile writes that self-reference as
#   `kernelbook @ file:///<this checkout>` (pip-tools issue #2002): the project is installed
#   by `-e .`, not by the lock, so its line goes.
# - torch's pin loses the local label of the build found here (`+cpu`): `torch==2.13.0`
#   still takes the CPU build on this machine, and accepts a GPU host's CUDA build of 2.13.0.
tmp=$(mktemp)
{
  cat <<'EOF'
# The lock: every package `python3 -m pip install -c constraints.txt -e '.[test]'` installs,
# each at one exact version (CPython 3.11, Linux x86_64). Refresh it with tools/lock.sh
# (pip-tools' pip-compile); do not edit it by hand.
EOF
  awk '
    /^kernelbook @ / { skip = 1; next }
    skip && /^    #/ { next }
    { skip = 0 }
    /^torch==/ { sub(/\+[A-Za-z0-9.]+$/, "") }
    { print }
  ' "$LOCK"
} > "$tmp"
mv "$tmp" "$LOCK"
chmod 644 "$LOCK"
if grep -nE '^[^# ].*(@ |file:)' "$LOCK"; then
  echo "tools/lock.sh: $LOCK holds a direct reference (above); it would not install elsewhere" >&2
  exit 1
fi
# torch's CUDA build (PyPI's, where the CPU build is not at hand) would bring nvidia-* runtime
# wheels that a CPU-only machine does not need; the project's own nvidia-* are these three.
cuda=$(grep -E '^nvidia-' "$LOCK" | grep -vE '^nvidia-(cuda-cuobjdump|cuda-nvdisasm|ml-py)==' || true)
if [ -n "$cuda" ]; then
  echo "tools/lock.sh: torch resolved to a CUDA build, which brings:" $cuda >&2
  echo "  make torch's CPU build visible to pip (pip install torch==2.13.0 takes it) and rerun" >&2
  git checkout -- "$LOCK"
  exit 1
fi
echo "$LOCK: $(grep -cE '^[A-Za-z0-9]' "$LOCK") packages pinned"
