#!/usr/bin/env bash
# Start time of the real binary with a 100,000-route, 1,000-certificate table (about
# 28 MB of JSON): process start to the first /readyz 200, CPU time until then, and peak
# resident memory (VmHWM), RUNS runs each (bench/README.md, "Start time").
#
#   bench/start-time.sh [BINARY...]     (default: a fresh build of ./cmd/ingress)
#
# Two ways to start are measured: standalone (--routes FILE) and relay mode restarting
# from the last-known-good table in --state-dir (the relay is unreachable; readiness needs
# only the table and the listeners). With several binaries (before/after), their runs
# alternate, so that the load of a shared machine falls on all of them alike.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=go1.27.3
RUNS=${RUNS:-7}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

go build -o "$work/starttime" ./bench/starttime
go run ./bench/bigtable -out "$work/big.json"
mkdir -m 700 "$work/state"
if [ $# -eq 0 ]; then
  go build -o "$work/ingress" ./cmd/ingress
  set -- "$work/ingress"
fi

listeners=(--http-addr 127.0.0.1:0 --https-addr 127.0.0.1:0 --http3=false --log-level warn)
for mode in standalone relay-lkg; do
  for ((round = 0; round < RUNS; round++)); do
    for bin in "$@"; do
      if [ "$mode" = standalone ]; then
        "$work/starttime" -bin "$bin" -runs 1 -settle 1s -- --routes "$work/big.json" "${listeners[@]}"
      else
        cp "$work/big.json" "$work/state/routetable.json"
        SERVEZONE_CLUSTER_INGRESS_BEARER=bench-bearer-0123456789abcdef \
        SERVEZONE_CLUSTER_RELAY_ORIGIN=http://127.0.0.1:9 SERVEZONE_CLUSTER_NODE_ID=node-1 \
          "$work/starttime" -bin "$bin" -runs 1 -settle 1s -- --state-dir "$work/state" "${listeners[@]}" --log-level error
      fi 2>/dev/null | grep '^run' | sed "s|^run 1:|$mode $(basename "$bin"):|"
    done
  done
done | tee "$work/runs.txt"

# Minimum and median per mode and binary.
awk '{
  key = $1 " " $2; ready[key] = ready[key] " " $4; cpu[key] = cpu[key] " " $7
  hwm[key] = hwm[key] " " $12; later[key] = later[key] " " $16
} END {
  for (k in ready) {
    printf "%-28s min/median: ready %s ms, CPU %s ms, VmHWM %s MiB at ready, %s MiB 1 s later\n", k, mm(ready[k]), mm(cpu[k]), mm(hwm[k]), mm(later[k])
  }
}
function mm(list,   v, n, i, j, t) {
  n = split(list, v, " ")
  for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
  return sprintf("%s/%s", v[1], (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2)
}' "$work/runs.txt" | sort
