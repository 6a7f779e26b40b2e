//! A SYN the primary never answered, handed to the restored service
//! (`resend_syn`, docs/tcp-repair.md "Handshakes"), on the real kernel
//! (needs root; fails, never skips, without it).
//!
//! A client and a server namespace on one veth. The server's INPUT drops
//! the client's SYN (the primary died with it); a packet socket on the
//! server's side keeps it as it arrived, as the gate does. The drop goes,
//! the SYN is sent to the server's listener from a raw socket, and the
//! client's connect() must complete long before its own retransmission
//! (1 s after the first SYN), over a connection that carries bytes.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use rrc_gate::packet::{self, Transport};
use rrc_repair::resend_syn;

mod common;
use common::{in_netns, run, Pair, SERVER};

/// A packet socket of the calling thread's namespace that sees every IPv4
/// packet (without link header).
fn capture() -> OwnedFd {
    let proto = (libc::ETH_P_IP as u16).to_be() as i32;
    // SAFETY: plain syscall; the descriptor is fresh and ours.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, proto) };
    assert!(fd >= 0, "AF_PACKET socket: {}", std::io::Error::last_os_error());
    // SAFETY: fd was just returned by socket().
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let tv = libc::timeval { tv_sec: 3, tv_usec: 0 };
    // SAFETY: tv is a valid timeval for the call.
    let r = unsafe { libc::setsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVTIMEO, &tv as *const _ as *const libc::c_void, std::mem::size_of_val(&tv) as u32) };
    assert_eq!(r, 0);
    fd
}

/// The next client SYN to SERVER the capture sees, and when.
fn next_syn(fd: &OwnedFd) -> (Vec<u8>, Instant) {
    let mut buf = vec![0u8; 65536];
    loop {
        // SAFETY: buf is writable for its length.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0) };
        assert!(n > 0, "no SYN captured: {}", std::io::Error::last_os_error());
        let bytes = &buf[..n as usize];
        let Ok(p) = packet::parse(bytes) else { continue };
        if let Transport::Tcp(seg) = &p.transport {
            if p.dst == *SERVER.ip() && seg.dst_port == SERVER.port() && seg.syn() && !seg.ack_flag() {
                return (bytes.to_vec(), Instant::now());
            }
        }
    }
}

#[test]
fn a_syn_sent_again_completes_the_clients_handshake_at_once() {
    assert_eq!(unsafe { libc::geteuid() }, 0, "needs root (network namespaces)");
    let pair = Pair::build("syn");
    let listener = in_netns(&pair.server, || std::net::TcpListener::bind(SERVER).expect("listen"));
    let lost = ["ip", "netns", "exec", &pair.server, "iptables", "-A", "INPUT", "-p", "tcp", "--syn", "-j", "DROP"];
    run("losing the client's SYN", &lost);
    let cap = in_netns(&pair.server, capture);

    let client = std::thread::spawn({
        let ns = pair.client.clone();
        move || in_netns(&ns, || (TcpStream::connect_timeout(&SERVER.into(), Duration::from_secs(5)), Instant::now()))
    });
    let (syn, seen) = next_syn(&cap);
    let mut found = lost;
    found[5] = "-D";
    run("the SYN's loss over", &found);
    let sent = in_netns(&pair.server, move || resend_syn(&syn).expect("resend_syn"));
    assert_eq!(sent.1, SERVER);

    let (conn, connected) = client.join().expect("client thread");
    let mut conn = conn.expect("connect");
    let took = connected - seen;
    eprintln!("connected {took:?} after the SYN was first seen");
    assert!(took < Duration::from_millis(500), "the handshake took {took:?}: the client's own retransmission, not the SYN sent again");
    let (mut served, peer) = listener.accept().expect("accept");
    assert_eq!(peer, conn.local_addr().unwrap());
    conn.write_all(b"ping").unwrap();
    let mut got = [0u8; 4];
    served.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"ping");
}
