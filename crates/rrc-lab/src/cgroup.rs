//! The lab's cgroup v2 tree: /sys/fs/cgroup/unified/rrc-lab/HOST. Every
//! process started with `rrc lab exec` joins its host's group, so that
//! `cgroup.kill` ends all of them at once (kill) and down finds them all.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::{io, LabError};

const EMPTY_TIMEOUT: Duration = Duration::from_secs(10);

pub fn procs(dir: &Path) -> std::io::Result<Vec<i32>> {
    let s = std::fs::read_to_string(dir.join("cgroup.procs"))?;
    Ok(s.split_whitespace().filter_map(|w| w.parse().ok()).collect())
}

/// Number of processes in the group and every group below it.
pub fn count_recursive(dir: &Path) -> usize {
    let mut n = procs(dir).map(|p| p.len()).unwrap_or(0);
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.filter_map(|e| e.ok()) {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                n += count_recursive(&e.path());
            }
        }
    }
    n
}

/// `cgroup.kill` (SIGKILL to every process of the group and its
/// descendants, atomically with respect to forks), then waits until the
/// group is empty.
pub fn kill(dir: &Path) -> Result<(), LabError> {
    if !dir.exists() {
        return Ok(());
    }
    std::fs::write(dir.join("cgroup.kill"), "1").map_err(io(format!("writing 1 to {}/cgroup.kill", dir.display())))?;
    let deadline = Instant::now() + EMPTY_TIMEOUT;
    loop {
        let n = count_recursive(dir);
        if n == 0 {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(LabError::Other(format!(
                "{} still holds {n} process(es) {EMPTY_TIMEOUT:?} after cgroup.kill",
                dir.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Kills everything in the tree at `dir` and removes it, depth first.
pub fn remove_tree(dir: &Path) -> Result<(), LabError> {
    if !dir.exists() {
        return Ok(());
    }
    kill(dir)?;
    let rd = std::fs::read_dir(dir).map_err(io(format!("listing {}", dir.display())))?;
    for e in rd.filter_map(|e| e.ok()) {
        if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            remove_tree(&e.path())?;
        }
    }
    // A group can stay busy for a moment after its last task is gone.
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => return Err(io(format!("removing the cgroup {}", dir.display()))(e)),
        }
    }
}
