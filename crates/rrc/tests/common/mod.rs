//! What the `rrc` integration tests share: the binary under test and the
//! check that the C runtime they need is built (a test that quietly passes
//! without its subject proves nothing).
#![allow(dead_code)] // each test crate uses its own subset

use std::path::PathBuf;
use std::process::{Command, Output};

/// `rrc`, with the caller's log level left out (tests read its output).
pub fn rrc() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rrc"));
    c.env_remove("RRC_LOG");
    c
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// A container `rrc exec` started and the directory of its files: both
/// removed when dropped, pass or fail.
pub struct Container {
    pub pid: i32,
    pub dir: PathBuf,
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = rrc().args(["kill", "--pid", &self.pid.to_string()]).output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The pid `rrc exec` printed on the last line of its stdout.
pub fn exec_pid(out: &Output) -> i32 {
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap_or_default().trim();
    last.parse().unwrap_or_else(|e| panic!("rrc exec printed no pid ({e}): {text}"))
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
