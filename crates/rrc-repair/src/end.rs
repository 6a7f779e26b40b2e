//! Ending connections a failover cannot carry on, without a wrong byte on
//! the wire (docs/tcp-repair.md "Resetting, silencing").
//!
//! - [`reset`]: a connection that cannot be rebuilt is reset, so that its
//!   client learns at once (one waiting for a reply sends nothing and
//!   would wait forever): a socket made at the client's view of the
//!   connection ([`crate::spec_to_reset`]) is closed with SO_LINGER 0.
//! - [`silence`]: a socket of a replay that diverged is about to be
//!   closed with its process; in repair mode its close sends nothing (no
//!   FIN, no RST: the kernel's tcp_disconnect skips both for a socket in
//!   repair), so the client's connection stays as it was for the fallback
//!   to rebuild. Also says how far the socket had written.

use std::os::fd::OwnedFd;

use crate::error::RepairError;
use crate::spec::RepairSpec;
use crate::sys;

/// Builds `spec`'s socket in the calling thread's network namespace and
/// closes it with an RST.
pub fn reset(spec: &RepairSpec) -> Result<(), RepairError> {
    let fd = crate::repair(spec)?;
    let linger = libc::linger { l_onoff: 1, l_linger: 0 };
    sys::setsockopt(&fd, libc::SOL_SOCKET, libc::SO_LINGER, &[linger]).map_err(|source| RepairError::Sys {
        local: spec.local,
        remote: spec.remote,
        step: "SO_LINGER 0 (to reset)".into(),
        source,
    })?;
    drop(fd);
    Ok(())
}

/// Puts `fd`'s connection into repair mode (so that closing it, here or in
/// any process holding it, sends nothing) and returns its write_seq: the
/// sequence number just past everything written on it.
pub fn silence(fd: &OwnedFd) -> std::io::Result<Silenced> {
    sys::setsockopt_int(fd, libc::SOL_TCP, sys::TCP_REPAIR, sys::TCP_REPAIR_ON)?;
    sys::setsockopt_int(fd, libc::SOL_TCP, sys::TCP_REPAIR_QUEUE, sys::TCP_SEND_QUEUE)?;
    let written = sys::getsockopt_int(fd, libc::SOL_TCP, sys::TCP_QUEUE_SEQ)? as u32;
    // read in repair mode: nothing more goes out between the two
    let info: libc::tcp_info = sys::getsockopt_struct(fd, libc::SOL_TCP, libc::TCP_INFO)?;
    Ok(Silenced { written, sent: written.wrapping_sub(info.tcpi_notsent_bytes) })
}

/// How far a silenced socket had got (absolute sequence numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Silenced {
    /// write_seq: past every byte the process wrote.
    pub written: u32,
    /// snd_nxt: past every byte that went out; its client holds at most
    /// the bytes up to it.
    pub sent: u32,
}

