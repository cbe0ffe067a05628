#!/usr/bin/env bash
# Run the GPU tests one pytest process per test, so that a session cut off mid-way still has
# a verdict for every test that finished. Tests whose node id matches one of the PRIORITY
# patterns (grep -E, in order) run first, the rest after them in collection order.
#
#   tools/gpu-tests.sh [PRIORITY...]
#   tools/offline/gpu-host.sh tools/gpu-tests.sh 'test_sanitizer_flags' 'concurrent'
#
# ONLY=1 runs the PRIORITY tests alone; SKIP=REGEX leaves out the tests it matches.
# With SHARD=i/n in the environment it runs only every n-th test of that order from the i-th
# (0-based): n runners, each with its own CUDA_VISIBLE_DEVICES, share the list across GPUs.
#
# Writes results/logs/gpu-tests/: summary[-i].tsv (node id, exit status, seconds, as each test
# ends) and one log per test. Exit status: 0 when every test passed, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
logs=results/logs/gpu-tests
mkdir -p "$logs"
# one cubin cache for every pytest process of the run: each kernel compiled once, not once a test
export KERNELBOOK_CUBIN_CACHE=${KERNELBOOK_CUBIN_CACHE:-$(mktemp -d -t kernelbook-gpu-tests-cubins-XXXX)}
all=$(python3 -m pytest -m gpu --collect-only -q 2>/dev/null | grep '::')
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
summary=$logs/summary${SHARD:+-$i}.tsv
: > "$summary"
awk -v i="$i" -v n="$n" 'NF && !seen[$0]++ && (k++ % n) == i' <<< "$ordered" | while IFS= read -r id; do
  name=$(printf '%s' "$id" | tr -c 'A-Za-z0-9_.-' '_' | cut -c1-180)
  t0=$(date +%s)
  timeout 900 python3 -m pytest -q -p no:cacheprovider "$id" > "$logs/$name.log" 2>&1
  rc=$?
  printf '%s\t%s\t%s\n' "$id" "$rc" "$(($(date +%s) - t0))" | tee -a "$summary"
done
awk -F'\t' '$2 != 0 {bad++} END {printf "%d tests, %d failed\n", NR, bad; exit bad > 0}' \
  "$summary"
