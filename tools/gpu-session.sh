#!/usr/bin/env bash
# One GPU session, start to end (through tools/gpu-detached.sh where commands are cut short):
# every study's measured tables on all GPUs (the host-timed studies' benches first), its wall time
# recorded, then the GPU tests: those matching the PRIORITY patterns (see tools/gpu-tests.sh)
# on one GPU, then those that need every GPU alone, then the rest split across the GPUs (one
# runner per GPU).
#
#   tools/gpu-session.sh [PRIORITY...]
# KERNELBOOK_GIT_COMMIT must name the commit the tree was copied from (the copy's .git may
# be older; `git rev-parse HEAD` where you committed, not on the host).
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -z "${KERNELBOOK_GIT_COMMIT:-}" ]; then
  echo "gpu-session.sh: set KERNELBOOK_GIT_COMMIT to the commit this tree was copied from" >&2
  exit 2
fi
# The GPUs the jobs may take, as they see them (NVML, narrowed by CUDA_VISIBLE_DEVICES): the
# run's GPU slots and the test shards follow that list, one GPU or many alike
gpus=$(tools/offline/gpu-host.sh python3 -m kernelbook gpus) || exit 1
read -r -d '' -a uuids <<< "$gpus"
ngpu=${#uuids[@]}
mkdir -p results/logs
t0=$(date +%s)
touch results/logs/.session-start  # the study folders this run writes are newer
# KERNELBOOK_STUDIES (e.g. "[sgemm]") narrows the run to some studies of config/config.yaml;
# KERNELBOOK_SESSION_TESTS=0 leaves out the GPU tests.
# Six GPU jobs per GPU: a bench checks and sets up its sizes with the GPU's lock shared,
# beside the other jobs' checks and compute-sanitizer's, and holds it exclusive for its
# timing only (kernelbook.locks: once a timer waits, no new checker starts); a profile holds
# it exclusive. The jobs start as forks of the job server (kernelbook.jobserver).
# Every GPU job appends its hold of the GPU's lock to the ledger (kernelbook ledger: busy,
# shared and idle time, by job).
# The studies that time the host (their jobs take every core) go first, while every core is
# free (the Snakefile's host_timed target); then the rest.
rc=0
for target in host_timed tables; do
  KERNELBOOK_GPU_LEDGER="$PWD/results/logs/gpu-ledger.tsv" \
    tools/offline/gpu-host.sh python3 -m snakemake --cores "$(nproc)" --resources gpu="$((6 * ngpu))" \
    --keep-going "$target" ${KERNELBOOK_STUDIES:+--config "studies=$KERNELBOOK_STUDIES"} || rc=$?
done
echo "tables${KERNELBOOK_STUDIES:+ $KERNELBOOK_STUDIES}: exit $rc, $(($(date +%s) - t0)) s wall on $ngpu GPU(s), commit $KERNELBOOK_GIT_COMMIT" \
  | tee results/logs/tables-wall.txt
# The run's GPU time from the ledger, and its check: no hold of a GPU overlapped a timing or
# a profile there, and every row this run wrote lies in a hold of its own job on the GPU it
# names (exit 1 otherwise: the session's too)
mapfile -t written < <(find results -mindepth 3 -maxdepth 3 -name measurements.parquet \
  -newer results/logs/.session-start -printf '%h\n' | sort)
if [ -f results/logs/gpu-ledger.tsv ]; then  # none where no GPU job ran (all up to date)
  tools/offline/gpu-host.sh python3 -m kernelbook ledger results/logs/gpu-ledger.tsv --top 20 \
    --check --tables "${written[@]}" > results/logs/gpu-ledger.txt || rc=1
  cat results/logs/gpu-ledger.txt
fi
# KERNELBOOK_SESSION_TESTS=0: the tables only (a session whose GPU tests run apart)
[ "${KERNELBOOK_SESSION_TESTS:-1}" = 0 ] && exit $rc
whole='test_concurrent_jobs_land_on_distinct_gpus|test_negative_controls_caught'
skip=$whole
if [ $# -gt 0 ]; then  # what the change touches, first of all (a cut session has its verdict)
  RUN=first ONLY=1 SKIP="$whole" tools/offline/gpu-host.sh tools/gpu-tests.sh "$@"
  skip+=$(printf '|%s' "$@")
fi
RUN=whole ONLY=1 tools/offline/gpu-host.sh tools/gpu-tests.sh "$whole"
for ((g = 0; g < ngpu; g++)); do
  CUDA_VISIBLE_DEVICES=${uuids[g]} SHARD=$g/$ngpu SKIP="$skip" tools/offline/gpu-host.sh tools/gpu-tests.sh &
done
wait
cat results/logs/gpu-tests/summary*.tsv | awk -F'\t' '{n++; bad += ($2 != 0)} END {print n " GPU tests, " bad " failed"}'
