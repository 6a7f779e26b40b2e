#!/usr/bin/env bash
# rrc demo: a replicated redis-server in the lab, a client that checks every
# reply, the primary host killed, the client carrying on.
#
#   1. `rrc lab up`: hosts client, a, b, c as network namespaces, an agent on
#      each of a, b, c;
#   2. `rrc run`: redis on a, its backup on b (checkpoint every 30 ms, every
#      reply held at b until the checkpoint covering it is committed);
#   3. rrc-check on `client`: 8 threads, each on one long-lived connection,
#      writing values and reading them back, flagging any difference, any
#      lost acknowledged write, any reset connection;
#   4. `rrc lab kill a` while it runs: every process of a killed, its links cut;
#   5. b detects the silence, restores the last committed checkpoint, repairs
#      the client connections, and goes live: the client carries on;
#   6. `rrc status` prints the failover's timeline.
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

step "2. redis-server protected: primary a, backup b, a checkpoint every 30 ms"
show "$RRC" run --name kv --primary a --backup b --epoch 30ms -- \
	redis-server --save '' --appendonly no --port 6379 --protected-mode no
for _ in $(seq 100); do
	"$RRC" status kv --json 2>/dev/null | grep -q '"protected":true' && break
	sleep 0.1
done
show "$RRC" status kv
IP=$("$RRC" status kv --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["service_ip"])')

step "3. The checking client on host 'client': 8 connections to $IP:6379 for 12 s"
"$RRC" lab exec client -- "$CHECK" redis --server "$IP:6379" --threads 8 --duration 12s --rate 400 \
	--state "$WORK/state" --progress >"$WORK/check.out" 2>"$WORK/check.err" &
CLIENT=$!
sleep 4
tail -n 2 "$WORK/check.err" || true

step "4. Power off host a (the primary): rrc lab kill a"
show "$RRC" lab kill a

step "5. The client carries on (its progress, one line per second)"
wait "$CLIENT" && ok=1 || ok=0
cat "$WORK/check.err"
cat "$WORK/check.out"

step "6. The failover, as host b's agent saw it"
show "$RRC" status kv

step "7. Every acknowledged write is there, on the same service IP"
show "$RRC" lab exec client -- "$CHECK" verify redis --server "$IP:6379" --state "$WORK/state"

if [ "$ok" = 1 ]; then
	printf '\n\033[1mThe client saw no error across the failover.\033[0m\n'
else
	printf '\n\033[1mThe client saw errors (above).\033[0m\n'
	exit 1
fi
