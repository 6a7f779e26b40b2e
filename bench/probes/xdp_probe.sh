#!/bin/bash
# An AF_XDP pass-through of the server's packets on the backup host,
# against an NFQUEUE pass-through and plain routing (bench/README.md,
# "path_costs", "AF_XDP"). Not part of `make`: it needs
#   apt-get install clang libbpf-dev libxdp-dev ethtool
# and builds its two programs into a temporary directory. The unprotected
# redis on lab host a, reached at 10.77.0.1 through b (as path_costs.py
# sets it up); a's link to b has its transmit checksums computed in
# software (`ethtool -K repl tx off`: a packet taken by XDP off a veth
# carries no checksum otherwise), for every configuration of the run.
# Takes the lab lock, refuses if a lab is up; prints "config ok ops/s
# mean_us" per run, ROUNDS rounds in alternation.
#   bench/probes/xdp_probe.sh [ROUNDS]
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
R=$here/target/release/rrc
C=$here/target/release/rrc-check
P=$here/target/release/examples/nfq_passthrough
rounds=${1:-4}
for t in clang gcc ethtool; do command -v $t >/dev/null || { echo "needs $t (see the header)" >&2; exit 2; }; done
X=$(mktemp -d)
clang -O2 -target bpf -I/usr/include/x86_64-linux-gnu -c "$here/bench/probes/xdp_redirect.bpf.c" -o "$X/redirect.bpf.o" || exit 2
gcc -O2 -Wall -o "$X/xdp_gate" "$here/bench/probes/xdp_gate.c" -lxdp -lbpf || exit 2
(cd "$here" && cargo build --release --locked -q --example nfq_passthrough -p rrc-gate) || exit 2
exec 9>/run/lock/rrc-lab-tests.lock; flock 9
if "$R" lab status --json | grep -q '"up": *true'; then echo "a lab is up already" >&2; exit 1; fi
ex() { "$R" lab exec "$@"; }
cleanup() { pkill -f "redis-server \*:6390"; pkill -f "$P"; pkill -f "$X/xdp_gate"; "$R" lab down >/dev/null 2>&1; rm -rf "$X"; }
trap cleanup EXIT
"$R" lab up >/dev/null
ex a -- redis-server --port 6390 --save '' --appendonly no --protected-mode no --daemonize yes >/dev/null
ex a -- ip addr add 10.77.0.1/32 dev lo
ex a -- ip rule add from 10.77.0.1 table 177
ex a -- ip route add default via 198.19.0.2 dev repl table 177
ex client -- ip route add 10.77.0.1/32 via 198.18.0.2
ex b -- ip route add 10.77.0.1/32 via 198.19.0.1 dev repl
for h in a b; do ex $h -- sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 net.ipv4.conf.repl.rp_filter=0 net.ipv4.conf.front.rp_filter=0; done
ex a -- ethtool -K repl tx off >/dev/null
cmac=$(ex client -- ip -br link show front | awk '{print $3}')
run() {
	out=$(ex client -- "$C" redis --server "$2:6390" --threads 64 --duration 6s --json)
	python3 -c 'import json,sys; d=json.loads(sys.argv[2]); print(sys.argv[1], d["ok"], round(d["throughput_ops_s"]), round(d["latency_us"]["mean"]))' "$1" "$out"
}
for r in $(seq "$rounds"); do
	run direct 198.18.0.1
	run routed 10.77.0.1
	ex b -- "$P" 200 & sleep 0.3
	ex b -- iptables -I FORWARD -s 10.77.0.1 -j NFQUEUE --queue-num 200
	run routed_nfq_out 10.77.0.1
	pkill -f "$P"; sleep 0.2; ex b -- iptables -F FORWARD
	ex b -- "$X/xdp_gate" repl front "$cmac" "$X/redirect.bpf.o" 2>/dev/null & sleep 0.5
	run routed_xdp_out 10.77.0.1
	pkill -f "$X/xdp_gate"; sleep 0.3; ex b -- ip link set dev repl xdp off 2>/dev/null
done
