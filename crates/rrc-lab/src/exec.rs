//! `rrc lab exec HOST -- CMD...`: CMD runs in HOST's network namespace
//! (setns) and cgroup, with the caller's stdio and working directory, and
//! RRC_LAB_HOST=HOST and RRC_STATE_DIR=/var/lib/rrc-lab/HOST in its
//! environment. The mount namespace is the machine's (unlike `ip netns
//! exec`, /sys is not remounted): hosts share the file system, each with
//! its own state directory.

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;

use crate::error::{io, LabError};
use crate::ns;
use crate::topology::Lab;

/// A Command that, once spawned (or exec'd), runs in `host`: the child
/// joins the host's cgroup and network namespace between fork and exec.
pub fn command(lab: &Lab, host: &str, argv: &[OsString]) -> Result<Command, LabError> {
    let h = lab.live_host(host)?;
    let (program, args) = argv.split_first().ok_or_else(|| LabError::Other("lab exec: no command given".into()))?;
    let path = ns::netns_path(&h.netns);
    if ns::ns_id(&path).is_none() {
        return Err(LabError::State {
            path: path.display().to_string(),
            reason: format!("host {host}'s network namespace is missing (the lab is damaged: `rrc lab down`, then `rrc lab up`)"),
        });
    }
    let netns = std::fs::File::open(&path).map_err(io(format!("opening {}", path.display())))?;
    let procs_path = format!("{}/cgroup.procs", h.cgroup);
    let mut procs = std::fs::OpenOptions::new().write(true).open(&procs_path).map_err(io(format!("opening {procs_path}")))?;
    let mut cmd = Command::new(program);
    cmd.args(args).env("RRC_LAB_HOST", &h.name).env("RRC_STATE_DIR", &h.state_dir);
    // SAFETY: the closure runs between fork and exec and makes only two
    // plain syscalls (write, setns) on fds it owns.
    unsafe {
        cmd.pre_exec(move || {
            // "0" moves the writing process.
            procs.write_all(b"0")?;
            if libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(cmd)
}

/// Replaces this process with CMD on `host` (so stdio, signals and the
/// exit status are CMD's own). Returns only on failure; the error's io
/// kind tells "not found" from other failures.
pub fn exec(lab: &Lab, host: &str, argv: &[OsString]) -> (LabError, Option<std::io::ErrorKind>) {
    let mut cmd = match command(lab, host, argv) {
        Ok(c) => c,
        Err(e) => return (e, None),
    };
    let e = cmd.exec();
    let kind = e.kind();
    (LabError::Io { what: format!("running {:?} on host {host}", argv[0]), source: e }, Some(kind))
}
