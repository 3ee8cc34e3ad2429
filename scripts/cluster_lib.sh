# Sourced by the scripts that run a local cluster (serve.sh, bench_serving.sh,
# bench_tp.sh). start_cluster CONFIG LOG [tee]: starts cascade-coordinator in the
# background with its output in LOG (and on stderr with "tee"), waits for its "ready on"
# line, and sets CLUSTER_PID, CLUSTER_ADDR and (with server.http_listen) CLUSTER_HTTP. Fails, showing the log, if the
# coordinator exits or is not ready within 60 s. $CLUSTER_ARGS (optional) are more
# coordinator flags, e.g. "--worker-threads 4".
start_cluster() {
  local config=$1 log=$2 mode=${3:-}
  local bin=${CASCADE_BUILD_DIR:-build}/bin
  if [[ $mode == tee ]]; then
    "$bin/cascade-coordinator" --config "$config" ${CLUSTER_ARGS:-} > >(tee "$log" >&2) 2>&1 &
  else
    "$bin/cascade-coordinator" --config "$config" ${CLUSTER_ARGS:-} > "$log" 2>&1 &
  fi
  CLUSTER_PID=$!
  CLUSTER_ADDR=""
  for _ in $(seq 1 600); do
    CLUSTER_ADDR=$(grep -o 'ready on [^ ]*' "$log" 2>/dev/null | head -1 | cut -d' ' -f3 || true)
    if [[ -n $CLUSTER_ADDR ]]; then
      CLUSTER_HTTP=$(grep -o 'http front on [^ ]*' "$log" 2>/dev/null | head -1 | cut -d' ' -f4 || true)
      return 0
    fi
    if ! kill -0 "$CLUSTER_PID" 2>/dev/null; then
      [[ $mode == tee ]] || cat "$log" >&2
      echo "the coordinator exited (config $config)" >&2
      return 1
    fi
    sleep 0.1
  done
  [[ $mode == tee ]] || cat "$log" >&2
  echo "the cluster of $config was not ready within 60 s" >&2
  return 1
}
