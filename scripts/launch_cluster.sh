#!/usr/bin/env bash
# Starts the external workers (`launch: external` nodes) of a cluster config on their
# hosts: through `srun` inside a Slurm allocation, otherwise through ssh. The coordinator
# must already run (cascade-coordinator --config FILE) and be reachable at ADDR.
#   scripts/launch_cluster.sh CONFIG COORDINATOR_ADDR [--threads N] [--remote-dir DIR] [--dry-run]
# Each worker runs `$REMOTE_DIR/build/bin/cascade-worker` (default: this checkout's path,
# so a shared filesystem or an identical checkout on every host is assumed).
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=${1:?usage: launch_cluster.sh CONFIG COORDINATOR_ADDR [--threads N] [--remote-dir DIR] [--dry-run]}
ADDR=${2:?coordinator address HOST:PORT}
shift 2
THREADS=1 REMOTE_DIR=$PWD DRY=0
while (($#)); do
  case $1 in
    --threads) THREADS=$2; shift 2 ;;
    --remote-dir) REMOTE_DIR=$2; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    *) echo "launch_cluster: unknown option $1" >&2; exit 2 ;;
  esac
done
BIN=${CASCADE_BUILD_DIR:-build}/bin
[[ -x $BIN/cascade-coordinator ]] || ./scripts/build.sh >/dev/null
mapfile -t WORKERS < <("$BIN/cascade-coordinator" --config "$CONFIG" --list-workers)
((${#WORKERS[@]})) || { echo "launch_cluster: $CONFIG has no external workers"; exit 0; }
pids=()
for w in "${WORKERS[@]}"; do
  read -r stage node host device <<<"$w"
  cmd="$REMOTE_DIR/build/bin/cascade-worker --coordinator $ADDR --node $node --device $device --threads $THREADS --listen $host:0"
  [[ $stage == draft ]] && cmd+=" --draft"  # The speculative drafter worker.
  if [[ -n ${SLURM_JOB_ID:-} ]]; then
    launcher=(srun --nodes=1 --ntasks=1 --nodelist="$host" --kill-on-bad-exit=1 bash -c "$cmd")
  else
    launcher=(ssh -o BatchMode=yes "$host" "$cmd")
  fi
  echo "stage $stage on $node ($host): ${launcher[*]}"
  ((DRY)) && continue
  "${launcher[@]}" 2>&1 | sed -u "s/^/[stage $stage] /" &
  pids+=($!)
done
((DRY)) && exit 0
trap 'kill "${pids[@]}" 2>/dev/null || true' INT TERM
wait
