#!/usr/bin/env bash
# Run a long GPU workload on a host that cuts every command after a time limit: the first
# call starts WORKLOAD detached (setsid), every call then watches it for at most SECONDS and
# copies a snapshot of the results and logs into OUT_DIR. Call it again (on the same host)
# until it reports "done".
#
#   tools/gpu-detached.sh SECONDS OUT_DIR WORKLOAD [ARGS...]
#
# e.g. a whole session (the DAG, then the GPU tests one pytest invocation each):
#   KERNELBOOK_GIT_COMMIT=<commit> tools/gpu-detached.sh 540 snapshots tools/gpu-session.sh
#
# State lives in $KERNELBOOK_DETACHED_DIR (default /tmp/kernelbook-detached): the workload's
# output (workload.log), its exit status (workload.rc) once it ends, and its start time.
# Each call leaves a snapshot in OUT_DIR (tools/snapshot.sh: the tables, cubins and
# Snakemake's state, less the Nsight Compute reports) and the workload's state
# (detached.tgz); tools/restore-snapshot.py resumes a run from one on another machine.
#
# KERNELBOOK_RESUME=SNAPSHOT_DIR (the last call's OUT_DIR, carried along on every call): where
# this machine has no run of its own yet (a first call, or the last machine went away
# between calls), the snapshot is restored before the workload starts, so that the run goes
# on from the tables it holds instead of from nothing; on a machine whose run is live it is
# ignored, the run being newer than any snapshot of it.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 3 ]; then
  echo "usage: $0 SECONDS OUT_DIR WORKLOAD [ARGS...]" >&2
  exit 2
fi
secs=$1 out=$2
shift 2
st=${KERNELBOOK_DETACHED_DIR:-/tmp/kernelbook-detached}
mkdir -p "$st" "$out"
if [ ! -f "$st/started" ]; then
  if [ -n "${KERNELBOOK_RESUME:-}" ]; then
    if [ ! -f "$KERNELBOOK_RESUME/snapshot.json" ]; then
      echo "$0: KERNELBOOK_RESUME=$KERNELBOOK_RESUME holds no snapshot (no snapshot.json); nothing started" >&2
      exit 1
    fi
    python3 tools/restore-snapshot.py "$KERNELBOOK_RESUME" \
      || { echo "$0: could not resume from $KERNELBOOK_RESUME; nothing started" >&2; exit 1; }
    echo "resumed from $KERNELBOOK_RESUME: $(cat "$KERNELBOOK_RESUME/snapshot.json")"
  fi
  date -u +%FT%TZ > "$st/started"
  # the status goes to a temporary file first and is renamed into place: a watcher that sees
  # workload.rc then always reads a whole status, never the empty file a redirection opens
  setsid nohup bash -c '"$@" > "$0/workload.log" 2>&1; echo $? > "$0/workload.rc.tmp"
    mv "$0/workload.rc.tmp" "$0/workload.rc"' \
    "$st" "$@" < /dev/null > /dev/null 2>&1 &
  echo "started: $*"
elif [ -n "${KERNELBOOK_RESUME:-}" ]; then
  echo "KERNELBOOK_RESUME=$KERNELBOOK_RESUME left alone: this machine's run is live (started $(cat "$st/started"))"
fi
end=$(($(date +%s) + secs))
while [ "$(date +%s)" -lt "$end" ] && [ ! -f "$st/workload.rc" ]; do sleep 3; done
if [ -f "$st/workload.rc" ]; then
  echo "done: exit $(cat "$st/workload.rc") (started $(cat "$st/started"))"
else
  echo "still running (started $(cat "$st/started")); call again to go on watching"
fi
tail -n 40 "$st/workload.log" | cut -c1-300
tools/snapshot.sh "$out" || echo "snapshot failed: $out holds what it could write"
tar czf "$out/detached.tgz" -C "$(dirname "$st")" "$(basename "$st")" 2>/dev/null
ls -l "$out"
