//! FINs across a repair, on the real kernel (needs root; fails, never
//! skips, without it). docs/tcp-repair.md "FINs".
//!
//! Two network namespaces, client and server, joined by a veth. A real
//! connection is half-closed by one side; then the server's socket dies
//! the way a primary's does for its clients (put into repair mode and
//! closed: nothing goes out) and `repair()` rebuilds it at the same
//! sequence numbers, with the FIN the kernel had sent or taken:
//!
//! * the server had shut down writing (FIN_WAIT2, lighttpd after a
//!   response with `Connection: close`): the repaired socket sends its FIN
//!   again, the client acknowledges it, and the client's later bytes and
//!   close reach the server as EOF, with no reset on either side;
//! * the client had shut down writing with bytes the server had not read
//!   (CLOSE_WAIT): the repaired socket returns those bytes, then EOF
//!   (with the client's output cut: its kernel would send the FIN again);
//!   the server's reply and close reach the client;
//! * both had (the server's socket CLOSE, its fd still open: lighttpd
//!   waiting for the EOF it has not read yet): the repaired socket gives
//!   EOF and EPIPE and sends the client, in TIME_WAIT, no packet (until
//!   its FIN's retransmission timeout).
//!
//! The spec is made here from the dead socket's own sequence numbers;
//! deriving it from the gate's record and the checkpoint's table is
//! unit-tested in src/spec.rs. Names follow tests/conftest.py
//! (`rrc-t-<pid hex>-...`), so that pytest's sweep removes leftovers.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddrV4, TcpStream};
use std::os::fd::OwnedFd;
use std::process::Command;
use std::time::Duration;

use rrc_repair::{repair, silence, sys, RepairError, RepairSpec, DEFAULT_RCV_WND};

mod common;
use common::{in_netns, run, tcp_info, wait_for, Pair, CLIENT_IP, SERVER};

const TCP_FIN_WAIT2: u8 = 5;
const TCP_CLOSE: u8 = 7;
const TCP_CLOSE_WAIT: u8 = 8;

/// The server's socket dies without a packet (as its host's would, for
/// the client): silenced, then closed. Returns its write_seq and rcv_nxt.
fn kill_silently(server: TcpStream) -> (u32, u32) {
    let fd = OwnedFd::from(server);
    let written = silence(&fd).expect("silence").written;
    sys::setsockopt_int(&fd, libc::SOL_TCP, sys::TCP_REPAIR_QUEUE, sys::TCP_RECV_QUEUE).unwrap();
    let rcv_nxt = sys::getsockopt_int(&fd, libc::SOL_TCP, sys::TCP_QUEUE_SEQ).unwrap() as u32;
    drop(fd);
    (written, rcv_nxt)
}

/// `repair(spec)` in the server's namespace, where the socket it replaces
/// was just closed: its 4-tuple can stay hashed a moment after the close
/// (EADDRNOTAVAIL at the repair's connect, seen once in CI), which a
/// restored namespace never has. Tried again for up to a second.
fn repair_once_freed(spec: &RepairSpec) -> OwnedFd {
    let deadline = std::time::Instant::now() + Duration::from_secs(1);
    loop {
        match repair(spec) {
            Ok(fd) => return fd,
            Err(RepairError::Sys { source, .. })
                if source.raw_os_error() == Some(libc::EADDRNOTAVAIL) && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) => panic!("repair: {e}"),
        }
    }
}

fn spec(client_port: u16, send_seq: u32, recv_seq: u32, recv_queue: &[u8]) -> RepairSpec {
    RepairSpec {
        local: SERVER,
        remote: SocketAddrV4::new(CLIENT_IP, client_port),
        send_seq,
        write_queue: Vec::new(),
        recv_seq,
        recv_queue: recv_queue.to_vec(),
        mss: 1460,
        snd_wscale: None,
        rcv_wscale: None,
        sack: true,
        timestamps: None,
        snd_wnd: 65535,
        rcv_wnd: DEFAULT_RCV_WND,
        fin_sent: false,
        fin_received: false,
        quiet: false,
    }
}

fn state(s: &TcpStream) -> u8 {
    tcp_info(s).tcpi_state
}

/// Waits until `s`'s kernel state is `want`.
fn wait_for_state(s: &TcpStream, want: u8, what: &str, timeout: Duration) {
    wait_for(what, timeout, || {
        let now = state(s);
        (now == want).then_some(()).ok_or(format!("state {now}"))
    });
}

fn read_to_end(s: &mut TcpStream, who: &str) -> Vec<u8> {
    let mut v = Vec::new();
    match s.read_to_end(&mut v) {
        Ok(_) => v,
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            panic!("{who}: no EOF after {v:?} within the read timeout")
        }
        Err(e) => panic!("{who}: {e} after {v:?}"),
    }
}

fn no_error(s: &TcpStream, who: &str) {
    assert!(s.take_error().unwrap().is_none(), "{who}: socket error {:?}", s.take_error());
}

#[test]
fn a_server_fin_is_sent_again_and_the_client_closes_later() {
    assert_eq!(unsafe { libc::geteuid() }, 0, "needs root (network namespaces)");
    let pair = Pair::build("finsrv");
    let (mut client, mut server) = pair.connect();
    client.write_all(b"GET").unwrap();
    let mut req = [0u8; 3];
    server.read_exact(&mut req).unwrap();
    server.write_all(b"REPLY").unwrap();
    server.shutdown(Shutdown::Write).unwrap();
    let mut reply = [0u8; 5];
    client.read_exact(&mut reply).unwrap();
    assert_eq!(&reply, b"REPLY");
    assert_eq!(client.read(&mut reply).unwrap(), 0, "client: EOF after the reply");
    wait_for_state(&server, TCP_FIN_WAIT2, "the server's FIN acknowledged", Duration::from_secs(2));

    let (written, rcv_nxt) = kill_silently(server);
    // the table counts the FIN: the socket stands before it and sends it
    let port = client.local_addr().unwrap().port();
    let spec = RepairSpec { fin_sent: true, ..spec(port, written.wrapping_sub(1), rcv_nxt, b"") };
    let mut repaired = TcpStream::from(in_netns(&pair.server, move || repair_once_freed(&spec)));
    repaired.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    wait_for_state(&repaired, TCP_FIN_WAIT2, "the FIN sent again acknowledged by the client", Duration::from_millis(500));

    client.write_all(b"MORE").unwrap();
    client.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_to_end(&mut repaired, "repaired server"), b"MORE");
    assert_eq!(client.read(&mut reply).unwrap(), 0, "client: still EOF, no reset");
    no_error(&client, "client");
    no_error(&repaired, "repaired server");
    assert_eq!(repaired.write(b"x").map_err(|e| e.kind()), Err(ErrorKind::BrokenPipe), "writing after the FIN");
}

#[test]
fn a_client_fin_ends_the_repaired_receive_queue() {
    assert_eq!(unsafe { libc::geteuid() }, 0, "needs root (network namespaces)");
    let pair = Pair::build("fincli");
    let (mut client, server) = pair.connect();
    client.write_all(b"ABCDE").unwrap();
    client.shutdown(Shutdown::Write).unwrap();
    wait_for_state(&server, TCP_CLOSE_WAIT, "the client's FIN taken", Duration::from_secs(2));

    // The client's kernel answers the repaired socket's window probe by
    // sending its FIN again (measured: CLOSE_WAIT within 300 ms); its
    // output is cut here so that the EOF the server reads can come only
    // from the repair.
    let drop_client_output = ["ip", "netns", "exec", &pair.client, "iptables", "-A", "OUTPUT", "-j", "DROP"];
    run("cutting the client's output", &drop_client_output);
    let (written, rcv_nxt) = kill_silently(server);
    // rcv_nxt is past the FIN; the five unread bytes stand before it
    let port = client.local_addr().unwrap().port();
    let spec = RepairSpec { fin_received: true, ..spec(port, written, rcv_nxt.wrapping_sub(6), b"ABCDE") };
    let mut repaired = TcpStream::from(in_netns(&pair.server, move || repair_once_freed(&spec)));
    repaired.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    assert_eq!(read_to_end(&mut repaired, "repaired server"), b"ABCDE");
    let mut allow = drop_client_output;
    allow[5] = "-D";
    run("restoring the client's output", &allow);

    repaired.write_all(b"BYE").unwrap();
    drop(repaired);
    assert_eq!(read_to_end(&mut client, "client"), b"BYE");
    no_error(&client, "client");
}

/// Packets the client's namespace has taken from the server since the
/// counting rule went in.
fn packets_to_client(pair: &Pair) -> u64 {
    let out = Command::new("ip")
        .args(["netns", "exec", &pair.client, "iptables", "-L", "INPUT", "-v", "-x", "-n"])
        .output()
        .expect("iptables -L");
    let text = String::from_utf8_lossy(&out.stdout);
    let rule = text.lines().find(|l| l.contains(&SERVER.ip().to_string())).unwrap_or_else(|| panic!("no counting rule in {text}"));
    rule.split_whitespace().next().unwrap().parse().expect("packet count")
}

#[test]
fn a_connection_both_sides_closed_is_rebuilt_without_a_packet_at_once() {
    assert_eq!(unsafe { libc::geteuid() }, 0, "needs root (network namespaces)");
    let pair = Pair::build("finboth");
    let (mut client, mut server) = pair.connect();
    client.write_all(b"QUIT").unwrap();
    client.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_to_end(&mut server, "server"), b"QUIT");
    server.write_all(b"BYE").unwrap();
    server.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_to_end(&mut client, "client"), b"BYE");
    // the client went first: the server's socket ends CLOSE, with no
    // TIME_WAIT in its namespace (as in a restored one)
    wait_for_state(&server, TCP_CLOSE, "the server's FIN acknowledged", Duration::from_secs(2));
    let server_ip = SERVER.ip().to_string();
    run("counting the client's input", &["ip", "netns", "exec", &pair.client, "iptables", "-A", "INPUT", "-s", &server_ip, "-j", "ACCEPT"]);

    let (written, rcv_nxt) = kill_silently(server);
    let port = client.local_addr().unwrap().port();
    let spec = RepairSpec {
        fin_sent: true,
        fin_received: true,
        quiet: true,
        ..spec(port, written.wrapping_sub(1), rcv_nxt.wrapping_sub(1), b"")
    };
    let mut repaired = TcpStream::from(in_netns(&pair.server, move || repair_once_freed(&spec)));
    repaired.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    assert_eq!(read_to_end(&mut repaired, "repaired server"), b"");
    assert_eq!(repaired.write(b"x").map_err(|e| e.kind()), Err(ErrorKind::BrokenPipe), "writing after the FIN");
    no_error(&repaired, "repaired server");
    // (a window probe or a FIN would have reached it at once over the
    // veth; the FIN counted as in flight goes out again at the first
    // retransmission timeout, >= 200 ms, by when the application has
    // read its EOF)
    assert_eq!(packets_to_client(&pair), 0, "the repair sent the client, done with the connection, a packet");
}
