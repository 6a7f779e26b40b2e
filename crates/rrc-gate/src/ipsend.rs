//! The output path's ways out (docs/gate.md "The output path") for the
//! server's packets the gate took from its AF_XDP socket: `prepare` does
//! a router's part on each, and where the gate knows no next hop for the
//! client, `IpSender` sends it through a raw IPv4 socket (`IPPROTO_RAW`,
//! header included), so that the kernel routes it and resolves the next
//! hop (the usual way is `xsk::XskTx`).
//!
//! A router's part: the TTL goes down by one (with the header checksum),
//! and a transport checksum left to offload is completed: a packet the
//! primary's stack handed over with checksum offload (veth keeps
//! CHECKSUM_PARTIAL across hops) reaches XDP with only the pseudo-header
//! sum in its checksum field. Only such a field is filled in: a right
//! checksum is kept, and a wrong one (a packet damaged on its way) is left
//! wrong, for the client to drop as it would have without the gate.

use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::error::GateError;
use crate::packet::{ones_sum, pseudo_header_sum, transport_checksum, IPPROTO_TCP};

const IPPROTO_UDP: u8 = 17;
/// Packets per sendmmsg.
const BATCH: usize = 64;

/// Readies one IPv4 packet to be sent on (TTL, transport checksum).
/// Returns its destination, or None for what a router drops (not IPv4,
/// a header longer than the packet, TTL expiring here).
pub fn prepare(p: &mut [u8]) -> Option<Ipv4Addr> {
    if p.len() < 20 || p[0] >> 4 != 4 {
        return None;
    }
    let ihl = usize::from(p[0] & 0xf) * 4;
    let total = usize::from(u16::from_be_bytes([p[2], p[3]]));
    if ihl < 20 || total < ihl || total > p.len() || p[8] <= 1 {
        return None;
    }
    p[8] -= 1;
    p[10..12].copy_from_slice(&[0, 0]);
    let hc = !ones_sum(&p[..ihl]);
    p[10..12].copy_from_slice(&hc.to_be_bytes());
    let dst = Ipv4Addr::new(p[16], p[17], p[18], p[19]);
    complete_checksum(p);
    Some(dst)
}

/// Completes a TCP or UDP checksum left to offload (the field holds
/// exactly the pseudo-header sum) in an IPv4 packet; any other field, and
/// any packet this cannot read, is left as it is.
pub fn complete_checksum(p: &mut [u8]) {
    if p.len() < 20 || p[0] >> 4 != 4 {
        return;
    }
    let ihl = usize::from(p[0] & 0xf) * 4;
    let total = usize::from(u16::from_be_bytes([p[2], p[3]]));
    if ihl < 20 || total < ihl || total > p.len() {
        return;
    }
    let src = Ipv4Addr::new(p[12], p[13], p[14], p[15]);
    let dst = Ipv4Addr::new(p[16], p[17], p[18], p[19]);
    let frag = u16::from_be_bytes([p[6], p[7]]);
    let fragmented = frag & 0x3fff != 0; // MF or an offset
    let proto = p[9];
    let seg = &mut p[ihl..total];
    let at = match proto {
        IPPROTO_TCP if seg.len() >= 20 => 16,
        // UDP's checksum 0 means "none": left so
        IPPROTO_UDP if seg.len() >= 8 && seg[6..8] != [0, 0] => 6,
        _ => return,
    };
    let field = u16::from_be_bytes([seg[at], seg[at + 1]]);
    // (a field that was right and held the pseudo sum by coincidence gets
    // the same checksum again)
    if !fragmented && field == pseudo_header_sum(proto, src, dst, seg.len()) {
        seg[at..at + 2].copy_from_slice(&[0, 0]);
        let mut c = transport_checksum(proto, src, dst, seg);
        if proto == IPPROTO_UDP && c == 0 {
            c = 0xffff;
        }
        seg[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }
}

/// What the sender did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SendStats {
    pub sent: u64,
    /// Refused by the kernel (no route, an OUTPUT rule's DROP: EPERM).
    pub refused: u64,
}

pub struct IpSender {
    fd: OwnedFd,
    stats: SendStats,
}

impl IpSender {
    /// A raw socket of the calling thread's network namespace.
    pub fn open() -> Result<IpSender, GateError> {
        // SAFETY: plain socket creation.
        let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::IPPROTO_RAW) };
        if raw < 0 {
            return Err(GateError::io("creating the gate's raw IPv4 socket")(std::io::Error::last_os_error()));
        }
        // SAFETY: fresh descriptor.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let size: libc::c_int = 8 << 20;
        // SAFETY: an int option. Best effort: the default still works.
        unsafe {
            libc::setsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, &size as *const libc::c_int as *const libc::c_void, 4);
        }
        Ok(IpSender { fd, stats: SendStats::default() })
    }

    pub fn stats(&self) -> SendStats {
        self.stats
    }

    /// Sends the packets (each readied by [`prepare`], with its
    /// destination), in order.
    pub fn send(&mut self, packets: &[(Ipv4Addr, &[u8])]) {
        for chunk in packets.chunks(BATCH) {
            let addrs: Vec<libc::sockaddr_in> = chunk.iter().map(|(dst, _)| sockaddr(*dst)).collect();
            let mut iov: Vec<libc::iovec> = chunk.iter().map(|(_, p)| libc::iovec { iov_base: p.as_ptr() as *mut libc::c_void, iov_len: p.len() }).collect();
            // SAFETY: zeroed mmsghdrs, filled below.
            let mut msgs: Vec<libc::mmsghdr> = (0..chunk.len()).map(|_| unsafe { std::mem::zeroed() }).collect();
            for (k, sa) in addrs.iter().enumerate() {
                let h = &mut msgs[k].msg_hdr;
                h.msg_name = sa as *const libc::sockaddr_in as *mut libc::c_void;
                h.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
                h.msg_iov = &mut iov[k];
                h.msg_iovlen = 1;
            }
            let mut at = 0;
            while at < msgs.len() {
                // SAFETY: msgs[at..] point at iovecs and addresses alive here.
                let r = unsafe { libc::sendmmsg(self.fd.as_raw_fd(), msgs[at..].as_mut_ptr(), (msgs.len() - at) as libc::c_uint, 0) };
                if r > 0 {
                    at += r as usize;
                    self.stats.sent += r as u64;
                    continue;
                }
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                // the packet at `at` was refused: count it, go on after it
                self.stats.refused += 1;
                if self.stats.refused.is_power_of_two() {
                    tracing::warn!(error = %e, refused = self.stats.refused, "the kernel refused a released server packet");
                }
                at += 1;
            }
        }
    }
}

fn sockaddr(ip: Ipv4Addr) -> libc::sockaddr_in {
    libc::sockaddr_in { sin_family: libc::AF_INET as libc::sa_family_t, sin_port: 0, sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(ip.octets()) }, sin_zero: [0; 8] }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::build::Segment;
    use crate::packet::tcp_checksum;
    use std::net::SocketAddrV4;

    fn seg() -> Vec<u8> {
        let s = Segment::new(SocketAddrV4::new(Ipv4Addr::new(10, 77, 0, 1), 6379), SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 9), 40000), 1, 1, 0x18);
        s.payload(b"+PONG\r\n").bytes()
    }

    const SRC: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
    const DST: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 9);

    #[test]
    fn a_partial_checksum_is_completed_and_the_ttl_goes_down() {
        let mut p = seg();
        let ttl = p[8];
        // what checksum offload leaves in the field
        let partial = pseudo_header_sum(IPPROTO_TCP, SRC, DST, p.len() - 20);
        p[36..38].copy_from_slice(&partial.to_be_bytes());
        assert_ne!(tcp_checksum(SRC, DST, &p[20..]), 0);
        assert_eq!(prepare(&mut p), Some(DST));
        assert_eq!(p[8], ttl - 1);
        assert_eq!(ones_sum(&p[..20]), 0xffff, "the header checksum follows the TTL");
        assert_eq!(tcp_checksum(SRC, DST, &p[20..]), 0);
    }

    #[test]
    fn a_right_checksum_is_kept_and_a_wrong_one_left_wrong() {
        let mut p = seg();
        let right = p[36..38].to_vec();
        prepare(&mut p);
        assert_eq!(p[36..38], right[..]);
        let mut p = seg();
        p[40] ^= 0x20; // a payload byte damaged on the way
        prepare(&mut p);
        assert_eq!(p[36..38], right[..]);
        assert_ne!(tcp_checksum(SRC, DST, &p[20..]), 0, "the client drops it, as without the gate");
    }

    #[test]
    fn what_a_router_drops() {
        let mut p = seg();
        p[8] = 1;
        assert_eq!(prepare(&mut p), None, "TTL expires here");
        let mut p = seg();
        p[0] = 0x65;
        assert_eq!(prepare(&mut p), None, "not IPv4");
        let mut p = seg();
        p.truncate(30);
        assert_eq!(prepare(&mut p), None, "shorter than its total length");
    }

    #[test]
    fn a_fragment_keeps_its_checksum() {
        let mut p = seg();
        p[6] = 0x20; // MF
        let before = p[36..38].to_vec();
        prepare(&mut p);
        assert_eq!(p[36..38], before[..]);
    }
}
