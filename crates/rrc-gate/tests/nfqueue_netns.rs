//! The gate on a real NFQUEUE (needs root; fails, never skips, without it).
//!
//! Three network namespaces stand in for hosts: client — router — server.
//! The router forwards, and its FORWARD chain queues every packet to or
//! from the service IP to the gate. A std TcpListener in the server
//! namespace answers a client in the client namespace; the test checks that
//! no reply byte reaches the client before a commit covers it, that a commit
//! releases exactly the covered bytes, complete and in order, that the
//! arrival bound releases what arrived before it and nothing after, and
//! that the server's FIN waits for a commit too. The same test runs with
//! the service's output taken by the AF_XDP output path (an XDP program on
//! the router's link from the server, released packets sent on through a
//! raw socket) instead of NFQUEUE.
//!
//! Names follow tests/conftest.py (`rrc-t-<pid hex>-...`), so that pytest's
//! sweep also removes what a crashed run of this test left behind.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::time::{Duration, Instant};

use rrc_gate::observe::OBSERVED_MARK;
use rrc_gate::{Commit, Gate, GateConfig, InputPath, OutputPath, ServerStream};

const SVC: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 100);
const PORT: u16 = 8080;
const QUEUE: u16 = 7;
/// How long "nothing arrives" is watched for.
const QUIET: Duration = Duration::from_millis(300);

fn run(what: &str, args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap_or_else(|e| panic!("{what}: cannot run {}: {e}", args[0]));
    assert!(out.status.success(), "{what}: `{}` failed ({}): {}", args.join(" "), out.status, String::from_utf8_lossy(&out.stderr).trim());
}

/// The three namespaces; deleting them removes the veths, addresses and
/// iptables rules inside them, on success and on failure alike.
struct Topology {
    client: String,
    router: String,
    server: String,
}

impl Topology {
    /// `queues`: receive and transmit queues of the server's link (the
    /// AF_XDP path binds a socket per receive queue).
    fn build(name: &str, queues: u32) -> Topology {
        let tag = format!("rrc-t-{:x}-{name}", std::process::id());
        let t = Topology { client: format!("{tag}-cli"), router: format!("{tag}-rtr"), server: format!("{tag}-srv") };
        for ns in [&t.client, &t.router, &t.server] {
            // a leftover of an earlier run with the same pid
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
            run("creating a netns", &["ip", "netns", "add", ns]);
        }
        let (c, r, s) = (t.client.as_str(), t.router.as_str(), t.server.as_str());
        // veths created inside the namespaces: no name clash with anything
        run("veth client-router", &["ip", "-n", r, "link", "add", "rc", "type", "veth", "peer", "name", "c0", "netns", c]);
        let q = queues.to_string();
        #[rustfmt::skip]
        run("veth server-router", &["ip", "-n", r, "link", "add", "rs", "numrxqueues", &q, "numtxqueues", &q, "type", "veth",
                                    "peer", "name", "s0", "numrxqueues", &q, "numtxqueues", &q, "netns", s]);
        for (ns, dev, addr) in [(c, "c0", "10.77.1.2/24"), (r, "rc", "10.77.1.1/24"), (r, "rs", "10.77.2.1/24"), (s, "s0", "10.77.2.2/24")] {
            run("address", &["ip", "-n", ns, "addr", "add", addr, "dev", dev]);
            run("link up", &["ip", "-n", ns, "link", "set", dev, "up"]);
        }
        for ns in [c, r, s] {
            run("lo up", &["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        run("service address", &["ip", "-n", s, "addr", "add", &format!("{SVC}/32"), "dev", "lo"]);
        run("client route", &["ip", "-n", c, "route", "add", "default", "via", "10.77.1.1"]);
        run("server route", &["ip", "-n", s, "route", "add", "default", "via", "10.77.2.1"]);
        run("router route to the service", &["ip", "-n", r, "route", "add", &format!("{SVC}/32"), "via", "10.77.2.2"]);
        run("forwarding", &["ip", "netns", "exec", r, "sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        let q = QUEUE.to_string();
        // what the observed input path recorded goes by the queue
        let mark = format!("{OBSERVED_MARK:#x}/{OBSERVED_MARK:#x}");
        #[rustfmt::skip]
        run("mark rule", &["ip", "netns", "exec", r, "iptables", "-A", "FORWARD", "-d", &SVC.to_string(), "-m", "mark", "--mark", &mark, "-j", "ACCEPT"]);
        for dir in ["-d", "-s"] {
            run(
                "NFQUEUE rule",
                &["ip", "netns", "exec", r, "iptables", "-A", "FORWARD", dir, &SVC.to_string(), "-j", "NFQUEUE", "--queue-num", &q],
            );
        }
        t
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for ns in [&self.client, &self.router, &self.server] {
            match Command::new("ip").args(["netns", "del", ns]).output() {
                Ok(o) if o.status.success() => {}
                Ok(o) => eprintln!("cleanup: ip netns del {ns}: {}", String::from_utf8_lossy(&o.stderr).trim()),
                Err(e) => eprintln!("cleanup: ip netns del {ns}: {e}"),
            }
        }
    }
}

/// Runs `f` on a thread that joined network namespace `ns` (sockets it
/// creates stay in that namespace wherever they are used later).
fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("opening {path}: {e}"));
        // SAFETY: setns on this thread only.
        let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns({path}): {}", std::io::Error::last_os_error());
        f()
    })
    .join()
    .expect("netns thread panicked")
}

/// Asserts that nothing is readable on `s` for QUIET.
fn assert_quiet(s: &mut TcpStream, what: &str) {
    s.set_read_timeout(Some(QUIET)).expect("set_read_timeout");
    let mut b = [0u8; 1];
    match s.read(&mut b) {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
        Ok(0) => panic!("{what}: the client saw EOF before a commit covered the FIN"),
        Ok(n) => panic!("{what}: the client received {n} byte(s) ({:?}) before a commit covered them", &b[..n]),
        Err(e) => panic!("{what}: read failed: {e}"),
    }
}

/// Reads exactly `n` bytes within 5 s.
fn read_n(s: &mut TcpStream, n: usize, what: &str) -> Vec<u8> {
    s.set_read_timeout(Some(Duration::from_secs(5))).expect("set_read_timeout");
    let mut v = vec![0u8; n];
    s.read_exact(&mut v).unwrap_or_else(|e| panic!("{what}: reading {n} bytes: {e}"));
    v
}

/// Waits until the gate holds at least `n` packets.
fn wait_held(gate: &Gate, n: u64, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while gate.stats().held_packets < n {
        assert!(Instant::now() < deadline, "{what}: the gate never held {n} packet(s): {:?}", gate.stats());
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
fn gate_holds_server_output_until_commit() {
    holds_until_commit("gate", false, false);
}

#[test]
fn gate_on_the_xdp_output_path_holds_server_output_until_commit() {
    holds_until_commit("gxdp", true, false);
}

/// The agent's default: output by AF_XDP, input observed by tcx.
#[test]
fn gate_on_the_observed_input_and_xdp_output_paths_holds_server_output_until_commit() {
    holds_until_commit("gobs", true, true);
}

fn holds_until_commit(name: &str, xdp: bool, observed: bool) {
    // SAFETY: plain getter.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test needs root (network namespaces, iptables, NFQUEUE, XDP): run `cargo test -p rrc-gate` as root (`make test` does)"
    );
    // two queues on the AF_XDP path: a socket each
    let topo = Topology::build(name, if xdp { 2 } else { 1 });
    let gate = in_netns(&topo.router, move || {
        let mut config = GateConfig::new(QUEUE, SVC);
        // SAFETY: NUL-terminated names.
        let (ifindex, to_clients) = unsafe { (libc::if_nametoindex(c"rs".as_ptr()), libc::if_nametoindex(c"rc".as_ptr())) };
        assert!(ifindex != 0 && to_clients != 0, "the router's links");
        if xdp {
            config.output = OutputPath::Xdp { ifindex, to_clients };
        }
        if observed {
            config.input = InputPath::Observed { ifindex: to_clients };
        }
        Gate::open(config).expect("starting the gate in the router namespace")
    });
    assert_eq!(gate.output_path(), if xdp { "xdp" } else { "nfqueue" });
    assert_eq!(gate.input_path(), if observed { "observed" } else { "nfqueue" });

    let listener = in_netns(&topo.server, || TcpListener::bind(SocketAddrV4::new(SVC, PORT)).expect("binding the service"));
    let mut client =
        in_netns(&topo.client, || TcpStream::connect_timeout(&SocketAddrV4::new(SVC, PORT).into(), Duration::from_secs(5)).expect("connecting"));
    let (mut server, peer) = listener.accept().expect("accept");
    server.set_nodelay(true).expect("TCP_NODELAY"); // each write goes out now (held segments are never ACKed)
    let client_addr = match peer {
        std::net::SocketAddr::V4(a) => a,
        other => panic!("unexpected peer {other}"),
    };
    let server_addr = SocketAddrV4::new(SVC, PORT);

    // Client → server: passes at once, and is recorded.
    client.write_all(b"request-1").expect("client write");
    assert_eq!(read_n(&mut server, 9, "server reading the request"), b"request-1");
    let d = gate.stream_data(client_addr, server_addr).expect("the gate knows the stream");
    assert!(d.snapshot.client_isn.is_some() && d.snapshot.server_isn.is_some(), "ISNs recorded: {:?}", d.snapshot);
    assert!(d.snapshot.client_syn_options.and_then(|o| o.mss).is_some(), "client MSS recorded: {:?}", d.snapshot);
    assert_eq!(d.client_unread, b"request-1");
    assert_eq!(gate.stats().held_packets, 0, "the handshake and the server's ACK passed");

    // Server → client: 1000 bytes, then 2000 more, held.
    let reply = pattern(3000, 1);
    server.write_all(&reply[..1000]).expect("server write 1");
    wait_held(&gate, 1, "first reply");
    server.write_all(&reply[1000..]).expect("server write 2");
    wait_held(&gate, 2, "second reply");
    assert_quiet(&mut client, "before any commit");

    let stream = |write: u32, read: u32| ServerStream { client: client_addr, server: server_addr, write_seq_rel: write, read_seq_rel: read, state: 1 };
    // Rule (1), partial: the first 1000 bytes only (bound 0: no arrival rule).
    let released = gate.commit(Commit { epoch: 1, arrival_bound: 0, streams: vec![stream(1000, 9)] }).expect("commit 1");
    assert!(released >= 1, "commit 1 released nothing");
    assert_eq!(read_n(&mut client, 1000, "after commit 1"), &reply[..1000]);
    assert_quiet(&mut client, "bytes beyond write_seq_rel 1000");
    let d = gate.stream_data(client_addr, server_addr).expect("stream");
    assert!(d.client_unread.is_empty(), "the app read the request: trimmed");

    // Rule (1): the rest, complete and in order.
    gate.commit(Commit { epoch: 2, arrival_bound: 0, streams: vec![stream(3000, 9)] }).expect("commit 2");
    assert_eq!(read_n(&mut client, 2000, "after commit 2"), &reply[1000..]);

    // Rule (2): what arrived up to the bound goes, later arrivals wait.
    let reply2 = pattern(500, 2);
    server.write_all(&reply2).expect("server write 3");
    wait_held(&gate, 1, "reply 2");
    let bound = gate.arrival_counter();
    let reply3 = pattern(700, 3);
    server.write_all(&reply3).expect("server write 4");
    let deadline = Instant::now() + Duration::from_secs(5);
    while gate.arrival_counter() == bound {
        assert!(Instant::now() < deadline, "reply 3 never reached the gate");
        std::thread::sleep(Duration::from_millis(10));
    }
    gate.commit(Commit { epoch: 3, arrival_bound: bound, streams: vec![stream(3000, 9)] }).expect("commit 3");
    assert_eq!(read_n(&mut client, 500, "after commit 3 (arrival bound)"), reply2);
    assert_quiet(&mut client, "reply 3 arrived after the bound");
    // (a commit lists every socket of the service: a stream missing from
    // one is taken as closed and forgotten)
    gate.commit(Commit { epoch: 4, arrival_bound: gate.arrival_counter(), streams: vec![stream(3000, 9)] }).expect("commit 4");
    assert_eq!(read_n(&mut client, 700, "after commit 4"), reply3);

    // Release disabled: a covering commit is noted, nothing goes out.
    let reply4 = pattern(100, 4);
    server.write_all(&reply4).expect("server write 5");
    wait_held(&gate, 1, "reply 4");
    gate.set_release_enabled(false).expect("disable");
    gate.commit(Commit { epoch: 5, arrival_bound: gate.arrival_counter(), streams: vec![stream(4300, 9)] }).expect("commit 5");
    assert_quiet(&mut client, "release disabled");
    gate.set_release_enabled(true).expect("enable");
    assert_eq!(read_n(&mut client, 100, "after re-enabling"), reply4);

    // A burst: with segmentation offload on, the server's stack hands the
    // router packets of several segments; on the AF_XDP path such a
    // packet is longer than a frame and goes the NFQUEUE way (segmented
    // there), the rest of the stream the XDP way.
    let burst = pattern(20000, 5);
    server.write_all(&burst).expect("server write 6");
    wait_held(&gate, 1, "burst");
    assert_quiet(&mut client, "burst");
    gate.commit(Commit { epoch: 6, arrival_bound: 0, streams: vec![stream(24300, 9)] }).expect("commit 6");
    assert_eq!(read_n(&mut client, 20000, "after commit 6"), burst);

    // The server's FIN waits for a commit too.
    server.shutdown(Shutdown::Write).expect("server shutdown");
    wait_held(&gate, 1, "server FIN");
    assert_quiet(&mut client, "server FIN");
    gate.commit(Commit { epoch: 7, arrival_bound: 0, streams: vec![stream(24301, 9)] }).expect("commit 7");
    client.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    let mut b = [0u8; 16];
    assert_eq!(client.read(&mut b).expect("reading EOF"), 0, "EOF after the FIN's commit");

    let s = gate.stats();
    assert_eq!(s.commits, 7);
    assert_eq!(s.last_commit_epoch, Some(7));
    assert!(s.packets_released >= 7, "{s:?}");
    assert!(s.packets_passed >= 4, "{s:?}");
    assert_eq!(s.netlink_enobufs, 0, "{s:?}");
    match s.xdp {
        Some(x) => {
            assert!(xdp, "{s:?}");
            // the server's packets but the burst's long ones came the XDP
            // way (the SYN-ACK, ACKs, 6 released data/FIN segments at
            // least) and left by the AF_XDP socket (the client's SYN had
            // taught the gate its next hop); none was too long for it
            assert!(x.frames >= 8 && x.sent + x.sent_raw == x.frames && x.sent >= 7, "{x:?}");
            assert_eq!(x.next_hops, 1, "{x:?}");
            assert_eq!((x.kernel_dropped, x.send_dropped, x.send_refused, x.blocked_dropped), (0, 0, 0, 0), "{x:?}");
        }
        None => assert!(!xdp, "{s:?}"),
    }
    match s.observed_input {
        Some(o) => {
            assert!(observed, "{s:?}");
            // every client packet: SYN, ACK, the request, ACKs of the
            // replies (recorded above, so they were read from the ring)
            assert!(o.frames >= 6 && o.attached && o.malformed == 0, "{o:?}");
            // and none took the queue (each went by once, marked)
            assert_eq!(o.queued, 0, "{o:?}");
        }
        None => assert!(!observed, "{s:?}"),
    }
    let snap = gate.streams().into_iter().find(|x| x.client == client_addr).expect("stream still known (client FIN not sent)");
    assert_eq!(snap.committed_write_rel, Some(24301));
    assert!(snap.server_fin);

    // A failover's hold: what the client sends from now on waits in the
    // gate (on the observed input path: the program detached, the packet
    // takes the queue), recorded, and reaches the server on release.
    gate.hold_input().expect("hold input");
    let observed_before = gate.stats().observed_input;
    if let Some(o) = observed_before {
        assert!(!o.attached, "hold_input detaches the input program");
    }
    let held_before = gate.stats().packets_held_total;
    client.write_all(b"late").expect("client write while held");
    let deadline = Instant::now() + Duration::from_secs(5);
    while gate.stats().packets_held_total == held_before {
        assert!(Instant::now() < deadline, "the client's packet during the hold never reached the gate: {:?}", gate.stats());
        std::thread::sleep(Duration::from_millis(10));
    }
    server.set_read_timeout(Some(QUIET)).expect("timeout");
    let mut b = [0u8; 4];
    match server.read(&mut b) {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
        other => panic!("the server got the client's packet during the hold: {other:?}"),
    }
    let d = gate.stream_data(client_addr, server_addr).expect("stream");
    assert_eq!(d.client_unread, b"late", "recorded while held");
    if let Some(before) = observed_before {
        let o = gate.stats().observed_input.expect("observed");
        assert!(o.frames == before.frames && o.queued >= 1, "after the hold, the client's packets take the queue: {o:?}");
    }
    assert!(gate.release_input().expect("release input") >= 1);
    server.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    server.read_exact(&mut b).expect("the held packet after release");
    assert_eq!(&b, b"late");
    drop(client);
    drop(server);
    gate.shutdown().expect("gate shutdown");
}
