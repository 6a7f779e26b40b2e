//! Waiting for what a started container reports: rrc-restore's status
//! record, then the library's PONG; with a useful diagnosis (how the
//! process ended, the end of its log) when it does not come.

use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use rrc_container::{liveness, Container, Liveness};
use rrc_control::{ControlError, Pong};

use crate::status::{self, RestoreStatus};

/// How long the library may take to answer PING once the process runs.
pub const PING_TIMEOUT: Duration = Duration::from_secs(10);
/// rrc-restore maps and fills the whole chain before it reports.
pub const STATUS_TIMEOUT: Duration = Duration::from_secs(120);

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
        Liveness::Running => "is still running".into(),
        Liveness::Gone => "is gone".into(),
    }
}

/// Reads the one status record rrc-restore writes on the pipe whose read
/// end is `r`; EOF first means the restorer died without reporting.
pub fn read_status(r: OwnedFd, c: &Container) -> Result<RestoreStatus> {
    let mut f = std::fs::File::from(r);
    let mut buf = [0u8; status::SIZE];
    let mut got = 0;
    let deadline = Instant::now() + STATUS_TIMEOUT;
    while got < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            bail!("rrc-restore (pid {}) sent no status within {STATUS_TIMEOUT:?}; {}", c.pid(), log_tail(&c.record.log));
        }
        let mut pfd = libc::pollfd { fd: f.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one pollfd on the stack.
        let n = unsafe { libc::poll(&mut pfd, 1, left.as_millis().min(1000) as i32) };
        if n <= 0 {
            continue;
        }
        match f.read(&mut buf[got..]) {
            Ok(0) => {
                // Give the exit status a moment to be collectable.
                let mut l = liveness(c.pid());
                let t = Instant::now();
                while l == Liveness::Running && t.elapsed() < Duration::from_secs(2) {
                    std::thread::sleep(Duration::from_millis(10));
                    l = liveness(c.pid());
                }
                bail!(
                    "rrc-restore (pid {}) closed its status fd without reporting (it {}); {}",
                    c.pid(),
                    describe_exit(l),
                    log_tail(&c.record.log)
                );
            }
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(anyhow!(e).context("reading rrc-restore's status")),
        }
    }
    status::parse(&buf).map_err(|m| anyhow!("rrc-restore: {m}")).context("reading rrc-restore's status")
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

/// Polls a restored library (its control socket) until its replay is
/// live or diverged. `wait` bounds the whole; the library's own watchdog
/// (no progress for its timeout) turns a stuck replay into a divergence
/// well before. `rrc restore --replay` and a failover in rr mode use it.
pub fn watch_replay(control: &Path, wait: Duration) -> Result<rrc_control::ReplayState> {
    use rrc_control::ReplayPhase;
    let deadline = Instant::now() + wait;
    loop {
        let s = rrc_control::replay_status(control, Duration::from_secs(5)).context("asking the restored process how its replay goes")?;
        match s.phase {
            ReplayPhase::Live | ReplayPhase::Diverged => return Ok(s),
            ReplayPhase::None => bail!("the restored process replays nothing (its library did not take the log)"),
            ReplayPhase::Running => {}
        }
        if Instant::now() >= deadline {
            bail!("the replay did not finish within {wait:?}: {} of {} events", s.events_done, s.events_total);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
