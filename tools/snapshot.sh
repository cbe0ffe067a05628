#!/usr/bin/env bash
# What a GPU run has made so far, as a few files a host's command can hand back (each well
# under the device tool's 16 MiB a file), so that a run cut short, or a machine that goes
# away, resumes from them elsewhere (tools/restore-snapshot.py) without re-measuring:
#
#   tools/snapshot.sh OUT_DIR
#
#   results.txz   results/ (every job's tables, samples and benchmark files), less the Nsight
#                 Compute reports (large; each profile job's table holds what the page uses)
#   build.txz     results/build: the cubins the measured rows name by hash
#   state.txz     .snakemake/metadata and .snakemake/incomplete: what Snakemake knows of each
#                 output, and which were still being written when the snapshot was taken
#   snapshot.json the commit the tree was copied from (KERNELBOOK_GIT_COMMIT, else git's)
#
# The parts are xz-compressed (all cores): a whole book's snapshot is then about 14 MB
# instead of gzip's 30 (cubins shrink to a third of gzip's size), small enough to travel
# back to the next machine beside the wheels. Without xz on the PATH they are gzip (.tgz);
# tools/restore-snapshot.py reads either.
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
if command -v xz > /dev/null; then
  ext=txz
  pack() { local name=$1; shift; tar cf - "$@" | xz -T0 -6 > "$out/$name.txz.part"; }
else
  ext=tgz
  pack() { local name=$1; shift; tar czf "$out/$name.tgz.part" "$@"; }
fi
# a part is written under a temporary name and renamed into place, and the other kind of
# the same part (from an earlier snapshot into OUT_DIR) removed, so that OUT_DIR never holds
# a half-written part or two versions of one
part() {
  local name=$1
  pack "$@"
  mv "$out/$name.$ext.part" "$out/$name.$ext"
  rm -f "$out/$name.$([ "$ext" = txz ] && echo tgz || echo txz)"
}
part results --exclude='*.ncu-rep' --exclude='results/build' results
if [ -d results/build ]; then part build results/build; fi
state=()
for d in .snakemake/metadata .snakemake/incomplete; do [ -d "$d" ] && state+=("$d"); done
if [ ${#state[@]} -gt 0 ]; then part state "${state[@]}"; fi
printf '{"commit": "%s", "made_at": "%s"}\n' "$commit" "$(date -u +%FT%TZ)" > "$out/snapshot.json"
