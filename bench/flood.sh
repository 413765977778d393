#!/usr/bin/env bash
# bench/flood.sh: the pre-opened HTTP/2 flood of issue 25 against the ingress, nginx and
# HAProxy, in one run, and a table of what it did to each (bench/README.md, "Pre-opened
# flood").
#
# For every proxy, protocol (h2c, h2 over TLS) and connection count, a fresh proxy is
# started pinned to PROXY_CPU (the ingress with GOMAXPROCS=1, nginx with one worker,
# HAProxy with one thread), and bench/h2flood -preopen, pinned to LOAD_CPU with the target,
# runs QUIET seconds of bystanders alone, then has one attacker address open the
# connections, then flood HEADERS+RST_STREAM on all of them for DURATION seconds (each
# connection redialled when the proxy ends it) while the bystanders (HTTP/1.1, and HTTP/2
# over TLS, from another address) go on. Each flood comes from a fresh source address.
#
# Environment (all optional):
#   DURATION=20       seconds of flood per measurement (the issue's floods ran 20-26 s)
#   QUIET=3           seconds of bystanders alone before each flood
#   CONNS="100 400"   pre-opened connections
#   OVER="h2c tls"    the attacker's protocol
#   PROXIES="ingress nginx haproxy"
#   PROXY_CPU=0 LOAD_CPU=1
#   INGRESS_FLAGS=""  extra flags for the ingress (its defaults otherwise)
#
# nginx and HAProxy run bench/nginx.conf and bench/haproxy.cfg with two changes made here
# (see render_configs): a listener for h2c with prior knowledge (the plain port of both
# serves HTTP/1.1 only; the ingress's serves both), and for nginx the per-connection
# request limit back at nginx's default (keepalive_requests 1000: the compare runs raise
# it so that a throughput run never reconnects; in a flood that default is part of the
# protection nginx ships with, as the ingress's own limit is part of its).
#
# Each measurement has a target of its own on a fresh loopback address (127.0.2.N): a proxy
# that opens and closes a target connection per flooding stream leaves tens of thousands in
# TIME_WAIT towards it, and the next measurement against the same address would start with
# the ephemeral ports to it used up (28,232 per source and destination pair; a connect()
# then searches for a free one, and the bystanders' requests wait). Within one flood that
# churn is the proxy's own doing, and is measured.
#
# Everything listens on loopback only; every process started here is stopped on exit.
set -euo pipefail

BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$BENCH")
export GOTOOLCHAIN=${BENCH_GOTOOLCHAIN:-$(awk '$1 == "toolchain" { print $2 }' "$ROOT/go.mod")}
RUN=$BENCH/out/flood-run
CMDLINE="$(for v in DURATION QUIET CONNS OVER PROXIES PROXY_CPU LOAD_CPU INGRESS_FLAGS; do
	if [[ -n ${!v+x} ]]; then printf '%s=%q ' "$v" "${!v}"; fi
done)bench/flood.sh"
DURATION=${DURATION:-20}
QUIET=${QUIET:-3}
CONNS=${CONNS:-"100 400"}
OVER=${OVER:-"h2c tls"}
PROXIES=${PROXIES:-"ingress nginx haproxy"}
PROXY_CPU=${PROXY_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
INGRESS_FLAGS=${INGRESS_FLAGS:-}
HOST=bench.test

[[ $DURATION =~ ^[1-9][0-9]{0,2}$ ]] || { echo "DURATION must be 1-999 seconds" >&2; exit 2; }
[[ $QUIET =~ ^[1-9][0-9]?$ ]] || { echo "QUIET must be 1-99 seconds" >&2; exit 2; }
for n in $CONNS; do [[ $n =~ ^[1-9][0-9]{0,3}$ ]] || { echo "CONNS: $n is not 1-9999" >&2; exit 2; }; done
for o in $OVER; do [[ $o == h2c || $o == tls ]] || { echo "OVER: $o is not h2c or tls" >&2; exit 2; }; done
for p in $PROXIES; do
	case $p in ingress | nginx | haproxy) ;; *) echo "unknown proxy in PROXIES: $p" >&2; exit 2 ;; esac
done

# Ports (127.0.0.1 only), apart from bench/compare's.
TARGET_PORT=18680 # on 127.0.2.N, a fresh N per measurement
declare -A HTTP_PORT=([ingress]=18601 [nginx]=18611 [haproxy]=18621)
declare -A H2C_PORT=([ingress]=18601 [nginx]=18612 [haproxy]=18622)
declare -A HTTPS_PORT=([ingress]=18643 [nginx]=18653 [haproxy]=18663)
INGRESS_ADMIN_PORT=18690

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "FATAL: $*"; exit 1; }

# Processes: each in its own process group (nginx's worker stops with its master); the
# EXIT trap stops every group still alive.
PIDS=()
cleanup() {
	local rc=$? pid
	for pid in "${PIDS[@]}"; do stop "$pid"; done
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start NAME CPU CMD...: starts CMD pinned to CPU in a new process group; sets STARTED_PID.
start() {
	local name=$1 cpu=$2
	shift 2
	setsid taskset -c "$cpu" "$@" >"$RUN/logs/$name.log" 2>&1 </dev/null &
	STARTED_PID=$!
	PIDS+=("$STARTED_PID")
}

# stop PID: stops the process group PID (SIGTERM, then SIGKILL after 3 s).
stop() {
	local pid=$1 i keep=() p
	kill -TERM -- "-$pid" 2>/dev/null || true
	for i in $(seq 1 30); do
		kill -0 -- "-$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL -- "-$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	for p in "${PIDS[@]}"; do [[ $p == "$pid" ]] || keep+=("$p"); done
	PIDS=("${keep[@]}")
}

# wait_ready NAME PID URL [curl args...]: polls URL (10 s at most) while PID lives.
wait_ready() {
	local name=$1 pid=$2 url=$3 i
	shift 3
	for i in $(seq 1 100); do
		kill -0 "$pid" 2>/dev/null || { tail -20 "$RUN/logs/$name.log" >&2; die "$name exited during start"; }
		curl -fsS -o /dev/null --max-time 1 "$@" "$url" 2>/dev/null && return 0
		sleep 0.1
	done
	tail -20 "$RUN/logs/$name.log" >&2
	die "$name not ready at $url after 10 s"
}

build() {
	log "building the target, bench/h2flood and the ingress"
	(cd "$ROOT" && go build -o "$RUN/bin/target" ./bench/target && go build -o "$RUN/bin/h2flood" ./bench/h2flood)
	if [[ " $PROXIES " == *" ingress "* ]]; then
		(cd "$ROOT" && go build -o "$RUN/bin/ingress" ./cmd/ingress) 2>"$RUN/logs/ingress-build.log" ||
			{ tail -30 "$RUN/logs/ingress-build.log" >&2; die "the ingress does not build"; }
	fi
}

make_cert() {
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-keyout "$RUN/key.pem" -out "$RUN/cert.pem" -days 7 -subj "/CN=$HOST" \
		-addext "subjectAltName=DNS:$HOST" >/dev/null 2>&1 || die "openssl could not make the certificate"
	chmod 600 "$RUN/key.pem"
	cat "$RUN/cert.pem" "$RUN/key.pem" >"$RUN/haproxy.pem"
	chmod 600 "$RUN/haproxy.pem"
}

# render TEMPLATE OUT PROXY: fills the @WORD@ placeholders of a checked-in configuration.
render() {
	local tmpl=$1 out=$2 proxy=$3
	sed -e "s|@RUN@|$RUN|g" -e "s|@TARGET_PORT@|$TARGET_PORT|g" \
		-e "s|@HTTP_PORT@|${HTTP_PORT[$proxy]}|g" -e "s|@HTTPS_PORT@|${HTTPS_PORT[$proxy]}|g" \
		"$tmpl" >"$out"
	! grep -v '^[[:space:]]*#' "$out" | grep -n '@[A-Z_]*@' || die "unfilled placeholder in $out"
}

# render_configs TARGET_IP: bench/compare's configurations, with the target at TARGET_IP,
# an h2c listener each and nginx's per-connection request limit at its default (see the
# header).
render_configs() {
	local tip=$1
	mkdir -p "$RUN/nginx-tmp"
	render "$BENCH/nginx.conf" "$RUN/nginx.conf" nginx
	sed -i "s|server 127.0.0.1:$TARGET_PORT;|server $tip:$TARGET_PORT;|" "$RUN/nginx.conf"
	grep -q "server $tip:$TARGET_PORT;" "$RUN/nginx.conf" || die "nginx.conf: the target address was not set"
	sed -i -e '/^[[:space:]]*keepalive_requests 1000000;/d' -e '/^[[:space:]]*http2_max_requests/d' \
		-e "s|^\([[:space:]]*\)listen 127.0.0.1:${HTTPS_PORT[nginx]} ssl http2;|&\n\1listen 127.0.0.1:${H2C_PORT[nginx]} http2;|" "$RUN/nginx.conf"
	# The upstream block's keepalive_requests (target side) stays as in bench/nginx.conf.
	sed -i -e "s|^\([[:space:]]*keepalive 1024;\)|\1\n        keepalive_requests 1000000;|" "$RUN/nginx.conf"
	grep -q "listen 127.0.0.1:${H2C_PORT[nginx]} http2;" "$RUN/nginx.conf" || die "nginx.conf: the h2c listener was not added"
	render "$BENCH/haproxy.cfg" "$RUN/haproxy.cfg" haproxy
	sed -i "s|server target 127.0.0.1:$TARGET_PORT|server target $tip:$TARGET_PORT|" "$RUN/haproxy.cfg"
	grep -q "server target $tip:$TARGET_PORT" "$RUN/haproxy.cfg" || die "haproxy.cfg: the target address was not set"
	sed -i "s|^\([[:space:]]*\)bind 127.0.0.1:${HTTPS_PORT[haproxy]} .*|&\n\1bind 127.0.0.1:${H2C_PORT[haproxy]} proto h2|" "$RUN/haproxy.cfg"
	grep -q "bind 127.0.0.1:${H2C_PORT[haproxy]} proto h2" "$RUN/haproxy.cfg" || die "haproxy.cfg: the h2c listener was not added"
	nginx -t -p "$RUN" -c "$RUN/nginx.conf" -e "$RUN/nginx-error.log" >"$RUN/logs/nginx-check.log" 2>&1 ||
		{ cat "$RUN/logs/nginx-check.log" >&2; die "nginx refused its configuration"; }
	haproxy -c -f "$RUN/haproxy.cfg" >"$RUN/logs/haproxy-check.log" 2>&1 ||
		{ cat "$RUN/logs/haproxy-check.log" >&2; die "haproxy refused its configuration"; }
	local tmpl cert key
	tmpl=$(<"$BENCH/routes.json.tmpl")
	cert=$(awk '{ printf "%s\\n", $0 }' "$RUN/cert.pem")
	key=$(awk '{ printf "%s\\n", $0 }' "$RUN/key.pem")
	tmpl=${tmpl//@TARGET_PORT@/$TARGET_PORT}
	tmpl=${tmpl//\"address\":\"127.0.0.1\"/\"address\":\"$tip\"}
	[[ $tmpl == *"\"address\":\"$tip\""* ]] || die "routes.json: the target address was not set"
	tmpl=${tmpl//@CERT_PEM@/$cert}
	tmpl=${tmpl//@KEY_PEM@/$key}
	printf '%s\n' "$tmpl" >"$RUN/routes.json"
	chmod 600 "$RUN/routes.json"
}

# start_proxy NAME: starts NAME pinned to PROXY_CPU and waits until it forwards over
# HTTP/1.1, h2c and TLS; sets PROXY_PID and METRICS.
start_proxy() {
	local name=$1
	METRICS=""
	case $name in
	ingress)
		# shellcheck disable=SC2086 # INGRESS_FLAGS is a list of flags
		start ingress "$PROXY_CPU" env GOMAXPROCS=1 "$RUN/bin/ingress" --routes "$RUN/routes.json" \
			--http-addr "127.0.0.1:${HTTP_PORT[ingress]}" --https-addr "127.0.0.1:${HTTPS_PORT[ingress]}" \
			--admin-addr "127.0.0.1:$INGRESS_ADMIN_PORT" --http3=false --log-level warn $INGRESS_FLAGS
		PROXY_PID=$STARTED_PID
		METRICS=http://127.0.0.1:$INGRESS_ADMIN_PORT/metrics
		wait_ready ingress "$PROXY_PID" "http://127.0.0.1:$INGRESS_ADMIN_PORT/readyz"
		;;
	nginx)
		start nginx "$PROXY_CPU" nginx -p "$RUN" -c "$RUN/nginx.conf" -e "$RUN/nginx-error.log"
		PROXY_PID=$STARTED_PID
		;;
	haproxy)
		start haproxy "$PROXY_CPU" haproxy -db -f "$RUN/haproxy.cfg"
		PROXY_PID=$STARTED_PID
		;;
	esac
	wait_ready "$name" "$PROXY_PID" "http://127.0.0.1:${HTTP_PORT[$name]}/64" -H "Host: $HOST"
	wait_ready "$name" "$PROXY_PID" "http://127.0.0.1:${H2C_PORT[$name]}/64" -H "Host: $HOST" --http2-prior-knowledge
	wait_ready "$name" "$PROXY_PID" "https://$HOST:${HTTPS_PORT[$name]}/64" -k --http2 \
		--resolve "$HOST:${HTTPS_PORT[$name]}:127.0.0.1"
	local p
	for p in $(pgrep -g "$PROXY_PID"); do
		[[ $(taskset -pc "$p" | awk '{ print $NF }') == "$PROXY_CPU" ]] || die "$name pid $p is not pinned to CPU $PROXY_CPU"
	done
}

# measure PROXY OVER CONNS FROM TARGET_IP: one flood against a fresh proxy and a fresh
# target at TARGET_IP; appends its row.
measure() {
	local px=$1 over=$2 conns=$3 from=$4 tip=$5 raw
	raw=$RUN/raw/$px-$over-$conns.txt
	render_configs "$tip"
	start "target-$px-$over-$conns" "$LOAD_CPU" env GOMAXPROCS=1 "$RUN/bin/target" -addr "$tip:$TARGET_PORT"
	TARGET_PID=$STARTED_PID
	wait_ready target "$TARGET_PID" "http://$tip:$TARGET_PORT/64"
	start_proxy "$px"
	log "$px: $conns connections over $over from $from, ${DURATION}s"
	taskset -c "$LOAD_CPU" "$RUN/bin/h2flood" -preopen "$conns" -over "$over" -name "$px" -from "$from" \
		-addr "127.0.0.1:${HTTP_PORT[$px]}" -h2c-addr "127.0.0.1:${H2C_PORT[$px]}" -tls-addr "127.0.0.1:${HTTPS_PORT[$px]}" \
		-host "$HOST" -path /64 -d "${DURATION}s" -quiet "${QUIET}s" \
		-target-counts "http://$tip:$TARGET_PORT/_counts" -metrics "$METRICS" -pid "$PROXY_PID" -target-pid "$TARGET_PID" >"$raw" 2>&1 ||
		{ cat "$raw" >&2; die "h2flood failed against $px"; }
	kill -0 "$PROXY_PID" 2>/dev/null || die "$px died during the flood (see $RUN/logs/$px.log)"
	stop "$PROXY_PID"
	stop "$TARGET_PID"
	sed -n '/^preopen:/,/^bystander HTTP\/2/p' "$raw" >&2
	grep '^row' "$raw" | cut -f2- >>"$RESULTS"
}

report() {
	echo "## Pre-opened flood $(date -u +%Y-%m-%dT%H:%MZ)"
	echo
	echo "Command: \`$CMDLINE\` (${DURATION}s of flood after ${QUIET}s quiet; connections: $CONNS; over: $OVER)"
	echo "Proxy on CPU $PROXY_CPU; h2flood (attacker child at niceness 10, bystanders) and the target (a fresh one per measurement) on CPU $LOAD_CPU. Load average at start: $LOAD_START; at end: $(cut -d' ' -f1-3 /proc/loadavg)."
	echo
	echo "- ingress: commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo n/a) (working tree as built), $(go version "$RUN/bin/ingress" 2>/dev/null | awk '{ print $2 }'), flags: defaults ${INGRESS_FLAGS:+plus $INGRESS_FLAGS}"
	echo "- nginx: $(nginx -v 2>&1 | sed 's/^nginx version: //'), HAProxy: $(haproxy -v 2>/dev/null | head -1 | awk '{ print $3 }'), kernel $(uname -r), $(nproc) CPUs"
	echo
	echo "| proxy | over | conns | opened | streams sent | reached target | target conns opened | target conns at once | verdict at | gone after verdict | pre-opened gone at | peak heap MiB | peak RSS MiB | peak goroutines | peak fds | /metrics failed | HTTP/1.1 p99 quiet → flood ms (failed) | HTTP/2 p99 quiet → flood ms (failed) | CPU proxy / target |"
	echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
	awk -F'\t' '{
		printf "| %s | %s | %s | %s | %d | %d | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s → %s (%s) | %s → %s (%s) | %s / %s |\n",
			$1, $2, $3, $4, $5, $6, $7, $8, sec($9), sec($10), sec($11), $12, $13, $14, $15, ($1 == "ingress" ? $16 : "–"), $17, $18, $19, $20, $21, $22, $23, $24
	}
	function sec(v) { return v == "-" ? "–" : v " s" }' "$RESULTS"
	echo
	echo "Columns: opened = connections served before the flood began; streams sent = HEADERS+RST_STREAM pairs written; reached target = /flood requests bench/target answered; target conns = connections it accepted during the flood, and the most it had open at once; verdict = the first GOAWAY ENHANCE_YOUR_CALM the attacker read or, for the ingress, the first /metrics sample with ingress_client_abuse_total up (250 ms apart), seconds after the flood began; gone after verdict = until the proxy served no attacking connection any more (– : no verdict, or some still served at the end); pre-opened gone = when the proxy had ended the last of the pre-opened connections (–: one lasted the whole flood); peaks over the pre-open, the flood and one second after (heap and goroutines from the ingress's /metrics every 250 ms; RSS and descriptors from /proc, the process group); bystander p99s over the quiet window and over the flood, and their failed requests (5 s timeout); CPU = the proxy's and the target's processes during the flood, in % of one core (each is pinned to one)."
}

main() {
	[[ $(nproc) -ge 2 ]] || die "needs at least 2 CPUs (proxy on one, load on the other)"
	command -v nginx >/dev/null && command -v haproxy >/dev/null && command -v curl >/dev/null && command -v openssl >/dev/null ||
		die "needs nginx, haproxy, curl and openssl (bench/compare installs them)"
	rm -rf "$RUN"
	mkdir -p "$RUN/logs" "$RUN/raw" "$RUN/bin"
	ulimit -n "$(ulimit -Hn)"
	LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
	RESULTS=$RUN/results.tsv
	: >"$RESULTS"
	build
	make_cert
	local i=0 px over conns
	for conns in $CONNS; do
		for over in $OVER; do
			for px in $PROXIES; do
				i=$((i + 1))
				measure "$px" "$over" "$conns" "127.0.0.$((10 + i))" "127.0.2.$((10 + i))"
			done
		done
	done
	local md
	md=$BENCH/out/flood-$(date -u +%Y-%m-%d-%H%M).md
	report >"$md"
	cat "$md"
	log "written to $md (raw output in $RUN/raw)"
}

main "$@"
