//! ASYNC-SIGNAL-SAFE: everything in this file runs in a child of fork() of
//! a possibly multi-threaded process (the test harness, later the agent),
//! where another thread may have held the allocator's lock at fork time.
//! Only raw libc calls on data prepared before the fork; no allocation, no
//! locks, no Rust I/O, no panics. Failures are reported to the parent as a
//! fixed 12-byte record on the status pipe and end the process with _exit.

use std::ffi::{c_char, CStr};
use std::os::fd::RawFd;

/// Records written on the status pipe: [tag: u32][a: i32][b: i32], native
/// endian (same machine). Each is < PIPE_BUF, so writes are atomic.
pub(crate) const TAG_PID: u32 = 1; // a = grandchild pid as seen by the caller
pub(crate) const TAG_FAIL: u32 = 2; // a = Stage, b = errno
pub(crate) const RECORD_SIZE: usize = 12;

/// Where in the container start-up a failure happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum Stage {
    Setsid = 1,
    Unshare = 2,
    Setns = 3,
    Fork = 4,
    MountPrivate = 5,
    MountProc = 6,
    MountTmpfs = 7,
    CgroupJoin = 8,
    Stdio = 9,
    PassFd = 10,
    Signals = 11,
    Exec = 12,
    CloseRange = 13,
    Bind = 14,
}

impl Stage {
    pub(crate) fn from_raw(v: i32) -> Option<Stage> {
        use Stage::*;
        Some(match v {
            1 => Setsid,
            2 => Unshare,
            3 => Setns,
            4 => Fork,
            5 => MountPrivate,
            6 => MountProc,
            7 => MountTmpfs,
            8 => CgroupJoin,
            9 => Stdio,
            10 => PassFd,
            11 => Signals,
            12 => Exec,
            13 => CloseRange,
            14 => Bind,
            _ => return None,
        })
    }

    pub fn describe(self) -> &'static str {
        match self {
            Stage::Setsid => "setsid() in the intermediate process",
            Stage::Unshare => "unshare(CLONE_NEWPID|CLONE_NEWNS|CLONE_NEWUTS|CLONE_NEWIPC)",
            Stage::Setns => "setns() into the network namespace",
            Stage::Fork => "fork() of the container's pid 1",
            Stage::MountPrivate => "making / rprivate in the new mount namespace",
            Stage::MountProc => "mounting a fresh proc on /proc",
            Stage::MountTmpfs => "mounting a tmpfs on /run/rrc-container",
            Stage::CgroupJoin => "joining the container's cgroup",
            Stage::Stdio => "redirecting stdio to the log",
            Stage::PassFd => "installing a passed fd at its number",
            Stage::Signals => "resetting signal mask and dispositions",
            Stage::Exec => "execve() of the command",
            Stage::CloseRange => "marking inherited fds close-on-exec",
            Stage::Bind => "bind-mounting a data directory",
        }
    }
}

/// Everything the children need, prepared by the parent before fork().
pub(crate) struct InitPlan<'a> {
    pub status_w: RawFd,
    pub netns_fd: Option<RawFd>,
    pub cgroup_procs_fd: RawFd,
    pub stdin_fd: RawFd,
    pub log_fd: RawFd,
    /// (source, target) pairs; every source is above every target.
    pub pass_fds: &'a [(RawFd, RawFd)],
    /// (host dir, target) pairs, both NUL-terminated, target existing.
    pub binds: &'a [(*const c_char, *const c_char)],
    pub program: &'a CStr,
    pub argv: &'a [*const c_char],
    pub envp: &'a [*const c_char],
}

fn errno() -> i32 {
    // SAFETY: reading the thread's errno location.
    unsafe { *libc::__errno_location() }
}

fn report(fd: RawFd, tag: u32, a: i32, b: i32) {
    let mut rec = [0u8; RECORD_SIZE];
    rec[0..4].copy_from_slice(&tag.to_ne_bytes());
    rec[4..8].copy_from_slice(&a.to_ne_bytes());
    rec[8..12].copy_from_slice(&b.to_ne_bytes());
    // SAFETY: plain write of a stack buffer; nothing to do if it fails.
    unsafe {
        libc::write(fd, rec.as_ptr() as *const libc::c_void, RECORD_SIZE);
    }
}

fn fail(plan: &InitPlan<'_>, stage: Stage) -> ! {
    report(plan.status_w, TAG_FAIL, stage as i32, errno());
    // SAFETY: _exit never returns and runs no atexit handlers.
    unsafe { libc::_exit(127) }
}

/// The intermediate process: new session, new namespaces, then fork the
/// container's pid 1, report its pid and exit. Never returns.
pub(crate) fn intermediate(plan: &InitPlan<'_>) -> ! {
    // SAFETY (whole block): raw syscalls on fds and pointers prepared before
    // fork; see the file comment.
    unsafe {
        if libc::setsid() < 0 {
            fail(plan, Stage::Setsid);
        }
        if libc::unshare(libc::CLONE_NEWPID | libc::CLONE_NEWNS | libc::CLONE_NEWUTS | libc::CLONE_NEWIPC) < 0 {
            fail(plan, Stage::Unshare);
        }
        if let Some(fd) = plan.netns_fd {
            if libc::setns(fd, libc::CLONE_NEWNET) < 0 {
                fail(plan, Stage::Setns);
            }
        }
        match libc::fork() {
            -1 => fail(plan, Stage::Fork),
            0 => container_init(plan),
            pid => {
                // fork() returned the pid in *our* pid namespace, which is the
                // caller's: unshare(CLONE_NEWPID) only affects children.
                report(plan.status_w, TAG_PID, pid, 0);
                libc::_exit(0)
            }
        }
    }
}

/// Pid 1 of the new pid namespace: mounts, cgroup, stdio, exec.
fn container_init(plan: &InitPlan<'_>) -> ! {
    const ROOT: &CStr = c"/";
    const PROC: &CStr = c"proc";
    const PROC_DIR: &CStr = c"/proc";
    const TMPFS: &CStr = c"tmpfs";
    const RUN_DIR: &CStr = c"/run/rrc-container";
    const TMPFS_OPTS: &CStr = c"mode=0755";
    // SAFETY (whole block): as above.
    unsafe {
        // Our mounts must not propagate back to the host's namespace.
        if libc::mount(std::ptr::null(), ROOT.as_ptr(), std::ptr::null(), libc::MS_REC | libc::MS_PRIVATE, std::ptr::null()) < 0 {
            fail(plan, Stage::MountPrivate);
        }
        // The library reads /proc/self: it must be this pid namespace's proc.
        if libc::mount(PROC.as_ptr(), PROC_DIR.as_ptr(), PROC.as_ptr(), libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC, std::ptr::null()) < 0 {
            fail(plan, Stage::MountProc);
        }
        if libc::mount(
            TMPFS.as_ptr(),
            RUN_DIR.as_ptr(),
            TMPFS.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            TMPFS_OPTS.as_ptr() as *const libc::c_void,
        ) < 0
        {
            fail(plan, Stage::MountTmpfs);
        }
        // Data directories: after the private remount, so they stay
        // invisible to the host's namespace.
        for &(host, target) in plan.binds {
            if libc::mount(host, target, std::ptr::null(), libc::MS_BIND | libc::MS_REC, std::ptr::null()) < 0 {
                fail(plan, Stage::Bind);
            }
        }
        // "0" means the writing process (cgroup v2).
        if libc::write(plan.cgroup_procs_fd, c"0".as_ptr() as *const libc::c_void, 1) != 1 {
            fail(plan, Stage::CgroupJoin);
        }
        if libc::dup2(plan.stdin_fd, 0) < 0 || libc::dup2(plan.log_fd, 1) < 0 || libc::dup2(plan.log_fd, 2) < 0 {
            fail(plan, Stage::Stdio);
        }
        // Whatever the caller left open must not leak into the service (it
        // would end up in its checkpoint image). The status pipe is already
        // close-on-exec and keeps working until exec.
        if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC) < 0 {
            fail(plan, Stage::CloseRange);
        }
        for &(src, target) in plan.pass_fds {
            // dup2 clears FD_CLOEXEC on the new descriptor.
            if libc::dup2(src, target) < 0 {
                fail(plan, Stage::PassFd);
            }
        }
        // Rust ignores SIGPIPE; ignored dispositions survive exec.
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        if libc::signal(libc::SIGPIPE, libc::SIG_DFL) == libc::SIG_ERR
            || libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut()) < 0
        {
            fail(plan, Stage::Signals);
        }
        libc::execve(plan.program.as_ptr(), plan.argv.as_ptr(), plan.envp.as_ptr());
        fail(plan, Stage::Exec)
    }
}
