# rrc top level. `make demo` and `make test` are the README's two commands:
# both install what is missing first (scripts/setup.sh, idempotent).

PREFIX  ?= /usr/local
CARGO   ?= cargo
PYTEST  ?= python3 -m pytest

all: runtime rust

runtime:
	$(MAKE) -C runtime

rust:
	$(CARGO) build --release --locked

setup:
	bash scripts/setup.sh

install: all
	install -D -m 0755 target/release/rrc $(DESTDIR)$(PREFIX)/bin/rrc
	install -D -m 0755 target/release/rrc-check $(DESTDIR)$(PREFIX)/bin/rrc-check
	install -D -m 0755 runtime/build/librrc.so $(DESTDIR)$(PREFIX)/lib/rrc/librrc.so
	install -D -m 0755 runtime/build/rrc-restore $(DESTDIR)$(PREFIX)/lib/rrc/rrc-restore

# The whole suite: C unit checks, Rust tests (incl. shared vectors), and the
# pytest suite that drives real processes (root, namespaces).
test: setup all
	$(MAKE) -C runtime vectors
	$(CARGO) test --release --locked
	$(PYTEST) -v tests

demo: setup all
	bash scripts/demo.sh

# The checkpoint/restore demo of issue 2 (one process, no lab).
demo-checkpoint: setup all
	bash scripts/demo-checkpoint.sh

# Benchmarks are not tests: they measure and write bench/results/*.json|png.
bench: setup all
	python3 bench/checkpoint_pause.py
	python3 bench/checkpoint_pause.py --snapshot copy
	python3 bench/replication.py
	python3 bench/closing_connections.py
	python3 bench/failover_campaign.py
	python3 bench/wire_auth.py --rounds 10
	python3 bench/record.py
	python3 bench/replay.py

# Coverage-guided fuzzing of the network decoders (stable toolchain,
# libFuzzer): FUZZ_TIME seconds per target, corpus kept in fuzz/corpus
# (replayed by `make test`), findings in fuzz/regressions. See fuzz/README.md.
FUZZ_TIME ?= 60
fuzz:
	bash scripts/fuzz.sh --time $(FUZZ_TIME) $(FUZZ_TARGETS)

clean:
	$(MAKE) -C runtime clean
	$(CARGO) clean

.PHONY: all runtime rust setup install test demo demo-checkpoint bench fuzz clean
