//! One TCP stream of the service as the gate sees it: what is recorded of
//! each direction, and the server's packets held in arrival order.
//!
//! Naming: the *server* is the service end (SVC:port), the *client* the
//! other end, whichever side opened the connection. Offsets are absolute
//! (see `record`): client offsets count from client ISN + 1, server
//! offsets from server ISN + 1.

use std::collections::VecDeque;
use std::net::SocketAddrV4;

use serde::Serialize;

use crate::logged::{release_cursor, LogCover};
use crate::packet::TcpOptions;
use crate::record::ByteRecord;

/// A packet the gate was given: the id NFQUEUE gave it (below 2^32; the
/// verdict names it), or one the AF_XDP output path numbered
/// ([`crate::gate::XDP_IDS`] and up).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct PacketId(pub u64);

/// (client, server)
pub type StreamKey = (SocketAddrV4, SocketAddrV4);

/// Which release rule can free a held packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cover {
    /// Rule (1) or (2): free once a commit's write_seq_rel reaches `end`
    /// (absolute server offset just past the packet), or by arrival.
    Sequence { end: u64 },
    /// Rule (2) only: RST segments, non-TCP packets, and segments of
    /// streams whose server ISN the gate never saw.
    ArrivalOnly,
}

/// A packet from the service waiting for a commit.
#[derive(Debug, Clone)]
pub struct Held {
    pub id: PacketId,
    pub arrival: u64,
    pub cover: Cover,
    /// Absolute server offset of the first payload byte (Sequence only).
    pub start: u64,
    /// The TCP payload (kept to be retained once released).
    pub payload: Vec<u8>,
    /// Bytes accounted as held: the payload, or the packet's length for
    /// packets whose payload is not kept.
    pub bytes: u64,
    pub rst: bool,
}

impl Held {
    /// Whether a commit with release cursor `committed_write` and arrival
    /// bound `bound` covers this packet.
    pub fn covered(&self, committed_write: Option<u64>, bound: u64) -> bool {
        if self.arrival <= bound {
            return true;
        }
        match (self.cover, committed_write) {
            (Cover::Sequence { end }, Some(w)) => end <= w,
            _ => false,
        }
    }
}

/// The memory a stream accounts for (for the gate's totals and bounds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Footprint {
    pub held_packets: u64,
    pub held_bytes: u64,
    pub client_bytes: u64,
    pub retained_bytes: u64,
}

#[derive(Debug)]
pub struct Stream {
    pub client: SocketAddrV4,
    pub server: SocketAddrV4,
    pub client_isn: Option<u32>,
    pub client_syn: Option<TcpOptions>,
    /// The client's latest SYN as it went on to the primary, kept until the
    /// server answers it: a failover that finds it unanswered sends it to
    /// the restored service, whose SYN-ACK spares the client its SYN
    /// retransmission timeout (1 s).
    pub client_syn_packet: Option<Vec<u8>>,
    pub server_isn: Option<u32>,
    pub server_syn: Option<TcpOptions>,

    /// Client payload by client offset, from what the app has not read.
    pub client_data: ByteRecord,
    /// Highest client offset seen (reference for sequence conversion).
    pub client_highest: u64,
    pub client_fin_end: Option<u64>,
    /// The client's latest ACK (server offset), window (unscaled) and
    /// timestamps.
    pub client_ack: Option<u64>,
    pub client_window: u16,
    pub client_timestamps: Option<(u32, u32)>,

    /// Released server payload the client has not acknowledged yet.
    pub server_retained: ByteRecord,
    /// Server offset just past everything released (payload + FIN).
    pub server_released_end: u64,
    /// Highest server offset seen (reference for sequence conversion).
    pub server_highest: u64,
    pub server_fin_end: Option<u64>,
    /// The highest ACK the server sent (client offset): how far the
    /// primary's kernel has received (PackGate's "acknowledgment numbers
    /// on each outgoing stream", RRC §4.4).
    pub server_ack: Option<u64>,
    /// The right edge of the receive window the server advertised (client
    /// offset; the widest one seen): the server's kernel takes no segment
    /// that starts beyond it, so the gate records none either, and a
    /// client sending far ahead cannot make it keep bytes without bound.
    pub server_window_edge: Option<u64>,
    pub server_timestamps: Option<(u32, u32)>,

    pub held: VecDeque<Held>,
    pub held_bytes: u64,
    /// Release cursor: the newest commit's write_seq_rel as a server offset
    /// (only moves forward).
    pub committed_write: Option<u64>,
    /// The newest commit's read_seq_rel as a client offset.
    pub committed_read: Option<u64>,
    pub last_state: Option<u8>,
    pub seen_in_commit: bool,
    /// The last commit listed its socket (not a second TIME_WAIT): kept
    /// however it ends, for a failover to that commit.
    pub kept_for_commit: bool,
    /// Commits applied since this stream last appeared in one or had a
    /// packet (for forgetting streams no commit ever lists).
    pub idle_commits: u64,
    pub reset: bool,
    pub last_arrival: u64,
    /// What the backup's record log covers (rr mode; `logged.rs`).
    pub log: LogCover,
    /// Arrival number of the newest packet released on the log's cover
    /// beyond the commits' (0: none): until a commit's arrival bound
    /// reaches it, the stream is kept even when finished, since a
    /// failover's replay must reproduce what was released on it (a reply
    /// acknowledging a write, then FINs or an RST, all before the next
    /// checkpoint).
    pub log_released_arrival: u64,
}

/// Raises `slot` to `v` (values only move forward).
pub fn raise(slot: &mut Option<u64>, v: u64) {
    if !matches!(*slot, Some(old) if old >= v) {
        *slot = Some(v);
    }
}

impl Stream {
    pub fn new(client: SocketAddrV4, server: SocketAddrV4) -> Stream {
        Stream {
            client,
            server,
            client_isn: None,
            client_syn: None,
            server_isn: None,
            server_syn: None,
            client_data: ByteRecord::new(0),
            client_highest: 0,
            client_fin_end: None,
            client_syn_packet: None,
            client_ack: None,
            client_window: 0,
            client_timestamps: None,
            server_retained: ByteRecord::new(0),
            server_released_end: 0,
            server_highest: 0,
            server_window_edge: None,
            server_fin_end: None,
            server_ack: None,
            server_timestamps: None,
            held: VecDeque::new(),
            held_bytes: 0,
            committed_write: None,
            committed_read: None,
            last_state: None,
            seen_in_commit: false,
            kept_for_commit: false,
            idle_commits: 0,
            reset: false,
            last_arrival: 0,
            log: LogCover::default(),
            log_released_arrival: 0,
        }
    }

    pub fn footprint(&self) -> Footprint {
        Footprint {
            held_packets: self.held.len() as u64,
            held_bytes: self.held_bytes,
            client_bytes: self.client_data.bytes_held(),
            retained_bytes: self.server_retained.bytes_held(),
        }
    }

    /// Both ISNs known: sequence numbers can be made relative.
    /// The shift of the server's advertised windows (RFC 7323: only when
    /// both SYNs carried the option; at most 14).
    pub fn server_window_shift(&self) -> u32 {
        match (self.client_syn.and_then(|o| o.window_scale), self.server_syn.and_then(|o| o.window_scale)) {
            (Some(_), Some(s)) => u32::from(s.min(14)),
            _ => 0,
        }
    }

    pub fn synced(&self) -> bool {
        self.client_isn.is_some() && self.server_isn.is_some()
    }

    /// Both FINs sent and acknowledged by the other side.
    pub fn both_fins_acked(&self) -> bool {
        let client_done = matches!((self.client_fin_end, self.server_ack), (Some(f), Some(a)) if a >= f);
        let server_done = matches!((self.server_fin_end, self.client_ack), (Some(f), Some(a)) if a >= f);
        client_done && server_done
    }

    /// Finished, nothing left to release, nothing the log released that
    /// a commit with arrival bound `bound` does not cover, and no socket
    /// of it in the last commit's table: a commit can forget it.
    pub fn finished(&self, bound: u64) -> bool {
        self.held.is_empty() && (self.reset || self.both_fins_acked()) && self.log_released_arrival <= bound && !self.kept_for_commit
    }

    /// The server's FIN went out (released).
    pub fn server_fin_released(&self) -> bool {
        self.server_fin_end.is_some_and(|f| self.server_released_end >= f)
    }

    /// Pops the held packets at the front that the stream's cursor (the
    /// commits', and the log's with `log_release`) or the arrival bound
    /// covers, applying what their release implies.
    pub fn release(&mut self, bound: u64, log_release: bool, out: &mut Vec<(u64, PacketId)>) {
        let cursor = release_cursor(self, log_release);
        while let Some(h) = self.held.front() {
            if !h.covered(cursor, bound) {
                break;
            }
            let Some(h) = self.held.pop_front() else { break };
            self.held_bytes -= h.bytes;
            if !h.covered(self.committed_write, bound) {
                self.log_released_arrival = self.log_released_arrival.max(h.arrival);
            }
            self.released(&h);
            out.push((h.arrival, h.id));
        }
    }

    pub fn hold(&mut self, h: Held) {
        self.held_bytes += h.bytes;
        self.held.push_back(h);
    }

    /// Bookkeeping for a server packet that goes out: its payload is kept
    /// until the client acknowledges it (failover rebuilds the write queue
    /// from it), its end advances the released end, an RST ends the stream.
    pub fn released(&mut self, h: &Held) {
        // (as for the client's, core.rs: one after both FINs changes
        // nothing the application can read)
        if h.rst && !self.both_fins_acked() {
            self.reset = true;
        }
        if let Cover::Sequence { end } = h.cover {
            // Bytes the client already acknowledged need no keeping
            // (`insert` skips what lies below the trimmed base).
            if !h.payload.is_empty() {
                self.server_retained.insert(h.start, &h.payload);
            }
            self.server_released_end = self.server_released_end.max(end);
        }
    }
}

/// A stream as `rrc status` and failover see it. Sequence numbers are
/// relative (0 = first data byte), as in a commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StreamSnapshot {
    pub client: SocketAddrV4,
    pub server: SocketAddrV4,
    pub client_isn: Option<u32>,
    pub server_isn: Option<u32>,
    pub client_syn_options: Option<TcpOptions>,
    pub server_syn_options: Option<TcpOptions>,
    /// Recorded client bytes: contiguous from `client_base_rel` for
    /// `client_recorded_len` bytes, plus out-of-order bytes beyond a hole.
    pub client_base_rel: u32,
    pub client_recorded_len: u64,
    pub client_out_of_order_bytes: u64,
    /// The client's FIN, at this offset (the client bytes before it): a
    /// repair puts it after the receive queue (reads then end in EOF).
    pub client_fin_rel: Option<u32>,
    /// The client's latest ACK (relative to server ISN + 1) and raw window.
    pub client_ack_rel: Option<u32>,
    pub client_window: u16,
    pub client_timestamps: Option<(u32, u32)>,
    /// Released server bytes not yet acknowledged: [from, to) relative.
    pub server_unacked_from_rel: u32,
    pub server_unacked_to_rel: u32,
    pub server_retained_bytes: u64,
    pub server_released_end_rel: u32,
    pub server_fin: bool,
    /// ... and released (by a commit, or on the log's cover: rr mode).
    pub server_fin_released: bool,
    /// The highest ACK the server sent (relative to client ISN + 1).
    pub server_ack_rel: Option<u32>,
    pub server_timestamps: Option<(u32, u32)>,
    pub held_packets: usize,
    pub committed_write_rel: Option<u32>,
    pub committed_read_rel: Option<u32>,
    pub last_state: Option<u8>,
    pub reset: bool,
    /// Listed by a commit's TCP table at least once: the stream existed at
    /// a checkpoint (a failover tells the connections begun since).
    pub seen_in_commit: bool,
}

/// A snapshot plus the bytes failover needs: the client bytes the server
/// app has not read (to re-inject into the receive queue) and the released
/// server bytes the client has not acknowledged (the write queue).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StreamData {
    pub snapshot: StreamSnapshot,
    pub client_unread: Vec<u8>,
    pub server_unacked: Vec<u8>,
}

impl Stream {
    pub fn snapshot(&self) -> StreamSnapshot {
        StreamSnapshot {
            client: self.client,
            server: self.server,
            client_isn: self.client_isn,
            server_isn: self.server_isn,
            client_syn_options: self.client_syn,
            server_syn_options: self.server_syn,
            client_base_rel: self.client_data.base() as u32,
            client_recorded_len: self.client_data.contiguous_len(),
            client_out_of_order_bytes: self.client_data.out_of_order_bytes(),
            client_fin_rel: self.client_fin_end.map(|f| (f - 1) as u32),
            client_ack_rel: self.client_ack.map(|a| a as u32),
            client_window: self.client_window,
            client_timestamps: self.client_timestamps,
            server_unacked_from_rel: self.server_retained.base() as u32,
            server_unacked_to_rel: self.server_retained.contiguous_end() as u32,
            server_retained_bytes: self.server_retained.bytes_held(),
            server_released_end_rel: self.server_released_end as u32,
            server_fin: self.server_fin_end.is_some(),
            server_fin_released: self.server_fin_released(),
            server_ack_rel: self.server_ack.map(|a| a as u32),
            server_timestamps: self.server_timestamps,
            held_packets: self.held.len(),
            committed_write_rel: self.committed_write.map(|w| w as u32),
            committed_read_rel: self.committed_read.map(|r| r as u32),
            last_state: self.last_state,
            reset: self.reset,
            seen_in_commit: self.seen_in_commit,
        }
    }

    pub fn data(&self) -> StreamData {
        StreamData {
            snapshot: self.snapshot(),
            client_unread: self.client_data.contiguous_bytes(),
            server_unacked: self.server_retained.contiguous_bytes(),
        }
    }
}
