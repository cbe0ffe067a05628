#!/usr/bin/env bash
# What a GPU run has made so far, as a few files a host's command can hand back (each well
# under the device tool's 16 MiB a file), so that a run cut short, or a machine that goes
# away, resumes from them elsewhere (tools/restore-snapshot.py) without re-measuring:
#
#   tools/snapshot.sh OUT_DIR
#
#   results.tgz   results/ (every job's tables, samples and benchmark files), less the Nsight
#                 Compute reports (large; each profile job's table holds what the page uses)
#   build.tgz     results/build: the cubins the measured rows name by hash
#   state.tgz     .snakemake/metadata and .snakemake/incomplete: what Snakemake knows of each
#                 output, and which were still being written when the snapshot was taken
#   snapshot.json the commit the tree was copied from (KERNELBOOK_GIT_COMMIT, else git's)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -ne 1 ]; then
  echo "usage: $0 OUT_DIR" >&2
  exit 2
fi
out=$1
mkdir -p "$out"
commit=${KERNELBOOK_GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
[ -d results ] || { echo "$0: no results/ to snapshot" >&2; exit 1; }
tar czf "$out/results.tgz" --exclude='*.ncu-rep' --exclude='results/build' results
if [ -d results/build ]; then tar czf "$out/build.tgz" results/build; fi
state=()
for d in .snakemake/metadata .snakemake/incomplete; do [ -d "$d" ] && state+=("$d"); done
if [ ${#state[@]} -gt 0 ]; then tar czf "$out/state.tgz" "${state[@]}"; fi
printf '{"commit": "%s", "made_at": "%s"}\n' "$commit" "$(date -u +%FT%TZ)" > "$out/snapshot.json"
