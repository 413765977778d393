#!/usr/bin/env bash
# The apply of a changed 100,000-route table under load (bench/README.md, "Start time"):
# wrk keeps 16 HTTP/1.1 keep-alive connections busy on one route of a standalone ingress
# for DURATION seconds, once with the routes file left alone and once with it replaced
# every 2 s by a table whose 200,000 targets all changed (lease ids; the same two
# backends), and prints wrk's requests per second and latency percentiles of both.
#
#   bench/swap-load.sh [BINARY...]    (default: a fresh build of ./cmd/ingress)
#
# Loopback only; everything it starts is stopped when it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=go1.27.3
DURATION=${DURATION:-20}
command -v wrk >/dev/null || { echo "wrk is needed (Debian package wrk)" >&2; exit 1; }
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/target" ./bench/target
"$work/target" -addr 127.0.0.1:18280 & pids+=($!)
"$work/target" -addr 127.0.0.1:18281 & pids+=($!)
go run ./bench/bigtable -target 127.0.0.1:18280 -redirect-http=false -out "$work/v0.json"
go run ./bench/bigtable -target 127.0.0.1:18280 -redirect-http=false -variant 1 -revision 2 \
  -certs-from "$work/v0.json" -out "$work/v1.json"
if [ $# -eq 0 ]; then
  go build -o "$work/ingress" ./cmd/ingress
  set -- "$work/ingress"
fi

host=h00050.d00500.bench.test
for bin in "$@"; do
  for swaps in no yes; do
    cp "$work/v0.json" "$work/routes.json"
    "$bin" --routes "$work/routes.json" --http-addr 127.0.0.1:18290 --https-addr 127.0.0.1:18291 \
      --http3=false --admin-addr 127.0.0.1:18292 --log-level warn 2>"$work/ingress.log" &
    ing=$!
    pids+=("$ing")
    for _ in $(seq 200); do
      curl -fs -o /dev/null http://127.0.0.1:18292/readyz && break
      sleep 0.05
    done
    swapper=""
    if [ "$swaps" = yes ]; then
      (
        v=1
        while :; do
          sleep 2
          cp "$work/v$v.json" "$work/routes.tmp" && mv "$work/routes.tmp" "$work/routes.json"
          v=$((1 - v))
        done
      ) &
      swapper=$!
      pids+=("$swapper")
    fi
    echo "== $(basename "$bin"), table swapped every 2 s: $swaps"
    wrk -t1 -c16 -d"${DURATION}s" --latency -H "Host: $host" http://127.0.0.1:18290/64 |
      grep -E 'Requests/sec|Latency|50%|90%|99%|Non-2xx|Socket errors'
    [ -n "$swapper" ] && kill "$swapper" && wait "$swapper" 2>/dev/null || true
    curl -fs http://127.0.0.1:18292/metrics | grep -E '^ingress_route_table_(applies|refusals)_total' || true
    kill "$ing" && wait "$ing" 2>/dev/null || true
  done
done
