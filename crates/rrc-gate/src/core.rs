//! The gate's decisions, without any I/O: `GateCore::on_packet` says
//! whether a queued packet goes out now or waits, `GateCore::commit` says
//! which waiting packets a commit releases, in arrival order.
//!
//! Checkpoint-only output commit (NiLiCon §II-A/§IV, as Remus): a server
//! output may leave only once the backup holds a checkpoint taken after
//! the server produced it. RRC §3 does the same per stream with a release
//! sequence number (PackGate); here the commit carries, per stream, how
//! many bytes the server app had written at the snapshot (rule 1), and an
//! arrival bound (rule 2) for what has no sequence number to compare.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{Ipv4Addr, SocketAddrV4};

use serde::{Deserialize, Serialize};

use crate::logged::{self, LogCoverStats, LoggedOutput};
use crate::packet::{self, Transport};
use crate::record::{to_abs, ByteRecord};
use crate::stream::{raise, Cover, Footprint, Held, PacketId, Stream, StreamData, StreamKey, StreamSnapshot};

/// What to do with a packet now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Give the ACCEPT verdict now.
    Accept,
    /// No verdict yet: a later `commit` (or `set_release_enabled`) returns
    /// its id.
    Hold,
}

/// A socket of the service as the snapshot saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerStream {
    pub client: SocketAddrV4,
    pub server: SocketAddrV4,
    /// Bytes the server app had written at the snapshot (+1 if it had sent
    /// FIN), relative to server ISN + 1.
    pub write_seq_rel: u32,
    /// Bytes the server app had read, relative to client ISN + 1.
    pub read_seq_rel: u32,
    /// Linux TCP state number (TCP_ESTABLISHED = 1, ...).
    pub state: u8,
}

/// What a gate needs to join an established connection (see
/// [`GateCore::seed`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamSeed {
    pub client: SocketAddrV4,
    pub server: SocketAddrV4,
    pub client_isn: u32,
    pub server_isn: u32,
    pub client_syn: Option<crate::packet::TcpOptions>,
    pub server_syn: Option<crate::packet::TcpOptions>,
}

impl StreamSeed {
    /// From a snapshot that saw both ISNs.
    pub fn of(s: &StreamSnapshot) -> Option<StreamSeed> {
        Some(StreamSeed {
            client: s.client,
            server: s.server,
            client_isn: s.client_isn?,
            server_isn: s.server_isn?,
            client_syn: s.client_syn_options,
            server_syn: s.server_syn_options,
        })
    }
}

/// A checkpoint the backup has committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Commit {
    pub epoch: u64,
    /// The newest arrival number the primary had received from this gate's
    /// agent before it took the snapshot.
    pub arrival_bound: u64,
    pub streams: Vec<ServerStream>,
}

/// Memory bounds: exceeding one is logged and counted, never enforced by
/// dropping (TCP flow control bounds what really accumulates).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateLimits {
    pub max_held_packets: u64,
    /// Recorded client bytes + retained server bytes.
    pub max_recorded_bytes: u64,
}

impl Default for GateLimits {
    fn default() -> Self {
        GateLimits { max_held_packets: 65536, max_recorded_bytes: 256 << 20 }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateStats {
    pub streams: u64,
    pub held_packets: u64,
    pub held_bytes: u64,
    pub recorded_client_bytes: u64,
    pub retained_server_bytes: u64,
    pub packets_in: u64,
    pub packets_passed: u64,
    pub packets_held_total: u64,
    pub packets_released: u64,
    pub commits: u64,
    pub last_commit_epoch: Option<u64>,
    /// Times a bound was crossed (counted once per crossing).
    pub bound_exceeded: u64,
    /// Client segments not recorded because their TCP checksum was wrong
    /// (the server drops them too; the retransmission is recorded).
    pub bad_checksum: u64,
    /// Client segments not recorded because they start beyond the window
    /// the server advertised (its kernel drops them too), or would add an
    /// out-of-order piece past [`MAX_OUT_OF_ORDER_PIECES`] to one stream.
    pub client_beyond_window: u64,
    /// Packets to or from the service that did not parse as IPv4.
    pub unparsable: u64,
    /// Commits ignored because their epoch was not newer than the last.
    pub stale_commits: u64,
    /// ENOBUFS on the netlink socket (kernel messages lost), set by `Gate`.
    pub netlink_enobufs: u64,
    pub release_enabled: bool,
    pub arrival_counter: u64,
    pub arrival_bound: u64,
    /// rr mode: what the record log covers, and whether it releases.
    #[serde(default)]
    pub log: LogCoverStats,
    #[serde(default)]
    pub log_release: bool,
    /// The AF_XDP output path's counters, set by `Gate` (None: the
    /// service's output goes through NFQUEUE).
    #[serde(default)]
    pub xdp: Option<XdpPathStats>,
    /// The observed input path's counters, set by `Gate` (None: what
    /// clients send comes through NFQUEUE).
    #[serde(default)]
    pub observed_input: Option<ObservedInputStats>,
}

/// What the observed input path did (docs/gate.md "The input path").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedInputStats {
    /// Clients' frames recorded from the ring (what the kernel forwarded
    /// past the NFQUEUE); the rest of what clients send is in the queue's
    /// count.
    pub frames: u64,
    pub bytes: u64,
    /// Ring samples that were not a frame (never expected).
    pub malformed: u64,
    /// Packets to the service that took the queue instead (not copied:
    /// longer than a frame, the ring full; or after a failover detached
    /// the program).
    pub queued: u64,
    /// Whether the program is still attached (a failover detaches it).
    pub attached: bool,
}

/// What the AF_XDP output path did (docs/gate.md "The output path").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct XdpPathStats {
    /// Frames of the service's output read from the AF_XDP sockets.
    pub frames: u64,
    /// Frames dropped while a fence held `Gate::block_output` on, or after
    /// a failover's `Gate::seal_output` (the old primary's output).
    pub blocked_dropped: u64,
    /// Frames the kernel could not give the sockets (RX ring full, no
    /// fill frame, invalid): TCP retransmits them.
    pub kernel_dropped: u64,
    /// Packets sent on by the AF_XDP socket on the clients' interface.
    pub sent: u64,
    /// Packets sent on by the raw socket (a client whose next hop the gate
    /// has not learned, or no free frame).
    #[serde(default)]
    pub sent_raw: u64,
    /// Dropped as a router would (TTL, malformed, an invalid frame).
    pub send_dropped: u64,
    /// Refused by the kernel on the raw socket (no route, an OUTPUT rule).
    pub send_refused: u64,
    /// Clients whose next hop the gate has learned.
    #[serde(default)]
    pub next_hops: u64,
}

/// Commits after which a stream that no commit ever listed, with nothing
/// held and no packet in between, is forgotten (about 5 min at 100 ms
/// epochs): a half-open connection the server dropped leaves no trace.
const IDLE_FORGET_COMMITS: u64 = 3000;

/// The kernel's TCP_TIME_WAIT (include/net/tcp_states.h), as a commit's
/// table names it.
const TCP_TIME_WAIT: u8 = 6;

/// Out-of-order pieces of client data kept per stream: a real sender's
/// holes within one window are few; a client sending one byte in every
/// other position would otherwise cost a map entry per byte.
pub const MAX_OUT_OF_ORDER_PIECES: usize = 16384;

/// Beyond the advertised window's edge, how far a segment may start and
/// still be recorded: the kernel's own edge is the advertised one rounded
/// up to its window scale, and a little more is harmless.
const WINDOW_SLACK: u64 = 64 << 10;

pub struct GateCore {
    service_ip: Ipv4Addr,
    limits: GateLimits,
    streams: HashMap<StreamKey, Stream>,
    /// Held packets from the service that are not TCP of a known stream
    /// (non-TCP, unparsable, older incarnations of a reused 4-tuple):
    /// released by rule (2) only.
    other: VecDeque<Held>,
    arrival: u64,
    arrival_bound: u64,
    release_enabled: bool,
    /// Failover: client packets held until the restored service is live.
    input_held: Option<Vec<PacketId>>,
    pending: Option<Commit>,
    totals: Footprint,
    over_held: bool,
    over_bytes: bool,
    stats: GateStats,
    /// Release on the record log's cover too, not only on commits (rr
    /// mode with failover by replay).
    log_release: bool,
    /// Packets released while deciding on another (the log's cover
    /// completed by its bytes): `take_released` hands them out.
    released_now: Vec<PacketId>,
}

impl GateCore {
    pub fn new(service_ip: Ipv4Addr, limits: GateLimits) -> GateCore {
        GateCore {
            service_ip,
            limits,
            streams: HashMap::new(),
            other: VecDeque::new(),
            arrival: 0,
            arrival_bound: 0,
            release_enabled: true,
            input_held: None,
            pending: None,
            totals: Footprint::default(),
            over_held: false,
            over_bytes: false,
            stats: GateStats::default(),
            log_release: false,
            released_now: Vec::new(),
        }
    }

    pub fn service_ip(&self) -> Ipv4Addr {
        self.service_ip
    }

    /// The newest arrival number given to a packet (0 before the first).
    pub fn arrival_counter(&self) -> u64 {
        self.arrival
    }

    /// Decides on one queued packet (`bytes`: the IPv4 packet).
    pub fn on_packet(&mut self, id: PacketId, bytes: &[u8]) -> Decision {
        self.arrival += 1;
        let arrival = self.arrival;
        self.stats.packets_in += 1;
        let mut d = self.decide(id, arrival, bytes);
        // Failover: what clients send waits here (recorded) until the
        // restored service is live, instead of being dropped and resent
        // only after the client's retransmission timeout.
        if d == Decision::Accept && bytes.len() >= 20 && bytes[16..20] == self.service_ip.octets() {
            if let Some(held) = self.input_held.as_mut() {
                held.push(id);
                d = Decision::Hold;
            }
        }
        match d {
            Decision::Accept => self.stats.packets_passed += 1,
            Decision::Hold => self.stats.packets_held_total += 1,
        }
        self.check_bounds();
        d
    }

    fn decide(&mut self, id: PacketId, arrival: u64, bytes: &[u8]) -> Decision {
        let pkt = match packet::parse(bytes) {
            Ok(p) => p,
            Err(e) => {
                // The queue only gets packets that matched `-s SVC` or
                // `-d SVC`; one we cannot read might be the service's
                // output, so it waits for rule (2), which is always safe.
                self.stats.unparsable += 1;
                tracing::warn!(error = %e, packet = id.0, "unparsable packet in the gate queue: holding it until an arrival bound covers it");
                self.hold_other(id, arrival, bytes.len() as u64);
                return Decision::Hold;
            }
        };
        let to_service = pkt.dst == self.service_ip;
        let from_service = !to_service && pkt.src == self.service_ip;
        match (&pkt.transport, to_service, from_service) {
            (_, false, false) => Decision::Accept, // not the service's traffic
            (Transport::Other { .. }, true, _) => Decision::Accept,
            (Transport::Other { .. }, _, true) => {
                self.hold_other(id, arrival, bytes.len() as u64);
                Decision::Hold
            }
            (Transport::Tcp(seg), true, _) => {
                let client = SocketAddrV4::new(pkt.src, seg.src_port);
                let server = SocketAddrV4::new(pkt.dst, seg.dst_port);
                self.on_client_segment((client, server), arrival, seg, bytes);
                Decision::Accept
            }
            (Transport::Tcp(seg), _, true) => {
                let server = SocketAddrV4::new(pkt.src, seg.src_port);
                let client = SocketAddrV4::new(pkt.dst, seg.dst_port);
                self.on_server_segment((client, server), id, arrival, seg)
            }
        }
    }

    fn hold_other(&mut self, id: PacketId, arrival: u64, len: u64) {
        // The payload is not kept: nothing is retained for non-TCP output.
        self.other.push_back(Held { id, arrival, cover: Cover::ArrivalOnly, start: 0, payload: Vec::new(), bytes: len, rst: false });
        self.totals.held_packets += 1;
        self.totals.held_bytes += len;
    }

    /// Runs `f` on a stream (created if needed) keeping the totals right.
    fn with_stream<R>(&mut self, key: StreamKey, f: impl FnOnce(&mut Stream) -> R) -> R {
        let s = self.streams.entry(key).or_insert_with(|| Stream::new(key.0, key.1));
        let before = s.footprint();
        let r = f(s);
        let after = s.footprint();
        apply_delta(&mut self.totals, before, after);
        r
    }

    /// A client→server segment: record it (PackRec), then it goes out.
    fn on_client_segment(&mut self, key: StreamKey, arrival: u64, seg: &packet::TcpSegment<'_>, packet: &[u8]) {
        if !seg.checksum_ok {
            self.stats.bad_checksum += 1;
            return;
        }
        // A SYN with a new ISN on a known 4-tuple is a new incarnation (a
        // SYN-ACK answers the service's own SYN: same incarnation).
        if seg.syn() && !seg.ack_flag() {
            let stale = self.streams.get(&key).is_some_and(|s| s.client_isn.is_some_and(|isn| isn != seg.seq));
            if stale {
                self.retire_stream(key);
            }
        }
        // (one held during a failover reaches the restored service anyway)
        let forwarded = self.input_held.is_none();
        let beyond_window = self.with_stream(key, |s| {
            let mut beyond_window = false;
            s.last_arrival = arrival;
            s.idle_commits = 0;
            if seg.syn() {
                s.client_isn = Some(seg.seq);
                s.client_syn = Some(seg.options);
                if !seg.ack_flag() && s.server_isn.is_none() && forwarded {
                    s.client_syn_packet = Some(packet.to_vec());
                }
            }
            if let Some(ts) = seg.options.timestamps {
                s.client_timestamps = Some(ts);
            }
            // After both FINs were acknowledged the server's socket has
            // ended (TIME_WAIT, or CLOSE with the application's fd still
            // open): a client RST then answers a server segment that came
            // after the client had closed (an ACK the gate held, released
            // late) and changes nothing the application can read, so the
            // stream is not marked reset (a failover rebuilds it with its
            // FINs, docs/tcp-repair.md).
            if seg.rst() && rst_acceptable(s, seg.seq) && !s.both_fins_acked() {
                s.reset = true;
            }
            if let Some(isn) = s.client_isn {
                let rel = seg.seq.wrapping_sub(isn.wrapping_add(1));
                // The SYN occupies offset -1: its payload (TFO) starts at 0.
                let start = to_abs(rel, s.client_highest) + i64::from(seg.syn());
                let end = start + i64::from(seg.payload.len() as u32);
                // Data the server's kernel would drop is not recorded, and
                // does not move the stream's reference offset either.
                let edge = s.server_window_edge.map(|e| e + WINDOW_SLACK + (1 << s.server_window_shift()));
                let in_window = edge.map_or(true, |e| start < 0 || (start as u64) < e);
                let new_hole = start > s.client_data.contiguous_end() as i64 && s.client_data.out_of_order_pieces() >= MAX_OUT_OF_ORDER_PIECES;
                if !seg.payload.is_empty() && (!in_window || new_hole) {
                    beyond_window = true;
                } else if !seg.payload.is_empty() && end > 0 && !seg.rst() {
                    let skip = (-start).max(0) as usize;
                    let start = start.max(0) as u64;
                    s.client_data.insert(start, &seg.payload[skip..]);
                }
                let fin_end = end + i64::from(seg.fin());
                if fin_end > 0 && in_window {
                    s.client_highest = s.client_highest.max(fin_end as u64);
                    if seg.fin() {
                        s.client_fin_end = Some(fin_end as u64);
                    }
                }
            }
            if seg.ack_flag() {
                s.client_window = seg.window;
                if let Some(isn) = s.server_isn {
                    let ack = to_abs(seg.ack.wrapping_sub(isn.wrapping_add(1)), s.server_highest);
                    if ack >= 0 {
                        raise(&mut s.client_ack, ack as u64);
                        // What the client acknowledges reached it: released
                        // here, or sent before this gate existed (a seeded
                        // stream, see `seed`).
                        s.server_released_end = s.server_released_end.max(ack as u64);
                        // The client has the bytes: no failover needs them.
                        s.server_retained.trim_below(ack as u64);
                    }
                }
            }
            beyond_window
        });
        if beyond_window {
            self.stats.client_beyond_window += 1;
        }
    }

    /// A server→client segment: pure ACKs and SYN-ACKs go out, data, FIN,
    /// RST wait for a commit (PackGate).
    fn on_server_segment(&mut self, key: StreamKey, id: PacketId, arrival: u64, seg: &packet::TcpSegment<'_>) -> Decision {
        // The service's own SYN with a new ISN: a new outgoing connection.
        if seg.syn() && !seg.ack_flag() {
            let stale = self.streams.get(&key).is_some_and(|s| s.server_isn.is_some_and(|isn| isn != seg.seq));
            if stale {
                self.retire_stream(key);
            }
        }
        let release_enabled = self.release_enabled;
        let log_release = self.log_release;
        let bound = self.arrival_bound;
        let mut log_stats = self.stats.log;
        let mut released_now = std::mem::take(&mut self.released_now);
        let before = released_now.len() as u64;
        let decision = self.with_stream(key, |s| {
            s.last_arrival = arrival;
            s.idle_commits = 0;
            if seg.syn() {
                s.client_syn_packet = None; // answered
                if s.server_isn != Some(seg.seq) {
                    s.server_isn = Some(seg.seq);
                    s.server_highest = 0;
                    s.server_released_end = 0;
                    s.server_retained = ByteRecord::new(0);
                    s.server_fin_end = None;
                    s.committed_write = None;
                }
                s.server_syn = Some(seg.options);
            }
            if let Some(ts) = seg.options.timestamps {
                s.server_timestamps = Some(ts);
            }
            if seg.ack_flag() {
                if let Some(isn) = s.client_isn {
                    let ack = to_abs(seg.ack.wrapping_sub(isn.wrapping_add(1)), s.client_highest);
                    if ack >= 0 {
                        raise(&mut s.server_ack, ack as u64);
                        // A SYN's window is never scaled (RFC 7323).
                        let shift = if seg.syn() { 0 } else { s.server_window_shift() };
                        raise(&mut s.server_window_edge, ack as u64 + (u64::from(seg.window) << shift));
                    }
                }
            }
            // SYN-ACK: the connection's acceptance is not an output the
            // client could observe twice (a restored server that never
            // accepted answers a retransmitted SYN the same way).
            if seg.syn() && seg.ack_flag() {
                return Decision::Accept;
            }
            let pure_ack = seg.payload.is_empty() && !seg.fin() && !seg.rst() && !seg.syn();
            if pure_ack {
                return Decision::Accept;
            }
            // Accounted as its payload length whether or not it is kept.
            let bytes = seg.payload.len() as u64;
            let mut held = Held { id, arrival, cover: Cover::ArrivalOnly, start: 0, payload: Vec::new(), bytes, rst: seg.rst() };
            if !seg.rst() {
                if let Some(isn) = s.server_isn {
                    let rel = seg.seq.wrapping_sub(isn.wrapping_add(1));
                    let start = to_abs(rel, s.server_highest) + i64::from(seg.syn());
                    let end = (start + i64::from(seg.payload.len() as u32) + i64::from(seg.fin())).max(0) as u64;
                    let skip = (-start).max(0) as usize;
                    held.start = start.max(0) as u64;
                    held.payload = seg.payload.get(skip..).unwrap_or_default().to_vec();
                    held.bytes = held.payload.len() as u64;
                    held.cover = Cover::Sequence { end };
                    s.server_highest = s.server_highest.max(end);
                    if seg.fin() {
                        s.server_fin_end = Some(end);
                    }
                }
            }
            // A retransmission that the last commit already covers needs
            // no new commit, but may not overtake held packets.
            if release_enabled && s.held.is_empty() && held.covered(logged::release_cursor(s, log_release), bound) {
                s.released(&held);
                return Decision::Accept;
            }
            s.hold(held);
            // the log may have been waiting for these bytes
            if s.log.pending() > 0 {
                logged::advance(s, &mut log_stats);
                if release_enabled && log_release {
                    let mut out = Vec::new();
                    s.release(bound, true, &mut out);
                    released_now.extend(out.into_iter().map(|(_, id)| id));
                }
            }
            Decision::Hold
        });
        let newly = released_now.len() as u64 - before;
        log_stats.released_packets += newly;
        self.stats.log = log_stats;
        self.stats.packets_released += newly;
        self.released_now = released_now;
        decision
    }

    /// Moves a stream's held packets to the rule-(2)-only queue and drops
    /// it: its 4-tuple starts a new connection.
    fn retire_stream(&mut self, key: StreamKey) {
        let Some(s) = self.streams.remove(&key) else { return };
        let fp = s.footprint();
        apply_delta(&mut self.totals, fp, Footprint::default());
        for mut h in s.held {
            h.cover = Cover::ArrivalOnly;
            h.payload = Vec::new();
            self.totals.held_packets += 1;
            self.totals.held_bytes += h.bytes;
            // Keep `other` in arrival order.
            let at = self.other.partition_point(|o| o.arrival < h.arrival);
            self.other.insert(at, h);
        }
        tracing::debug!(client = %key.0, server = %key.1, "a new connection reuses the 4-tuple; the old stream is forgotten");
    }

    fn forget(&mut self, key: StreamKey) {
        if let Some(s) = self.streams.remove(&key) {
            apply_delta(&mut self.totals, s.footprint(), Footprint::default());
            tracing::debug!(client = %key.0, server = %key.1, reset = s.reset, "stream forgotten");
        }
    }

    /// Notes a commit and returns the packets it releases, in arrival
    /// order. A commit whose epoch is not newer than the last is ignored.
    /// While releasing is disabled, the commit is only remembered.
    /// Streams this gate did not see start: a new backup's gate joining
    /// established connections at re-protection. Their ISNs and SYN
    /// options come from the primary (which had them from the previous
    /// backup's acks); bytes are recorded from the first packet seen, and
    /// the first commit trims what the application had already read.
    pub fn seed(&mut self, seeds: &[StreamSeed]) {
        for sd in seeds {
            let key = (sd.client, sd.server);
            if self.streams.contains_key(&key) {
                continue;
            }
            self.with_stream(key, |s| {
                s.client_isn = Some(sd.client_isn);
                s.server_isn = Some(sd.server_isn);
                s.client_syn = sd.client_syn;
                s.server_syn = sd.server_syn;
            });
        }
    }

    pub fn commit(&mut self, c: Commit) -> Vec<PacketId> {
        if let Some(last) = self.stats.last_commit_epoch {
            if c.epoch <= last {
                self.stats.stale_commits += 1;
                tracing::warn!(epoch = c.epoch, last, "commit not newer than the last one: ignored");
                return Vec::new();
            }
        }
        self.stats.commits += 1;
        self.stats.last_commit_epoch = Some(c.epoch);
        if !self.release_enabled {
            self.pending = Some(c);
            return Vec::new();
        }
        self.apply(c)
    }

    /// Stops (false) or resumes (true) releasing. Resuming applies the
    /// newest commit noted meanwhile and returns what it releases.
    /// Failover: from now on every packet to the service is recorded as
    /// usual but held, in arrival order, until [`Self::release_input`].
    pub fn hold_input(&mut self) {
        self.input_held.get_or_insert_with(Vec::new);
    }

    /// The held input, to accept in this order (the service is live).
    pub fn release_input(&mut self) -> Vec<PacketId> {
        self.input_held.take().unwrap_or_default()
    }

    pub fn set_release_enabled(&mut self, enabled: bool) -> Vec<PacketId> {
        self.release_enabled = enabled;
        if !enabled {
            return Vec::new();
        }
        match self.pending.take() {
            Some(c) => self.apply(c),
            None => Vec::new(),
        }
    }

    pub fn release_enabled(&self) -> bool {
        self.release_enabled
    }

    /// Packets released while deciding on others (the log's cover
    /// completed by a packet's bytes), in order: their verdicts go out
    /// before the deciding packet's own.
    pub fn take_released(&mut self) -> Vec<PacketId> {
        std::mem::take(&mut self.released_now)
    }

    /// Outputs the record log now covers (rr mode): each stream's cover
    /// moves on as far as the server's bytes verify it. With log release
    /// on, returns what that releases, in arrival order.
    pub fn logged(&mut self, outputs: &[LoggedOutput]) -> Vec<PacketId> {
        let mut touched = Vec::new();
        for o in outputs {
            self.stats.log.outputs += 1;
            self.stats.log.output_bytes += o.length;
            let key = (o.client, o.server);
            let Some(s) = self.streams.get_mut(&key) else {
                self.stats.log.unknown_stream += 1;
                continue;
            };
            logged::add(s, o, &mut self.stats.log);
            touched.push(key);
        }
        touched.sort_unstable();
        touched.dedup();
        let mut released = Vec::new();
        let (release, bound, mut stats) = (self.release_enabled && self.log_release, self.arrival_bound, self.stats.log);
        for key in touched {
            self.with_stream(key, |s| {
                logged::advance(s, &mut stats);
                if release {
                    s.release(bound, true, &mut released);
                }
            });
        }
        self.stats.log = stats;
        self.finish_release(released)
    }

    /// Turns releasing on the log's cover on or off (on: rr mode, whose
    /// failover replays the log). Turning it on returns what the cover
    /// releases at once.
    pub fn set_log_release(&mut self, on: bool) -> Vec<PacketId> {
        self.log_release = on;
        if !on || !self.release_enabled {
            return Vec::new();
        }
        let mut released = Vec::new();
        let bound = self.arrival_bound;
        let keys: Vec<StreamKey> = self.streams.keys().copied().collect();
        for key in keys {
            self.with_stream(key, |s| s.release(bound, true, &mut released));
        }
        self.finish_release(released)
    }

    /// Counts what the log released, in arrival order.
    fn finish_release(&mut self, mut released: Vec<(u64, PacketId)>) -> Vec<PacketId> {
        released.sort_unstable_by_key(|&(a, _)| a);
        self.stats.log.released_packets += released.len() as u64;
        self.stats.packets_released += released.len() as u64;
        self.check_bounds();
        released.into_iter().map(|(_, id)| id).collect()
    }

    fn apply(&mut self, c: Commit) -> Vec<PacketId> {
        // The bound echoes a number this gate gave out; a larger one is a
        // bug upstream and would release packets the snapshot never saw.
        let bound = if c.arrival_bound > self.arrival {
            tracing::error!(bound = c.arrival_bound, counter = self.arrival, "commit's arrival bound is beyond the arrival counter: clamped");
            self.arrival
        } else {
            c.arrival_bound
        };
        self.arrival_bound = self.arrival_bound.max(bound);
        let bound = self.arrival_bound;

        let mut listed = HashSet::with_capacity(c.streams.len());
        for ss in &c.streams {
            let key = (ss.client, ss.server);
            listed.insert(key);
            if !self.streams.contains_key(&key) {
                tracing::debug!(client = %ss.client, server = %ss.server, "commit names a stream the gate does not know");
                continue;
            }
            self.with_stream(key, |s| {
                s.seen_in_commit = true;
                s.idle_commits = 0;
                // a socket the committed process may hold, whose record a
                // failover to this commit needs; a TIME_WAIT (the fd may
                // still be open on its closed socket) for one commit only
                s.kept_for_commit = ss.state != TCP_TIME_WAIT || s.last_state != Some(TCP_TIME_WAIT);
                s.last_state = Some(ss.state);
                if s.server_isn.is_some() {
                    let w = to_abs(ss.write_seq_rel, s.server_highest).max(0) as u64;
                    raise(&mut s.committed_write, w);
                }
                if s.client_isn.is_some() {
                    let r = to_abs(ss.read_seq_rel, s.client_highest).max(0) as u64;
                    raise(&mut s.committed_read, r);
                    // The app has read these bytes: failover re-injects
                    // only what it has not.
                    s.client_data.trim_below(r);
                }
            });
        }

        let mut released: Vec<(u64, PacketId)> = Vec::new();
        let keys: Vec<StreamKey> = self.streams.keys().copied().collect();
        for key in keys {
            let (log_release, mut stats) = (self.log_release, self.stats.log);
            self.with_stream(key, |s| {
                // a commit may let the log's cover continue
                logged::advance(s, &mut stats);
                s.release(bound, log_release, &mut released);
            });
            self.stats.log = stats;
        }
        while self.other.front().is_some_and(|h| h.arrival <= bound) {
            if let Some(h) = self.other.pop_front() {
                self.totals.held_packets -= 1;
                self.totals.held_bytes -= h.bytes;
                released.push((h.arrival, h.id));
            }
        }

        // Forget what is finished, and what the commit no longer lists
        // (the socket is gone) once nothing of it is held and its last
        // packet came before the snapshot. Only here, at a commit: a
        // stream whose socket the commit's table lists is kept however it
        // ended since (a failover to this commit rebuilds that socket,
        // docs/tcp-repair.md "FINs"), and one no table listed stays until
        // a commit's snapshot came after it (a failover to an earlier one
        // replays it).
        let keys: Vec<StreamKey> = self.streams.keys().copied().collect();
        for key in keys {
            let Some(s) = self.streams.get_mut(&key) else { continue };
            if !listed.contains(&key) {
                s.idle_commits += 1;
                s.kept_for_commit = false;
            }
            let gone = !listed.contains(&key)
                && s.held.is_empty()
                && s.last_arrival <= bound
                && (s.seen_in_commit || !s.synced() || s.idle_commits >= IDLE_FORGET_COMMITS);
            if gone || s.finished(bound) {
                self.forget(key);
            }
        }

        released.sort_unstable_by_key(|&(arrival, _)| arrival);
        self.stats.packets_released += released.len() as u64;
        self.check_bounds();
        released.into_iter().map(|(_, id)| id).collect()
    }

    fn check_bounds(&mut self) {
        let held_over = self.totals.held_packets > self.limits.max_held_packets;
        if held_over && !self.over_held {
            self.stats.bound_exceeded += 1;
            tracing::warn!(held = self.totals.held_packets, max = self.limits.max_held_packets, "gate holds more packets than its bound (not dropping: waiting for commits)");
        }
        self.over_held = held_over;
        let bytes = self.totals.client_bytes + self.totals.retained_bytes;
        let bytes_over = bytes > self.limits.max_recorded_bytes;
        if bytes_over && !self.over_bytes {
            self.stats.bound_exceeded += 1;
            tracing::warn!(bytes, max = self.limits.max_recorded_bytes, "gate records more bytes than its bound (not dropping)");
        }
        self.over_bytes = bytes_over;
    }

    pub fn stats(&self) -> GateStats {
        GateStats {
            streams: self.streams.len() as u64,
            held_packets: self.totals.held_packets,
            held_bytes: self.totals.held_bytes,
            recorded_client_bytes: self.totals.client_bytes,
            retained_server_bytes: self.totals.retained_bytes,
            release_enabled: self.release_enabled,
            log_release: self.log_release,
            arrival_counter: self.arrival,
            arrival_bound: self.arrival_bound,
            ..self.stats.clone()
        }
    }

    /// Every stream, ordered by (client, server).
    pub fn streams(&self) -> Vec<StreamSnapshot> {
        let mut v: Vec<StreamSnapshot> = self.streams.values().map(Stream::snapshot).collect();
        v.sort_by_key(|s| (s.client, s.server));
        v
    }

    /// One stream with its recorded bytes (for failover).
    pub fn stream_data(&self, client: SocketAddrV4, server: SocketAddrV4) -> Option<StreamData> {
        self.streams.get(&(client, server)).map(Stream::data)
    }

    /// The clients' SYNs the primary never answered (no SYN-ACK came
    /// through), as they went to it, in (client, server) order: a failover
    /// sends them to the restored service so that its clients, waiting in
    /// SYN_SENT, need not wait for their retransmission timeout.
    pub fn unanswered_syns(&self) -> Vec<Vec<u8>> {
        // (a SYN-ACK drops the packet: see on_server_segment)
        let mut v: Vec<(&StreamKey, &Vec<u8>)> =
            self.streams.iter().filter(|(_, s)| !s.reset).filter_map(|(k, s)| Some((k, s.client_syn_packet.as_ref()?))).collect();
        v.sort_unstable_by_key(|(k, _)| **k);
        v.into_iter().map(|(_, p)| p.clone()).collect()
    }

    /// Ids of every held packet, in arrival order.
    pub fn held_ids(&self) -> Vec<PacketId> {
        let mut v: Vec<(u64, PacketId)> =
            self.streams.values().flat_map(|s| s.held.iter()).chain(self.other.iter()).map(|h| (h.arrival, h.id)).collect();
        v.sort_unstable_by_key(|&(a, _)| a);
        v.into_iter().map(|(_, id)| id).collect()
    }
}

/// Whether a client RST would reset the server's socket: the kernel
/// (RFC 5961) takes an RST only at rcv_nxt, which is where the contiguous
/// record ends; anything far off is answered with a challenge ACK and must
/// not make the gate forget the stream. Unsynced streams: yes.
fn rst_acceptable(s: &Stream, seq: u32) -> bool {
    let Some(isn) = s.client_isn else { return true };
    let at = to_abs(seq.wrapping_sub(isn.wrapping_add(1)), s.client_highest);
    at >= s.client_data.contiguous_end() as i64 && at <= s.client_highest as i64
}

fn apply_delta(t: &mut Footprint, before: Footprint, after: Footprint) {
    t.held_packets = t.held_packets + after.held_packets - before.held_packets;
    t.held_bytes = t.held_bytes + after.held_bytes - before.held_bytes;
    t.client_bytes = t.client_bytes + after.client_bytes - before.client_bytes;
    t.retained_bytes = t.retained_bytes + after.retained_bytes - before.retained_bytes;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::*;

    #[test]
    fn handshake_records_isns_and_options() {
        let mut t = T::new();
        t.handshake();
        let s = t.snap();
        assert_eq!(s.client_isn, Some(CISN));
        assert_eq!(s.server_isn, Some(SISN));
        let co = s.client_syn_options.expect("client options");
        assert_eq!((co.mss, co.window_scale, co.sack_permitted, co.timestamps), (Some(1460), Some(7), true, Some((111, 0))));
        let so = s.server_syn_options.expect("server options");
        assert_eq!((so.mss, so.window_scale, so.timestamps), (Some(1400), Some(9), Some((222, 111))));
        assert_eq!(s.client_ack_rel, Some(0));
        assert_eq!(s.server_ack_rel, Some(0));
        assert_eq!(t.core.arrival_counter(), 3);
        let st = t.core.stats();
        assert_eq!((st.packets_in, st.packets_passed, st.held_packets, st.streams), (3, 3, 0, 1));
    }

    #[test]
    fn client_bytes_recorded_with_retransmits_overlaps_and_reordering() {
        let mut t = T::new();
        t.handshake();
        assert_eq!(t.c(6, 0, TCP_ACK, b"ghij").1, Decision::Accept); // out of order
        t.c(0, 0, TCP_ACK | TCP_PSH, b"abc");
        t.c(0, 0, TCP_ACK | TCP_PSH, b"abc"); // retransmit
        t.c(2, 0, TCP_ACK, b"cdef"); // overlaps both sides
        let d = t.data();
        assert_eq!(d.client_unread, b"abcdefghij");
        assert_eq!(d.snapshot.client_out_of_order_bytes, 0);
        assert_eq!(t.core.stats().recorded_client_bytes, 10);
        // a corrupted segment is passed but not recorded
        let mut bad = Segment::new(cli(), srv(), CISN + 1 + 10, SISN + 1, TCP_ACK).payload(b"XYZ").bytes();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert_eq!(t.core.on_packet(PacketId(999), &bad), Decision::Accept);
        assert_eq!(t.data().client_unread, b"abcdefghij");
        assert_eq!(t.core.stats().bad_checksum, 1);
    }

    #[test]
    fn server_data_held_until_write_seq_covers_it_then_in_order() {
        let mut t = T::new();
        t.handshake();
        let (a, d) = t.s(0, 0, TCP_ACK | TCP_PSH, b"hello");
        assert_eq!(d, Decision::Hold);
        let (b, _) = t.s(5, 0, TCP_ACK | TCP_PSH, b"world");
        let (c, _) = t.s(10, 0, TCP_ACK | TCP_PSH, b"!");
        assert_eq!(t.core.stats().held_packets, 3);
        assert_eq!(t.core.stats().held_bytes, 11);
        // bound below every held packet: only rule (1) applies
        let bound = 3;
        assert_eq!(t.commit(1, bound, 4, 0), vec![], "write_seq 4 does not cover [0,5)");
        assert_eq!(t.commit(2, bound, 10, 0), vec![a, b]);
        assert_eq!(t.snap().server_unacked_to_rel, 10);
        assert_eq!(t.commit(3, bound, 11, 0), vec![c]);
        let st = t.core.stats();
        assert_eq!((st.held_packets, st.held_bytes, st.packets_released, st.commits, st.last_commit_epoch), (0, 0, 3, 3, Some(3)));
        assert_eq!(t.data().server_unacked, b"helloworld!");
    }

    #[test]
    fn release_stops_at_first_uncovered_packet() {
        let mut t = T::new();
        t.handshake();
        // the server's segments arrive reordered: [5,10) before [0,5)
        let (late, _) = t.s(5, 0, TCP_ACK, b"world");
        let (early, _) = t.s(0, 0, TCP_ACK, b"hello");
        // write_seq 5 covers [0,5) but the first held packet is [5,10)
        assert_eq!(t.commit(1, 0, 5, 0), vec![]);
        assert_eq!(t.commit(2, 0, 10, 0), vec![late, early], "arrival order kept");
    }

    #[test]
    fn arrival_bound_releases_and_is_clamped() {
        let mut t = T::new();
        t.handshake();
        let (a, _) = t.s(0, 0, TCP_ACK, b"x");
        let (b, _) = t.s(1, 0, TCP_ACK, b"y");
        let a_arrival = t.core.arrival_counter() - 1;
        // no stream listed: only rule (2)
        assert_eq!(t.core.commit(Commit { epoch: 1, arrival_bound: a_arrival, streams: vec![] }), vec![a]);
        // a bound beyond the counter must not release the future
        assert_eq!(t.core.commit(Commit { epoch: 2, arrival_bound: 1_000, streams: vec![] }), vec![b]);
        assert_eq!(t.core.stats().arrival_bound, t.core.arrival_counter());
        let (c, d) = t.s(2, 0, TCP_ACK, b"z");
        assert_eq!(d, Decision::Hold);
        assert_eq!(t.core.commit(Commit { epoch: 3, arrival_bound: 5, streams: vec![] }), vec![], "bound never moves back");
        assert_eq!(t.core.commit(Commit { epoch: 4, arrival_bound: t.core.arrival_counter(), streams: vec![] }), vec![c]);
    }

    #[test]
    fn pure_acks_window_updates_and_keepalives_pass() {
        let mut t = T::new();
        t.handshake();
        t.c(0, 0, TCP_ACK, b"req");
        assert_eq!(t.s(0, 3, TCP_ACK, b"").1, Decision::Accept);
        assert_eq!(t.send(Segment::new(srv(), cli(), SISN + 1, CISN + 4, TCP_ACK).window(9000)).1, Decision::Accept);
        assert_eq!(t.s(u32::MAX, 3, TCP_ACK, b"").1, Decision::Accept, "keepalive at snd_una - 1");
        assert_eq!(t.snap().server_ack_rel, Some(3));
        assert_eq!(t.core.stats().held_packets, 0);
    }

    #[test]
    fn fin_counts_one_and_is_held() {
        let mut t = T::new();
        t.handshake();
        let (a, _) = t.s(0, 0, TCP_ACK, b"bye");
        let (f, d) = t.s(3, 0, TCP_ACK | TCP_FIN, b"");
        assert_eq!(d, Decision::Hold);
        assert_eq!(t.commit(1, 0, 3, 0), vec![a], "FIN ends at 4");
        assert_eq!(t.commit(2, 0, 4, 0), vec![f]);
        assert_eq!(t.snap().server_released_end_rel, 4);
    }

    #[test]
    fn rst_uses_arrival_only() {
        let mut t = T::new();
        t.handshake();
        let (r, d) = t.s(0, 0, TCP_ACK | TCP_RST, b"");
        assert_eq!(d, Decision::Hold);
        let arrival = t.core.arrival_counter();
        assert_eq!(t.commit(1, arrival - 1, u32::MAX / 2, 0), vec![], "rule (1) never releases an RST");
        assert_eq!(t.commit(2, arrival, 0, 0), vec![r]);
        assert_eq!(t.core.stats().streams, 1, "its socket in that commit's table: kept");
        t.core.commit(Commit { epoch: 3, arrival_bound: arrival, streams: vec![] });
        assert_eq!(t.core.stats().streams, 0, "forgotten after the RST went out");
    }

    #[test]
    fn non_tcp_from_service_held_to_service_passed() {
        let mut t = T::new();
        let to = ipv4(Ipv4Addr::new(10, 0, 0, 1), SVC, 17, &[0; 12]);
        let from = ipv4(SVC, Ipv4Addr::new(10, 0, 0, 1), 1, &[0; 12]);
        assert_eq!(t.core.on_packet(PacketId(1), &to), Decision::Accept);
        assert_eq!(t.core.on_packet(PacketId(2), &from), Decision::Hold);
        assert_eq!(t.core.on_packet(PacketId(3), &[0x45, 0, 0]), Decision::Hold, "unparsable: rule (2)");
        let foreign = ipv4(Ipv4Addr::new(1, 1, 1, 1), Ipv4Addr::new(2, 2, 2, 2), 17, &[0; 4]);
        assert_eq!(t.core.on_packet(PacketId(4), &foreign), Decision::Accept);
        assert_eq!(t.core.stats().held_packets, 2);
        assert_eq!(t.core.stats().held_bytes, 32 + 3);
        assert_eq!(t.core.commit(Commit { epoch: 1, arrival_bound: 2, streams: vec![] }), vec![PacketId(2)]);
        assert_eq!(t.core.commit(Commit { epoch: 2, arrival_bound: 4, streams: vec![] }), vec![PacketId(3)]);
        assert_eq!(t.core.stats().held_bytes, 0);
    }

    #[test]
    fn streams_released_together_in_arrival_order() {
        let mut t = T::new();
        t.handshake();
        let other_client = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 50000);
        t.send(Segment::new(other_client, srv(), 7, 0, TCP_SYN));
        t.send(Segment::new(srv(), other_client, 9, 8, TCP_SYN | TCP_ACK));
        let (a, _) = t.s(0, 0, TCP_ACK, b"a1");
        let (b, _) = t.send(Segment::new(srv(), other_client, 10, 8, TCP_ACK).payload(b"b1"));
        let (a2, _) = t.s(2, 0, TCP_ACK, b"a2");
        let ids = t.core.commit(Commit {
            epoch: 1,
            arrival_bound: 0,
            streams: vec![
                ServerStream { client: other_client, server: srv(), write_seq_rel: 2, read_seq_rel: 0, state: 1 },
                ServerStream { client: cli(), server: srv(), write_seq_rel: 4, read_seq_rel: 0, state: 1 },
            ],
        });
        assert_eq!(ids, vec![a, b, a2]);
    }

    #[test]
    fn sequence_wraparound() {
        // both ISNs a few bytes below 2^32: data crosses the wrap
        let mut t = T::with_isns(u32::MAX - 3, u32::MAX - 2);
        t.handshake();
        t.c(0, 0, TCP_ACK, b"0123456789");
        let (a, _) = t.s(0, 10, TCP_ACK, b"abcdef");
        let (b, _) = t.s(6, 10, TCP_ACK, b"ghij");
        assert_eq!(t.commit(1, 0, 6, 4), vec![a]);
        assert_eq!(t.data().client_unread, b"456789");
        assert_eq!(t.commit(2, 0, 10, 10), vec![b]);
        assert_eq!(t.data().server_unacked, b"abcdefghij");
        assert_eq!(t.snap().client_base_rel, 10);
        // the client acks 7 of them across the wrap
        t.c(10, 7, TCP_ACK, b"");
        assert_eq!(t.data().server_unacked, b"hij");
        assert_eq!(t.snap().server_unacked_from_rel, 7);
    }

    #[test]
    fn long_stream_crosses_2_pow_32() {
        // Relative offsets beyond 4 GiB: the u32 wraps, offsets don't. The
        // segments are 16 MiB apart (the app reads everything up to each
        // one, so the record's base jumps; the server acknowledges each and
        // keeps a 32 MiB window open), and the server side likewise.
        let mut t = T::new();
        t.handshake();
        let step: u32 = 16 << 20;
        let mut rel: u32 = 0;
        for i in 0..300u64 {
            t.c(rel, 0, TCP_ACK, b"chunk");
            let seq = t.sisn.wrapping_add(1).wrapping_add(rel);
            let ack = t.cisn.wrapping_add(1).wrapping_add(rel.wrapping_add(5));
            let (id, _) = t.send(Segment::new(srv(), cli(), seq, ack, TCP_ACK).window(65535).payload(b"reply"));
            assert_eq!(t.commit(i + 1, 0, rel.wrapping_add(5), rel.wrapping_add(5)), vec![id], "step {i}");
            t.c(rel.wrapping_add(5), rel.wrapping_add(5), TCP_ACK, b""); // the client acks the reply
            rel = rel.wrapping_add(step);
        }
        let s = t.snap();
        assert_eq!(t.core.stats().recorded_client_bytes, 0);
        assert_eq!(t.core.stats().retained_server_bytes, 0);
        // with a hole before it the tail is an out-of-order piece...
        t.c(rel, 0, TCP_ACK, b"tail");
        assert_eq!(t.snap().client_out_of_order_bytes, 4);
        // ...that becomes contiguous once the base reaches it
        t.commit(1000, 0, 0, rel);
        assert_eq!(t.data().client_unread, b"tail");
        assert_eq!(t.snap().client_base_rel, rel);
        assert_eq!(s.committed_write_rel, Some(rel.wrapping_sub(step).wrapping_add(5)));
    }

    /// A client sending far beyond the window the server advertised (its
    /// kernel drops such segments) makes the gate keep nothing of it, and
    /// does not move the stream's reference: in-window data goes on being
    /// recorded as before.
    #[test]
    fn client_bytes_beyond_the_advertised_window_are_not_recorded() {
        let mut t = T::new();
        t.handshake();
        // The server's ACK: window 100 << 9 = 51200 bytes from offset 0.
        t.s(0, 0, TCP_ACK, b"");
        let seq = t.sisn.wrapping_add(1);
        let ack = t.cisn.wrapping_add(1);
        t.send(Segment::new(srv(), cli(), seq, ack, TCP_ACK).window(100));
        for i in 1..=2000u32 {
            t.c(i << 20, 0, TCP_ACK, &[7u8; 1000]);
        }
        let st = t.core.stats();
        assert_eq!(st.recorded_client_bytes, 0);
        assert_eq!(st.client_beyond_window, 2000);
        // what the window allows is kept, from where the stream really is
        t.c(0, 0, TCP_ACK, b"hello");
        t.c(40_000, 0, TCP_ACK, b"in the window, out of order");
        assert_eq!(t.data().client_unread, b"hello");
        assert_eq!(t.snap().client_out_of_order_bytes, 27);
        assert_eq!(t.core.stats().client_beyond_window, 2000);
    }

    /// One byte in every other position of a wide window: the pieces kept
    /// per stream are bounded; in-order data is still recorded.
    #[test]
    fn out_of_order_pieces_per_stream_are_bounded() {
        let mut t = T::new();
        t.handshake();
        let seq = t.sisn.wrapping_add(1);
        let ack = t.cisn.wrapping_add(1);
        t.send(Segment::new(srv(), cli(), seq, ack, TCP_ACK).window(65535)); // 32 MiB
        let extra = 50;
        for i in 0..(MAX_OUT_OF_ORDER_PIECES + extra) as u32 {
            t.c(2 + 2 * i, 0, TCP_ACK, b"x");
        }
        let snap = t.snap();
        assert_eq!(snap.client_out_of_order_bytes, MAX_OUT_OF_ORDER_PIECES as u64);
        assert_eq!(t.core.stats().client_beyond_window, extra as u64);
        t.c(0, 0, TCP_ACK, b"ab");
        assert_eq!(&t.data().client_unread[..3], b"abx");
    }

    #[test]
    fn trimming_client_by_read_seq_and_server_by_ack() {
        let mut t = T::new();
        t.handshake();
        t.c(0, 0, TCP_ACK, b"GET /a\n");
        t.c(7, 0, TCP_ACK, b"GET /b\n");
        assert_eq!(t.core.stats().recorded_client_bytes, 14);
        let (r, _) = t.s(0, 14, TCP_ACK, b"resp-a");
        assert_eq!(t.commit(1, 0, 6, 7), vec![r]);
        assert_eq!(t.data().client_unread, b"GET /b\n", "only what the app has not read");
        assert_eq!(t.core.stats().retained_server_bytes, 6);
        t.c(14, 3, TCP_ACK, b"");
        assert_eq!(t.data().server_unacked, b"p-a");
        t.c(14, 6, TCP_ACK, b"");
        assert_eq!(t.core.stats().retained_server_bytes, 0);
        // read_seq never moves back
        t.commit(2, 0, 6, 2);
        assert_eq!(t.data().client_unread, b"GET /b\n");
        assert_eq!(t.snap().committed_read_rel, Some(7));
    }

    #[test]
    fn covered_retransmission_passes_unless_something_is_held() {
        let mut t = T::new();
        t.handshake();
        let (a, _) = t.s(0, 0, TCP_ACK, b"hello");
        assert_eq!(t.commit(1, 0, 5, 0), vec![a]);
        assert_eq!(t.s(0, 0, TCP_ACK, b"hello").1, Decision::Accept, "retransmission of committed bytes");
        let (b, _) = t.s(5, 0, TCP_ACK, b"more");
        assert_eq!(t.s(0, 0, TCP_ACK, b"hello").1, Decision::Hold, "must not overtake a held packet");
        assert_eq!(t.commit(2, 0, 9, 0).len(), 2);
        let _ = b;
    }

    #[test]
    fn release_disabled_notes_commits_then_applies_newest() {
        let mut t = T::new();
        t.handshake();
        let (a, _) = t.s(0, 0, TCP_ACK, b"aa");
        let (b, _) = t.s(2, 0, TCP_ACK, b"bb");
        assert_eq!(t.core.set_release_enabled(false), vec![]);
        assert_eq!(t.commit(1, 0, 2, 0), vec![]);
        assert_eq!(t.commit(2, 0, 4, 0), vec![]);
        let st = t.core.stats();
        assert_eq!((st.commits, st.last_commit_epoch, st.held_packets, st.release_enabled), (2, Some(2), 2, false));
        assert_eq!(t.s(0, 0, TCP_ACK, b"aa").1, Decision::Hold);
        assert_eq!(t.s(4, 0, TCP_ACK, b"").1, Decision::Accept, "pure ACKs still pass");
        let ids = t.core.set_release_enabled(true);
        assert_eq!(&ids[..2], &[a, b]);
        assert_eq!(ids.len(), 3);
    }

    #[test]
    fn stale_epochs_ignored() {
        let mut t = T::new();
        t.handshake();
        t.s(0, 0, TCP_ACK, b"a");
        t.commit(5, 0, 0, 0);
        assert_eq!(t.commit(5, 0, 1, 0), vec![]);
        assert_eq!(t.commit(4, 0, 1, 0), vec![]);
        let st = t.core.stats();
        assert_eq!((st.stale_commits, st.commits, st.held_packets), (2, 1, 1));
    }

    #[test]
    fn stream_forgotten_when_both_fins_acked() {
        let mut t = T::new();
        t.handshake();
        t.c(0, 0, TCP_ACK | TCP_FIN, b"q"); // client: "q" + FIN, ends at 2
        let (r, _) = t.s(0, 2, TCP_ACK | TCP_FIN, b"r"); // server acks both, sends "r" + FIN
        assert_eq!(t.commit(1, 0, 2, 1), vec![r]);
        assert_eq!(t.core.stats().streams, 1, "the client has not acked the server's FIN yet");
        t.c(2, 2, TCP_ACK, b"");
        assert!(t.snap().client_fin_rel.is_some() && t.snap().server_fin_released);
        // finished, but the last commit listed its socket: a failover to
        // it rebuilds that socket from this record
        assert_eq!(t.core.stats().streams, 1);
        let bound = t.core.arrival_counter();
        let listed = |state| vec![ServerStream { client: cli(), server: srv(), write_seq_rel: 2, read_seq_rel: 2, state }];
        t.core.commit(Commit { epoch: 2, arrival_bound: bound, streams: listed(5) }); // FIN_WAIT2
        assert_eq!(t.core.stats().streams, 1, "listed in FIN_WAIT2: kept");
        t.core.commit(Commit { epoch: 3, arrival_bound: bound, streams: listed(6) });
        assert_eq!(t.core.stats().streams, 1, "first listed in TIME_WAIT (its fd may still be open): kept");
        t.core.commit(Commit { epoch: 4, arrival_bound: bound, streams: listed(6) });
        assert_eq!(t.core.stats().streams, 0, "TIME_WAIT again: forgotten");
        let st = t.core.stats();
        assert_eq!((st.recorded_client_bytes, st.retained_server_bytes, st.held_packets), (0, 0, 0));
    }

    /// A stream that began and ended between two snapshots is kept until
    /// a commit's snapshot comes after it (a failover to the earlier
    /// checkpoint replays it), then forgotten.
    #[test]
    fn a_stream_finished_between_commits_waits_for_a_snapshot_after_it() {
        let mut t = T::new();
        let before = t.core.arrival_counter();
        t.handshake();
        t.c(0, 0, TCP_ACK | TCP_FIN, b"q");
        t.s(0, 2, TCP_ACK | TCP_FIN, b"r");
        t.core.commit(Commit { epoch: 1, arrival_bound: before, streams: vec![] });
        t.c(2, 2, TCP_ACK, b"");
        t.core.commit(Commit { epoch: 2, arrival_bound: before, streams: vec![] });
        assert_eq!(t.core.stats().streams, 1, "finished after the snapshot: kept");
        t.core.commit(Commit { epoch: 3, arrival_bound: t.core.arrival_counter(), streams: vec![] });
        assert_eq!(t.core.stats().streams, 0);
    }

    /// lighttpd's lingering close at a checkpoint, then a late ACK of
    /// the server's released after the client had closed: the client's
    /// kernel answers with an RST, which leaves the stream as it was, ended
    /// by both FINs (what a failover to that checkpoint rebuilds). Before,
    /// it made the stream "reset" and the failover left the connection
    /// unrebuilt.
    #[test]
    fn client_rst_after_both_fins_acknowledged_is_no_reset() {
        let mut t = T::new();
        t.handshake();
        t.c(0, 0, TCP_ACK | TCP_FIN, b"q");
        t.s(0, 2, TCP_ACK | TCP_FIN, b"r");
        t.c(2, 2, TCP_ACK, b"");
        t.c(2, 2, TCP_RST, b"");
        assert!(!t.snap().reset);
        // one FIN still unacknowledged: an RST is a reset
        let mut t = T::new();
        t.handshake();
        t.c(0, 0, TCP_ACK | TCP_FIN, b"q");
        t.s(0, 2, TCP_ACK | TCP_FIN, b"r");
        t.c(2, 0, TCP_RST, b"");
        assert!(t.snap().reset);
    }

    #[test]
    fn client_rst_forgets_only_when_in_window() {
        let mut t = T::new();
        t.handshake();
        t.c(0, 0, TCP_ACK, b"abc");
        t.c(100_000, 0, TCP_RST, b""); // blind RST far off: ignored by the server
        assert!(!t.snap().reset);
        t.c(3, 0, TCP_RST, b"");
        assert!(t.snap().reset);
        t.core.commit(Commit { epoch: 1, arrival_bound: t.core.arrival_counter(), streams: vec![] });
        assert_eq!(t.core.stats().streams, 0, "forgotten at the next commit");
    }

    #[test]
    fn streams_gone_from_commits_are_forgotten_after_the_snapshot() {
        let mut t = T::new();
        t.handshake();
        t.commit(1, t.core.arrival_counter(), 0, 0);
        // the socket disappears, but a packet came after the snapshot
        t.c(0, 0, TCP_ACK, b"late");
        let bound_before = t.core.arrival_counter() - 1;
        t.core.commit(Commit { epoch: 2, arrival_bound: bound_before, streams: vec![] });
        assert_eq!(t.core.stats().streams, 1, "a packet came after the snapshot");
        t.core.commit(Commit { epoch: 3, arrival_bound: t.core.arrival_counter(), streams: vec![] });
        assert_eq!(t.core.stats().streams, 0);
        // a brand new connection not yet in any commit stays
        t.handshake();
        t.core.commit(Commit { epoch: 4, arrival_bound: t.core.arrival_counter(), streams: vec![] });
        assert_eq!(t.core.stats().streams, 1);
    }

    #[test]
    fn new_incarnation_of_a_4_tuple() {
        let mut t = T::new();
        t.handshake();
        let (old, _) = t.s(0, 0, TCP_ACK, b"old");
        t.cisn = 77;
        t.sisn = 88;
        t.handshake();
        assert_eq!(t.snap().client_isn, Some(77));
        let (new, _) = t.s(0, 0, TCP_ACK, b"new");
        // the old stream's packet is now released by arrival only
        assert_eq!(t.commit(1, 0, 3, 0), vec![new]);
        assert_eq!(t.core.commit(Commit { epoch: 2, arrival_bound: 4, streams: vec![] }), vec![old]);
    }

    #[test]
    fn service_initiated_connection() {
        let mut t = T::new();
        // the service connects out: its SYN is output (held), end offset 0
        let (syn, d) = t.send(Segment::new(srv(), cli(), SISN, 0, TCP_SYN));
        assert_eq!(d, Decision::Hold);
        assert_eq!(t.commit(1, 0, 0, 0), vec![syn], "a commit listing the socket covers its SYN");
        assert_eq!(t.send(Segment::new(cli(), srv(), CISN, SISN + 1, TCP_SYN | TCP_ACK)).1, Decision::Accept);
        let s = t.snap();
        assert_eq!((s.client_isn, s.server_isn, s.client_ack_rel), (Some(CISN), Some(SISN), Some(0)));
    }

    #[test]
    fn bounds_are_counted_not_enforced() {
        let mut t = T::new();
        t.core = GateCore::new(SVC, GateLimits { max_held_packets: 2, max_recorded_bytes: 4 });
        t.handshake();
        t.s(0, 0, TCP_ACK, b"a");
        t.s(1, 0, TCP_ACK, b"b");
        assert_eq!(t.core.stats().bound_exceeded, 0);
        assert_eq!(t.s(2, 0, TCP_ACK, b"c").1, Decision::Hold, "never dropped");
        t.s(3, 0, TCP_ACK, b"d");
        assert_eq!(t.core.stats().bound_exceeded, 1, "counted once per crossing");
        t.c(0, 0, TCP_ACK, b"12345");
        assert_eq!(t.core.stats().bound_exceeded, 2);
        assert_eq!(t.core.stats().held_packets, 4);
    }

    #[test]
    fn unsynced_stream_uses_arrival_only() {
        let mut t = T::new();
        // the gate started mid-connection: no SYN seen
        let (a, d) = t.s(0, 0, TCP_ACK, b"data");
        assert_eq!(d, Decision::Hold);
        assert_eq!(t.commit(1, 0, u32::MAX / 4, 0), vec![]);
        assert_eq!(t.commit(2, t.core.arrival_counter(), 0, 0), vec![a]);
    }

    #[test]
    fn stats_and_snapshots_serialize() {
        let mut t = T::new();
        t.handshake();
        let j = serde_json::to_value(t.core.stats()).expect("json");
        for k in ["streams", "held_packets", "held_bytes", "recorded_client_bytes", "retained_server_bytes", "packets_in", "packets_passed",
            "packets_held_total", "packets_released", "commits", "last_commit_epoch", "bound_exceeded"]
        {
            assert!(j.get(k).is_some(), "{k} missing");
        }
        let s = serde_json::to_value(t.core.streams()).expect("json");
        assert_eq!(s[0]["client"], "10.0.0.1:40000");
        assert_eq!(s[0]["server_isn"], SISN);
    }

    #[test]
    fn held_input_waits_for_release_in_order() {
        let mut t = T::with_isns(1000, 5000);
        t.handshake();
        t.core.hold_input();
        let (a, da) = t.c(0, 0, TCP_ACK | TCP_PSH, b"one");
        let (b, db) = t.c(3, 0, TCP_ACK | TCP_PSH, b"two");
        assert_eq!((da, db), (Decision::Hold, Decision::Hold));
        assert_eq!(t.core.release_input(), vec![a, b]);
        // recorded as usual
        assert_eq!(t.data().client_unread, b"onetwo".to_vec());
        let (_, dc) = t.c(6, 0, TCP_ACK | TCP_PSH, b"3");
        assert_eq!(dc, Decision::Accept, "input flows again after the release");
    }

    /// A SYN the primary never answered is kept as it went out, for a
    /// failover to send to the restored service; its answer, a reset, or
    /// the input being held (a held SYN is delivered anyway) leave none.
    #[test]
    fn unanswered_syns_are_kept_as_they_went_out() {
        let mut t = T::new();
        let syn = Segment::new(cli(), srv(), CISN, 0, TCP_SYN).options(TcpOptions { mss: Some(1460), window_scale: Some(7), sack_permitted: true, timestamps: Some((111, 0)) });
        t.send(syn.clone());
        assert_eq!(t.core.unanswered_syns(), vec![syn.bytes()]);
        // retransmitted with a later timestamp: the latest is kept
        let again = syn.clone().options(TcpOptions { timestamps: Some((1111, 0)), ..syn.options });
        t.send(again.clone());
        assert_eq!(t.core.unanswered_syns(), vec![again.bytes()]);
        // answered
        t.send(Segment::new(srv(), cli(), SISN, CISN.wrapping_add(1), TCP_SYN | TCP_ACK));
        assert!(t.core.unanswered_syns().is_empty());
        // another client's, then reset by it
        let other = SocketAddrV4::new(*cli().ip(), cli().port() + 1);
        t.send(Segment::new(other, srv(), 77, 0, TCP_SYN));
        assert_eq!(t.core.unanswered_syns().len(), 1);
        t.send(Segment::new(other, srv(), 78, 0, TCP_RST));
        assert!(t.core.unanswered_syns().is_empty());
        // one held during a failover
        t.core.hold_input();
        let third = SocketAddrV4::new(*cli().ip(), cli().port() + 2);
        let (_, d) = t.send(Segment::new(third, srv(), 99, 0, TCP_SYN));
        assert_eq!(d, Decision::Hold);
        assert!(t.core.unanswered_syns().is_empty());
    }

}
