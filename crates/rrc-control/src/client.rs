//! The client side of the control protocol: one request per connection.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::proto::*;

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("cannot connect to control socket {path}: {source}")]
    Connect {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("control socket {path}: {what}: {source}")]
    Io {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("control socket {path}: no {what} within {after:?}")]
    Timeout { path: PathBuf, what: &'static str, after: Duration },
    #[error("control socket {path}: the library closed the connection before {what}")]
    Closed { path: PathBuf, what: &'static str },
    #[error("control socket {path}: malformed message: {reason}")]
    Protocol { path: PathBuf, reason: DecodeError },
    #[error("control socket {path}: expected {expected}, got {got}")]
    Unexpected { path: PathBuf, expected: &'static str, got: &'static str },
    /// The library answered ERROR; `reply` holds its code, errno and message verbatim.
    #[error("librrc {stage}: {reply}")]
    Remote { path: PathBuf, stage: &'static str, reply: ErrorReply },
}

/// One connection to a library's control socket.
pub struct Client {
    stream: UnixStream,
    path: PathBuf,
}

impl Client {
    pub fn connect(path: &Path) -> Result<Client, ControlError> {
        let stream = UnixStream::connect(path).map_err(|source| ControlError::Connect { path: path.to_path_buf(), source })?;
        Ok(Client { stream, path: path.to_path_buf() })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Sends one message, with `fd` attached by SCM_RIGHTS when given.
    pub fn send(&mut self, msg: &Message, fd: Option<BorrowedFd<'_>>, timeout: Duration) -> Result<(), ControlError> {
        let frame = msg.encode();
        let io_err = |what, source| ControlError::Io { path: self.path.clone(), what, source };
        self.stream.set_write_timeout(Some(timeout.max(Duration::from_millis(1)))).map_err(|e| io_err("setting the write timeout", e))?;
        let sent = match fd {
            Some(fd) => send_with_fd(self.stream.as_raw_fd(), &frame, fd.as_raw_fd()).map_err(|e| io_err("sending the request with its fd", e))?,
            None => 0,
        };
        self.stream.write_all(&frame[sent..]).map_err(|e| match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => ControlError::Timeout { path: self.path.clone(), what: "room to send the request", after: timeout },
            _ => io_err("sending the request", e),
        })
    }

    /// Receives one message within `timeout`. `what` names the expected
    /// reply in error messages.
    pub fn recv(&mut self, timeout: Duration, what: &'static str) -> Result<Message, ControlError> {
        let deadline = Instant::now() + timeout;
        let mut hb = [0u8; HEADER_SIZE];
        self.read_full(&mut hb, deadline, timeout, what)?;
        let h = decode_header(&hb).map_err(|reason| ControlError::Protocol { path: self.path.clone(), reason })?;
        let mut p = vec![0u8; h.length as usize];
        self.read_full(&mut p, deadline, timeout, what)?;
        let msg = decode_payload(&h, &p).map_err(|reason| ControlError::Protocol { path: self.path.clone(), reason })?;
        tracing::debug!(path = %self.path.display(), msg = msg.msg_type().name(), "control message received");
        Ok(msg)
    }

    fn read_full(&mut self, buf: &mut [u8], deadline: Instant, timeout: Duration, what: &'static str) -> Result<(), ControlError> {
        let mut got = 0;
        while got < buf.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ControlError::Timeout { path: self.path.clone(), what, after: timeout });
            }
            self.stream
                .set_read_timeout(Some(left))
                .map_err(|e| ControlError::Io { path: self.path.clone(), what: "setting the read timeout", source: e })?;
            match self.stream.read(&mut buf[got..]) {
                Ok(0) => return Err(ControlError::Closed { path: self.path.clone(), what }),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                    return Err(ControlError::Timeout { path: self.path.clone(), what, after: timeout })
                }
                Err(e) => return Err(ControlError::Io { path: self.path.clone(), what: "reading the reply", source: e }),
            }
        }
        Ok(())
    }

    fn unexpected(&self, expected: &'static str, got: &Message) -> ControlError {
        ControlError::Unexpected { path: self.path.clone(), expected, got: got.msg_type().name() }
    }
}

/// sendmsg() with one SCM_RIGHTS fd; returns the bytes sent (the caller
/// sends any rest with plain writes: the fd travels with the first byte).
fn send_with_fd(sock: RawFd, data: &[u8], fd: RawFd) -> io::Result<usize> {
    let fd_len = std::mem::size_of::<libc::c_int>() as u32;
    // SAFETY: CMSG_SPACE/CMSG_LEN are pure arithmetic.
    let (space, cmsg_len) = unsafe { (libc::CMSG_SPACE(fd_len) as usize, libc::CMSG_LEN(fd_len) as usize) };
    // u64 storage keeps the control buffer aligned for struct cmsghdr.
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec { iov_base: data.as_ptr() as *mut libc::c_void, iov_len: data.len() };
    // SAFETY: msghdr is plain data; all-zero is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = space as _;
    // SAFETY: msg_control points to `space` bytes we own, so CMSG_FIRSTHDR
    // is non-null and the header and its 4 data bytes are in bounds.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = cmsg_len as _;
        std::ptr::copy_nonoverlapping(&fd as *const RawFd as *const u8, libc::CMSG_DATA(cmsg), fd_len as usize);
    }
    loop {
        // SAFETY: msg and everything it points to live across the call.
        let n = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// PING -> PONG on a fresh connection.
pub fn ping(path: &Path, timeout: Duration) -> Result<Pong, ControlError> {
    let mut c = Client::connect(path)?;
    c.send(&Message::Ping, None, timeout)?;
    match c.recv(timeout, "PONG")? {
        Message::Pong(p) => Ok(p),
        Message::Error(reply) => Err(ControlError::Remote { path: path.to_path_buf(), stage: "answered PING with an error", reply }),
        m => Err(c.unexpected("PONG", &m)),
    }
}

/// REPLAY_STATUS -> REPLAY_STATE on a fresh connection (also the
/// library's watchdog tick: a replay without progress for its timeout is
/// declared diverged when asked).
pub fn replay_status(path: &Path, timeout: Duration) -> Result<ReplayState, ControlError> {
    let mut c = Client::connect(path)?;
    c.send(&Message::ReplayStatus, None, timeout)?;
    match c.recv(timeout, "REPLAY_STATE")? {
        Message::ReplayState(s) => Ok(s),
        Message::Error(reply) => Err(ControlError::Remote { path: path.to_path_buf(), stage: "answered REPLAY_STATUS with an error", reply }),
        m => Err(c.unexpected("REPLAY_STATE", &m)),
    }
}

/// Sends RECORD with the log's sink: the process, live at the end of a
/// failover's replay and recording since, sends its log there from now on.
pub fn record_to(path: &Path, req: &RecordRequest, sink: BorrowedFd<'_>, timeout: Duration) -> Result<(), ControlError> {
    let mut c = Client::connect(path)?;
    c.send(&Message::Record(*req), Some(sink), timeout)?;
    match c.recv(timeout, "RECORDING")? {
        Message::Recording => Ok(()),
        Message::Error(reply) => Err(ControlError::Remote { path: path.to_path_buf(), stage: "refused to record to the sink", reply }),
        m => Err(c.unexpected("RECORDING", &m)),
    }
}

/// A DUMP in progress: the request is sent; the replies are read with
/// [`DumpSession::wait_paused`] then [`DumpSession::wait_done`].
pub struct DumpSession {
    client: Client,
}

/// Sends DUMP with the image file descriptor.
pub fn dump(path: &Path, req: &DumpRequest, image_fd: BorrowedFd<'_>, timeout: Duration) -> Result<DumpSession, ControlError> {
    let mut client = Client::connect(path)?;
    client.send(&Message::Dump(*req), Some(image_fd), timeout)?;
    Ok(DumpSession { client })
}

impl DumpSession {
    /// DUMP_PAUSED: the process ran again; the snapshot child writes the
    /// image. An ERROR here means the dump was refused and nothing changed.
    pub fn wait_paused(&mut self, timeout: Duration) -> Result<DumpPaused, ControlError> {
        match self.client.recv(timeout, "DUMP_PAUSED")? {
            Message::DumpPaused(p) => Ok(p),
            Message::Error(reply) => Err(ControlError::Remote { path: self.client.path.clone(), stage: "refused the dump", reply }),
            m => Err(self.client.unexpected("DUMP_PAUSED", &m)),
        }
    }

    /// DUMP_DONE: the image is complete. An ERROR here means the snapshot
    /// child failed (the process itself kept running).
    pub fn wait_done(&mut self, timeout: Duration) -> Result<DumpDone, ControlError> {
        match self.client.recv(timeout, "DUMP_DONE")? {
            Message::DumpDone(d) => Ok(d),
            Message::Error(reply) => Err(ControlError::Remote { path: self.client.path.clone(), stage: "failed writing the image", reply }),
            m => Err(self.client.unexpected("DUMP_DONE", &m)),
        }
    }
}

/// A HOLD in force: every application thread is parked (and the data
/// directory's journal was emptied) until [`HoldSession::resume`], the
/// hold's timeout, or the drop of this session (the connection closes and
/// the library resumes the threads by itself).
pub struct HoldSession {
    client: Client,
    held: Held,
}

/// Sends HOLD and waits for HELD. `timeout_ms` bounds the hold itself
/// (0 = [`HOLD_MAX_MS`]); `timeout` bounds the wait for HELD.
pub fn hold(path: &Path, timeout_ms: u32, timeout: Duration) -> Result<HoldSession, ControlError> {
    let mut client = Client::connect(path)?;
    client.send(&Message::Hold(HoldRequest { timeout_ms }), None, timeout)?;
    match client.recv(timeout, "HELD")? {
        Message::Held(held) => Ok(HoldSession { client, held }),
        Message::Error(reply) => Err(ControlError::Remote { path: path.to_path_buf(), stage: "refused the hold", reply }),
        m => Err(client.unexpected("HELD", &m)),
    }
}

impl HoldSession {
    pub fn held(&self) -> &Held {
        &self.held
    }

    /// RESUME -> RESUMED. An ERROR HOLD_EXPIRED here means the library had
    /// already resumed the threads (its timeout passed): whatever was done
    /// during the hold did not see a parked process throughout.
    pub fn resume(mut self, timeout: Duration) -> Result<Resumed, ControlError> {
        // The library may have ended the hold and closed already: its
        // ERROR is still readable after a failed send.
        let sent = self.client.send(&Message::Resume, None, timeout);
        match self.client.recv(timeout, "RESUMED") {
            Ok(Message::Resumed(r)) => Ok(r),
            Ok(Message::Error(reply)) => Err(ControlError::Remote { path: self.client.path.clone(), stage: "ended the hold", reply }),
            Ok(m) => Err(self.client.unexpected("RESUMED", &m)),
            Err(e) => Err(sent.err().unwrap_or(e)),
        }
    }
}
