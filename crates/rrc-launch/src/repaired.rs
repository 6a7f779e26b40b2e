//! Handing repaired TCP sockets to rrc-restore (docs/restore.md,
//! "Repaired connections").
//!
//! The restorer gets one end of a SOCK_SEQPACKET socketpair at
//! [`REPAIRED_FD`] (`--repaired-fds 4`). On the other end the launcher
//! sends one message per socket: SCM_RIGHTS carrying the socket, data the
//! fd number it must get in the restored process (int32, native byte
//! order: same machine), then closes its end; the restorer reads until EOF
//! before it places any fd. SEQPACKET keeps each number with its socket:
//! a stream socket may merge or split the data of consecutive messages.
//!
//! A connection not yet accepted by the application (it was in a
//! listener's kernel queue at the checkpoint) goes as a message whose data
//! is two int32s: its listener's fd number and [`ACCEPT_QUEUE_TAG`]
//! (runtime/include/rrc/accept-queue.h); rrc-restore lists those, in the
//! order sent, for the restored library's accept() wrapper.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use anyhow::{anyhow, Context, Result};

/// The fd number the restorer finds the channel at.
pub const REPAIRED_FD: RawFd = 4;

/// Second int32 of a message for the accept queue (RRC_ACCEPT_QUEUE_TAG).
pub const ACCEPT_QUEUE_TAG: i32 = 1;

/// How long one send may block: the restorer reads the channel right after
/// parsing its command line, so only a restorer that hangs makes it wait.
const SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// (our end, the restorer's end), both close-on-exec.
pub(crate) fn channel() -> Result<(OwnedFd, OwnedFd)> {
    let mut sv = [0 as RawFd; 2];
    // SAFETY: plain syscall writing two fds.
    if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0, sv.as_mut_ptr()) } < 0 {
        return Err(anyhow!(std::io::Error::last_os_error()).context("creating the repaired-socket channel"));
    }
    // SAFETY: fresh fds we own.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(sv[0]), OwnedFd::from_raw_fd(sv[1])) };
    let tv = libc::timeval { tv_sec: SEND_TIMEOUT.as_secs() as libc::time_t, tv_usec: 0 };
    // SAFETY: setsockopt with a timeval on the stack.
    let rc = unsafe {
        libc::setsockopt(
            ours.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDTIMEO,
            &tv as *const libc::timeval as *const libc::c_void,
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(anyhow!(std::io::Error::last_os_error()).context("setting the channel's send timeout"));
    }
    Ok((ours, theirs))
}

/// Sends one socket and its data (the target fd number, or the listener's
/// and the accept-queue tag) as one message.
fn send_one(chan: &OwnedFd, words: &[i32], sock: RawFd) -> std::io::Result<()> {
    let mut data: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let mut iov = libc::iovec { iov_base: data.as_mut_ptr() as *mut libc::c_void, iov_len: data.len() };
    // u64 elements: the control buffer must be aligned for struct cmsghdr.
    let mut cbuf = [0u64; 4];
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    debug_assert!(space <= std::mem::size_of_val(&cbuf));
    // SAFETY: msghdr is plain data; every pointer set below outlives the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = space;
    // SAFETY: the control buffer holds one cmsghdr with room for one fd
    // (space computed above); CMSG_FIRSTHDR of it is non-null.
    unsafe {
        let cm = libc::CMSG_FIRSTHDR(&msg);
        (*cm).cmsg_level = libc::SOL_SOCKET;
        (*cm).cmsg_type = libc::SCM_RIGHTS;
        (*cm).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(cm) as *mut RawFd, sock);
    }
    loop {
        // SAFETY: msg and everything it points to are live; MSG_NOSIGNAL:
        // a restorer that died gives EPIPE, not SIGPIPE.
        let n = unsafe { libc::sendmsg(chan.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Sends every socket, then closes the channel (the restorer's EOF). The
/// caller keeps its own descriptors: SCM_RIGHTS gives the restorer a
/// duplicate of each.
pub(crate) fn send_all(chan: OwnedFd, socks: &[(i32, OwnedFd)], pending: &[(i32, OwnedFd)]) -> Result<()> {
    for (target, sock) in socks {
        send_one(&chan, &[*target], sock.as_raw_fd()).with_context(|| format!("sending the repaired socket for fd {target} to rrc-restore"))?;
        tracing::debug!(fd = target, "repaired socket handed to rrc-restore");
    }
    for (listener, sock) in pending {
        send_one(&chan, &[*listener, ACCEPT_QUEUE_TAG], sock.as_raw_fd())
            .with_context(|| format!("sending a repaired connection for accept() on fd {listener} to rrc-restore"))?;
        tracing::debug!(listener, "repaired connection for accept() handed to rrc-restore");
    }
    drop(chan);
    Ok(())
}
