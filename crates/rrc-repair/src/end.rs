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
pub fn silence(fd: &OwnedFd) -> std::io::Result<u32> {
    sys::setsockopt_int(fd, libc::SOL_TCP, sys::TCP_REPAIR, sys::TCP_REPAIR_ON)?;
    sys::setsockopt_int(fd, libc::SOL_TCP, sys::TCP_REPAIR_QUEUE, sys::TCP_SEND_QUEUE)?;
    let seq = sys::getsockopt_int(fd, libc::SOL_TCP, sys::TCP_QUEUE_SEQ)?;
    Ok(seq as u32)
}

