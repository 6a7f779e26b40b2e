#!/bin/bash
# A/B of two rrc binaries (agents, gate) on rr mode at saturation, in
# alternation: per round and binary, `rrc lab up`, the server protected in
# rr mode (primary a, backup b, epoch 100 ms), 3 s, then rrc-check with 64
# connections for 8 s; prints "round binary ok ops/s mean_us p99_us
# pause_p50_us pause_p99_us" (the primary's pauses over the service's
# life, the 3 idle seconds included).
# Each binary runs with the library (runtime/build) of its own tree when
# it sits in one (TREE/target/release/rrc), else this tree's; rrc-check is
# this tree's for both.
# Holds the lab lock of the test suite; refuses to run if a lab is up.
# AB_OLD_ENV / AB_NEW_ENV: VAR=VALUE words set for that side's `rrc lab
# up` (so for its agents), e.g. one binary against itself with
# AB_OLD_ENV=RRC_GATE_OUTPUT=nfqueue AB_NEW_ENV=RRC_GATE_OUTPUT=xdp.
# AB_OLD_RUN / AB_NEW_RUN: extra words for that side's `rrc run` (the
# service's environment goes there, not through the agents), e.g.
# AB_NEW_RUN='--env RRC_PRECOPY_PASSES=0'.
#
#   bench/ab_rr_saturation.sh OLD_RRC NEW_RRC [ROUNDS] [redis|memcached]
set -eu
old=$1 new=$2 rounds=${3:-4} kind=${4:-redis}
old_env=${AB_OLD_ENV:-} new_env=${AB_NEW_ENV:-}
old_run=${AB_OLD_RUN:-} new_run=${AB_NEW_RUN:-}
here=$(cd "$(dirname "$0")/.." && pwd)
libdir_of() {
	local d
	d=$(cd "$(dirname "$1")/../.." && pwd)/runtime/build
	if [ -f "$d/librrc.so" ]; then echo "$d"; else echo "$here/runtime/build"; fi
}
check=$here/target/release/rrc-check
case $kind in
	redis) server=(redis-server --port 6379 --save '' --appendonly no --protected-mode no) port=6379 ;;
	memcached) server=(memcached -t 4 -p 11211 -U 0 -u root -m 64) port=11211 ;;
	*) echo "unknown server $kind" >&2; exit 2 ;;
esac
exec 9>/run/lock/rrc-lab-tests.lock
flock 9
if "$old" lab status --json | grep -q '"up": *true'; then echo "a lab is up already" >&2; exit 1; fi
for round in $(seq "$rounds"); do
	for which in old new; do
		rrc=${!which}
		export RRC_LIBDIR; RRC_LIBDIR=$(libdir_of "$rrc")
		trap '"$rrc" stop ab >/dev/null 2>&1 || true; "$rrc" lab down >/dev/null 2>&1 || true' EXIT
		side_env=${which}_env
		# shellcheck disable=SC2086 # VAR=VALUE words
		env ${!side_env} "$rrc" lab up >/dev/null
		side_run=${which}_run
		# shellcheck disable=SC2086 # extra words for rrc run
		ip=$("$rrc" run --name ab --primary a --backup b --mode rr --epoch 100ms ${!side_run} --json -- "${server[@]}" |
			python3 -c 'import json,sys; print(json.load(sys.stdin)["service_ip"])')
		sleep 3
		load=$("$rrc" lab exec client -- "$check" "$kind" --server "$ip:$port" --threads 64 --duration 8s --json)
		status=$("$rrc" status ab --json)
		python3 -c 'import json,sys; d=json.loads(sys.argv[3]); l=d["latency_us"]; st=json.loads(sys.argv[4])["primary_view"]["stats"]
print(sys.argv[1], sys.argv[2], d["ok"], round(d["throughput_ops_s"]), l["mean"], l["p99"], st["pause_us_p50"], st["pause_us_p99"])' \
			"$round" "$which" "$load" "$status"
		"$rrc" stop ab >/dev/null 2>&1 || true
		"$rrc" lab down >/dev/null
	done
done
