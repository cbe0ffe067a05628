#!/usr/bin/env bash
# Run the GPU tests one pytest process per test file (its selected tests in one go), so that
# a session cut off mid-way still has a verdict for every file that finished, while the tests
# of a file still share what they share in one process (one `kernelbook bench` of all of a
# study's variants, its compiled kernels). Tests whose node id matches one of the PRIORITY
# patterns (grep -E, in order) run first, the rest after them in collection order; a file's
# tests run together where they come one after another in that order.
#
#   tools/gpu-tests.sh [PRIORITY...]
#   tools/offline/gpu-host.sh tools/gpu-tests.sh 'test_sanitizer_flags' 'concurrent'
#
# ONLY=1 runs the PRIORITY tests alone; SKIP=REGEX leaves out the tests it matches. RUN=NAME
# names this invocation's summary and logs (summary-NAME.tsv, NAME-001-...), so that several
# invocations of one session (tools/gpu-session.sh) keep theirs apart.
# With SHARD=i/n in the environment it runs only every n-th group of that order from the
# i-th (0-based): n runners, each with its own CUDA_VISIBLE_DEVICES, share the list across
# GPUs.
#
# Writes results/logs/gpu-tests/: summary[-i].tsv (node id, exit status: 0 passed or
# skipped, 1 failed, 2 not run (its pytest process ended before it; the process's log says
# why), seconds, outcome), one line a test as each group ends, and one log and JUnit XML per
# group. Exit status: 0 when every test passed (or was skipped), 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
logs=results/logs/gpu-tests
mkdir -p "$logs"
# one cubin cache for every pytest process of the run: each kernel compiled once, not once a file
export KERNELBOOK_CUBIN_CACHE=${KERNELBOOK_CUBIN_CACHE:-$(mktemp -d -t kernelbook-gpu-tests-cubins-XXXX)}
all=$(python3 -m pytest -m gpu --collect-only -q -n 0 -p no:cacheprovider 2>/dev/null | grep '::')
if [ -z "$all" ]; then
  echo "no GPU tests collected" >&2
  exit 1
fi
ordered=""
for pat in "$@"; do
  ordered+=$(grep -E -- "$pat" <<< "$all")$'\n'
done
[ -n "${ONLY:-}" ] || ordered+="$all"
[ -z "${SKIP:-}" ] || ordered=$(grep -v -E -- "$SKIP" <<< "$ordered")
shard=${SHARD:-0/1}
i=${shard%/*} n=${shard#*/}
summary=$logs/summary${RUN:+-$RUN}${SHARD:+-$i}.tsv
: > "$summary"
# groups: runs of consecutive ids of one file, each a line "file<TAB>id id ..."
groups=$(awk 'NF && !seen[$0]++ {
    f = $0; sub(/::.*/, "", f)
    if (f != last) { if (ids != "") print last "\t" ids; ids = ""; last = f }
    ids = ids (ids == "" ? "" : " ") $0
  } END { if (ids != "") print last "\t" ids }' <<< "$ordered" |
  awk -v i="$i" -v n="$n" '(NR - 1) % n == i')
g=0
while IFS=$'\t' read -r file ids; do
  [ -n "$file" ] || continue
  g=$((g + 1))
  name=$(printf '%s%03d-%s' "${RUN:+$RUN-}" "$g" "$file" | tr -c 'A-Za-z0-9_.-' '_' | cut -c1-120)
  read -r -a sel <<< "$ids"
  t0=$(date +%s)
  # -n 0: the group's tests share one process (and its session fixtures); the lock keeps
  # runners on other GPUs apart
  timeout $((600 + 120 * ${#sel[@]})) python3 -m pytest -q -n 0 -p no:cacheprovider \
    --junitxml="$logs/$name.xml" "${sel[@]}" > "$logs/$name.log" 2>&1
  rc=$?
  python3 tools/junit-summary.py "$logs/$name.xml" "$rc" "$(($(date +%s) - t0))" "${sel[@]}" |
    tee -a "$summary"
done <<< "$groups"
awk -F'\t' '$2 != 0 {bad++} END {printf "%d tests, %d failed or not run\n", NR, bad; exit bad > 0}' \
  "$summary"
