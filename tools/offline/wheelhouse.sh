#!/usr/bin/env bash
# Build the wheel folder a GPU host without network access installs from (run it where there
# is network; docs/offline-gpu-host.md):
#
#   tools/offline/wheelhouse.sh OUT_DIR [REQUIREMENT ...]
#
# Requirements default to tools/offline/requirements.txt. Every dependency is resolved and
# kept as a wheel, except the distributions named in HOST_PACKAGES (a file written on the
# host by tools/offline/host-packages.sh): those stay the host's own builds. Compiled wheels
# are fetched for the host's interpreter: TARGET_PY (default: the python of HOST_PACKAGES,
# else 3.12), x86_64 manylinux. The wheels of tools/offline/requirements-gpu-host.txt
# (cupti-python) are fetched alone, without their dependencies, which are the host's CUDA
# stack (GPU_HOST_REQUIREMENTS names another file, or none with an empty value). OUT_DIR
# gets MANIFEST.txt (sha256 of every wheel).
#
# LEAVE_OUT (default: pulp) names distributions left out although required: pulp is the LP
# solver of Snakemake's ILP scheduler, 16 MB of bundled solver binaries; without it Snakemake
# schedules greedily, and the folder stays small enough to travel with a checkout to a host
# that limits what a command may bring (the device tool's 64 MiB, with the checkout).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: tools/offline/wheelhouse.sh OUT_DIR [REQUIREMENT ...]}
shift
reqs=("$@")
if [ ${#reqs[@]} -eq 0 ]; then
  mapfile -t reqs < <(sed -e 's/#.*//' -e 's/[[:space:]]*$//' "$here/requirements.txt" | grep .)
fi
host=${HOST_PACKAGES:-}
keep_out=""
py=${TARGET_PY:-}
if [ -n "$host" ]; then
  keep_out=$(grep -v '^#' "$host" | tr 'A-Z_.' 'a-z--')
  [ -n "$py" ] || py=$(sed -n 's/^# python \([0-9.]*\) .*/\1/p' "$host")
fi
py=${py:-3.12}
abi=cp${py/./}
norm() { tr 'A-Z_.' 'a-z--' <<< "$1"; }
leave_out=$(tr ' ,' '\n\n' <<< "${LEAVE_OUT-pulp}" | grep . | tr 'A-Z_.' 'a-z--' || true)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
# 1. resolve and build every requirement with its dependencies (sdists become wheels)
python3 -m pip wheel -q --wheel-dir "$work" "${reqs[@]}"
# 2. keep what the host lacks: pure wheels as they are, compiled ones for the host's python
kept=0 skipped=0
for whl in "$work"/*.whl; do
  file=$(basename "$whl")
  name=${file%%-*}
  version=$(cut -d- -f2 <<< "$file")
  if [ -n "$keep_out" ] && grep -qxF "$(norm "$name")" <<< "$keep_out"; then
    skipped=$((skipped + 1))
    continue
  fi
  if [ -n "$leave_out" ] && grep -qxF "$(norm "$name")" <<< "$leave_out"; then
    echo "wheelhouse.sh: left out $file (LEAVE_OUT)"
    continue
  fi
  case $file in
    *-none-any.whl | *-abi3-*.whl) cp "$whl" "$out/" ;;
    *)
      python3 -m pip download -q --no-deps --only-binary=:all: --dest "$out" \
        --python-version "$py" --implementation cp --abi "$abi" \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 "$name==$version"
      ;;
  esac
  kept=$((kept + 1))
done
# 2b. wheels whose dependencies are the host's own CUDA stack: fetched alone
gpu_reqs=${GPU_HOST_REQUIREMENTS-$here/requirements-gpu-host.txt}
if [ -n "$gpu_reqs" ]; then
  while read -r req; do
    python3 -m pip download -q --no-deps --only-binary=:all: --dest "$out" \
      --python-version "$py" --implementation cp --abi "$abi" \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 "$req"
    kept=$((kept + 1))
  done < <(sed -e 's/#.*//' -e 's/[[:space:]]*$//' "$gpu_reqs" | grep .)
fi
# 3. every compiled wheel must match the host's interpreter
wrong=$(ls "$out" | grep -E -- '-cp3[0-9]+-cp3[0-9]+' | grep -v -- "-$abi-$abi-" || true)
if [ -n "$wrong" ]; then
  echo "wheelhouse.sh: these wheels are not for python $py ($abi):" >&2
  echo "$wrong" >&2
  exit 1
fi
(cd "$out" && sha256sum -- *.whl > MANIFEST.txt)
echo "wheelhouse.sh: $kept wheel(s) in $out for python $py ($skipped left to the host)"
