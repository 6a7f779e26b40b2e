//! Waiting for a container's library to answer PING, with a useful
//! diagnosis when it does not.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use rrc_container::{liveness, Container, Liveness};
use rrc_control::{ControlError, Pong};

pub const PING_TIMEOUT: Duration = Duration::from_secs(10);

/// The last lines of the log, for error messages.
pub fn log_tail(log: &Path) -> String {
    if log == Path::new("/dev/null") {
        return "(its output went to /dev/null; use --log FILE to keep it)".into();
    }
    match std::fs::read(log) {
        Ok(b) => {
            let from = b.len().saturating_sub(4096);
            let text = String::from_utf8_lossy(&b[from..]);
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(20)..];
            if tail.is_empty() {
                format!("(log {} is empty)", log.display())
            } else {
                format!("last lines of {}:\n    {}", log.display(), tail.join("\n    "))
            }
        }
        Err(e) => format!("(cannot read log {}: {e})", log.display()),
    }
}

fn describe_exit(l: Liveness) -> String {
    match l {
        Liveness::Exited(c) => format!("exited with status {c}"),
        Liveness::Signaled(s) => format!("was killed by signal {s}"),
        _ => "exited".into(),
    }
}

/// Whether librrc.so is mapped in the process.
fn library_mapped(pid: i32) -> Option<bool> {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).ok().map(|m| m.lines().any(|l| l.ends_with("/librrc.so")))
}

/// PINGs the container's control socket until a PONG arrives (with
/// `restored == 1` when `want_restored`), the process exits, or
/// PING_TIMEOUT passes.
pub fn wait_for_pong(c: &Container, want_restored: bool) -> Result<Pong> {
    let pid = c.pid();
    let sock = c.control_socket();
    let deadline = Instant::now() + PING_TIMEOUT;
    let mut last: String;
    loop {
        let l = liveness(pid);
        if l != Liveness::Running {
            bail!("pid {pid} {} before its library answered PING; {}", describe_exit(l), log_tail(&c.record.log));
        }
        match rrc_control::ping(&sock, Duration::from_secs(2)) {
            Ok(p) if !want_restored || p.restored == 1 => return Ok(p),
            Ok(p) => last = format!("PONG with restored={}", p.restored),
            Err(ControlError::Connect { source, .. }) => last = format!("connect: {source}"),
            Err(e) => last = e.to_string(),
        }
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let why = match library_mapped(pid) {
        Some(false) => "librrc.so is not loaded in the process (LD_PRELOAD did not take effect: is the library there and built for this system? a static binary cannot preload)".to_string(),
        Some(true) => format!("librrc.so is loaded but its control socket does not answer (last attempt: {last})"),
        None => format!("last attempt: {last}"),
    };
    bail!(
        "pid {pid} did not answer PING on {} within {PING_TIMEOUT:?}: {why}; {}",
        sock.display(),
        log_tail(&c.record.log)
    )
}
