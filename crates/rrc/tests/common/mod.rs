//! What the `rrc` integration tests share: the binary under test and the
//! check that the C runtime they need is built (a test that quietly passes
//! without its subject proves nothing).
#![allow(dead_code)] // each test crate uses its own subset

use std::path::PathBuf;
use std::process::Command;

/// `rrc`, with the caller's log level left out (tests read its output).
pub fn rrc() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rrc"));
    c.env_remove("RRC_LOG");
    c
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// runtime/build (or $RRC_LIBDIR) holds librrc.so and rrc-restore.
pub fn require_runtime() {
    let b = std::env::var_os("RRC_LIBDIR").map(PathBuf::from).unwrap_or_else(|| repo().join("runtime/build"));
    assert!(
        b.join("librrc.so").is_file() && b.join("rrc-restore").is_file(),
        "librrc.so or rrc-restore missing in {} (run `make runtime`)",
        b.display()
    );
}
