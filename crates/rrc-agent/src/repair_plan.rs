//! Which client connections a failover rebuilds, and from what (issue 14
//! §7: the failover's decisions apart from its I/O). failover.rs gathers
//! the inputs (the committed image's sockets and TCP table, the gate's
//! record of each connection), asks [`plan`], and carries the plan out
//! with TCP_REPAIR; the unit tests below check the matching without a lab.
//!
//! Two kinds of connections are rebuilt (docs/failover.md):
//! - those the application held as an fd at the checkpoint (`InetConn`
//!   sockets of the image), found in the TCP table by inode;
//! - those the kernel had completed but the application had not accepted:
//!   in the TCP table with inode 0, ESTABLISHED, opened by the client, on
//!   the port of one of the image's listeners (specific address or
//!   wildcard); they are handed to the next accept() of that listener.
//!
//! Each needs the gate's record of its bytes (client bytes not yet read,
//! server bytes not yet acknowledged); without it, or without its TCP
//! table entry, the connection is not rebuilt and the reason is reported.

use std::net::{SocketAddr, SocketAddrV4};

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

/// One connection of the plan. `fd` is the connection's own fd, or, for
/// one not yet accepted, its listener's.
#[derive(Debug, PartialEq)]
pub struct Repair<'t, D> {
    pub fd: i32,
    pub peer: SocketAddrV4,
    pub accept_queue: bool,
    /// What to rebuild it from, or why it cannot be.
    pub from: Result<(&'t TcpStream, D), &'static str>,
}

const NOT_IN_TABLE: &str = "not in the checkpoint's TCP table";
const NOT_IN_GATE: &str = "the gate has no record of this connection";

/// Every connection to rebuild, held ones first, in the image's order;
/// the accept queue's in the TCP table's order (the kernel's hash order:
/// the primary's queue order is not recorded; clients do not see the
/// order in which they are accepted).
/// `gate(peer, local)` is the gate's record of a connection.
pub fn plan<'t, D>(held: &[HeldConn], listeners: &[Listener], table: &'t [TcpStream], gate: impl Fn(SocketAddrV4, SocketAddrV4) -> Option<D>) -> Vec<Repair<'t, D>> {
    let mut out = Vec::new();
    for c in held {
        let entry = table.iter().find(|t| t.inode == c.inode && c.inode != 0);
        let from = match (entry, gate(c.peer, c.local)) {
            (None, _) => Err(NOT_IN_TABLE),
            (_, None) => Err(NOT_IN_GATE),
            (Some(t), Some(d)) => Ok((t, d)),
        };
        out.push(Repair { fd: c.fd, peer: c.peer, accept_queue: false, from });
    }
    for t in table.iter().filter(|t| t.inode == 0 && t.state == TCP_ESTABLISHED && !t.is_active_open()) {
        let (Some(local), Some(peer)) = (socket_v4(t.local), socket_v4(t.remote)) else { continue };
        let Some(l) = listeners.iter().find(|l| l.local.port() == local.port() && (l.local.ip().is_unspecified() || l.local.ip() == local.ip())) else {
            continue;
        };
        let from = gate(peer, local).map(|d| (t, d)).ok_or(NOT_IN_GATE);
        out.push(Repair { fd: l.fd, peer, accept_queue: true, from });
    }
    out
}

/// The kernel's TCP_ESTABLISHED.
const TCP_ESTABLISHED: u8 = 1;

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
        let p = plan(&held, &[], &table, gate);
        assert_eq!(p, vec![Repair { fd: 9, peer: addr("198.18.0.10:4000"), accept_queue: false, from: Ok((&table[0], 4000)) }]);
    }

    #[test]
    fn a_held_connection_missing_from_the_table_or_the_gate_is_reported() {
        let table = [entry(SERVICE, "198.18.0.10:5000", 78, 1, false)];
        let held = [
            HeldConn { fd: 9, local: addr(SERVICE), peer: addr("198.18.0.10:4000"), inode: 77 },
            HeldConn { fd: 10, local: addr(SERVICE), peer: addr("198.18.0.10:5000"), inode: 78 },
            // inode 0 never matches the accept queue's entries
            HeldConn { fd: 11, local: addr(SERVICE), peer: addr("198.18.0.10:4001"), inode: 0 },
        ];
        let p = plan(&held, &[], &table, gate);
        let why: Vec<_> = p.iter().map(|r| r.from.as_ref().err().copied()).collect();
        assert_eq!(why, vec![Some(NOT_IN_TABLE), Some(NOT_IN_GATE), Some(NOT_IN_TABLE)]);
    }

    /// Only passive, established, fd-less connections on a listener's port
    /// (and address, unless the listener is the wildcard) are in an accept
    /// queue; the gate's record is asked for each.
    #[test]
    fn accept_queue_entries_go_to_the_listener_of_their_port() {
        let listeners = [Listener { fd: 3, local: addr("0.0.0.0:7100") }, Listener { fd: 4, local: addr("198.18.0.100:7200") }];
        let table = [
            entry("198.18.0.100:7100", "198.18.0.10:4000", 0, 1, false), // queued on fd 3
            entry("198.18.0.100:7100", "198.18.0.10:4001", 77, 1, false), // accepted: has an fd
            entry("198.18.0.100:7100", "198.18.0.10:4002", 0, 8, false), // CLOSE_WAIT
            entry("198.18.0.100:7100", "198.18.0.10:4003", 0, 1, true), // outgoing
            entry("198.18.0.100:7200", "198.18.0.10:4004", 0, 1, false), // queued on fd 4
            entry("127.0.0.1:7200", "127.0.0.1:4005", 0, 1, false), // other address than fd 4's
            entry("198.18.0.100:7300", "198.18.0.10:4006", 0, 1, false), // no listener
            entry("0.0.0.0:0", "0.0.0.0:0", 0, 10, false), // a listener itself
            entry("198.18.0.100:7100", "198.18.0.10:5000", 0, 1, false), // queued on fd 3, unknown to the gate
        ];
        let p = plan(&[], &listeners, &table, gate);
        let got: Vec<_> = p.iter().map(|r| (r.fd, r.peer.port(), r.accept_queue, r.from.as_ref().err().copied())).collect();
        assert_eq!(got, vec![(3, 4000, true, None), (4, 4004, true, None), (3, 5000, true, Some(NOT_IN_GATE))]);
        assert_eq!(p[0].from, Ok((&table[0], 4000)));
    }

    #[test]
    fn ipv4_mapped_addresses_count_as_ipv4() {
        let mapped: SocketAddr = "[::ffff:198.18.0.100]:6379".parse().unwrap();
        assert_eq!(socket_v4(mapped), Some(addr(SERVICE)));
        assert_eq!(socket_v4("[::1]:6379".parse().unwrap()), None);
    }
}
