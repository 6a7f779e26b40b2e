#!/usr/bin/env bash
# rrc demo: checkpoint a live redis-server, kill it, restore it, and show
# that every key is back and that it serves new clients.
#
# (The checkpoint/restore demo of issue 2; `make demo` runs the failover
# demo, scripts/demo.sh. This one: `make demo-checkpoint`.)
#
# Run as root after `make` (or simply `make demo`). Everything it creates,
# the network namespace, the container, the images, is removed at the end,
# on failure too.
set -euo pipefail
cd "$(dirname "$0")/.."

RRC=${RRC:-target/release/rrc}
NS=rrc-demo-$$
PORT=6379
WORK=$(mktemp -d /tmp/rrc-demo.XXXXXX)
PID=

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
show() { printf '$ %s\n' "$*"; "$@"; }
cli() { ip netns exec "$NS" redis-cli -p "$PORT" "$@"; }

cleanup() {
	set +e
	if [ -n "$PID" ]; then "$RRC" kill --pid "$PID" >/dev/null 2>&1; fi
	ip netns del "$NS" 2>/dev/null
	rm -rf "$WORK"
}
trap cleanup EXIT

[ "$(id -u)" -eq 0 ] || { echo "demo: run as root (namespaces, cgroups)" >&2; exit 1; }
[ -x "$RRC" ] || { echo "demo: $RRC not found: run make first" >&2; exit 1; }

step "1. A network namespace for the demo: $NS"
show ip netns add "$NS"
show ip -n "$NS" link set lo up

step "2. Start redis-server protected by rrc (pid 1 of its own container, librrc.so preloaded)"
PID=$("$RRC" exec --netns "$NS" --log "$WORK/redis.log" -- \
	redis-server --save '' --appendonly no --port "$PORT" --bind 127.0.0.1 | tail -1)
echo "redis-server runs as pid $PID"
for _ in $(seq 100); do cli ping >/dev/null 2>&1 && break; sleep 0.05; done
cli ping

step "3. Load 10000 keys with redis-cli"
for i in $(seq 1 10000); do printf 'SET key:%d value-%d\n' "$i" "$i"; done | cli --pipe
cli dbsize

step "4. Full checkpoint, the server keeps running"
show "$RRC" dump --pid "$PID" --images "$WORK/ck0" --leave-running --json

step "5. Write more: 5000 new keys, 1000 overwritten"
for i in $(seq 10001 15000); do printf 'SET key:%d value-%d\n' "$i" "$i"; done | cli --pipe
for i in $(seq 1 1000); do printf 'SET key:%d changed-%d\n' "$i" "$i"; done | cli --pipe
cli dbsize

step "6. Incremental checkpoint (only the pages written since step 4); the process is then killed"
show "$RRC" dump --pid "$PID" --images "$WORK/ck1" --parent "$WORK/ck0" --json
for _ in $(seq 100); do [ -d "/proc/$PID" ] || break; sleep 0.05; done
PID=
echo "redis-server is gone:"
cli ping 2>&1 || true

step "7. The chain on disk"
show "$RRC" inspect --images "$WORK/ck1"

step "8. Restore it"
PID=$("$RRC" restore --images "$WORK/ck1" --netns "$NS" | tail -1)
echo "restored redis-server runs as pid $PID"
for _ in $(seq 100); do cli ping >/dev/null 2>&1 && break; sleep 0.05; done

step "9. Every key is back"
cli dbsize
bad=0
for i in 1 500 1000 1001 5000 10000 10001 15000; do
	want="value-$i"; [ "$i" -le 1000 ] && want="changed-$i"
	got=$(cli get "key:$i")
	printf 'key:%-6s %-14s %s\n' "$i" "$got" "$([ "$got" = "$want" ] && echo ok || echo "WRONG (want $want)")"
	[ "$got" = "$want" ] || bad=1
done
n=$(cli dbsize)
[ "$n" = 15000 ] || { echo "expected 15000 keys, found $n"; bad=1; }

step "10. It answers new clients"
show ip netns exec "$NS" redis-cli -p "$PORT" set hello "from after the restore"
show ip netns exec "$NS" redis-cli -p "$PORT" get hello
ip netns exec "$NS" redis-benchmark -p "$PORT" -n 10000 -t set,get -q

if [ "$bad" = 0 ]; then
	step "Done: redis-server was checkpointed, killed and restored with all its data."
else
	step "FAILED: data differs after the restore"
	exit 1
fi
