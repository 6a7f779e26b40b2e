//! A minimal NFQUEUE client over a raw netlink socket (nfnetlink_queue).
//!
//! Written here rather than taken from the `nfq` crate because the gate
//! holds packets for a whole epoch: `nfq` needs its `Message` (which pins
//! the whole receive buffer it came in, ~72 KiB) to give a verdict, and
//! exposes neither the socket (for poll and SO_RCVBUF) nor ENOBUFS. Here a
//! held packet is its 32-bit id, and verdicts for a release go out as one
//! datagram of many netlink messages (nfnetlink processes each in order).
//!
//! The socket belongs to the network namespace of the thread that opens
//! it: open it inside the namespace whose FORWARD chain queues the packets.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use crate::error::GateError;
use crate::stream::PacketId;

const NETLINK_NETFILTER: libc::c_int = 12;
const NFNL_SUBSYS_QUEUE: u16 = 3;
const NFQNL_MSG_PACKET: u16 = 0;
const NFQNL_MSG_VERDICT: u16 = 1;
const NFQNL_MSG_CONFIG: u16 = 2;
const NFNETLINK_V0: u8 = 0;

const NFQA_PACKET_HDR: u16 = 1;
const NFQA_VERDICT_HDR: u16 = 2;
const NFQA_IFINDEX_INDEV: u16 = 5;
const NFQA_HWADDR: u16 = 9;
const NFQA_PAYLOAD: u16 = 10;
const NFQA_CAP_LEN: u16 = 13;

const NFQA_CFG_CMD: u16 = 1;
const NFQA_CFG_PARAMS: u16 = 2;
const NFQA_CFG_QUEUE_MAXLEN: u16 = 3;
const NFQA_CFG_MASK: u16 = 4;
const NFQA_CFG_FLAGS: u16 = 5;
const NFQNL_CFG_CMD_BIND: u8 = 1;
const NFQNL_CFG_CMD_UNBIND: u8 = 2;
const NFQNL_COPY_PACKET: u8 = 2;
const NFQA_CFG_F_FAIL_OPEN: u32 = 1;
const NFQA_CFG_F_GSO: u32 = 4;

const NF_ACCEPT: u32 = 1;

const NLMSG_HDRLEN: usize = 16;
const NFGEN_HDRLEN: usize = 4;
const NLA_HDRLEN: usize = 4;
const NLA_TYPE_MASK: u16 = 0x3fff;

/// Receive buffer: a full 64 KiB packet plus the netlink metadata.
pub const RECV_BUFFER: usize = 65536 + 8192;
/// Verdict messages sent per datagram.
const VERDICTS_PER_SEND: usize = 512;

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// How the queue is configured.
#[derive(Debug, Clone, Copy)]
pub struct QueueOptions {
    pub queue_num: u16,
    /// Kernel queue length (packets waiting for a verdict, held ones too).
    pub max_len: u32,
    /// Socket receive buffer (SO_RCVBUFFORCE, falling back to SO_RCVBUF).
    pub rcvbuf: usize,
}

/// One message from the kernel.
#[derive(Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// `from`: the interface it came in on and the link-layer source
    /// address it came from (the AF_XDP output path learns clients' next
    /// hops from it), when the kernel gave both.
    Packet { id: PacketId, payload: &'a [u8], truncated: bool, from: Option<LinkSource> },
    /// An NLMSG_ERROR with a non-zero errno (e.g. a verdict for an unknown id).
    Error { errno: i32 },
}

/// Where a queued packet came from on the link layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkSource {
    pub ifindex: u32,
    pub mac: [u8; 6],
}

pub struct NfQueue {
    fd: OwnedFd,
    queue_num: u16,
    seq: AtomicU32,
    /// Serializes senders (verdicts come from the reader and from commit).
    send_lock: Mutex<()>,
    /// Packets that arrived while setup waited for an ACK, to hand over on
    /// the first `recv`.
    early: Mutex<Vec<Vec<u8>>>,
}

fn nl_header(buf: &mut Vec<u8>, msg_type: u16, flags: u16, seq: u32, queue_num: u16) -> usize {
    let at = buf.len();
    buf.extend_from_slice(&0u32.to_ne_bytes()); // length, patched by finish
    buf.extend_from_slice(&((NFNL_SUBSYS_QUEUE << 8) | msg_type).to_ne_bytes());
    buf.extend_from_slice(&flags.to_ne_bytes());
    buf.extend_from_slice(&seq.to_ne_bytes());
    buf.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel
    buf.extend_from_slice(&[libc::AF_UNSPEC as u8, NFNETLINK_V0]);
    buf.extend_from_slice(&queue_num.to_be_bytes());
    at
}

fn nl_attr(buf: &mut Vec<u8>, attr_type: u16, payload: &[u8]) {
    buf.extend_from_slice(&((NLA_HDRLEN + payload.len()) as u16).to_ne_bytes());
    buf.extend_from_slice(&attr_type.to_ne_bytes());
    buf.extend_from_slice(payload);
    buf.resize(align4(buf.len()), 0);
}

fn nl_finish(buf: &mut [u8], at: usize) {
    let len = (buf.len() - at) as u32;
    buf[at..at + 4].copy_from_slice(&len.to_ne_bytes());
}

fn ne_u16(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}
fn ne_u32(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The errno of an NLMSG_ERROR body (its first 4 bytes: minus the errno,
/// 0 for an ACK). Wrapping: i32::MIN has no negation, and a malformed
/// message must not panic.
fn nl_errno(body: &[u8]) -> i32 {
    (ne_u32(body, 0) as i32).wrapping_neg()
}

/// The (type, payload) attributes of a netlink message body.
fn attrs(mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if b.len() < NLA_HDRLEN {
            return None;
        }
        let len = usize::from(ne_u16(b, 0));
        if len < NLA_HDRLEN || len > b.len() {
            return None;
        }
        let item = (ne_u16(b, 2) & NLA_TYPE_MASK, &b[NLA_HDRLEN..len]);
        b = &b[align4(len).min(b.len())..];
        Some(item)
    })
}

/// Every message in one datagram from the kernel. Malformed trailing
/// bytes end the walk.
pub fn parse_datagram(mut b: &[u8]) -> Vec<Event<'_>> {
    let mut out = Vec::new();
    while b.len() >= NLMSG_HDRLEN {
        let len = ne_u32(b, 0) as usize;
        if len < NLMSG_HDRLEN || len > b.len() {
            break;
        }
        let msg_type = ne_u16(b, 4);
        let body = &b[NLMSG_HDRLEN..len];
        if msg_type == libc::NLMSG_ERROR as u16 {
            if body.len() >= 4 {
                let errno = nl_errno(body);
                if errno != 0 {
                    out.push(Event::Error { errno });
                }
            }
        } else if msg_type == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET && body.len() >= NFGEN_HDRLEN {
            let mut id = None;
            let mut payload: &[u8] = &[];
            let mut truncated = false;
            let (mut indev, mut mac) = (None, None);
            for (t, p) in attrs(&body[NFGEN_HDRLEN..]) {
                match t {
                    NFQA_PACKET_HDR if p.len() >= 4 => id = Some(u32::from_be_bytes([p[0], p[1], p[2], p[3]])),
                    NFQA_PAYLOAD => payload = p,
                    NFQA_CAP_LEN => truncated = true,
                    NFQA_IFINDEX_INDEV if p.len() >= 4 => indev = Some(u32::from_be_bytes([p[0], p[1], p[2], p[3]])),
                    // struct nfqnl_msg_packet_hw: be16 length, pad, 8 bytes
                    NFQA_HWADDR if p.len() >= 10 && u16::from_be_bytes([p[0], p[1]]) == 6 => {
                        mac = Some([p[4], p[5], p[6], p[7], p[8], p[9]]);
                    }
                    _ => {}
                }
            }
            let from = indev.zip(mac).map(|(ifindex, mac)| LinkSource { ifindex, mac });
            if let Some(id) = id {
                out.push(Event::Packet { id: PacketId(u64::from(id)), payload, truncated, from });
            }
        }
        b = &b[align4(len).min(b.len())..];
    }
    out
}

/// The netlink messages giving `verdict` to each id, in order.
pub fn verdict_messages(queue_num: u16, ids: &[PacketId], verdict: u32) -> Vec<u8> {
    let mut buf = Vec::with_capacity(ids.len() * 32);
    for id in ids {
        let at = nl_header(&mut buf, NFQNL_MSG_VERDICT, libc::NLM_F_REQUEST as u16, 0, queue_num);
        let mut vh = [0u8; 8];
        vh[..4].copy_from_slice(&verdict.to_be_bytes());
        // NFQUEUE ids are 32-bit (the gate sends only those here)
        vh[4..].copy_from_slice(&(id.0 as u32).to_be_bytes());
        nl_attr(&mut buf, NFQA_VERDICT_HDR, &vh);
        nl_finish(&mut buf, at);
    }
    buf
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

impl NfQueue {
    /// Opens the socket and binds `opts.queue_num`: whole packets copied,
    /// queue length `max_len`, not fail-open (a full queue drops: letting
    /// a server packet through would break output commit), no GSO (the
    /// kernel segments before queueing, so each packet is one segment).
    pub fn open(opts: QueueOptions) -> Result<NfQueue, GateError> {
        let ctx = |what: &str| format!("NFQUEUE {}: {what}", opts.queue_num);
        // SAFETY: plain syscalls on a socket this function owns.
        let raw = cvt(unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, NETLINK_NETFILTER) })
            .map_err(GateError::io(ctx("opening a NETLINK_NETFILTER socket")))?;
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        cvt(unsafe { libc::bind(raw, &addr as *const _ as *const libc::sockaddr, std::mem::size_of_val(&addr) as libc::socklen_t) })
            .map_err(GateError::io(ctx("binding the netlink socket")))?;
        let rcvbuf = opts.rcvbuf.min(i32::MAX as usize) as libc::c_int;
        let set = |opt| unsafe {
            libc::setsockopt(raw, libc::SOL_SOCKET, opt, &rcvbuf as *const _ as *const libc::c_void, std::mem::size_of_val(&rcvbuf) as libc::socklen_t)
        };
        // FORCE goes beyond net.core.rmem_max (needs CAP_NET_ADMIN).
        if set(libc::SO_RCVBUFFORCE) < 0 {
            let e = io::Error::last_os_error();
            tracing::warn!(error = %e, "SO_RCVBUFFORCE refused; using SO_RCVBUF (capped by net.core.rmem_max)");
            cvt(set(libc::SO_RCVBUF)).map_err(GateError::io(ctx("setting SO_RCVBUF")))?;
        }
        let q = NfQueue { fd, queue_num: opts.queue_num, seq: AtomicU32::new(1), send_lock: Mutex::new(()), early: Mutex::new(Vec::new()) };

        // One config message: bind, copy whole packets, queue length,
        // flags (fail-open and GSO off). nfqnl_recv_config applies them in
        // that order; an error undoes nothing, so the queue is unbound
        // on failure by closing the socket.
        let seq = q.seq.fetch_add(1, Ordering::Relaxed);
        let mut m = Vec::new();
        let at = nl_header(&mut m, NFQNL_MSG_CONFIG, (libc::NLM_F_REQUEST | libc::NLM_F_ACK) as u16, seq, opts.queue_num);
        nl_attr(&mut m, NFQA_CFG_CMD, &[NFQNL_CFG_CMD_BIND, 0, 0, 0]); // cmd, pad, pf (unused)
        let mut params = [0u8; 5]; // packed { __be32 copy_range; __u8 copy_mode }
        params[..4].copy_from_slice(&0xffffu32.to_be_bytes());
        params[4] = NFQNL_COPY_PACKET;
        nl_attr(&mut m, NFQA_CFG_PARAMS, &params);
        nl_attr(&mut m, NFQA_CFG_QUEUE_MAXLEN, &opts.max_len.to_be_bytes());
        nl_attr(&mut m, NFQA_CFG_FLAGS, &0u32.to_be_bytes());
        nl_attr(&mut m, NFQA_CFG_MASK, &(NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO).to_be_bytes());
        nl_finish(&mut m, at);
        q.send(&m).map_err(GateError::io(ctx("sending the bind request")))?;
        q.wait_ack(seq).map_err(|e| {
            let hint = if e.raw_os_error() == Some(libc::EBUSY) { " (another process has bound this queue number)" } else { "" };
            GateError::Io { context: ctx(&format!("binding the queue{hint}")), source: e }
        })?;
        tracing::info!(queue = opts.queue_num, max_len = opts.max_len, rcvbuf = opts.rcvbuf, "NFQUEUE bound (copy whole packets, not fail-open)");
        Ok(q)
    }

    /// Waits for the ACK of request `seq`, keeping packets that arrive in
    /// the meantime.
    fn wait_ack(&self, seq: u32) -> io::Result<()> {
        let mut buf = vec![0u8; RECV_BUFFER];
        for _ in 0..10_000 {
            // SAFETY: recv into our own buffer.
            let n = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            let d = &buf[..n as usize];
            // Is it the answer (an NLMSG_ERROR naming our seq)?
            if d.len() >= NLMSG_HDRLEN + 4 && ne_u16(d, 4) == libc::NLMSG_ERROR as u16 && ne_u32(d, 8) == seq {
                let errno = nl_errno(&d[NLMSG_HDRLEN..]);
                return if errno == 0 { Ok(()) } else { Err(io::Error::from_raw_os_error(errno)) };
            }
            self.early.lock().unwrap_or_else(|e| e.into_inner()).push(d.to_vec());
        }
        Err(io::Error::new(io::ErrorKind::TimedOut, "no ACK from nfnetlink_queue"))
    }

    fn send(&self, bytes: &[u8]) -> io::Result<()> {
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        let _g = self.send_lock.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            // SAFETY: sendto from our buffer to the kernel (port 0).
            let n = unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    bytes.as_ptr() as *const libc::c_void,
                    bytes.len(),
                    0,
                    &addr as *const _ as *const libc::sockaddr,
                    std::mem::size_of_val(&addr) as libc::socklen_t,
                )
            };
            if n >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// ACCEPT for each id, in order.
    pub fn accept(&self, ids: &[PacketId]) -> io::Result<()> {
        for chunk in ids.chunks(VERDICTS_PER_SEND) {
            self.send(&verdict_messages(self.queue_num, chunk, NF_ACCEPT))?;
        }
        Ok(())
    }

    /// Datagrams that arrived during setup (taken once).
    pub fn take_early(&self) -> Vec<Vec<u8>> {
        std::mem::take(&mut *self.early.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// One datagram without blocking: Ok(None) when there is none. Errors
    /// include ENOBUFS (the kernel could not queue messages to us: the
    /// packets in them were dropped, since the queue is not fail-open).
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        loop {
            // SAFETY: recv into the caller's buffer.
            let n = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr() as *mut libc::c_void, buf.len(), libc::MSG_DONTWAIT | libc::MSG_TRUNC) };
            if n >= 0 {
                let n = n as usize;
                if n > buf.len() {
                    return Err(io::Error::new(io::ErrorKind::InvalidData, format!("netlink datagram of {n} bytes truncated to {}", buf.len())));
                }
                return Ok(Some(n));
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => return Ok(None),
                _ => return Err(e),
            }
        }
    }

    /// Up to `batch.capacity()` datagrams in one system call (recvmmsg),
    /// without blocking: how many came (0: none), read with
    /// [`RecvBatch::datagrams`]. A busy gate gets several packets per
    /// wake-up; one `recv` each cost a system call per packet. Errors as
    /// [`Self::recv`]'s, for the first datagram (a later one's error comes
    /// with the next call).
    pub fn recv_many(&self, batch: &mut RecvBatch) -> io::Result<usize> {
        let n = batch.msgs.len();
        loop {
            // SAFETY: n headers, each with one iovec into a buffer of the
            // batch (set up by RecvBatch::new, none of them moved since).
            let got = unsafe {
                libc::recvmmsg(self.fd.as_raw_fd(), batch.msgs.as_mut_ptr(), n as libc::c_uint, libc::MSG_DONTWAIT | libc::MSG_TRUNC, std::ptr::null_mut())
            };
            if got >= 0 {
                let got = got as usize;
                for (i, m) in batch.msgs[..got].iter().enumerate() {
                    let len = m.msg_len as usize;
                    if len > RECV_BUFFER || m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("netlink datagram of {len} bytes truncated to {RECV_BUFFER}")));
                    }
                    batch.lens[i] = len;
                }
                return Ok(got);
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => return Ok(0),
                _ => return Err(e),
            }
        }
    }

    /// Unbinds the queue; the kernel drops the packets still waiting.
    pub fn unbind(&self) -> io::Result<()> {
        let mut m = Vec::new();
        let at = nl_header(&mut m, NFQNL_MSG_CONFIG, libc::NLM_F_REQUEST as u16, 0, self.queue_num);
        nl_attr(&mut m, NFQA_CFG_CMD, &[NFQNL_CFG_CMD_UNBIND, 0, 0, 0]);
        nl_finish(&mut m, at);
        self.send(&m)
    }

    pub fn queue_num(&self) -> u16 {
        self.queue_num
    }
}

/// Receive buffers for [`NfQueue::recv_many`], with the recvmmsg headers
/// pointing into them: made once per reader, not per call (the gate's hot
/// path).
pub struct RecvBatch {
    /// Never resized: the headers point into them.
    bufs: Vec<Box<[u8]>>,
    /// Only owned here: the headers point at them.
    _iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
    lens: Vec<usize>,
}

impl RecvBatch {
    /// Room for `n` datagrams of up to [`RECV_BUFFER`] bytes.
    pub fn new(n: usize) -> RecvBatch {
        let mut bufs: Vec<Box<[u8]>> = (0..n).map(|_| vec![0u8; RECV_BUFFER].into_boxed_slice()).collect();
        let mut iovs: Vec<libc::iovec> =
            bufs.iter_mut().map(|b| libc::iovec { iov_base: b.as_mut_ptr() as *mut libc::c_void, iov_len: b.len() }).collect();
        // SAFETY: an all-zero mmsghdr is valid; each is pointed at its iovec below.
        let mut msgs: Vec<libc::mmsghdr> = (0..n).map(|_| unsafe { std::mem::zeroed() }).collect();
        for (m, iov) in msgs.iter_mut().zip(iovs.iter_mut()) {
            m.msg_hdr.msg_iov = iov;
            m.msg_hdr.msg_iovlen = 1;
        }
        RecvBatch { bufs, _iovs: iovs, msgs, lens: vec![0; n] }
    }

    pub fn capacity(&self) -> usize {
        self.msgs.len()
    }

    /// The first `got` datagrams of the last [`NfQueue::recv_many`].
    pub fn datagrams(&self, got: usize) -> impl Iterator<Item = &[u8]> {
        self.bufs.iter().zip(&self.lens).take(got).map(|(b, &len)| &b[..len])
    }
}

impl AsRawFd for NfQueue {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A packet message as nfqnl_build_packet_message lays it out.
    fn packet_msg(id: u32, payload: &[u8]) -> Vec<u8> {
        let mut m = Vec::new();
        let at = nl_header(&mut m, NFQNL_MSG_PACKET, 0, 0, 7);
        let mut hdr = id.to_be_bytes().to_vec();
        hdr.extend_from_slice(&[0x08, 0x00, 2]); // hw_protocol, hook
        nl_attr(&mut m, NFQA_PACKET_HDR, &hdr);
        nl_attr(&mut m, NFQA_IFINDEX_INDEV | 0x8000, &[0, 0, 0, 3]); // flag bits masked off
        if id == 43 {
            nl_attr(&mut m, NFQA_HWADDR, &[0, 6, 0, 0, 2, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0, 0]);
        }
        nl_attr(&mut m, 20, &[1, 2, 3, 4]); // unknown: skipped
        nl_attr(&mut m, NFQA_PAYLOAD, payload);
        nl_finish(&mut m, at);
        m
    }

    #[test]
    fn parses_packets_and_errors_in_one_datagram() {
        let mut d = packet_msg(42, b"abcde");
        d.extend(packet_msg(43, b"xyz"));
        // NLMSG_ERROR with errno ENOENT
        let mut e = Vec::new();
        e.extend_from_slice(&36u32.to_ne_bytes());
        e.extend_from_slice(&(libc::NLMSG_ERROR as u16).to_ne_bytes());
        e.extend_from_slice(&[0; 10]);
        e.extend_from_slice(&(-libc::ENOENT).to_ne_bytes());
        e.extend_from_slice(&[0; 16]);
        d.extend(e);
        d.extend_from_slice(&[1, 2, 3]); // junk tail ignored
        let ev = parse_datagram(&d);
        assert_eq!(
            ev,
            vec![
                Event::Packet { id: PacketId(42), payload: b"abcde", truncated: false, from: None },
                Event::Packet {
                    id: PacketId(43),
                    payload: b"xyz",
                    truncated: false,
                    from: Some(LinkSource { ifindex: 3, mac: [2, 0xaa, 0xbb, 0xcc, 0xdd, 0xee] })
                },
                Event::Error { errno: libc::ENOENT },
            ]
        );
    }

    /// An NLMSG_ERROR whose error field is i32::MIN (no negation exists)
    /// is an odd errno, not a panic of the gate's reader thread.
    #[test]
    fn error_of_i32_min_does_not_overflow() {
        let mut e = Vec::new();
        e.extend_from_slice(&20u32.to_ne_bytes());
        e.extend_from_slice(&(libc::NLMSG_ERROR as u16).to_ne_bytes());
        e.extend_from_slice(&[0; 10]);
        e.extend_from_slice(&i32::MIN.to_ne_bytes());
        assert_eq!(parse_datagram(&e), vec![Event::Error { errno: i32::MIN }]);
    }

    #[test]
    fn verdict_layout() {
        let m = verdict_messages(5, &[PacketId(1), PacketId(0x01020304)], NF_ACCEPT);
        assert_eq!(m.len(), 64);
        assert_eq!(ne_u32(&m, 0), 32);
        assert_eq!(ne_u16(&m, 4), (3 << 8) | 1);
        assert_eq!(&m[18..20], &5u16.to_be_bytes());
        assert_eq!(ne_u16(&m, 20), 12); // attr len
        assert_eq!(ne_u16(&m, 22), NFQA_VERDICT_HDR);
        assert_eq!(&m[24..28], &1u32.to_be_bytes());
        assert_eq!(&m[32 + 28..64], &[1, 2, 3, 4]);
    }
}
