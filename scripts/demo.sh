#!/usr/bin/env bash
# rrc demo: redis protected in both of rrc's modes, their reply latency side
# by side, then the primary host killed under a checking client in rr mode:
# a failover by replay, the client carrying on.
#
#   1. `rrc lab up`: hosts client, a, b, c as network namespaces, an agent on
#      each of a, b, c;
#   2. `rrc run` twice, primary a, backup b: one redis in checkpoint mode
#      (NiLiCon: every reply held at b until the checkpoint covering it is
#      committed, one every 30 ms), one in rr mode (RRC: recorded, its log
#      sent straight to b, a reply released as soon as the log that
#      reproduces it is at b; checkpoints every 100 ms only bound the log);
#   3. the same paced load on each: reply latency p50/p99 side by side; the
#      checkpoint-mode service is stopped;
#   4. rrc-check on `client` against the rr-mode redis: 8 threads, each on
#      one long-lived connection, writing values and reading them back,
#      flagging any difference, any lost acknowledged write, any reset
#      connection;
#   5. `rrc lab kill a` while it runs: every process of a killed, its links cut;
#   6. b detects the silence, restores the last committed checkpoint,
#      rebuilds every client connection where its client stands, replays
#      the log up to the last reply the clients were sent, and goes live:
#      the client carries on;
#   7. `rrc status` prints the failover's timeline and what the replay did;
#      every acknowledged write is verified.
#
# Run as root after `make` (or simply `make demo`). The lab and everything in
# it is removed at the end, on failure too.
set -euo pipefail
cd "$(dirname "$0")/.."

RRC=${RRC:-$PWD/target/release/rrc}
CHECK=${CHECK:-$PWD/target/release/rrc-check}
WORK=$(mktemp -d /tmp/rrc-demo.XXXXXX)
chmod 755 "$WORK"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
show() { printf '$ %s\n' "$*"; "$@"; }

cleanup() {
	set +e
	"$RRC" lab down >/dev/null 2>&1
	rm -rf "$WORK"
}
trap cleanup EXIT

[ "$(id -u)" -eq 0 ] || { echo "demo: run as root (namespaces, cgroups)" >&2; exit 1; }
[ -x "$RRC" ] && [ -x "$CHECK" ] || { echo "demo: $RRC or $CHECK not found: run make first" >&2; exit 1; }
if [ -e /run/rrc-lab/lab.json ]; then
	echo "demo: a lab is already up (rrc lab status); take it down with 'rrc lab down' first" >&2
	trap - EXIT
	exit 1
fi

step "1. The lab: client, a, b, c on this machine, one agent per server host"
show "$RRC" lab up

wait_protected() {
	for _ in $(seq 100); do
		"$RRC" status "$1" --json 2>/dev/null | grep -q '"protected":true' && return 0
		sleep 0.1
	done
	echo "demo: $1 not protected after 10 s" >&2
	return 1
}
ip_of() { "$RRC" status "$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["service_ip"])'; }
REDIS=(redis-server --save '' --appendonly no --port 6379 --protected-mode no)

step "2. redis-server protected twice: primary a, backup b, in each mode"
show "$RRC" run --name kv-checkpoint --mode checkpoint --primary a --backup b --epoch 30ms -- "${REDIS[@]}"
show "$RRC" run --name kv --mode rr --primary a --backup b -- "${REDIS[@]}"
wait_protected kv-checkpoint
wait_protected kv
show "$RRC" status kv

step "3. Reply latency: 4 connections, 200 requests/s in all, 4 s each"
printf '%-12s %10s %10s %10s\n' mode p50_us p99_us errors
for svc in kv-checkpoint kv; do
	"$RRC" lab exec client -- "$CHECK" redis --server "$(ip_of $svc):6379" --threads 4 --duration 4s --rate 200 \
		--json 2>/dev/null | python3 -c '
import json, sys
r = json.load(sys.stdin)
mode = "checkpoint" if sys.argv[1] == "kv-checkpoint" else "rr"
print("%-12s %10d %10d %10d" % (mode, r["latency_us"]["p50"], r["latency_us"]["p99"], sum(r["errors"].values())))' "$svc" || true
done
echo "(checkpoint mode: a reply waits for the next commit; rr mode: for its log at the backup)"
show "$RRC" stop kv-checkpoint
IP=$(ip_of kv)

step "4. The checking client on host 'client': 8 connections to $IP:6379 for 12 s"
"$RRC" lab exec client -- "$CHECK" redis --server "$IP:6379" --threads 8 --duration 12s --rate 400 \
	--state "$WORK/state" --progress >"$WORK/check.out" 2>"$WORK/check.err" &
CLIENT=$!
sleep 4
tail -n 2 "$WORK/check.err" || true

step "5. Power off host a (the primary): rrc lab kill a"
show "$RRC" lab kill a

step "6. The client carries on (its progress, one line per second)"
wait "$CLIENT" && ok=1 || ok=0
cat "$WORK/check.err"
cat "$WORK/check.out"

step "7. The failover by replay, as host b's agent saw it"
show "$RRC" status kv

step "8. Every acknowledged write is there, on the same service IP"
show "$RRC" lab exec client -- "$CHECK" verify redis --server "$IP:6379" --state "$WORK/state"

if [ "$ok" = 1 ]; then
	printf '\n\033[1mThe client saw no error across the failover.\033[0m\n'
else
	printf '\n\033[1mThe client saw errors (above).\033[0m\n'
	exit 1
fi
