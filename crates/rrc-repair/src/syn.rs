//! Handshakes a failover interrupted (docs/tcp-repair.md "Handshakes").
//!
//! A client whose SYN reached the gate and went on to the primary, which
//! died before answering, waits in SYN_SENT for its retransmission timeout
//! (1 s for the first, then 2, 4...) before the restored service ever sees
//! it. The gate keeps each such SYN as it went out
//! (`Gate::unanswered_syns`); once the restored service is live, the
//! failover hands it to the service's kernel, whose SYN-ACK completes the
//! client's handshake at once. Only SYNs no SYN-ACK answered: a client
//! that had one from the primary may have completed the handshake with
//! the primary's sequence numbers, which a new SYN-ACK would contradict.

use std::net::SocketAddrV4;

use rrc_gate::packet::{self, Transport};

use crate::error::RepairError;
use crate::sys;

/// Sends `syn` (an IPv4 packet holding a client's TCP SYN to the service)
/// to the service's sockets in the calling thread's network namespace, as
/// if it had just arrived. Returns its (client, service) addresses.
pub fn resend_syn(syn: &[u8]) -> Result<(SocketAddrV4, SocketAddrV4), RepairError> {
    let (packet, client, service) = prepared(syn)?;
    sys::send_ipv4(&packet, *service.ip()).map_err(|source| RepairError::Sys {
        local: service,
        remote: client,
        step: "sending the client's SYN again (raw socket)".into(),
        source,
    })?;
    Ok((client, service))
}

/// The packet to send: a bare SYN, cut to its IP length, its TCP checksum
/// made right (one taken where the sender's checksum offload had not
/// filled it in yet, a veth's seen from a packet socket, carries only its
/// pseudo-header's part, and the service's kernel would drop it).
fn prepared(syn: &[u8]) -> Result<(Vec<u8>, SocketAddrV4, SocketAddrV4), RepairError> {
    let not_a_syn = |why: String| RepairError::NotASyn { why };
    let p = packet::parse(syn).map_err(|e| not_a_syn(e.to_string()))?;
    let Transport::Tcp(seg) = &p.transport else {
        return Err(not_a_syn("not TCP".into()));
    };
    if !seg.syn() || seg.ack_flag() || seg.rst() || seg.fin() {
        return Err(not_a_syn("not a bare SYN".into()));
    }
    let (client, service) = (SocketAddrV4::new(p.src, seg.src_port), SocketAddrV4::new(p.dst, seg.dst_port));
    let ihl = usize::from(syn[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([syn[2], syn[3]]));
    let mut out = syn[..total].to_vec();
    out[ihl + 16..ihl + 18].copy_from_slice(&[0, 0]);
    let csum = packet::tcp_checksum(p.src, p.dst, &out[ihl..]);
    out[ihl + 16..ihl + 18].copy_from_slice(&csum.to_be_bytes());
    Ok((out, client, service))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rrc_gate::packet::build::Segment;
    use rrc_gate::packet::{TCP_ACK, TCP_SYN};

    #[test]
    fn only_a_bare_tcp_syn_is_sent() {
        let (c, s) = ("10.0.0.2:40000".parse().unwrap(), "198.18.0.100:80".parse().unwrap());
        let synack = Segment::new(c, s, 1, 2, TCP_SYN | TCP_ACK).bytes();
        assert!(matches!(resend_syn(&synack), Err(RepairError::NotASyn { .. })));
        assert!(matches!(resend_syn(&synack[..10]), Err(RepairError::NotASyn { .. })));
        let udp = rrc_gate::packet::build::ipv4(*c.ip(), *s.ip(), 17, &[0; 8]);
        assert!(matches!(resend_syn(&udp), Err(RepairError::NotASyn { .. })));
    }

    #[test]
    fn the_checksum_is_made_right_and_trailing_bytes_cut() {
        let (c, s) = ("10.0.0.2:40000".parse().unwrap(), "198.18.0.100:80".parse().unwrap());
        let good = Segment::new(c, s, 7, 0, TCP_SYN).bytes();
        let mut partial = good.clone();
        partial[20 + 16] ^= 0x5a; // as a sender's offload leaves it
        partial.extend_from_slice(&[0; 6]); // link-layer padding
        let (out, client, service) = prepared(&partial).unwrap();
        assert_eq!((out, client, service), (good, c, s));
    }
}
