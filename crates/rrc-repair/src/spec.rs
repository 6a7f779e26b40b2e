//! What one connection needs to be rebuilt (`RepairSpec`), and how it is
//! derived from the backup gate's recording of the stream plus the
//! committed checkpoint's TCP table entry (`spec_from_gate`).
//!
//! Sequence numbers: the gate reports offsets relative to ISN + 1,
//! truncated to 32 bits; the checkpoint's table reports 64-bit relative
//! counts. Each gate value is first unwrapped to the 64-bit offset nearest
//! to the table's (the kernel's before()/after() rule, `rrc_gate::record::to_abs`),
//! then all comparisons are on plain integers; only the final absolute
//! sequence numbers wrap (ISN + 1 + offset, mod 2^32).

use std::net::{SocketAddr, SocketAddrV4};

use rrc_gate::record::to_abs;
use rrc_gate::StreamData;
use rrc_image::sections::TcpStream;

use crate::error::{RepairError, Unsupported};

/// The receive window the repaired socket starts with when nothing tells
/// the real one (the gate does not record the server's advertised window).
/// The kernel never shrinks a window it advertised, and grows it from here
/// as the restored application reads; a client that had been offered more
/// and sends beyond it retransmits once the window opens.
pub const DEFAULT_RCV_WND: u32 = 65535;

/// The MSS TCP assumes when the peer announced none (RFC 1122).
const DEFAULT_MSS: u16 = 536;

/// Timestamps in effect (both SYNs carried the option).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TsSpec {
    /// The newest TSval our side (the server) sent: the repaired socket's
    /// clock continues past it, so the client's PAWS check accepts it.
    pub our_last_tsval: u32,
    /// The newest TSval the client sent. The kernel offers no way to set
    /// `ts_recent`; it learns it from the client's next segment (which the
    /// window probe prompts). Kept for diagnostics.
    pub peer_last_tsval: u32,
}

/// One established connection to rebuild on the local (service) side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairSpec {
    /// The service IP and port (the address must exist in the netns).
    pub local: SocketAddrV4,
    pub remote: SocketAddrV4,
    /// Absolute sequence number of the first byte of `write_queue`
    /// (= snd_una: the client has acknowledged everything before it).
    pub send_seq: u32,
    /// Bytes the application had written that the client has not
    /// acknowledged (the client may or may not have them).
    pub write_queue: Vec<u8>,
    /// Absolute sequence number of the first byte of `recv_queue` (the
    /// application's read point); rcv_nxt = recv_seq + recv_queue.len().
    pub recv_seq: u32,
    /// Client bytes the application has not read yet.
    pub recv_queue: Vec<u8>,
    /// The peer's MSS (from its SYN): the socket's mss_clamp.
    pub mss: u16,
    /// The peer's window scale (applies to windows it advertises).
    pub snd_wscale: Option<u8>,
    /// Our window scale (applies to windows we advertise). Window scaling
    /// is in effect only if both are Some.
    pub rcv_wscale: Option<u8>,
    pub sack: bool,
    pub timestamps: Option<TsSpec>,
    /// The peer's advertised window, scaled (bytes beyond send_seq).
    pub snd_wnd: u32,
    /// Our receive window (bytes beyond rcv_nxt).
    pub rcv_wnd: u32,
    /// The server's FIN follows the write queue: the checkpoint's
    /// application had shut down its end. The repaired socket shuts down
    /// writing once the write queue is sent (the client that has the FIN
    /// acknowledges it again).
    pub fin_sent: bool,
    /// The client's FIN follows the receive queue: the repaired socket
    /// shuts down reading, so that reads return the queue, then EOF.
    pub fin_received: bool,
    /// The client acknowledged the server's FIN and the server the
    /// client's: its connection is over (TIME_WAIT or closed), and a
    /// segment sent to it would only draw an RST. Nothing is sent: the
    /// FIN goes into the send queue in repair mode and repair mode ends
    /// without a window probe.
    pub quiet: bool,
}

impl RepairSpec {
    /// rcv_nxt: the sequence number just past the receive queue.
    pub fn rcv_nxt(&self) -> u32 {
        self.recv_seq.wrapping_add(self.recv_queue.len() as u32)
    }
    /// write_seq: the sequence number just past the write queue.
    pub fn write_seq(&self) -> u32 {
        self.send_seq.wrapping_add(self.write_queue.len() as u32)
    }
}

/// Linux's TCP states (include/net/tcp_states.h) a connection is rebuilt from.
const TCP_ESTABLISHED: u8 = 1;
const TCP_FIN_WAIT1: u8 = 4;
const TCP_FIN_WAIT2: u8 = 5;
const TCP_CLOSE_WAIT: u8 = 8;
const TCP_LAST_ACK: u8 = 9;
const TCP_CLOSING: u8 = 11;

/// Builds the spec of one connection from the gate's recording of its
/// stream (`Gate::stream_data(client, server)`) and the committed
/// checkpoint's table entry for the same socket.
///
/// * send_seq = server ISN + 1 + the client's latest ACK; the write queue
///   is the gate's released-but-unacknowledged server bytes from there up
///   to the table's `write_seq_rel`. Bytes the application had written
///   beyond what the gate ever released were never transmitted and exist
///   nowhere any more: `WriteQueueGap`.
/// * recv_seq = client ISN + 1 + the table's `read_seq_rel`; the receive
///   queue is the gate's contiguous recording from there to its end.
/// * MSS, window scales, SACK and timestamps from the SYN and SYN-ACK;
///   snd_wnd = the client's latest window << its scale.
pub fn spec_from_gate(data: &StreamData, table: &TcpStream) -> Result<RepairSpec, RepairError> {
    spec(data, table, false)
}

/// The connection for a failover that then replays the record log (rr
/// mode; docs/tcp-repair.md "Before a replay"): the gate may have
/// released, and the client acknowledged, server bytes beyond what the
/// checkpoint's application had written (the log covered them). The
/// socket stands where the client does: snd_una at the client's ACK, the
/// write queue the gate's released bytes it has not acknowledged, the
/// write point at the end of the release. The replay does not send the
/// released bytes again (runtime/lib/rr-conns.c skips them, told by the
/// log's released record): a socket at the checkpoint's write point would
/// drop every ACK past it (RFC 793: it acknowledges nothing sent) and the
/// connection would stall once more than a window had been acknowledged.
pub fn spec_for_replay(data: &StreamData, table: &TcpStream) -> Result<RepairSpec, RepairError> {
    spec(data, table, true)
}

fn spec(data: &StreamData, table: &TcpStream, replay: bool) -> Result<RepairSpec, RepairError> {
    let s = &data.snapshot;
    let (client, server) = (s.client, s.server);
    let unsupported = |reason| RepairError::Unsupported {
        client,
        server,
        reason,
    };
    let inconsistent = |what: String| RepairError::Inconsistent {
        client,
        server,
        what,
    };

    // The table entry must be this stream's socket.
    let (SocketAddr::V4(local), SocketAddr::V4(remote)) = (table.local, table.remote) else {
        return Err(unsupported(Unsupported::NotIpv4));
    };
    if local != server || remote != client {
        return Err(inconsistent(format!(
            "the table entry is {local} -> {remote}, not this stream"
        )));
    }
    let (Some(client_isn), Some(server_isn)) = (s.client_isn, s.server_isn) else {
        return Err(unsupported(Unsupported::NoIsns));
    };
    if s.reset {
        return Err(unsupported(Unsupported::Reset));
    }
    let Some(fins) = FinsAtCheckpoint::of_state(table.state) else {
        return Err(unsupported(Unsupported::State(table.state)));
    };
    let (Some(written), Some(read)) = (table.write_seq_rel, table.read_seq_rel) else {
        return Err(unsupported(Unsupported::NoSequence));
    };
    // The FIN counts one in the table's offsets (docs/tcp-repair.md): the
    // bytes the checkpoint's application had written, without it.
    let written = written.saturating_sub(u64::from(fins.server));

    // ---- the write queue: [client ACK, written) ----
    // The server's FIN, where the gate released it, takes no byte: a FIN
    // the checkpoint's application had sent goes after the write queue
    // again (`fin_sent`); one released on the log after it (rr mode) is
    // sent again by the replayed shutdown or close, so the socket stands
    // before it. In checkpoint-only mode a commit releases only what its
    // checkpoint had sent: a FIN beyond it is held, and dropped like held
    // bytes (the restored application closes again).
    let fin_out = s.server_fin_released;
    if fin_out && !fins.server && !replay {
        return Err(inconsistent(
            "the gate released the server's FIN, which the checkpoint's application had not sent".into(),
        ));
    }
    let released_end = unwrap_near(s.server_released_end_rel, written).saturating_sub(u64::from(fin_out));
    let Some(ack_rel) = s.client_ack_rel else {
        return Err(inconsistent(
            "the gate never saw the client acknowledge anything".into(),
        ));
    };
    let acked = unwrap_near(ack_rel, written);
    // the client's acknowledgment of that FIN: the socket stands before it
    let acked = if fin_out { acked.min(released_end) } else { acked };
    // before a replay the socket's write point is the end of the release
    // (the replay's outputs continue from there)
    let write_to = if replay { released_end } else { written };
    // written by the checkpoint's application, never released: lost
    let gap = |have| RepairError::WriteQueueGap {
        client,
        server,
        have,
        need: written,
    };
    if released_end < written {
        return Err(gap(released_end));
    }
    if released_end > written && !replay {
        // In checkpoint-only mode a commit releases only what its
        // checkpoint's application had written; anything beyond comes
        // from the log, which only a replay reproduces
        // (spec_for_replay).
        return Err(inconsistent(format!(
            "the gate released server bytes up to offset {released_end}, beyond the {written} the checkpoint's application had written"
        )));
    }
    if acked > write_to {
        return Err(inconsistent(format!(
            "the client acknowledged offset {acked}, beyond the {write_to} bytes {}",
            if replay { "released" } else { "written" }
        )));
    }
    let write_queue = if acked == write_to {
        Vec::new() // nothing unacknowledged
    } else {
        let kept_from = unwrap_near(s.server_unacked_from_rel, written);
        let kept_to = kept_from + data.server_unacked.len() as u64;
        if kept_from > acked {
            return Err(inconsistent(format!("the gate keeps unacknowledged server bytes from offset {kept_from}, after the client's ACK {acked}")));
        }
        if kept_to < write_to {
            // Released but not retained (a hole in the gate's record): just as lost.
            return Err(gap(kept_to));
        }
        data.server_unacked[(acked - kept_from) as usize..(write_to - kept_from) as usize].to_vec()
    };

    // ---- the receive queue: [read, end of the contiguous recording) ----
    // The client's FIN, if the gate saw one, follows it (`fin_received`:
    // reads end in EOF there). The kernel counts a FIN it took as read
    // (the table's offset one past the bytes) as soon as the last byte
    // before it is read.
    let client_fin = s.client_fin_rel.map(|f| unwrap_near(f, read));
    if fins.client && client_fin.is_none() {
        return Err(inconsistent(
            "the checkpoint's socket had the client's FIN, which the gate never saw".into(),
        ));
    }
    let read = match client_fin {
        Some(f) if read == f + 1 && fins.client => f,
        _ => read,
    };
    let recorded_from = match unwrap_near(s.client_base_rel, read) {
        // a commit whose table counted the FIN trimmed the recording to
        // one past it
        from if client_fin == Some(from.wrapping_sub(1)) && data.client_unread.is_empty() => from - 1,
        from => from,
    };
    let recorded_to = recorded_from + data.client_unread.len() as u64;
    if client_fin.is_some_and(|f| f != recorded_to) {
        // a hole in the recording before the FIN, or bytes past it
        return Err(unsupported(Unsupported::ClientFin));
    }
    if recorded_from > read || recorded_to < read {
        return Err(RepairError::RecordingGap {
            client,
            server,
            read,
            recorded_from,
            recorded_to,
        });
    }
    let recv_queue = data.client_unread[(read - recorded_from) as usize..].to_vec();

    let hs = handshake(s);
    let (snd_wscale, rcv_wscale) = (hs.snd_wscale, hs.rcv_wscale);

    // The checkpoint's kernel reported the same options (tcp_info) if it
    // reported any: a disagreement means the two describe different
    // connections.
    const TCPI_OPT_WSCALE: u8 = 4;
    let table_reports_wscale =
        table.flags & rrc_image::sections::TCP_F_INFO != 0 && table.options & TCPI_OPT_WSCALE != 0;
    if table_reports_wscale
        && (Some(table.snd_wscale), Some(table.rcv_wscale)) != (snd_wscale, rcv_wscale)
    {
        return Err(inconsistent(format!(
            "window scales: checkpoint snd {} rcv {}, handshake {:?} {:?}",
            table.snd_wscale, table.rcv_wscale, snd_wscale, rcv_wscale
        )));
    }

    let mut spec = hs.spec(
        (local, remote),
        (server_isn.wrapping_add(1).wrapping_add(acked as u32), write_queue),
        (client_isn.wrapping_add(1).wrapping_add(read as u32), recv_queue),
    );
    spec.fin_sent = fins.server;
    spec.fin_received = client_fin.is_some();
    // Both FINs acknowledged, every byte too: the client's connection is
    // over (TIME_WAIT or closed); anything sent would draw an RST.
    let client_fin_acked = match (client_fin, s.server_ack_rel) {
        (Some(f), Some(a)) => unwrap_near(a, f) > f,
        _ => false,
    };
    spec.quiet = fins.server && fin_out && client_fin_acked && spec.write_queue.is_empty() && unwrap_near(ack_rel, written) > written;
    Ok(spec)
}

/// Which FINs the checkpoint's kernel had sent and taken, by its socket's
/// state: a half-closed or closing connection is rebuilt established,
/// then shut down on the same side(s) (docs/tcp-repair.md "FINs").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FinsAtCheckpoint {
    /// The application had shut down its end (FIN_WAIT1/2, CLOSING, LAST_ACK).
    server: bool,
    /// The client's FIN had arrived (CLOSE_WAIT, CLOSING, LAST_ACK).
    client: bool,
}

impl FinsAtCheckpoint {
    fn of_state(state: u8) -> Option<Self> {
        let (server, client) = match state {
            TCP_ESTABLISHED => (false, false),
            TCP_FIN_WAIT1 | TCP_FIN_WAIT2 => (true, false),
            TCP_CLOSE_WAIT => (false, true),
            TCP_LAST_ACK | TCP_CLOSING => (true, true),
            // TIME_WAIT and CLOSE have no sequence values; SYN_* and
            // LISTEN are no connection yet
            _ => return None,
        };
        Some(Self { server, client })
    }
}

/// What the handshake settled, and the client's window now.
struct Handshake {
    mss: u16,
    snd_wscale: Option<u8>,
    rcv_wscale: Option<u8>,
    sack: bool,
    timestamps: Option<TsSpec>,
    snd_wnd: u32,
}

impl Handshake {
    /// The spec of the connection (local, remote) with the send side at
    /// (send_seq, write queue) and the receive side at (recv_seq, queue).
    fn spec(self, (local, remote): (SocketAddrV4, SocketAddrV4), send: (u32, Vec<u8>), recv: (u32, Vec<u8>)) -> RepairSpec {
        RepairSpec {
            local,
            remote,
            send_seq: send.0,
            write_queue: send.1,
            recv_seq: recv.0,
            recv_queue: recv.1,
            mss: self.mss,
            snd_wscale: self.snd_wscale,
            rcv_wscale: self.rcv_wscale,
            sack: self.sack,
            timestamps: self.timestamps,
            snd_wnd: self.snd_wnd,
            rcv_wnd: DEFAULT_RCV_WND,
            fin_sent: false,
            fin_received: false,
            quiet: false,
        }
    }
}

/// The client's SYN is the peer's, the SYN-ACK ours.
fn handshake(s: &rrc_gate::StreamSnapshot) -> Handshake {
    let peer = s.client_syn_options.unwrap_or_default();
    let ours = s.server_syn_options.unwrap_or_default();
    let (snd_wscale, rcv_wscale) = match (peer.window_scale, ours.window_scale) {
        (Some(p), Some(o)) => (Some(p), Some(o)),
        _ => (None, None), // scaling is on only if both SYNs offered it
    };
    let timestamps = match (peer.timestamps, ours.timestamps) {
        (Some(peer_syn), Some(our_syn)) => Some(TsSpec {
            our_last_tsval: s.server_timestamps.unwrap_or(our_syn).0,
            peer_last_tsval: s.client_timestamps.unwrap_or(peer_syn).0,
        }),
        _ => None,
    };
    Handshake {
        mss: peer.mss.unwrap_or(DEFAULT_MSS),
        snd_wscale,
        rcv_wscale,
        sack: peer.sack_permitted && ours.sack_permitted,
        timestamps,
        snd_wnd: u32::from(s.client_window) << snd_wscale.unwrap_or(0).min(crate::sys::TCP_MAX_WSCALE),
    }
}

/// A connection the failover cannot rebuild, as its client sees it, only
/// to be reset (docs/tcp-repair.md "Resetting"): closed at once with
/// SO_LINGER 0, the socket sends an RST at its snd_nxt, the end of what
/// the gate released (the client's rcv_nxt once those bytes arrived: an
/// RST there is accepted at once; one elsewhere in the window draws a
/// challenge ACK, which the restored kernel, with no socket for it,
/// answers with an RST at exactly that ACK). Without it a client waiting
/// for a reply would wait forever: nothing it sends is outstanding.
/// `sent_to`: where a diverged replay's socket had sent up to on this
/// connection (absolute snd_nxt), when that is past the release: its
/// client may hold those bytes, and an RST below its rcv_nxt is dropped
/// without a word (RFC 5961 §3.2), so the reset stands there instead (at
/// or above the client's rcv_nxt, within the window it offered).
pub fn spec_to_reset(data: &StreamData, sent_to: Option<u32>) -> Result<RepairSpec, RepairError> {
    let s = &data.snapshot;
    let (Some(client_isn), Some(server_isn)) = (s.client_isn, s.server_isn) else {
        return Err(RepairError::Unsupported { client: s.client, server: s.server, reason: Unsupported::NoIsns });
    };
    let client_end = s.client_base_rel.wrapping_add(s.client_recorded_len as u32);
    let released = server_isn.wrapping_add(1).wrapping_add(s.server_released_end_rel);
    let send_seq = sent_to.filter(|&x| seq_cmp(x, released).is_gt()).unwrap_or(released);
    Ok(handshake(s).spec((s.server, s.client), (send_seq, Vec::new()), (client_isn.wrapping_add(1).wrapping_add(client_end), Vec::new())))
}

/// Two TCP sequence numbers in sequence order (RFC 793's modular
/// comparison: `a` after `b` if it is less than 2^31 ahead).
pub fn seq_cmp(a: u32, b: u32) -> std::cmp::Ordering {
    (a.wrapping_sub(b) as i32).cmp(&0)
}

/// The 64-bit offset whose low 32 bits are `rel`, nearest to `reference`
/// (clamped at 0: nothing precedes the first data byte here).
fn unwrap_near(rel: u32, reference: u64) -> u64 {
    to_abs(rel, reference).max(0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use rrc_gate::{StreamSnapshot, TcpOptions};
    use std::net::Ipv4Addr;

    const CLIENT: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 40000);
    const SERVER: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 100), 8080);

    fn syn(wscale: u8, ts: u32) -> TcpOptions {
        TcpOptions {
            mss: Some(1460),
            window_scale: Some(wscale),
            sack_permitted: true,
            timestamps: Some((ts, 0)),
        }
    }

    /// A stream: the server released `released` bytes of which the client
    /// acked `acked`; the client sent `client_bytes`, recorded from `base`.
    fn stream(
        client_isn: u32,
        server_isn: u32,
        acked: u64,
        released: u64,
        base: u64,
        client_bytes: u64,
    ) -> StreamData {
        let snapshot = StreamSnapshot {
            client: CLIENT,
            server: SERVER,
            client_isn: Some(client_isn),
            server_isn: Some(server_isn),
            client_syn_options: Some(syn(7, 1000)),
            server_syn_options: Some(syn(9, 5000)),
            client_base_rel: base as u32,
            client_recorded_len: client_bytes - base,
            client_out_of_order_bytes: 0,
            client_fin_rel: None,
            client_ack_rel: Some(acked as u32),
            client_window: 500,
            client_timestamps: Some((1111, 5555)),
            server_unacked_from_rel: acked as u32,
            server_unacked_to_rel: released as u32,
            server_retained_bytes: released - acked,
            server_released_end_rel: released as u32,
            server_fin: false,
            server_fin_released: false,
            server_ack_rel: Some(client_bytes as u32),
            server_timestamps: Some((6666, 1111)),
            held_packets: 0,
            committed_write_rel: Some(released as u32),
            committed_read_rel: Some(base as u32),
            last_state: Some(1),
            reset: false,
            seen_in_commit: true,
        };
        StreamData {
            snapshot,
            client_unread: (base..client_bytes).map(|i| i as u8).collect(),
            server_unacked: (acked..released).map(|i| (i as u8) ^ 0x55).collect(),
        }
    }

    fn table(written: u64, read: u64) -> TcpStream {
        TcpStream {
            family: libc::AF_INET as u16,
            state: 1,
            state_name: "ESTABLISHED",
            options: 1 | 2 | 4,
            snd_wscale: 7,
            rcv_wscale: 9,
            flags: rrc_image::sections::TCP_F_INFO | rrc_image::sections::TCP_F_SEQ,
            local: SERVER.into(),
            remote: CLIENT.into(),
            snd_mss: 1448,
            inode: 1,
            cookie: 1,
            rqueue: 0,
            wqueue: 0,
            bytes_acked: 0,
            bytes_received: 0,
            write_seq_rel: Some(written),
            read_seq_rel: Some(read),
            ifindex: 0,
        }
    }

    #[test]
    fn queues_sequences_and_options() {
        let d = stream(1000, 2000, 30, 100, 40, 90);
        let s = spec_from_gate(&d, &table(100, 40)).expect("spec");
        assert_eq!(s.local, SERVER);
        assert_eq!(s.remote, CLIENT);
        assert_eq!(s.send_seq, 2000 + 1 + 30);
        assert_eq!(
            s.write_queue,
            (30u64..100).map(|i| (i as u8) ^ 0x55).collect::<Vec<_>>()
        );
        assert_eq!(s.write_seq(), 2000 + 1 + 100);
        assert_eq!(s.recv_seq, 1000 + 1 + 40);
        assert_eq!(
            s.recv_queue,
            (40u64..90).map(|i| i as u8).collect::<Vec<_>>()
        );
        assert_eq!(s.rcv_nxt(), 1000 + 1 + 90);
        assert_eq!(
            (s.mss, s.snd_wscale, s.rcv_wscale, s.sack),
            (1460, Some(7), Some(9), true)
        );
        assert_eq!(
            s.timestamps,
            Some(TsSpec {
                our_last_tsval: 6666,
                peer_last_tsval: 1111
            })
        );
        assert_eq!(s.snd_wnd, 500 << 7);
        assert_eq!(s.rcv_wnd, DEFAULT_RCV_WND);
    }

    #[test]
    fn the_app_had_read_part_of_the_recording() {
        // A commit trims the recording to read_seq_rel; one older than the
        // table (base below read) is cut here.
        let d = stream(1000, 2000, 0, 0, 10, 90);
        let s = spec_from_gate(&d, &table(0, 25)).expect("spec");
        assert_eq!(s.recv_seq, 1000 + 1 + 25);
        assert_eq!(
            s.recv_queue,
            (25u64..90).map(|i| i as u8).collect::<Vec<_>>()
        );
        assert!(s.write_queue.is_empty());
        assert_eq!(s.send_seq, 2001);
    }

    #[test]
    fn sequence_numbers_wrap_around() {
        // ISNs just below 2^32: ISN + 1 + offset wraps.
        let d = stream(u32::MAX - 5, u32::MAX - 2, 10, 20, 3, 30);
        let s = spec_from_gate(&d, &table(20, 3)).expect("spec");
        assert_eq!(s.send_seq, 10 - 2); // (2^32 - 3) + 1 + 10
        assert_eq!(s.recv_seq, u32::MAX - 1); // (2^32 - 6) + 1 + 3
        assert_eq!(s.rcv_nxt(), (u32::MAX - 5).wrapping_add(1 + 30));
        assert_eq!(s.write_seq(), (u32::MAX - 2).wrapping_add(1 + 20));
    }

    #[test]
    fn relative_offsets_beyond_4_gib() {
        // More than 2^32 bytes each way: the gate's u32 relative values
        // are unwrapped against the table's u64 counts.
        let four_gib = 1u64 << 32;
        let (acked, written) = (four_gib * 3 + 100, four_gib * 3 + 160);
        let (base, end) = (
            four_gib + u64::from(u32::MAX) - 4,
            four_gib + u64::from(u32::MAX) + 20,
        ); // crosses a 2^32 boundary
        let mut d = stream(7, 9, 0, 0, 0, 0);
        d.snapshot.client_ack_rel = Some(acked as u32);
        d.snapshot.server_unacked_from_rel = acked as u32;
        d.snapshot.server_released_end_rel = written as u32;
        d.server_unacked = vec![0xAB; (written - acked) as usize];
        d.snapshot.client_base_rel = base as u32;
        d.client_unread = vec![0xCD; (end - base) as usize];
        let s = spec_from_gate(&d, &table(written, base + 2)).expect("spec");
        assert_eq!(s.write_queue.len(), 60);
        assert_eq!(s.send_seq, 9u32.wrapping_add(1).wrapping_add(acked as u32));
        assert_eq!(s.recv_queue.len(), (end - base - 2) as usize);
        assert_eq!(
            s.recv_seq,
            7u32.wrapping_add(1).wrapping_add((base + 2) as u32)
        );
    }

    #[test]
    fn bytes_written_but_never_released_are_a_gap() {
        let d = stream(1000, 2000, 30, 100, 40, 90);
        match spec_from_gate(&d, &table(150, 40)) {
            Err(RepairError::WriteQueueGap {
                have: 100,
                need: 150,
                ..
            }) => {}
            other => panic!("expected a write queue gap, got {other:?}"),
        }
        // released beyond what the checkpoint's app wrote: inconsistent
        assert!(matches!(
            spec_from_gate(&d, &table(80, 40)),
            Err(RepairError::Inconsistent { .. })
        ));
    }

    #[test]
    fn recording_must_cover_the_read_point() {
        let d = stream(1000, 2000, 30, 100, 40, 90);
        match spec_from_gate(&d, &table(100, 35)) {
            Err(RepairError::RecordingGap {
                read: 35,
                recorded_from: 40,
                recorded_to: 90,
                ..
            }) => {}
            other => panic!("expected a recording gap, got {other:?}"),
        }
        assert!(matches!(
            spec_from_gate(&d, &table(100, 95)),
            Err(RepairError::RecordingGap { .. })
        ));
    }

    #[test]
    fn unsupported_streams_name_the_reason() {
        let reason = |d: &StreamData, t: &TcpStream| match spec_from_gate(d, t) {
            Err(RepairError::Unsupported { reason, .. }) => reason,
            other => panic!("expected unsupported, got {other:?}"),
        };
        let base = stream(1000, 2000, 30, 100, 40, 90);
        let t = table(100, 40);
        let mut d = base.clone();
        d.snapshot.client_isn = None;
        assert_eq!(reason(&d, &t), Unsupported::NoIsns);
        let mut d = base.clone();
        d.snapshot.client_fin_rel = Some(95); // past the recording's end, 90
        assert_eq!(reason(&d, &t), Unsupported::ClientFin);
        let mut d = base.clone();
        d.snapshot.reset = true;
        assert_eq!(reason(&d, &t), Unsupported::Reset);
        let mut t2 = table(100, 40);
        t2.state = 6;
        assert_eq!(reason(&base, &t2), Unsupported::State(6));
        let msg = spec_from_gate(&base, &t2)
            .expect_err("time-wait")
            .to_string();
        assert!(
            msg.contains("TIME_WAIT") && msg.contains("not supported yet"),
            "{msg}"
        );
        let mut t3 = table(100, 40);
        t3.write_seq_rel = None;
        assert_eq!(reason(&base, &t3), Unsupported::NoSequence);
    }

    #[test]
    fn before_a_replay_a_released_fin_is_sent_again_by_the_replayed_close() {
        // 100 bytes and the FIN released; the client acknowledged both and
        // sent its own FIN after its 90 bytes
        let mut d = stream(1000, 2000, 101, 101, 40, 90);
        d.server_unacked.clear();
        d.snapshot.server_unacked_from_rel = 101;
        d.snapshot.server_unacked_to_rel = 101;
        d.snapshot.server_fin = true;
        d.snapshot.server_fin_released = true;
        d.snapshot.client_fin_rel = Some(90);
        let t = table(60, 40);
        let spec = spec_for_replay(&d, &t).unwrap();
        assert_eq!(spec.send_seq, 2000 + 1 + 100, "the socket stands before the FIN");
        assert!(spec.write_queue.is_empty());
        assert_eq!(spec.recv_seq, 1000 + 1 + 40);
        assert_eq!(spec.recv_queue.len(), 50, "the client's bytes, not its FIN");
        assert!(spec.fin_received && !spec.fin_sent, "the client's FIN after its bytes; the replay sends the server's");
        // without a replay a released FIN the checkpoint had not sent
        // contradicts the commit that released it
        assert!(matches!(spec_from_gate(&d, &t), Err(RepairError::Inconsistent { .. })));
        // a FIN held, not released: dropped like held bytes
        let mut held = d.clone();
        held.snapshot.server_fin_released = false;
        held.snapshot.client_fin_rel = None;
        held.snapshot.server_released_end_rel = 100;
        held.snapshot.client_ack_rel = Some(100);
        let spec = spec_for_replay(&held, &t).unwrap();
        assert_eq!((spec.send_seq, spec.fin_sent, spec.fin_received), (2000 + 1 + 100, false, false));
        assert_eq!(spec_from_gate(&held, &table(100, 40)).unwrap().send_seq, 2000 + 1 + 100);
        held.snapshot.client_fin_rel = Some(90);
        assert!(spec_for_replay(&held, &t).unwrap().fin_received);
        // released bytes not acknowledged yet before the FIN: queued
        let mut d2 = stream(1000, 2000, 80, 101, 40, 90);
        d2.server_unacked.truncate(20);
        d2.snapshot.server_unacked_to_rel = 100;
        d2.snapshot.server_fin = true;
        d2.snapshot.server_fin_released = true;
        let spec = spec_for_replay(&d2, &t).unwrap();
        assert_eq!((spec.send_seq, spec.write_queue.len()), (2000 + 1 + 80, 20));
    }

    /// A stream on which the server sent `bytes` and its FIN, all
    /// released; the client acknowledged up to `acked` (FIN included at
    /// bytes + 1) and sent 90 bytes, recorded from 40, and its FIN if
    /// `client_fin`.
    fn closing(acked: u64, bytes: u64, client_fin: bool) -> StreamData {
        let mut d = stream(1000, 2000, acked.min(bytes), bytes, 40, 90);
        d.snapshot.client_ack_rel = Some(acked as u32);
        d.snapshot.server_released_end_rel = bytes as u32 + 1;
        d.snapshot.server_fin = true;
        d.snapshot.server_fin_released = true;
        d.snapshot.client_fin_rel = client_fin.then_some(90);
        d
    }

    fn in_state(state: u8, written: u64, read: u64) -> TcpStream {
        TcpStream { state, ..table(written, read) }
    }

    #[test]
    fn a_server_fin_sent_before_the_checkpoint_follows_the_write_queue() {
        // FIN_WAIT2: 100 bytes and the FIN (the table counts it), all acked
        let t = in_state(5, 101, 40);
        let s = spec_from_gate(&closing(101, 100, false), &t).expect("fin-wait-2");
        assert_eq!((s.send_seq, s.write_queue.len()), (2000 + 1 + 100, 0), "the socket stands before the FIN");
        assert!(s.fin_sent && !s.fin_received);
        assert_eq!(s.recv_queue.len(), 50);
        // FIN_WAIT1, the last 20 bytes and the FIN not acknowledged yet
        let s = spec_from_gate(&closing(80, 100, false), &in_state(4, 101, 40)).expect("fin-wait-1");
        assert_eq!((s.send_seq, s.write_queue.len(), s.fin_sent), (2000 + 1 + 80, 20, true));
        // the same before a replay: the replay does not close again
        let s = spec_for_replay(&closing(80, 100, false), &in_state(4, 101, 40)).expect("replay");
        assert_eq!((s.write_queue.len(), s.fin_sent), (20, true));
        // the client's FIN came after the checkpoint (the gate saw it)
        let s = spec_from_gate(&closing(101, 100, true), &t).expect("client fin since");
        assert!(s.fin_sent && s.fin_received);
        assert_eq!((s.recv_seq, s.recv_queue.len()), (1000 + 1 + 40, 50));
        assert!(!s.quiet, "the server has not acknowledged the client's FIN: the client waits in LAST_ACK");
        // ... acknowledged, and the client had acknowledged ours: quiet
        let mut over = closing(101, 100, true);
        over.snapshot.server_ack_rel = Some(91);
        assert!(spec_from_gate(&over, &t).unwrap().quiet);
        over.snapshot.client_ack_rel = Some(100);
        assert!(!spec_from_gate(&over, &t).unwrap().quiet, "our FIN not acknowledged");
        // the FIN not released by the gate (never sent): sent now all the same
        let mut d = closing(100, 100, false);
        d.snapshot.server_released_end_rel = 100;
        d.snapshot.server_fin_released = false;
        let s = spec_from_gate(&d, &t).expect("fin held");
        assert_eq!((s.send_seq, s.fin_sent), (2000 + 1 + 100, true));
        // bytes written before the FIN the gate never released: still a gap
        assert!(matches!(spec_from_gate(&closing(90, 100, false), &in_state(4, 121, 40)), Err(RepairError::WriteQueueGap { have: 100, need: 120, .. })));
    }

    #[test]
    fn a_client_fin_before_the_checkpoint_ends_the_receive_queue() {
        let mut d = stream(1000, 2000, 30, 100, 40, 90);
        d.snapshot.client_fin_rel = Some(90);
        // CLOSE_WAIT, the application had read 60 bytes
        let s = spec_from_gate(&d, &in_state(8, 100, 60)).expect("close-wait");
        assert_eq!((s.recv_seq, s.recv_queue.len()), (1000 + 1 + 60, 30));
        assert!(s.fin_received && !s.fin_sent);
        // every byte read: the kernel counts the FIN as read too (91)
        let mut all = stream(1000, 2000, 30, 100, 90, 90);
        all.snapshot.client_fin_rel = Some(90);
        let s = spec_from_gate(&all, &in_state(8, 100, 91)).expect("fin read");
        assert_eq!((s.recv_seq, s.recv_queue.len(), s.fin_received), (1000 + 1 + 90, 0, true));
        // ... and a commit at that table trimmed the recording past the FIN
        all.snapshot.client_base_rel = 91;
        let s = spec_from_gate(&all, &in_state(8, 100, 91)).expect("trimmed past the fin");
        assert_eq!((s.recv_seq, s.recv_queue.len()), (1000 + 1 + 90, 0));
        // LAST_ACK: both FINs
        let s = spec_from_gate(&closing(100, 100, true), &in_state(9, 101, 60)).expect("last-ack");
        assert!(s.fin_sent && s.fin_received);
        assert_eq!(s.recv_queue.len(), 30);
        // the table has the client's FIN, the gate never saw it
        let d = stream(1000, 2000, 30, 100, 40, 90);
        assert!(matches!(spec_from_gate(&d, &in_state(8, 100, 60)), Err(RepairError::Inconsistent { .. })));
    }

    #[test]
    fn options_follow_both_syns() {
        let mut d = stream(1000, 2000, 0, 0, 0, 0);
        d.snapshot.server_syn_options = Some(TcpOptions {
            mss: Some(1400),
            window_scale: None,
            sack_permitted: false,
            timestamps: None,
        });
        let mut t = table(0, 0);
        t.options = 0;
        let s = spec_from_gate(&d, &t).expect("spec");
        assert_eq!(
            (s.mss, s.snd_wscale, s.rcv_wscale, s.sack, s.timestamps),
            (1460, None, None, false, None)
        );
        assert_eq!(
            s.snd_wnd, 500,
            "no scaling without both window-scale options"
        );
        // a checkpoint whose kernel reported other window scales is another connection
        let d = stream(1000, 2000, 0, 0, 0, 0);
        let mut t = table(0, 0);
        t.snd_wscale = 3;
        assert!(matches!(
            spec_from_gate(&d, &t),
            Err(RepairError::Inconsistent { .. })
        ));
        // the table entry must be this stream's
        let mut t = table(0, 0);
        t.remote = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 3), 40000).into();
        assert!(matches!(
            spec_from_gate(&d, &t),
            Err(RepairError::Inconsistent { .. })
        ));
    }

    #[test]
    fn before_a_replay_the_socket_stands_where_the_client_does() {
        // the checkpoint's app had written 100; the log let the gate
        // release up to 180, of which the client acknowledged 150
        let d = stream(1000, 5000, 150, 180, 0, 20);
        let t = table(100, 20);
        assert!(matches!(spec_from_gate(&d, &t), Err(RepairError::Inconsistent { .. })), "not in checkpoint mode");
        let sp = spec_for_replay(&d, &t).unwrap();
        assert_eq!(sp.send_seq, 5000 + 1 + 150, "snd_una: the client's ACK (one past it would be dropped)");
        assert_eq!(sp.write_queue, (150u64..180).map(|i| (i as u8) ^ 0x55).collect::<Vec<u8>>(), "then what it has not acknowledged");
        assert_eq!(sp.write_seq(), 5000 + 1 + 180, "the write point: the end of the release");
        // acknowledged only up to 60: from there, across the checkpoint's write point
        let d = stream(1000, 5000, 60, 180, 0, 20);
        let sp = spec_for_replay(&d, &t).unwrap();
        assert_eq!(sp.send_seq, 5000 + 1 + 60);
        assert_eq!(sp.write_queue, (60u64..180).map(|i| (i as u8) ^ 0x55).collect::<Vec<u8>>());
        // nothing released since the checkpoint: as in checkpoint mode
        let d = stream(1000, 5000, 100, 100, 0, 20);
        assert_eq!(spec_for_replay(&d, &t).unwrap(), spec_from_gate(&d, &t).unwrap());
        // what the checkpoint wrote and the gate never released is still lost
        let d = stream(1000, 5000, 60, 90, 0, 20);
        assert!(matches!(spec_for_replay(&d, &t), Err(RepairError::WriteQueueGap { .. })));
        // released and not retained: a hole
        let mut d = stream(1000, 5000, 60, 180, 0, 20);
        d.server_unacked.truncate(100);
        assert!(matches!(spec_for_replay(&d, &t), Err(RepairError::WriteQueueGap { .. })));
    }

    /// A reset stands where the client does: our snd_nxt at the end of
    /// what the gate released (not what the client acknowledged), our
    /// rcv_nxt at the end of the client's recorded bytes; no queues; the
    /// handshake's options.
    #[test]
    fn a_reset_stands_where_the_client_is() {
        let d = stream(u32::MAX - 5, 5000, 150, 180, 40, 90);
        let sp = spec_to_reset(&d, None).unwrap();
        assert_eq!((sp.local, sp.remote), (SERVER, CLIENT));
        assert_eq!(sp.send_seq, 5000 + 1 + 180);
        // a diverged replay sent past the release: the reset stands there;
        // a replay's socket behind the release changes nothing
        assert_eq!(spec_to_reset(&d, Some(5000 + 1 + 180 + 700)).unwrap().send_seq, 5000 + 1 + 180 + 700);
        assert_eq!(spec_to_reset(&d, Some(5000 + 1 + 100)).unwrap().send_seq, 5000 + 1 + 180);
        assert_eq!(spec_to_reset(&d, Some(5000 + 1 + 180)).unwrap().send_seq, 5000 + 1 + 180);
        assert_eq!(sp.recv_seq, (u32::MAX - 5).wrapping_add(1).wrapping_add(90));
        assert!(sp.write_queue.is_empty() && sp.recv_queue.is_empty());
        assert_eq!((sp.mss, sp.snd_wscale, sp.rcv_wscale, sp.sack), (1460, Some(7), Some(9), true));
        let mut d = d;
        d.snapshot.server_isn = None;
        assert!(matches!(spec_to_reset(&d, None), Err(RepairError::Unsupported { reason: Unsupported::NoIsns, .. })));
    }
}
