//! Parsing of the IPv4/TCP packets the gate sees (a copy of the whole
//! packet as NFQUEUE hands it over: IP header first, no link layer).
//!
//! Only what the gate decides on is decoded: addresses, TCP ports,
//! sequence/ack numbers, flags, window, the SYN options that a repaired
//! socket needs (MSS, window scale, SACK-permitted, timestamps) and the
//! payload. Nothing here trusts the input: every length is checked and a
//! malformed packet is an error, never a panic.

use std::net::{Ipv4Addr, SocketAddrV4};

use serde::Serialize;

pub const IPPROTO_TCP: u8 = 6;

pub const TCP_FIN: u8 = 0x01;
pub const TCP_SYN: u8 = 0x02;
pub const TCP_RST: u8 = 0x04;
pub const TCP_PSH: u8 = 0x08;
pub const TCP_ACK: u8 = 0x10;

const TCPOPT_EOL: u8 = 0;
const TCPOPT_NOP: u8 = 1;
const TCPOPT_MSS: u8 = 2;
const TCPOPT_WSCALE: u8 = 3;
const TCPOPT_SACK_PERM: u8 = 4;
const TCPOPT_TIMESTAMP: u8 = 8;

/// Why a packet could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("packet of {0} bytes is shorter than an IPv4 header")]
    TooShort(usize),
    #[error("IP version {0}, not 4")]
    NotIpv4(u8),
    #[error("IPv4 header length {ihl} or total length {total} inconsistent with a packet of {len} bytes")]
    BadIpLength { ihl: usize, total: usize, len: usize },
    #[error("TCP header truncated ({0} bytes of segment)")]
    TcpTooShort(usize),
    #[error("TCP data offset {0} out of range")]
    BadDataOffset(usize),
}

/// The TCP options of a segment that matter for repairing a socket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct TcpOptions {
    pub mss: Option<u16>,
    pub window_scale: Option<u8>,
    pub sack_permitted: bool,
    /// (TSval, TSecr)
    pub timestamps: Option<(u32, u32)>,
}

/// A decoded TCP segment; `payload` borrows from the packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpSegment<'a> {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub window: u16,
    pub options: TcpOptions,
    pub payload: &'a [u8],
    /// The TCP checksum over the pseudo header and segment is correct.
    pub checksum_ok: bool,
}

impl TcpSegment<'_> {
    pub fn syn(&self) -> bool {
        self.flags & TCP_SYN != 0
    }
    pub fn ack_flag(&self) -> bool {
        self.flags & TCP_ACK != 0
    }
    pub fn fin(&self) -> bool {
        self.flags & TCP_FIN != 0
    }
    pub fn rst(&self) -> bool {
        self.flags & TCP_RST != 0
    }
    /// Sequence space the segment occupies: payload, +1 for SYN, +1 for FIN.
    pub fn seq_len(&self) -> u32 {
        self.payload.len() as u32 + u32::from(self.syn()) + u32::from(self.fin())
    }
}

/// What the transport of a packet is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport<'a> {
    Tcp(TcpSegment<'a>),
    /// Any other protocol, or a fragment (only a first fragment carries a
    /// TCP header, and the gate does not reassemble).
    Other { protocol: u8 },
}

/// A decoded IPv4 packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipv4Packet<'a> {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub transport: Transport<'a>,
}

impl Ipv4Packet<'_> {
    /// (source, destination) socket addresses of a TCP packet.
    pub fn tcp_endpoints(&self) -> Option<(SocketAddrV4, SocketAddrV4, &TcpSegment<'_>)> {
        match &self.transport {
            Transport::Tcp(t) => Some((SocketAddrV4::new(self.src, t.src_port), SocketAddrV4::new(self.dst, t.dst_port), t)),
            Transport::Other { .. } => None,
        }
    }
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Decodes one IPv4 packet. Bytes after the IP total length (link padding)
/// are ignored.
pub fn parse(bytes: &[u8]) -> Result<Ipv4Packet<'_>, ParseError> {
    if bytes.len() < 20 {
        return Err(ParseError::TooShort(bytes.len()));
    }
    let version = bytes[0] >> 4;
    if version != 4 {
        return Err(ParseError::NotIpv4(version));
    }
    let ihl = usize::from(bytes[0] & 0x0f) * 4;
    let total = usize::from(be16(bytes, 2));
    if ihl < 20 || total < ihl || total > bytes.len() {
        return Err(ParseError::BadIpLength { ihl, total, len: bytes.len() });
    }
    let src = Ipv4Addr::new(bytes[12], bytes[13], bytes[14], bytes[15]);
    let dst = Ipv4Addr::new(bytes[16], bytes[17], bytes[18], bytes[19]);
    let protocol = bytes[9];
    let frag = be16(bytes, 6);
    let fragmented = frag & 0x1fff != 0 || frag & 0x2000 != 0; // offset != 0 or MF
    if protocol != IPPROTO_TCP || fragmented {
        return Ok(Ipv4Packet { src, dst, transport: Transport::Other { protocol } });
    }
    let seg = &bytes[ihl..total];
    Ok(Ipv4Packet { src, dst, transport: Transport::Tcp(parse_tcp(seg, src, dst)?) })
}

fn parse_tcp(seg: &[u8], src: Ipv4Addr, dst: Ipv4Addr) -> Result<TcpSegment<'_>, ParseError> {
    if seg.len() < 20 {
        return Err(ParseError::TcpTooShort(seg.len()));
    }
    let doff = usize::from(seg[12] >> 4) * 4;
    if doff < 20 || doff > seg.len() {
        return Err(ParseError::BadDataOffset(doff));
    }
    Ok(TcpSegment {
        src_port: be16(seg, 0),
        dst_port: be16(seg, 2),
        seq: be32(seg, 4),
        ack: be32(seg, 8),
        flags: seg[13],
        window: be16(seg, 14),
        options: parse_options(&seg[20..doff]),
        payload: &seg[doff..],
        checksum_ok: tcp_checksum(src, dst, seg) == 0,
    })
}

/// Reads the options the gate keeps. A malformed option ends the walk (the
/// options before it are kept), as the kernel's tcp_parse_options does.
pub fn parse_options(mut opts: &[u8]) -> TcpOptions {
    let mut o = TcpOptions::default();
    while let Some(&kind) = opts.first() {
        match kind {
            TCPOPT_EOL => break,
            TCPOPT_NOP => {
                opts = &opts[1..];
                continue;
            }
            _ => {}
        }
        let Some(&len) = opts.get(1) else { break };
        let len = usize::from(len);
        if len < 2 || len > opts.len() {
            break;
        }
        let body = &opts[2..len];
        match (kind, len) {
            (TCPOPT_MSS, 4) => o.mss = Some(be16(body, 0)),
            (TCPOPT_WSCALE, 3) => o.window_scale = Some(body[0]),
            (TCPOPT_SACK_PERM, 2) => o.sack_permitted = true,
            (TCPOPT_TIMESTAMP, 10) => o.timestamps = Some((be32(body, 0), be32(body, 4))),
            _ => {}
        }
        opts = &opts[len..];
    }
    o
}

/// The one's complement sum over the IPv4 pseudo header and the segment:
/// 0 when the segment's checksum is right.
pub fn tcp_checksum(src: Ipv4Addr, dst: Ipv4Addr, seg: &[u8]) -> u16 {
    transport_checksum(IPPROTO_TCP, src, dst, seg)
}

/// The same for any transport protocol with the IPv4 pseudo header (TCP,
/// UDP).
pub fn transport_checksum(proto: u8, src: Ipv4Addr, dst: Ipv4Addr, seg: &[u8]) -> u16 {
    !fold(u64::from(pseudo_header_sum(proto, src, dst, seg.len())) + u64::from(ones_sum(seg)))
}

/// The IPv4 pseudo header's one's complement sum, folded, not inverted:
/// also what a stack that leaves the checksum to offload puts in the
/// field.
pub fn pseudo_header_sum(proto: u8, src: Ipv4Addr, dst: Ipv4Addr, len: usize) -> u16 {
    let mut sum: u64 = 0;
    for pair in [src.octets(), dst.octets()] {
        sum += u64::from(u16::from_be_bytes([pair[0], pair[1]])) + u64::from(u16::from_be_bytes([pair[2], pair[3]]));
    }
    fold(sum + u64::from(proto) + len as u64)
}

/// The one's complement sum of `b`'s 16-bit words (an odd last byte padded
/// with zero), folded, not inverted. `!ones_sum(header)` is the IPv4
/// header checksum.
pub fn ones_sum(b: &[u8]) -> u16 {
    let mut sum: u64 = 0;
    let mut chunks = b.chunks_exact(2);
    for c in &mut chunks {
        sum += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u64::from(u16::from_be_bytes([*last, 0]));
    }
    fold(sum)
}

fn fold(mut sum: u64) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// Builds IPv4/TCP packets with correct checksums: for the unit tests of
/// this crate and for tests of crates that drive a `GateCore`.
pub mod build {
    use super::*;

    /// A TCP segment to build.
    #[derive(Debug, Clone)]
    pub struct Segment {
        pub src: SocketAddrV4,
        pub dst: SocketAddrV4,
        pub seq: u32,
        pub ack: u32,
        pub flags: u8,
        pub window: u16,
        pub options: TcpOptions,
        pub payload: Vec<u8>,
    }

    impl Segment {
        pub fn new(src: SocketAddrV4, dst: SocketAddrV4, seq: u32, ack: u32, flags: u8) -> Segment {
            Segment { src, dst, seq, ack, flags, window: 502, options: TcpOptions::default(), payload: Vec::new() }
        }
        pub fn payload(mut self, p: &[u8]) -> Segment {
            self.payload = p.to_vec();
            self
        }
        pub fn options(mut self, o: TcpOptions) -> Segment {
            self.options = o;
            self
        }
        pub fn window(mut self, w: u16) -> Segment {
            self.window = w;
            self
        }
        /// The wire bytes: IPv4 header (no options) + TCP header with the
        /// options in the kernel's usual layout + payload.
        pub fn bytes(&self) -> Vec<u8> {
            let mut opts = Vec::new();
            if let Some(mss) = self.options.mss {
                opts.extend_from_slice(&[TCPOPT_MSS, 4]);
                opts.extend_from_slice(&mss.to_be_bytes());
            }
            if self.options.sack_permitted {
                opts.extend_from_slice(&[TCPOPT_SACK_PERM, 2]);
            }
            if let Some((val, ecr)) = self.options.timestamps {
                opts.extend_from_slice(&[TCPOPT_NOP, TCPOPT_NOP, TCPOPT_TIMESTAMP, 10]);
                opts.extend_from_slice(&val.to_be_bytes());
                opts.extend_from_slice(&ecr.to_be_bytes());
            }
            if let Some(ws) = self.options.window_scale {
                opts.extend_from_slice(&[TCPOPT_NOP, TCPOPT_WSCALE, 3, ws]);
            }
            while opts.len() % 4 != 0 {
                opts.push(TCPOPT_EOL);
            }
            let tcp_len = 20 + opts.len() + self.payload.len();
            let mut tcp = Vec::with_capacity(tcp_len);
            tcp.extend_from_slice(&self.src.port().to_be_bytes());
            tcp.extend_from_slice(&self.dst.port().to_be_bytes());
            tcp.extend_from_slice(&self.seq.to_be_bytes());
            tcp.extend_from_slice(&self.ack.to_be_bytes());
            tcp.push((((20 + opts.len()) / 4) as u8) << 4);
            tcp.push(self.flags);
            tcp.extend_from_slice(&self.window.to_be_bytes());
            tcp.extend_from_slice(&[0, 0, 0, 0]); // checksum, urgent pointer
            tcp.extend_from_slice(&opts);
            tcp.extend_from_slice(&self.payload);
            let csum = tcp_checksum(*self.src.ip(), *self.dst.ip(), &tcp);
            tcp[16..18].copy_from_slice(&csum.to_be_bytes());
            ipv4(*self.src.ip(), *self.dst.ip(), IPPROTO_TCP, &tcp)
        }
    }

    /// An IPv4 packet around `body` (no options, DF set, TTL 64).
    pub fn ipv4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, body: &[u8]) -> Vec<u8> {
        let total = (20 + body.len()) as u16;
        let mut p = vec![0x45, 0];
        p.extend_from_slice(&total.to_be_bytes());
        p.extend_from_slice(&[0, 0, 0x40, 0, 64, protocol, 0, 0]);
        p.extend_from_slice(&src.octets());
        p.extend_from_slice(&dst.octets());
        p.extend_from_slice(body);
        p
    }
}

#[cfg(test)]
mod tests {
    use super::build::*;
    use super::*;

    fn a(s: &str) -> SocketAddrV4 {
        s.parse().expect("test address")
    }

    #[test]
    fn syn_with_every_option() {
        let o = TcpOptions { mss: Some(1460), window_scale: Some(7), sack_permitted: true, timestamps: Some((0xdead_beef, 0)) };
        let b = Segment::new(a("10.0.0.1:40000"), a("198.18.0.100:80"), 0xffff_fff0, 0, TCP_SYN).options(o).window(64240).bytes();
        let p = parse(&b).expect("parses");
        assert_eq!(p.src, Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(p.dst, Ipv4Addr::new(198, 18, 0, 100));
        let (src, dst, t) = p.tcp_endpoints().expect("tcp");
        assert_eq!((src, dst), (a("10.0.0.1:40000"), a("198.18.0.100:80")));
        assert_eq!(t.seq, 0xffff_fff0);
        assert!(t.syn() && !t.ack_flag() && !t.fin() && !t.rst());
        assert_eq!(t.window, 64240);
        assert_eq!(t.options, o);
        assert!(t.payload.is_empty());
        assert!(t.checksum_ok);
        assert_eq!(t.seq_len(), 1);
    }

    #[test]
    fn data_fin_payload_and_checksum() {
        let b = Segment::new(a("198.18.0.100:80"), a("10.0.0.1:40000"), 1000, 2000, TCP_ACK | TCP_PSH | TCP_FIN)
            .payload(b"hello") // odd length exercises the checksum's last byte
            .bytes();
        let p = parse(&b).expect("parses");
        let (_, _, t) = p.tcp_endpoints().expect("tcp");
        assert_eq!(t.payload, b"hello");
        assert!(t.checksum_ok);
        assert_eq!(t.seq_len(), 6);
        let mut bad = b.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0x40;
        let p = parse(&bad).expect("parses");
        assert!(!p.tcp_endpoints().expect("tcp").2.checksum_ok);
    }

    #[test]
    fn link_padding_after_total_length_is_ignored() {
        let mut b = Segment::new(a("10.0.0.1:1"), a("10.0.0.2:2"), 1, 1, TCP_ACK).bytes();
        b.extend_from_slice(&[0; 6]);
        let p = parse(&b).expect("parses");
        assert!(p.tcp_endpoints().expect("tcp").2.payload.is_empty());
    }

    #[test]
    fn non_tcp_and_fragments_are_other() {
        let udp = ipv4(Ipv4Addr::new(1, 2, 3, 4), Ipv4Addr::new(5, 6, 7, 8), 17, &[0; 8]);
        assert_eq!(parse(&udp).expect("parses").transport, Transport::Other { protocol: 17 });
        let mut frag = Segment::new(a("10.0.0.1:1"), a("10.0.0.2:2"), 1, 1, TCP_ACK).payload(b"x").bytes();
        frag[6] = 0x20; // MF
        assert_eq!(parse(&frag).expect("parses").transport, Transport::Other { protocol: 6 });
    }

    #[test]
    fn malformed_packets_are_errors() {
        assert_eq!(parse(&[0x45; 10]), Err(ParseError::TooShort(10)));
        let mut v6 = vec![0u8; 40];
        v6[0] = 0x60;
        assert_eq!(parse(&v6), Err(ParseError::NotIpv4(6)));
        let mut b = Segment::new(a("10.0.0.1:1"), a("10.0.0.2:2"), 1, 1, TCP_ACK).bytes();
        b[3] = 200; // total length beyond the buffer
        assert!(matches!(parse(&b), Err(ParseError::BadIpLength { .. })));
        let mut b = Segment::new(a("10.0.0.1:1"), a("10.0.0.2:2"), 1, 1, TCP_ACK).bytes();
        b[20 + 12] = 0xf0; // data offset 60 > segment
        assert_eq!(parse(&b), Err(ParseError::BadDataOffset(60)));
        let short = ipv4(Ipv4Addr::new(1, 2, 3, 4), Ipv4Addr::new(5, 6, 7, 8), IPPROTO_TCP, &[0; 10]);
        assert_eq!(parse(&short), Err(ParseError::TcpTooShort(10)));
    }

    #[test]
    fn options_walk_stops_on_malformed_and_skips_unknown() {
        // unknown kind 30 len 4, then MSS, then a bad length that ends the walk
        let o = parse_options(&[30, 4, 0, 0, TCPOPT_MSS, 4, 0x05, 0xb4, TCPOPT_WSCALE, 9, 1]);
        assert_eq!(o.mss, Some(1460));
        assert_eq!(o.window_scale, None);
        // zero length must not loop forever
        assert_eq!(parse_options(&[TCPOPT_NOP, 5, 0, TCPOPT_MSS, 4, 0, 1]), TcpOptions::default());
        // wrong length for a known kind is ignored, later options still read
        let o = parse_options(&[TCPOPT_MSS, 3, 0, TCPOPT_SACK_PERM, 2, TCPOPT_EOL, TCPOPT_SACK_PERM, 2]);
        assert!(o.sack_permitted);
        assert_eq!(o.mss, None);
    }
}
