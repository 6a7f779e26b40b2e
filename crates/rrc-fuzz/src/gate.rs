//! The backup's packet gate: IPv4/TCP parsing, the decision core fed with
//! sequences of packets and commits, and the netlink messages of NFQUEUE.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddrV4};

use rrc_gate::packet::build::Segment;
use rrc_gate::packet::{parse, parse_options, tcp_checksum, Transport, TCP_SYN};
use rrc_gate::{Commit, Decision, GateCore, GateLimits, PacketId, ServerStream, StreamSeed, TcpOptions};

use crate::Bytes;

/// `packet::parse` and `parse_options`; a TCP segment that parses, built
/// again by `packet::build`, parses to the same fields with a right
/// checksum.
pub fn gate_packet(data: &[u8]) {
    let _ = parse_options(data);
    let Ok(p) = parse(data) else { return };
    let Transport::Tcp(t) = &p.transport else { return };
    let src = SocketAddrV4::new(p.src, t.src_port);
    let dst = SocketAddrV4::new(p.dst, t.dst_port);
    // Left out: a payload so long that the rebuilt options overflow the
    // 16-bit total length (the builder's limit, not the parser's).
    if t.payload.len() > 60_000 {
        return;
    }
    let b = Segment::new(src, dst, t.seq, t.ack, t.flags).window(t.window).options(t.options).payload(t.payload).bytes();
    let q = parse(&b).expect("a built segment parses");
    let Transport::Tcp(u) = &q.transport else { panic!("a built segment is not TCP") };
    assert_eq!((q.src, q.dst, u.src_port, u.dst_port), (p.src, p.dst, t.src_port, t.dst_port));
    assert_eq!((u.seq, u.ack, u.flags, u.window, u.options, u.payload), (t.seq, t.ack, t.flags, t.window, t.options, t.payload));
    assert!(u.checksum_ok, "a built segment has a bad checksum");
    assert_eq!(tcp_checksum(q.src, q.dst, &b[20..]), 0);
}

/// `nfqueue::parse_datagram`: every payload it returns lies in the input.
pub fn nfqueue(data: &[u8]) {
    let range = data.as_ptr_range();
    for ev in rrc_gate::nfqueue::parse_datagram(data) {
        if let rrc_gate::nfqueue::Event::Packet { payload, .. } = ev {
            if payload.is_empty() {
                continue; // a message without NFQA_PAYLOAD
            }
            let r = payload.as_ptr_range();
            assert!(range.start <= r.start && r.end <= range.end, "a payload outside the datagram");
        }
    }
}

const SVC: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 100);
/// Initial sequence numbers per client slot, near the wrap on purpose.
const CLIENT_ISN: [u32; 4] = [0xffff_ff00, 1_000_000, 0x7fff_fff0, 0];
const SERVER_ISN: [u32; 4] = [5_000_000, 0xffff_fff0, 0x8000_0000, 12345];

fn client(k: usize) -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1 + (k as u8 & 1)), 40000 + (k as u16 >> 1))
}
fn server(k: usize) -> SocketAddrV4 {
    SocketAddrV4::new(SVC, if k == 3 { 6379 } else { 80 })
}

/// A sequence number near `isn`: mostly a small step after it (0: the
/// ISN, 1: the first data byte), sometimes any value.
fn seq_near(b: &mut Bytes<'_>, isn: u32) -> u32 {
    let step = b.u16();
    if step == 0xffff {
        return b.u32();
    }
    isn.wrapping_add(u32::from(step))
}

fn segment(b: &mut Bytes<'_>, from_client: bool) -> Vec<u8> {
    let k = usize::from(b.u8() & 3);
    let flags = b.u8();
    let (own, peer) = if from_client { (CLIENT_ISN[k], SERVER_ISN[k]) } else { (SERVER_ISN[k], CLIENT_ISN[k]) };
    let seq = seq_near(b, own);
    let ack = seq_near(b, peer);
    let o = b.u8();
    let options = if flags & TCP_SYN != 0 || o & 0x80 != 0 {
        TcpOptions { mss: (o & 1 != 0).then_some(1460), window_scale: (o & 2 != 0).then_some(o >> 4), sack_permitted: o & 4 != 0, timestamps: (o & 8 != 0).then_some((u32::from(o), 7)) }
    } else {
        TcpOptions::default()
    };
    let n = b.u8();
    // Short payloads from the input, long ones as a repeated byte.
    let payload = if n < 0xc0 { b.take(usize::from(n)).to_vec() } else { vec![n; usize::from(n & 0x3f) * 1024] };
    let (src, dst) = if from_client { (client(k), server(k)) } else { (server(k), client(k)) };
    let mut p = Segment::new(src, dst, seq, ack, flags).window(b.u16()).options(options).payload(&payload).bytes();
    if o & 0x40 != 0 {
        let last = p.len() - 1;
        p[last] ^= 1; // a bad checksum (or a changed IP byte)
    }
    p
}

/// What the target knows of the packets the core was given.
#[derive(Default)]
struct Model {
    next_id: u64,
    /// Held by the core's streams or its rule-(2) queue.
    held: BTreeSet<u64>,
    /// Held as input during a failover, in arrival order.
    input: Vec<u64>,
    epoch: u64,
}

impl Model {
    /// Ids a commit released: each held once, released once, in arrival
    /// (= id) order.
    fn released(&mut self, ids: &[PacketId]) {
        assert!(ids.windows(2).all(|w| w[0].0 < w[1].0), "released out of arrival order: {ids:?}");
        for id in ids {
            assert!(self.held.remove(&id.0), "packet {} released but not held (or released twice)", id.0);
        }
    }
}

/// `GateCore` fed with a sequence of packets (built TCP segments of four
/// streams, or raw bytes), commits, release switches, failover input
/// holds and seeds. Checks that every packet held is released at most
/// once, in arrival order, and that the core's counts agree with the held
/// packets it lists.
pub fn gate_core(data: &[u8]) {
    let mut core = GateCore::new(SVC, GateLimits { max_held_packets: 64, max_recorded_bytes: 1 << 16 });
    let mut m = Model::default();
    let mut b = Bytes::new(data);
    let mut steps = 0;
    while !b.is_empty() && steps < 256 {
        steps += 1;
        match b.u8() % 8 {
            op @ (0..=2) => {
                let bytes = match op {
                    0 => {
                        let n = usize::from(b.u16() % 1600);
                        b.take(n).to_vec()
                    }
                    1 => segment(&mut b, true),
                    _ => segment(&mut b, false),
                };
                m.next_id += 1;
                let id = m.next_id;
                if core.on_packet(PacketId(id), &bytes) == Decision::Hold {
                    if core.held_ids().contains(&PacketId(id)) {
                        m.held.insert(id);
                    } else {
                        m.input.push(id);
                    }
                }
            }
            3 => {
                let step = u64::from(b.u8() % 3);
                m.epoch += step; // 0: a stale epoch
                let arrival_bound = core.arrival_counter().saturating_sub(u64::from(b.u8() % 8)) + u64::from(b.u8() / 250);
                let mask = b.u8();
                let streams = (0..4)
                    .filter(|k| mask & (1 << k) != 0)
                    .map(|k| ServerStream { client: client(k), server: server(k), write_seq_rel: seq_near(&mut b, 0), read_seq_rel: seq_near(&mut b, 0), state: b.u8() % 12 })
                    .collect();
                let ids = core.commit(Commit { epoch: m.epoch, arrival_bound, streams });
                m.released(&ids);
            }
            4 => {
                let ids = core.set_release_enabled(b.u8() & 1 != 0);
                m.released(&ids);
            }
            5 => core.hold_input(),
            6 => {
                let ids: Vec<u64> = core.release_input().iter().map(|i| i.0).collect();
                assert_eq!(ids, std::mem::take(&mut m.input), "the held input came back otherwise");
            }
            _ => {
                let mask = b.u8();
                let seeds: Vec<StreamSeed> = (0..4)
                    .filter(|k| mask & (1 << k) != 0)
                    .map(|k| StreamSeed { client: client(k), server: server(k), client_isn: CLIENT_ISN[k], server_isn: SERVER_ISN[k], client_syn: None, server_syn: None })
                    .collect();
                core.seed(&seeds);
            }
        }
        let listed: BTreeSet<u64> = core.held_ids().iter().map(|i| i.0).collect();
        assert_eq!(listed, m.held, "the core's held packets differ from those it said it held");
        let st = core.stats();
        assert_eq!(st.held_packets, listed.len() as u64, "stats count other held packets than it lists");
    }
    serde_json::to_string(&core.stats()).expect("stats serialize");
    for s in core.streams() {
        let d = core.stream_data(s.client, s.server).expect("a listed stream has data");
        serde_json::to_string(&d).expect("stream data serializes");
        assert_eq!(d.client_unread.len() as u64, s.client_recorded_len);
    }
}
