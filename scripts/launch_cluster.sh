#!/usr/bin/env bash
# Starts the external workers (`launch: external` nodes) of a cluster config on their
# hosts: through `srun` inside a Slurm allocation, otherwise through ssh. The coordinator
# must already run (cascade-coordinator --config FILE): it made the cluster's CA bundle
# and join token in security.cluster_dir, which this script carries to each worker (over
# ssh's stdin into a 0700 directory, or in srun's environment), never on a command line.
#   scripts/launch_cluster.sh CONFIG [CONTROL_ADDR] [--threads N] [--remote-dir DIR] [--dry-run]
# CONTROL_ADDR: the coordinator's control plane as workers reach it (default:
# server.cluster_listen). Each worker runs `$REMOTE_DIR/build/bin/cascade-worker`
# (default: this checkout's path, so a shared filesystem or an identical checkout on
# every host is assumed; $CASCADE_BUILD_DIR replaces build/ here and there).
# Environment:
#   CASCADE_SSH_OPTS  extra ssh options, word-split, before the host on every ssh call, e.g.
#                     "-F ~/cluster/ssh_config" or "-i ~/.ssh/cluster_key -p 2222"
#   UCX_*             passed on to every worker (`UCX_TLS=tcp` where only TCP joins the hosts):
#                     srun carries the environment, and over ssh (which carries none) they
#                     prefix the remote command.
set -euo pipefail
cd "$(dirname "$0")/.."
USAGE="usage: launch_cluster.sh CONFIG [CONTROL_ADDR] [--threads N] [--remote-dir DIR] [--dry-run]"
CONFIG=${1:?$USAGE}
shift
ADDR=
if (($#)) && [[ $1 != --* ]]; then ADDR=$1; shift; fi
THREADS=1 REMOTE_DIR=$PWD DRY=0
while (($#)); do
  case $1 in
    --threads) THREADS=$2; shift 2 ;;
    --remote-dir) REMOTE_DIR=$2; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    *) echo "launch_cluster: unknown option $1 ($USAGE)" >&2; exit 2 ;;
  esac
done
BIN=${CASCADE_BUILD_DIR:-build}/bin
[[ -x $BIN/cascade-coordinator ]] || ./scripts/build.sh >/dev/null
mapfile -t LINES < <("$BIN/cascade-coordinator" --config "$CONFIG" --list-workers)
WORKERS=() TRUST=insecure TRUST_DIR=
for line in "${LINES[@]}"; do
  read -r kind a b c d e <<<"$line"
  case $kind in
    control) [[ -n $ADDR ]] || ADDR=$a ;;
    security) TRUST=$a TRUST_DIR=$b ;;
    worker) WORKERS+=("$a $b $c $d") ;;
  esac
done
((${#WORKERS[@]})) || { echo "launch_cluster: $CONFIG has no external workers"; exit 0; }
if [[ $ADDR == *:0 || $ADDR == 0.0.0.0:* || $ADDR == "[::]:"* ]]; then
  echo "launch_cluster: the control plane is $ADDR; give the address workers reach it at (CONTROL_ADDR)" >&2
  exit 2
fi
if [[ $TRUST == tls ]] && ((!DRY)); then
  for f in ca.pem join.token; do
    [[ -r $TRUST_DIR/$f ]] || { echo "launch_cluster: no $TRUST_DIR/$f: start the coordinator first (it makes them)" >&2; exit 2; }
  done
fi
REMOTE_TRUST='$HOME/.cascade/trust'  # Expanded on the worker's host.
# The worker binary on the hosts: this checkout's build directory under REMOTE_DIR.
BUILD=${CASCADE_BUILD_DIR:-build}
BUILD=${BUILD#"$PWD"/}
if [[ $BUILD == /* ]]; then WORKER=$BUILD/bin/cascade-worker; else WORKER=$REMOTE_DIR/$BUILD/bin/cascade-worker; fi
read -ra SSH_OPTS <<<"${CASCADE_SSH_OPTS:-}"
SSH=(ssh "${SSH_OPTS[@]}" -o BatchMode=yes)
# UCX_* for the remote command line, each value quoted for a POSIX shell where needed.
REMOTE_ENV=
while read -r var; do
  val=${!var}
  [[ $val =~ ^[A-Za-z0-9_.,:/+=@%-]*$ ]] || val="'${val//\'/\'\\\'\'}'"
  REMOTE_ENV+="$var=$val "
done < <(compgen -e | grep '^UCX_' || true)
pids=()
for w in "${WORKERS[@]}"; do
  read -r stage node host device <<<"$w"
  cmd="$WORKER --coordinator $ADDR --node $node --device $device --threads $THREADS --listen $host:0"
  [[ $stage == draft ]] && cmd+=" --draft"  # The speculative drafter worker.
  if [[ $TRUST == insecure ]]; then
    cmd+=" --insecure"
  elif [[ -n ${SLURM_JOB_ID:-} ]]; then
    # srun passes the environment: the CA goes to a private file on the node (removed when
    # the worker ends), the token stays in the environment.
    cmd="d=\$(mktemp -d) && trap 'rm -rf \"\$d\"' EXIT && printf '%s\n' \"\$CASCADE_CA_PEM\" > \$d/ca.pem && $cmd --ca \$d/ca.pem"
  else
    cmd+=" --ca $REMOTE_TRUST/ca.pem --token-file $REMOTE_TRUST/join.token"
  fi
  if [[ -n ${SLURM_JOB_ID:-} ]]; then
    # --overlap: the workers of one node are concurrent steps of the allocation; without
    # it a second step waits for the first one's CPUs, which a worker never gives back.
    launcher=(srun --nodes=1 --ntasks=1 --nodelist="$host" --overlap --kill-on-bad-exit=1 bash -c "$cmd")
  else
    launcher=("${SSH[@]}" "$host" "$REMOTE_ENV$cmd")
  fi
  echo "stage $stage on $node ($host): ${launcher[*]}"
  ((DRY)) && continue
  if [[ $TRUST == tls && -n ${SLURM_JOB_ID:-} ]]; then
    export CASCADE_CA_PEM CASCADE_JOIN_TOKEN
    CASCADE_CA_PEM=$(<"$TRUST_DIR/ca.pem") CASCADE_JOIN_TOKEN=$(<"$TRUST_DIR/join.token")
  elif [[ $TRUST == tls ]]; then
    for f in ca.pem join.token; do
      "${SSH[@]}" "$host" "umask 077 && mkdir -p $REMOTE_TRUST && cat > $REMOTE_TRUST/$f" <"$TRUST_DIR/$f"
    done
  fi
  "${launcher[@]}" 2>&1 | sed -u "s/^/[stage $stage] /" &
  pids+=($!)
done
((DRY)) && exit 0
trap 'kill "${pids[@]}" 2>/dev/null || true' INT TERM
wait
