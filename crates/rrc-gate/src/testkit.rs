//! Test helpers shared by the gate's unit tests: a core driven with
//! relative sequence numbers.
#![cfg(test)]

use crate::core::*;
use crate::stream::{PacketId, StreamData, StreamSnapshot};
use std::net::{Ipv4Addr, SocketAddrV4};
pub use crate::packet::build::{ipv4, Segment};
pub use crate::packet::{TcpOptions, TCP_ACK, TCP_FIN, TCP_PSH, TCP_RST, TCP_SYN};

pub const SVC: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 100);
pub const CISN: u32 = 1_000_000;
pub const SISN: u32 = 5_000_000;

pub fn cli() -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 40000)
}
pub fn srv() -> SocketAddrV4 {
    SocketAddrV4::new(SVC, 80)
}

/// A core plus a packet id counter and helpers that speak relative
/// sequence numbers.
pub struct T {
    pub core: GateCore,
    pub next: u64,
    pub cisn: u32,
    pub sisn: u32,
}

impl T {
    pub fn new() -> T {
        T::with_isns(CISN, SISN)
    }
    pub fn with_isns(cisn: u32, sisn: u32) -> T {
        T { core: GateCore::new(SVC, GateLimits::default()), next: 1, cisn, sisn }
    }
    pub fn send(&mut self, seg: Segment) -> (PacketId, Decision) {
        let id = PacketId(self.next);
        self.next += 1;
        let d = self.core.on_packet(id, &seg.bytes());
        (id, d)
    }
    /// Client→server segment at relative seq/ack.
    pub fn c(&mut self, rel: u32, ack_rel: u32, flags: u8, data: &[u8]) -> (PacketId, Decision) {
        let seq = self.cisn.wrapping_add(1).wrapping_add(rel);
        let ack = self.sisn.wrapping_add(1).wrapping_add(ack_rel);
        self.send(Segment::new(cli(), srv(), seq, ack, flags).payload(data))
    }
    /// Server→client segment at relative seq/ack.
    pub fn s(&mut self, rel: u32, ack_rel: u32, flags: u8, data: &[u8]) -> (PacketId, Decision) {
        let seq = self.sisn.wrapping_add(1).wrapping_add(rel);
        let ack = self.cisn.wrapping_add(1).wrapping_add(ack_rel);
        self.send(Segment::new(srv(), cli(), seq, ack, flags).payload(data))
    }
    pub fn handshake(&mut self) {
        let copt = TcpOptions { mss: Some(1460), window_scale: Some(7), sack_permitted: true, timestamps: Some((111, 0)) };
        let sopt = TcpOptions { mss: Some(1400), window_scale: Some(9), sack_permitted: true, timestamps: Some((222, 111)) };
        let (_, d) = self.send(Segment::new(cli(), srv(), self.cisn, 0, TCP_SYN).options(copt));
        assert_eq!(d, Decision::Accept);
        let (_, d) = self.send(Segment::new(srv(), cli(), self.sisn, self.cisn.wrapping_add(1), TCP_SYN | TCP_ACK).options(sopt));
        assert_eq!(d, Decision::Accept, "SYN-ACK passes at once");
        let (_, d) = self.c(0, 0, TCP_ACK, b"");
        assert_eq!(d, Decision::Accept);
    }
    pub fn commit(&mut self, epoch: u64, bound: u64, write: u32, read: u32) -> Vec<PacketId> {
        self.core.commit(Commit {
            epoch,
            arrival_bound: bound,
            streams: vec![ServerStream { client: cli(), server: srv(), write_seq_rel: write, read_seq_rel: read, state: 1 }],
        })
    }
    pub fn snap(&self) -> StreamSnapshot {
        self.core.stream_data(cli(), srv()).expect("stream known").snapshot
    }
    pub fn data(&self) -> StreamData {
        self.core.stream_data(cli(), srv()).expect("stream known")
    }
}

