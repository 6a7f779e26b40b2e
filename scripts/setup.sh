#!/usr/bin/env bash
# Installs what rrc's build, tests, demo and benchmark need and is missing.
#
# Idempotent and non-interactive: safe to run before every `make test` and in
# CI (CI=true, no stdin). When everything is present it only checks and exits
# (well under a second). Needs root (apt-get, and the tests need it anyway).
#
#   Debian packages  the servers the end-to-end tests protect and the client
#                    tools that load them; iproute2/iptables for namespaces.
#   Python modules   pytest and the clients the tests and bench use, installed
#                    with the machine's python3 (`python3 -m pip`).
#   Rust             cargo must already be there (rustup); we only check.
set -euo pipefail

log() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root (apt-get, namespaces, cgroups); try: sudo $0"

# ---- Debian packages --------------------------------------------------------
APT_PACKAGES=(
	redis-server redis-tools
	memcached libmemcached-tools
	lighttpd apache2-utils wrk curl
	iproute2 iptables procps
	etcd-server etcd-client openssl
)
# Services the packages above would start; they must not run outside the tests
# (they would hold the ports and the memory the tests and the demo use).
SERVICES=(redis-server memcached lighttpd etcd)

installed() { # PKG -> 0 if dpkg has it fully installed
	[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]
}

missing=()
for p in "${APT_PACKAGES[@]}"; do
	installed "$p" || missing+=("$p")
done

if [ "${#missing[@]}" -gt 0 ]; then
	command -v apt-get >/dev/null || die "apt-get not found: install by hand: ${missing[*]}"
	log "installing Debian packages: ${missing[*]}"
	# Keep maintainer scripts from starting the services: invoke-rc.d asks
	# policy-rc.d, and 101 means "action forbidden". Only remove the file if
	# we created it (some images ship one of their own).
	made_policy=0
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\n# temporary, by rrc scripts/setup.sh\nexit 101\n' > /usr/sbin/policy-rc.d
		chmod 0755 /usr/sbin/policy-rc.d
		made_policy=1
	fi
	cleanup_policy() { [ "$made_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d; return 0; }
	trap cleanup_policy EXIT
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq </dev/null
	apt-get install -y -qq --no-install-recommends \
		-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
		"${missing[@]}" </dev/null >/dev/null
	cleanup_policy
	trap - EXIT
	# Stop any service that started anyway (no policy-rc.d honoured, systemd).
	for s in "${SERVICES[@]}"; do
		if command -v systemctl >/dev/null && systemctl is-active --quiet "$s" 2>/dev/null; then
			log "stopping service $s"
			systemctl stop "$s" || true
		elif [ -x "/etc/init.d/$s" ] && "/etc/init.d/$s" status >/dev/null 2>&1; then
			log "stopping service $s"
			"/etc/init.d/$s" stop >/dev/null 2>&1 || true
		fi
	done
	for p in "${APT_PACKAGES[@]}"; do
		installed "$p" || die "package $p did not install"
	done
fi

# ---- Python modules -----------------------------------------------------------
command -v python3 >/dev/null || die "python3 not found (apt-get install python3 python3-pip)"
# module name to import -> PyPI package name
declare -A PY_MODULES=([pytest]=pytest [redis]=redis [pymemcache]=pymemcache [matplotlib]=matplotlib)
# find_spec only locates the module (no import): one fast python3 start.
py_absent() { python3 -c 'import importlib.util, sys
print(" ".join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))' "$@"; }
py_missing=()
for m in $(py_absent "${!PY_MODULES[@]}"); do py_missing+=("${PY_MODULES[$m]}"); done
if [ "${#py_missing[@]}" -gt 0 ]; then
	log "installing Python modules with $(command -v python3): ${py_missing[*]}"
	python3 -m pip --version >/dev/null 2>&1 || die "pip for python3 not found (apt-get install python3-pip)"
	pipopts=(--quiet --disable-pip-version-check --no-input --root-user-action=ignore)
	if ! python3 -m pip install "${pipopts[@]}" "${py_missing[@]}" </dev/null; then
		# Debian's own python3 refuses system-wide pip installs (PEP 668).
		python3 -m pip install "${pipopts[@]}" --break-system-packages "${py_missing[@]}" </dev/null
	fi
	still=$(py_absent "${!PY_MODULES[@]}")
	[ -z "$still" ] || die "python modules did not install: $still"
fi

# ---- Rust ---------------------------------------------------------------------
if ! command -v cargo >/dev/null; then
	if [ -x "$HOME/.cargo/bin/cargo" ]; then
		die "cargo is installed in $HOME/.cargo/bin but not on PATH: export PATH=\"\$HOME/.cargo/bin:\$PATH\""
	fi
	die "cargo not found: install Rust with rustup (https://rustup.rs), then re-run"
fi

# ---- Kernel -------------------------------------------------------------------
# PROCMAP_QUERY (6.11) is the newest interface rrc uses; older kernels fail
# at run time with a clear error, so this is only a warning here.
kver=$(uname -r)
kmaj=${kver%%.*}; krest=${kver#*.}; kmin=${krest%%[!0-9]*}
if [ "$kmaj" -lt 6 ] || { [ "$kmaj" -eq 6 ] && [ "$kmin" -lt 11 ]; }; then
	log "warning: Linux $kver is older than 6.11 (PROCMAP_QUERY); rrc will not work here"
fi

log "ok"
