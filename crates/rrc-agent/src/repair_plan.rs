//! Which client connections a failover rebuilds, and from what (issue 14
//! §7: the failover's decisions apart from its I/O). failover.rs gathers
//! the inputs (the committed image's sockets and TCP table, the gate's
//! record of each connection), asks [`plan`], and carries the plan out
//! with TCP_REPAIR; the unit tests below check the matching without a lab.
//!
//! Three kinds of connections are rebuilt (docs/failover.md):
//! - those the application held as an fd at the checkpoint (`InetConn`
//!   sockets of the image), found in the TCP table by inode;
//! - those the kernel had completed but the application had not accepted:
//!   in the TCP table with inode 0, ESTABLISHED or CLOSE_WAIT, opened by the client, on
//!   the port of one of the image's listeners (specific address or
//!   wildcard); they are handed to the next accept() of that listener;
//! - those the clients opened after the checkpoint: in the gate's record,
//!   never in a commit's table (or there as a request socket, SYN_RECV),
//!   their handshake complete, on a listener's port. The checkpoint's application had read and written nothing of
//!   them: they are rebuilt at offsets 0/0 (a table entry made here) and
//!   handed over like the accept queue's; in rr mode the replayed accept
//!   that took one on the primary takes it again (RRC §4.4), and one the
//!   primary had not accepted yet waits for a live accept().
//!
//! Each needs the gate's record of its bytes (client bytes not yet read,
//! server bytes not yet acknowledged); without it, or without its TCP
//! table entry, the connection is not rebuilt and the reason is reported.

use std::net::{SocketAddr, SocketAddrV4};

use rrc_gate::StreamSnapshot;
use rrc_image::rrlog::{OutputConn, Released, ReleasedConn};
use rrc_image::sections::TcpStream;

/// A connected socket of the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldConn {
    pub fd: i32,
    pub local: SocketAddrV4,
    pub peer: SocketAddrV4,
    pub inode: u64,
}

/// A listening socket of the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listener {
    pub fd: i32,
    pub local: SocketAddrV4,
}

/// Why a connection is rebuilt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// An fd of the checkpoint's application.
    Held,
    /// In a listener's kernel accept queue at the checkpoint.
    AcceptQueue,
    /// Opened by its client after the checkpoint.
    AfterCheckpoint,
}

/// One connection of the plan. `fd` is the connection's own fd, or, for
/// one not yet accepted at the checkpoint, its listener's.
#[derive(Debug, PartialEq)]
pub struct Repair<D> {
    pub fd: i32,
    pub peer: SocketAddrV4,
    /// The service's end.
    pub local: SocketAddrV4,
    pub origin: Origin,
    /// What to rebuild it from, or why it cannot be.
    pub from: Result<(TcpStream, D), &'static str>,
}

impl<D> Repair<D> {
    /// Handed to a listener's accept() rather than placed at an fd.
    pub fn accept_queue(&self) -> bool {
        self.origin != Origin::Held
    }
}

const NOT_IN_TABLE: &str = "not in the checkpoint's TCP table";
const NOT_IN_GATE: &str = "the gate has no record of this connection";
const ENDED_BEFORE: &str = "in neither the checkpoint's TCP table nor the gate's record: both ends had closed it before an earlier commit";

/// Every connection to rebuild, held ones first, in the image's order;
/// then the accept queue's in the TCP table's order (the kernel's hash
/// order: the primary's queue order is not recorded; clients do not see
/// the order in which they are accepted); then those begun after the
/// checkpoint, in `streams`' order.
/// `streams` are the gate's, `gate(peer, local)` its record of one.
pub fn plan<D>(
    held: &[HeldConn],
    listeners: &[Listener],
    table: &[TcpStream],
    streams: &[StreamSnapshot],
    gate: impl Fn(SocketAddrV4, SocketAddrV4) -> Option<D>,
) -> Vec<Repair<D>> {
    let mut out = Vec::new();
    for c in held {
        let entry = table
            .iter()
            .find(|t| t.inode == c.inode && c.inode != 0)
            .cloned()
            .or_else(|| stream_of(streams, (c.peer, c.local)).and_then(ended_before_checkpoint));
        let from = match (entry, gate(c.peer, c.local)) {
            (Some(t), Some(d)) => Ok((t, d)),
            (None, None) => Err(ENDED_BEFORE),
            (None, Some(_)) => Err(NOT_IN_TABLE),
            (Some(_), None) => Err(NOT_IN_GATE),
        };
        out.push(Repair { fd: c.fd, peer: c.peer, local: c.local, origin: Origin::Held, from });
    }
    for t in table.iter().filter(|t| t.inode == 0 && queued_state(t.state) && !t.is_active_open()) {
        let (Some(local), Some(peer)) = (socket_v4(t.local), socket_v4(t.remote)) else { continue };
        let Some(l) = listener_of(listeners, local) else { continue };
        let from = gate(peer, local).map(|d| (t.clone(), d)).ok_or(NOT_IN_GATE);
        out.push(Repair { fd: l.fd, peer, local, origin: Origin::AcceptQueue, from });
    }
    // rebuilt above from its table entry: an fd's socket, or a completed
    // connection in an accept queue (a request socket, SYN_RECV at the
    // checkpoint, is neither: its client completed the handshake after it,
    // as for the connections begun since; a CI-like campaign of closing
    // connections saw the replayed accept of one find nothing)
    let in_table = |s: &StreamSnapshot| {
        table.iter().any(|t| {
            socket_v4(t.local) == Some(s.server) && socket_v4(t.remote) == Some(s.client) && (t.inode != 0 || queued_state(t.state))
        })
    };
    // (and not one the application held: rebuilt above)
    let held_conn = |s: &StreamSnapshot| held.iter().any(|c| (c.peer, c.local) == (s.client, s.server));
    for s in streams.iter().filter(|s| begun_after_checkpoint(s) && !in_table(s) && !held_conn(s)) {
        let Some(l) = listener_of(listeners, s.server) else { continue };
        let from = gate(s.client, s.server).map(|d| (unread_unwritten(s.server, s.client), d)).ok_or(NOT_IN_GATE);
        out.push(Repair { fd: l.fd, peer: s.client, local: s.server, origin: Origin::AfterCheckpoint, from });
    }
    out
}

/// A stream that no checkpoint knew of and whose client completed the
/// handshake (it acknowledged the SYN-ACK: the primary's kernel may have
/// queued it, its application accepted it). One whose handshake the gate
/// did not see complete is left to the restored kernel: the client's
/// retransmitted SYN makes a new connection. A reset one is gone.
fn begun_after_checkpoint(s: &StreamSnapshot) -> bool {
    !s.seen_in_commit && s.client_isn.is_some() && s.server_isn.is_some() && s.client_ack_rel.is_some() && !s.reset
}

/// The table entry of a connection the application held whose both FINs
/// had gone before the checkpoint: the kernel's socket was CLOSE, in no
/// table (lighttpd keeps such an fd until it reads the EOF). It is
/// rebuilt closing on both sides (docs/tcp-repair.md "FINs") when the gate
/// saw every server byte and the FIN released and the client's FIN. The
/// bytes before the client's FIN are taken as read: an unread rest would
/// have no reply the client saw (a checkpoint found it unread; a replay
/// that reads it finds the queue empty and diverges, reported), and
/// giving the application bytes it had read would run them twice.
fn ended_before_checkpoint(s: &StreamSnapshot) -> Option<TcpStream> {
    let fin = s.client_fin_rel?;
    if s.reset || !s.server_fin_released || s.server_isn.is_none() || s.client_isn.is_none() {
        return None;
    }
    Some(TcpStream {
        state: TCP_LAST_ACK, // both FINs: what the repair needs to know
        state_name: "CLOSE",
        write_seq_rel: Some(u64::from(s.server_released_end_rel)), // the FIN counts one, as in a table
        read_seq_rel: Some(u64::from(fin)),
        ..unread_unwritten(s.server, s.client)
    })
}

/// The listener a passive connection to `local` came through.
fn listener_of(listeners: &[Listener], local: SocketAddrV4) -> Option<&Listener> {
    listeners.iter().find(|l| l.local.port() == local.port() && (l.local.ip().is_unspecified() || l.local.ip() == local.ip()))
}

/// The table entry of a connection the application has read and written
/// nothing of: synchronized, established, at relative offsets 0 and 0.
fn unread_unwritten(local: SocketAddrV4, remote: SocketAddrV4) -> TcpStream {
    TcpStream {
        family: libc::AF_INET as u16,
        state: TCP_ESTABLISHED,
        state_name: "ESTABLISHED",
        options: 0,
        snd_wscale: 0,
        rcv_wscale: 0,
        flags: rrc_image::sections::TCP_F_SEQ,
        local: SocketAddr::V4(local),
        remote: SocketAddr::V4(remote),
        snd_mss: 0,
        inode: 0,
        cookie: 0,
        rqueue: 0,
        wqueue: 0,
        bytes_acked: 0,
        bytes_received: 0,
        write_seq_rel: Some(0),
        read_seq_rel: Some(0),
        ifindex: 0,
    }
}

/// Whether a socket whose write end is `write_seq` (absolute) sent bytes
/// past the end of what the gate released on `s`: after a replay that
/// diverged, the client may hold such bytes (nothing the checkpoint
/// reproduces), so its connection is reset, not rebuilt.
pub fn past_release(write_seq: u32, s: &StreamSnapshot) -> Option<std::cmp::Ordering> {
    let released = s.server_isn?.wrapping_add(1).wrapping_add(s.server_released_end_rel);
    Some(rrc_repair::seq_cmp(write_seq, released))
}

/// What the clients were sent, for a failover's replay (rr mode; RRC
/// §4.4): every connection on which the gate released server bytes, with
/// the stream offset it released up to (the 32-bit count unwrapped near
/// the checkpoint's table count of that connection, or near 0 for one
/// opened after it). The replay reproduces every output of which a byte
/// was released, on any connection: one its client has closed since
/// included (its reply acknowledged a write that must not be lost), and
/// sends none of those bytes again (the repaired socket stands past them).
pub fn released(streams: &[StreamSnapshot], table: &[TcpStream]) -> Released {
    let conns = streams
        .iter()
        .filter(|s| s.server_isn.is_some() && s.server_released_end_rel != 0)
        .map(|s| {
            let near = table
                .iter()
                .find(|t| (socket_v4(t.local), socket_v4(t.remote)) == (Some(s.server), Some(s.client)))
                .and_then(|t| t.write_seq_rel)
                .unwrap_or(0);
            let end = rrc_gate::record::to_abs(s.server_released_end_rel, near).max(0) as u64;
            // the FIN's place in sequence space is no byte: the replay
            // counts bytes, and reproduces the close that sent the FIN
            let fin = s.server_fin_released && end > 0;
            ReleasedConn { conn: OutputConn { local: s.server, peer: s.client }, released: end - u64::from(fin), fin }
        })
        .collect();
    Released { conns }
}

/// A connection the fallback after a diverged replay resets, not rebuilds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MustReset {
    /// (client, service)
    pub conn: (SocketAddrV4, SocketAddrV4),
    pub why: String,
    /// Where the replay's socket had sent up to (absolute snd_nxt): the
    /// reset stands there if that is past the release
    /// (rrc_repair::spec_to_reset).
    pub sent_to: u32,
}

/// After a replay that diverged: the connections (client, service) whose
/// socket wrote (by its write_seq, `Silenced::written`) past what the gate
/// had released. Their clients may hold bytes the checkpoint alone does
/// not reproduce: the fallback resets them, with why.
pub fn written_past_release(written: &[((SocketAddrV4, SocketAddrV4), rrc_repair::Silenced)], streams: &[StreamSnapshot]) -> Vec<MustReset> {
    written
        .iter()
        .filter(|&&(conn, w)| stream_of(streams, conn).and_then(|s| past_release(w.written, s)) == Some(std::cmp::Ordering::Greater))
        .map(|&(conn, w)| MustReset { conn, why: "the diverged replay sent this client bytes the gate had not released".to_string(), sent_to: w.sent })
        .collect()
}

/// The gate's snapshot of connection `key` (client, service).
pub fn stream_of(streams: &[StreamSnapshot], key: (SocketAddrV4, SocketAddrV4)) -> Option<&StreamSnapshot> {
    streams.iter().find(|s| (s.client, s.server) == key)
}

/// The kernel's TCP states (include/net/tcp_states.h).
const TCP_ESTABLISHED: u8 = 1;
const TCP_CLOSE_WAIT: u8 = 8;
const TCP_LAST_ACK: u8 = 9;

/// The states of a connection in an accept queue: established, or
/// half-closed by a client that sent its request and shut down writing
/// before the application accepted it (the repair puts its FIN back).
fn queued_state(state: u8) -> bool {
    state == TCP_ESTABLISHED || state == TCP_CLOSE_WAIT
}

/// An IPv4 socket address, or the IPv4 one an IPv4-mapped IPv6 address
/// stands for (a dual-stack listener's connections from IPv4 clients).
pub fn socket_v4(a: SocketAddr) -> Option<SocketAddrV4> {
    match a {
        SocketAddr::V4(a) => Some(a),
        SocketAddr::V6(a) => a.ip().to_ipv4_mapped().map(|ip| SocketAddrV4::new(ip, a.port())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERVICE: &str = "198.18.0.100:6379";

    fn addr(s: &str) -> SocketAddrV4 {
        s.parse().unwrap()
    }

    fn entry(local: &str, remote: &str, inode: u64, state: u8, active: bool) -> TcpStream {
        TcpStream {
            family: libc::AF_INET as u16,
            state,
            state_name: "",
            options: 0,
            snd_wscale: 0,
            rcv_wscale: 0,
            flags: if active { rrc_image::sections::TCP_F_ACTIVE } else { 0 },
            local: SocketAddr::V4(addr(local)),
            remote: SocketAddr::V4(addr(remote)),
            snd_mss: 1460,
            inode,
            cookie: 0,
            rqueue: 0,
            wqueue: 0,
            bytes_acked: 0,
            bytes_received: 0,
            write_seq_rel: None,
            read_seq_rel: None,
            ifindex: 0,
        }
    }

    /// The gate knows every client on port 4000-4099 and no other.
    fn gate(peer: SocketAddrV4, _local: SocketAddrV4) -> Option<u16> {
        (4000..4100).contains(&peer.port()).then_some(peer.port())
    }

    #[test]
    fn a_held_connection_is_rebuilt_from_its_table_entry_and_the_gate_s_record() {
        let table = [entry(SERVICE, "198.18.0.10:4000", 77, 1, false)];
        let held = [HeldConn { fd: 9, local: addr(SERVICE), peer: addr("198.18.0.10:4000"), inode: 77 }];
        let p = plan(&held, &[], &table, &[], gate);
        assert_eq!(p, vec![Repair { fd: 9, peer: addr("198.18.0.10:4000"), local: addr(SERVICE), origin: Origin::Held, from: Ok((table[0].clone(), 4000)) }]);
    }

    #[test]
    fn a_held_connection_missing_from_the_table_or_the_gate_is_reported() {
        let table = [entry(SERVICE, "198.18.0.10:5000", 78, 1, false)];
        let held = [
            HeldConn { fd: 9, local: addr(SERVICE), peer: addr("198.18.0.10:4000"), inode: 77 },
            HeldConn { fd: 10, local: addr(SERVICE), peer: addr("198.18.0.10:5000"), inode: 78 },
            // inode 0 never matches the accept queue's entries
            HeldConn { fd: 11, local: addr(SERVICE), peer: addr("198.18.0.10:4001"), inode: 0 },
            // gone from both: ended before an earlier commit
            HeldConn { fd: 12, local: addr(SERVICE), peer: addr("198.18.0.10:5001"), inode: 79 },
        ];
        let p = plan(&held, &[], &table, &[], gate);
        let why: Vec<_> = p.iter().map(|r| r.from.as_ref().err().copied()).collect();
        assert_eq!(why, vec![Some(NOT_IN_TABLE), Some(NOT_IN_GATE), Some(NOT_IN_TABLE), Some(ENDED_BEFORE)]);
    }

    /// Only passive, established (or half-closed by the client), fd-less
    /// connections on a listener's port
    /// (and address, unless the listener is the wildcard) are in an accept
    /// queue; the gate's record is asked for each.
    #[test]
    fn accept_queue_entries_go_to_the_listener_of_their_port() {
        let listeners = [Listener { fd: 3, local: addr("0.0.0.0:7100") }, Listener { fd: 4, local: addr("198.18.0.100:7200") }];
        let table = [
            entry("198.18.0.100:7100", "198.18.0.10:4000", 0, 1, false), // queued on fd 3
            entry("198.18.0.100:7100", "198.18.0.10:4001", 77, 1, false), // accepted: has an fd
            entry("198.18.0.100:7100", "198.18.0.10:4002", 0, 8, false), // CLOSE_WAIT: queued on fd 3
            entry("198.18.0.100:7100", "198.18.0.10:4008", 0, 6, false), // TIME_WAIT: gone
            entry("198.18.0.100:7100", "198.18.0.10:4003", 0, 1, true), // outgoing
            entry("198.18.0.100:7200", "198.18.0.10:4004", 0, 1, false), // queued on fd 4
            entry("127.0.0.1:7200", "127.0.0.1:4005", 0, 1, false), // other address than fd 4's
            entry("198.18.0.100:7300", "198.18.0.10:4006", 0, 1, false), // no listener
            entry("0.0.0.0:0", "0.0.0.0:0", 0, 10, false), // a listener itself
            entry("198.18.0.100:7100", "198.18.0.10:5000", 0, 1, false), // queued on fd 3, unknown to the gate
        ];
        let p = plan(&[], &listeners, &table, &[], gate);
        let got: Vec<_> = p.iter().map(|r| (r.fd, r.peer.port(), r.accept_queue(), r.from.as_ref().err().copied())).collect();
        assert_eq!(got, vec![(3, 4000, true, None), (3, 4002, true, None), (4, 4004, true, None), (3, 5000, true, Some(NOT_IN_GATE))]);
        assert_eq!(p[0].from, Ok((table[0].clone(), 4000)));
    }

    /// A stream of the gate from `client` to `server`: handshake complete,
    /// never listed by a commit, unless changed.
    fn stream(server: &str, client: &str) -> StreamSnapshot {
        StreamSnapshot {
            client: addr(client),
            server: addr(server),
            client_isn: Some(100),
            server_isn: Some(200),
            client_syn_options: None,
            server_syn_options: None,
            client_base_rel: 0,
            client_recorded_len: 5,
            client_out_of_order_bytes: 0,
            client_fin_rel: None,
            client_ack_rel: Some(0),
            client_window: 500,
            client_timestamps: None,
            server_unacked_from_rel: 0,
            server_unacked_to_rel: 0,
            server_retained_bytes: 0,
            server_released_end_rel: 0,
            server_fin: false,
            server_fin_released: false,
            server_ack_rel: Some(5),
            server_timestamps: None,
            held_packets: 0,
            committed_write_rel: None,
            committed_read_rel: None,
            last_state: None,
            reset: false,
            seen_in_commit: false,
        }
    }

    /// A held fd whose connection both sides had closed before the
    /// checkpoint (its socket in no table) is rebuilt closing, quietly,
    /// from the gate's record; one reset, or whose client's FIN the gate
    /// did not see, is not; none is also taken for one begun since.
    #[test]
    fn a_held_connection_closed_on_both_sides_is_rebuilt_from_the_gate() {
        let listeners = [Listener { fd: 3, local: addr("0.0.0.0:6379") }];
        // the server wrote 30 bytes and its FIN (offset 31), the client
        // acknowledged both, sent 5 bytes and its FIN, which the server
        // acknowledged (6)
        let ended = StreamSnapshot {
            client_fin_rel: Some(5),
            client_ack_rel: Some(31),
            server_released_end_rel: 31,
            server_unacked_from_rel: 31,
            server_unacked_to_rel: 31,
            server_fin: true,
            server_fin_released: true,
            server_ack_rel: Some(6),
            ..stream(SERVICE, "198.18.0.10:4000")
        };
        let streams = [
            ended.clone(),
            StreamSnapshot { reset: true, ..stream_at(&ended, 4001) },
            StreamSnapshot { client_fin_rel: None, ..stream_at(&ended, 4002) },
        ];
        let held: Vec<_> = (0..3u16).map(|i| HeldConn { fd: 9 + i32::from(i), local: addr(SERVICE), peer: SocketAddrV4::new([198, 18, 0, 10].into(), 4000 + i), inode: 70 + u64::from(i) }).collect();
        let p = plan(&held, &listeners, &[], &streams, gate);
        let got: Vec<_> = p.iter().map(|r| (r.fd, r.origin, r.from.as_ref().err().copied())).collect();
        assert_eq!(got, vec![(9, Origin::Held, None), (10, Origin::Held, Some(NOT_IN_TABLE)), (11, Origin::Held, Some(NOT_IN_TABLE))]);
        let (t, _) = p[0].from.as_ref().unwrap();
        let data = rrc_gate::StreamData { snapshot: ended, client_unread: b"QUIT\n".to_vec(), server_unacked: vec![] };
        let spec = rrc_repair::spec_for_replay(&data, t).unwrap();
        assert_eq!((spec.send_seq, spec.recv_seq), (201 + 30, 101 + 5), "before each FIN");
        assert!(spec.write_queue.is_empty() && spec.recv_queue.is_empty());
        assert!(spec.fin_sent && spec.fin_received && spec.quiet);
    }

    fn stream_at(s: &StreamSnapshot, client_port: u16) -> StreamSnapshot {
        StreamSnapshot { client: SocketAddrV4::new(*s.client.ip(), client_port), ..s.clone() }
    }

    /// A connection no checkpoint listed, whose client completed the
    /// handshake on a listener's port, goes to that listener at 0/0; one
    /// a commit listed (it ended before the checkpoint), one in the table
    /// (rebuilt from there), one not yet established, one reset, one on
    /// no listener's port, are not.
    #[test]
    fn connections_begun_after_the_checkpoint_go_to_their_listener_at_offsets_zero() {
        let listeners = [Listener { fd: 3, local: addr("0.0.0.0:7100") }];
        // 4007: a request socket at the checkpoint (TCP_NEW_SYN_RECV), its
        // handshake completed after it: like one begun since
        let table = [entry("198.18.0.100:7100", "198.18.0.10:4001", 77, 1, false), entry("198.18.0.100:7100", "198.18.0.10:4007", 0, 12, false)];
        let held = [HeldConn { fd: 9, local: addr("198.18.0.100:7100"), peer: addr("198.18.0.10:4001"), inode: 77 }];
        let streams = [
            stream("198.18.0.100:7100", "198.18.0.10:4000"),
            stream("198.18.0.100:7100", "198.18.0.10:4007"),
            StreamSnapshot { seen_in_commit: true, ..stream("198.18.0.100:7100", "198.18.0.10:4002") },
            stream("198.18.0.100:7100", "198.18.0.10:4001"), // in the table
            StreamSnapshot { client_ack_rel: None, ..stream("198.18.0.100:7100", "198.18.0.10:4003") },
            StreamSnapshot { reset: true, ..stream("198.18.0.100:7100", "198.18.0.10:4004") },
            StreamSnapshot { server_isn: None, ..stream("198.18.0.100:7100", "198.18.0.10:4005") },
            stream("198.18.0.100:7300", "198.18.0.10:4006"), // no listener
            stream("198.18.0.100:7100", "198.18.0.10:5000"), // unknown to the gate's record
        ];
        let p = plan(&held, &listeners, &table, &streams, gate);
        let got: Vec<_> = p.iter().map(|r| (r.fd, r.peer.port(), r.origin, r.from.as_ref().err().copied())).collect();
        assert_eq!(
            got,
            vec![(9, 4001, Origin::Held, None), (3, 4000, Origin::AfterCheckpoint, None), (3, 4007, Origin::AfterCheckpoint, None), (3, 5000, Origin::AfterCheckpoint, Some(NOT_IN_GATE))]
        );
        let (t, _) = p[1].from.as_ref().unwrap();
        assert_eq!((t.state, t.write_seq_rel, t.read_seq_rel, t.inode), (TCP_ESTABLISHED, Some(0), Some(0), 0));
        assert_eq!((socket_v4(t.local), socket_v4(t.remote)), (Some(addr("198.18.0.100:7100")), Some(addr("198.18.0.10:4000"))));
        assert!(p[1].accept_queue() && !p[0].accept_queue());
    }

    /// The table entry made for one rebuilds it with every client byte in
    /// its receive queue and nothing written (what a repair derives).
    #[test]
    fn a_connection_begun_after_the_checkpoint_is_rebuilt_unread_and_unwritten() {
        let s = stream("198.18.0.100:7100", "198.18.0.10:4000");
        let data = rrc_gate::StreamData { snapshot: s.clone(), client_unread: b"PING\n".to_vec(), server_unacked: vec![] };
        let t = unread_unwritten(s.server, s.client);
        let spec = rrc_repair::spec_for_replay(&data, &t).unwrap();
        assert_eq!((spec.recv_seq, spec.recv_queue.as_slice(), spec.send_seq, spec.write_queue.len()), (101, &b"PING\n"[..], 201, 0));
        // without a replay, nothing may have been released yet
        assert!(rrc_repair::spec_from_gate(&data, &t).is_ok());
        let released = rrc_gate::StreamData { snapshot: StreamSnapshot { server_released_end_rel: 6, client_ack_rel: Some(6), ..s }, ..data };
        assert!(rrc_repair::spec_from_gate(&released, &t).is_err());
        assert!(rrc_repair::spec_for_replay(&released, &t).is_ok());
    }

    #[test]
    fn a_write_end_is_compared_with_the_release_in_sequence_order() {
        use std::cmp::Ordering::*;
        let s = StreamSnapshot { server_isn: Some(u32::MAX - 10), server_released_end_rel: 20, ..stream("198.18.0.100:7100", "198.18.0.10:4000") };
        let released = (u32::MAX - 10).wrapping_add(21); // wrapped: 10
        assert_eq!(released, 10);
        assert_eq!(past_release(released, &s), Some(Equal));
        assert_eq!(past_release(released + 5, &s), Some(Greater));
        assert_eq!(past_release(u32::MAX - 3, &s), Some(Less), "before the wrap is less");
        assert_eq!(past_release(0, &StreamSnapshot { server_isn: None, ..s }), None);
    }

    #[test]
    fn released_offsets_are_unwrapped_near_the_checkpoint_s_count() {
        let (svc, c1, c2, c3) = ("198.18.0.100:7100", "198.18.0.10:4000", "198.18.0.10:4001", "198.18.0.10:4002");
        let streams = [
            // 5 GiB written at the checkpoint, the released end wrapped past it
            StreamSnapshot { server_released_end_rel: 0x4000_0100, ..stream(svc, c1) },
            // opened after the checkpoint: from 0
            StreamSnapshot { server_released_end_rel: 900, ..stream(svc, c2) },
            // nothing released: not listed
            StreamSnapshot { server_released_end_rel: 0, ..stream(svc, c3) },
            // 30 bytes and the FIN released (on the log): the FIN is no byte
            StreamSnapshot { server_released_end_rel: 31, server_fin: true, server_fin_released: true, ..stream(svc, "198.18.0.10:4004") },
            // no handshake seen: no offsets at all
            StreamSnapshot { server_isn: None, server_released_end_rel: 5, ..stream(svc, "198.18.0.10:4003") },
        ];
        let mut t = entry(svc, c1, 7, 1, false);
        t.write_seq_rel = Some(5 << 30);
        let r = released(&streams, &[t]);
        let conn = |c: &str| OutputConn { local: addr(svc), peer: addr(c) };
        assert_eq!(r.conns, vec![ReleasedConn { conn: conn(c1), released: (5u64 << 30) + 0x100, fin: false }, ReleasedConn { conn: conn(c2), released: 900, fin: false }, ReleasedConn { conn: conn("198.18.0.10:4004"), released: 30, fin: true }]);
    }

    #[test]
    fn a_diverged_replay_s_connections_past_the_release_are_reset() {
        let (svc, c1, c2, c3) = ("198.18.0.100:7100", "198.18.0.10:4000", "198.18.0.10:4001", "198.18.0.10:4002");
        let streams = [StreamSnapshot { server_released_end_rel: 50, ..stream(svc, c1) }, StreamSnapshot { server_released_end_rel: 50, ..stream(svc, c2) }];
        let key = |c: &str| (addr(c), addr(svc));
        // server ISN 200: the release ends at 251
        let w = |written, sent| rrc_repair::Silenced { written, sent };
        let written = [(key(c1), w(251, 251)), (key(c2), w(260, 255)), (key(c3), w(900, 900))];
        let r = written_past_release(&written, &streams);
        assert_eq!(r.iter().map(|m| m.conn).collect::<Vec<_>>(), vec![key(c2)], "at the release: kept; no record: not judged here");
        assert!(r[0].why.contains("had not released"));
        assert_eq!(r[0].sent_to, 255, "the reset stands where the socket had sent up to, not where it had written");
    }

    #[test]
    fn ipv4_mapped_addresses_count_as_ipv4() {
        let mapped: SocketAddr = "[::ffff:198.18.0.100]:6379".parse().unwrap();
        assert_eq!(socket_v4(mapped), Some(addr(SERVICE)));
        assert_eq!(socket_v4("[::1]:6379".parse().unwrap()), None);
    }
}
