//! TCP repair end to end (needs root; fails, never skips, without it).
//!
//! Four network namespaces stand in for hosts: client — router — server1
//! and server2, both holding the service IP. The router forwards, and an
//! rrc-gate `Gate` on an NFQUEUE in its FORWARD chain records the client's
//! bytes and holds server1's output until a commit (made here from the
//! test server's exact byte counts) covers it. The client keeps ONE
//! connection and sends numbered requests.
//!
//! Then server1 "crashes" with two things in flight that only the repair
//! can carry over:
//! * a request server1's kernel acknowledged but the application never
//!   read (it stopped reading): it must reappear in the repaired receive
//!   queue;
//! * a reply the gate released but the client never received (the
//!   client's INPUT drops it, so the client never acknowledges it): it must
//!   come out of the repaired write queue.
//!
//! The router's route moves to server2, which builds the socket with
//! `repair()` from the gate's `stream_data` and a TCP table entry made from
//! the server's counts, and serves on: the client must carry on over the
//! same connection with every reply intact, no error and no reset. The test
//! prints how long after `repair()` the client got its next byte.
//!
//! Names follow tests/conftest.py (`rrc-t-<pid hex>-...`), so that pytest's
//! sweep also removes what a crashed run of this test left behind.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use rrc_gate::{Commit, Gate, GateConfig, ServerStream};
use rrc_image::sections::{TcpStream as TableEntry, TCP_F_INFO, TCP_F_SEQ};
use rrc_repair::{repair, spec_from_gate};

mod common;
use common::{in_netns, ns_exec, run, spawn_in_netns, tcp_info, wait_for};

const SVC: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 100);
const PORT: u16 = 8080;
const QUEUE: u16 = 9;
const REQ_LEN: usize = 64;
/// Requests served by server1 in the steady phase.
const STEADY: u32 = 20;
/// The last request of the test.
const LAST: u32 = 40;
/// Connection resumption faster than this is "at once"; a retransmission
/// timeout of a fresh socket (TCP_TIMEOUT_INIT) is 1 s.
const PROMPT: Duration = Duration::from_millis(500);

/// How long server2 waits after the repair before it serves.
const SERVER2_PAUSE: Duration = Duration::from_secs(1);

/// The four namespaces; deleting them removes the veths, addresses, routes
/// and iptables rules inside them, on success and on failure alike.
struct Topology {
    client: String,
    router: String,
    server1: String,
    server2: String,
}

impl Topology {
    fn build() -> Topology {
        let tag = format!("rrc-t-{:x}-rep", std::process::id());
        let t = Topology {
            client: format!("{tag}-cli"),
            router: format!("{tag}-rtr"),
            server1: format!("{tag}-s1"),
            server2: format!("{tag}-s2"),
        };
        for ns in t.all() {
            let _ = Command::new("ip").args(["netns", "del", ns]).output(); // a leftover of an earlier run with this pid
            run("creating a netns", &["ip", "netns", "add", ns]);
        }
        let (c, r, s1, s2) = (
            t.client.as_str(),
            t.router.as_str(),
            t.server1.as_str(),
            t.server2.as_str(),
        );
        run(
            "veth client-router",
            &[
                "ip", "-n", r, "link", "add", "rc", "type", "veth", "peer", "name", "c0", "netns",
                c,
            ],
        );
        run(
            "veth server1-router",
            &[
                "ip", "-n", r, "link", "add", "rs1", "type", "veth", "peer", "name", "s0", "netns",
                s1,
            ],
        );
        run(
            "veth server2-router",
            &[
                "ip", "-n", r, "link", "add", "rs2", "type", "veth", "peer", "name", "s0", "netns",
                s2,
            ],
        );
        for (ns, dev, addr) in [
            (c, "c0", "10.78.1.2/24"),
            (r, "rc", "10.78.1.1/24"),
            (r, "rs1", "10.78.2.1/24"),
            (s1, "s0", "10.78.2.2/24"),
            (r, "rs2", "10.78.3.1/24"),
            (s2, "s0", "10.78.3.2/24"),
        ] {
            run(
                "address",
                &["ip", "-n", ns, "addr", "add", addr, "dev", dev],
            );
            run("link up", &["ip", "-n", ns, "link", "set", dev, "up"]);
        }
        for ns in [c, r, s1, s2] {
            run("lo up", &["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        // Both servers hold the service IP, as the primary's and the
        // backup's service namespaces do.
        for (ns, gw) in [(s1, "10.78.2.1"), (s2, "10.78.3.1")] {
            run(
                "service address",
                &[
                    "ip",
                    "-n",
                    ns,
                    "addr",
                    "add",
                    &format!("{SVC}/32"),
                    "dev",
                    "lo",
                ],
            );
            run(
                "server route",
                &["ip", "-n", ns, "route", "add", "default", "via", gw],
            );
        }
        run(
            "client route",
            &["ip", "-n", c, "route", "add", "default", "via", "10.78.1.1"],
        );
        run(
            "router route to server1",
            &[
                "ip",
                "-n",
                r,
                "route",
                "add",
                &format!("{SVC}/32"),
                "via",
                "10.78.2.2",
            ],
        );
        ns_exec(r, "forwarding", &["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        let q = QUEUE.to_string();
        for dir in ["-d", "-s"] {
            ns_exec(
                r,
                "NFQUEUE rule",
                &[
                    "iptables",
                    "-A",
                    "FORWARD",
                    dir,
                    &SVC.to_string(),
                    "-j",
                    "NFQUEUE",
                    "--queue-num",
                    &q,
                ],
            );
        }
        t
    }

    fn all(&self) -> [&String; 4] {
        [&self.client, &self.router, &self.server1, &self.server2]
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for ns in self.all() {
            match Command::new("ip").args(["netns", "del", ns]).output() {
                Ok(o) if o.status.success() => {}
                Ok(o) => eprintln!(
                    "cleanup: ip netns del {ns}: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                ),
                Err(e) => eprintln!("cleanup: ip netns del {ns}: {e}"),
            }
        }
    }
}

fn request(k: u32) -> Vec<u8> {
    let mut v = b"REQ".to_vec();
    v.extend_from_slice(&k.to_be_bytes());
    v.extend((v.len()..REQ_LEN).map(|i| (i as u32 * 7 + k) as u8));
    v
}

fn reply_len(k: u32) -> usize {
    1500 + (k as usize % 7) * 311
}

fn reply(k: u32) -> Vec<u8> {
    let mut v = k.to_be_bytes().to_vec();
    v.extend((4..reply_len(k)).map(|i| (i as u32).wrapping_mul(31).wrapping_add(k * 13) as u8));
    v
}

/// What the server application has written and read: the values a
/// checkpoint's TCP table would carry (write_seq_rel, read_seq_rel).
#[derive(Default)]
struct Counts {
    written: AtomicU64,
    read: AtomicU64,
}

/// Serves requests `first..` on `conn` until `last_to_read` is read (then
/// returns the socket without reading more) or the client closes.
fn serve(conn: &mut TcpStream, first: u32, last_to_read: u32, counts: &Counts) -> u32 {
    let mut k = first;
    while k <= last_to_read {
        let mut req = vec![0u8; REQ_LEN];
        match conn.read_exact(&mut req) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => break,
            Err(e) => panic!("server reading request {k}: {e}"),
        }
        assert_eq!(req, request(k), "server: request {k} corrupted");
        counts.read.fetch_add(REQ_LEN as u64, Ordering::SeqCst);
        conn.write_all(&reply(k))
            .unwrap_or_else(|e| panic!("server writing reply {k}: {e}"));
        counts
            .written
            .fetch_add(reply_len(k) as u64, Ordering::SeqCst);
        k += 1;
    }
    k - first
}

fn read_reply(conn: &mut TcpStream, k: u32) {
    let mut v = vec![0u8; reply_len(k)];
    conn.read_exact(&mut v)
        .unwrap_or_else(|e| panic!("client reading reply {k}: {e}"));
    assert!(v == reply(k), "client: reply {k} corrupted");
}

#[test]
fn client_connection_survives_failover_through_tcp_repair() {
    // SAFETY: plain getter.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test needs root (network namespaces, iptables, NFQUEUE, TCP_REPAIR): run `cargo test -p rrc-repair` as root (`make test` does)"
    );
    let topo = Topology::build();
    let gate = Arc::new(in_netns(&topo.router, || {
        Gate::open(GateConfig::new(QUEUE, SVC)).expect("starting the gate in the router namespace")
    }));
    let server_addr = SocketAddrV4::new(SVC, PORT);

    // ---- server1: serves STEADY + 1 requests, then stops reading ----
    let counts = Arc::new(Counts::default());
    let (ready_tx, ready_rx) = mpsc::channel();
    let (crash_tx, crash_rx) = mpsc::channel::<()>();
    let c = counts.clone();
    let server1 = spawn_in_netns(&topo.server1, "server1", move || {
        let listener = TcpListener::bind(server_addr).expect("server1 binding the service");
        ready_tx.send(()).expect("signalling readiness");
        let (mut conn, _) = listener.accept().expect("server1 accept");
        conn.set_nodelay(true).expect("TCP_NODELAY"); // each reply goes out now (held segments are never ACKed)
        let served = serve(&mut conn, 1, STEADY + 1, &c);
        assert_eq!(served, STEADY + 1, "server1 served");
        // Stopped reading: park until the crash; the sockets die with it.
        let _ = crash_rx.recv();
        (conn, listener)
    });
    ready_rx
        .recv_timeout(Duration::from_secs(5))
        .expect("server1 never listened");

    let mut client = in_netns(&topo.client, move || {
        TcpStream::connect_timeout(&server_addr.into(), Duration::from_secs(5))
            .expect("client connecting")
    });
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    let client_addr = match client.local_addr().expect("client address") {
        SocketAddr::V4(a) => a,
        other => panic!("unexpected client address {other}"),
    };

    // ---- the committer: an epoch every 10 ms with the server's exact counts ----
    let stop_commits = Arc::new(AtomicBool::new(false));
    let committer = {
        let (gate, counts, stop) = (gate.clone(), counts.clone(), stop_commits.clone());
        std::thread::spawn(move || {
            let mut epoch = 0;
            while !stop.load(Ordering::SeqCst) {
                epoch += 1;
                let stream = ServerStream {
                    client: client_addr,
                    server: server_addr,
                    write_seq_rel: counts.written.load(Ordering::SeqCst) as u32,
                    read_seq_rel: counts.read.load(Ordering::SeqCst) as u32,
                    state: 1,
                };
                gate.commit(Commit {
                    epoch,
                    arrival_bound: 0,
                    streams: vec![stream],
                })
                .expect("commit");
                std::thread::sleep(Duration::from_millis(10));
            }
            // A last commit with the final counts.
            let stream = ServerStream {
                client: client_addr,
                server: server_addr,
                write_seq_rel: counts.written.load(Ordering::SeqCst) as u32,
                read_seq_rel: counts.read.load(Ordering::SeqCst) as u32,
                state: 1,
            };
            gate.commit(Commit {
                epoch: epoch + 1,
                arrival_bound: 0,
                streams: vec![stream],
            })
            .expect("final commit");
        })
    };

    // ---- steady state: ping-pong through the gate ----
    for k in 1..=STEADY {
        client
            .write_all(&request(k))
            .expect("client writing a request");
        read_reply(&mut client, k);
    }

    // ---- set up what only the repair can carry over ----
    // The client stops receiving anything from the service: the next reply
    // is released by the gate but never acknowledged.
    let drop_rule = [
        "INPUT",
        "-p",
        "tcp",
        "-s",
        &SVC.to_string(),
        "--sport",
        &PORT.to_string(),
        "-j",
        "DROP",
    ];
    let rule = |op: &str| -> Vec<String> {
        let mut v = vec!["iptables".to_string(), op.to_string()];
        v.extend(drop_rule.iter().map(|s| s.to_string()));
        v
    };
    let add = rule("-A");
    ns_exec(
        &topo.client,
        "client INPUT drop",
        &add.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    client
        .write_all(&request(STEADY + 1))
        .expect("client writing request STEADY+1");
    // server1 reads it and replies, then stops reading: the next request is
    // acknowledged by its kernel, never read by the application.
    client
        .write_all(&request(STEADY + 2))
        .expect("client writing request STEADY+2");
    let written: u64 = (1..=STEADY + 1).map(|k| reply_len(k) as u64).sum();
    let read = u64::from(STEADY + 1) * REQ_LEN as u64;
    let sent = u64::from(STEADY + 2) * REQ_LEN as u64;
    wait_for("the crash point", Duration::from_secs(10), || {
        let d = gate
            .stream_data(client_addr, server_addr)
            .ok_or("stream unknown")?;
        let s = &d.snapshot;
        let (w, r) = (
            counts.written.load(Ordering::SeqCst),
            counts.read.load(Ordering::SeqCst),
        );
        if (w, r) != (written, read) {
            return Err(format!("server1 counts written {w} read {r}"));
        }
        if u64::from(s.server_released_end_rel) != written
            || d.server_unacked.len() != reply_len(STEADY + 1)
        {
            return Err(format!(
                "released end {} unacked {}",
                s.server_released_end_rel,
                d.server_unacked.len()
            ));
        }
        if s.server_ack_rel.map(u64::from) != Some(sent) {
            return Err(format!(
                "server1's kernel acknowledged {:?} of {sent} client bytes",
                s.server_ack_rel
            ));
        }
        if d.client_unread != request(STEADY + 2) {
            return Err(format!(
                "client bytes not read: {} recorded",
                d.client_unread.len()
            ));
        }
        Ok(())
    });
    stop_commits.store(true, Ordering::SeqCst);
    committer.join().expect("committer panicked");

    // ---- crash server1: nothing may escape it any more (no RST) ----
    ns_exec(
        &topo.server1,
        "server1 OUTPUT drop",
        &["iptables", "-A", "OUTPUT", "-j", "DROP"],
    );
    drop(crash_tx);
    let (conn1, listener1) = server1.join().expect("server1 panicked");
    drop(conn1); // unread data: the kernel sends an RST, which the DROP rule eats
    drop(listener1);

    // ---- failover: the gate's recording, the route, the repair ----
    let data = gate
        .stream_data(client_addr, server_addr)
        .expect("the gate knows the stream");
    assert_eq!(
        gate.stats().held_packets,
        0,
        "every server1 output was covered by a commit: {:?}",
        gate.stats()
    );
    // Server2's output is not gated in this test: the rules go, then the gate.
    ns_exec(
        &topo.router,
        "removing the NFQUEUE rules",
        &["iptables", "-F", "FORWARD"],
    );
    gate.shutdown().expect("gate shutdown");
    run(
        "route to server2",
        &[
            "ip",
            "-n",
            &topo.router,
            "route",
            "replace",
            &format!("{SVC}/32"),
            "via",
            "10.78.3.2",
        ],
    );
    let del = rule("-D");
    ns_exec(
        &topo.client,
        "client INPUT drop removed",
        &del.iter().map(String::as_str).collect::<Vec<_>>(),
    );

    let table = TableEntry {
        family: libc::AF_INET as u16,
        state: 1,
        state_name: "ESTABLISHED",
        options: 0,
        snd_wscale: 0,
        rcv_wscale: 0,
        flags: TCP_F_SEQ | TCP_F_INFO,
        local: server_addr.into(),
        remote: client_addr.into(),
        snd_mss: 0,
        inode: 0,
        cookie: 1,
        rqueue: REQ_LEN as u32,
        wqueue: reply_len(STEADY + 1) as u32,
        bytes_acked: written - reply_len(STEADY + 1) as u64,
        bytes_received: sent,
        write_seq_rel: Some(written),
        read_seq_rel: Some(read),
        ifindex: 0,
    };
    let spec = spec_from_gate(&data, &table).expect("building the repair spec");
    assert_eq!(
        spec.write_queue,
        reply(STEADY + 1),
        "the write queue is the released, unacknowledged reply"
    );
    assert_eq!(
        spec.recv_queue,
        request(STEADY + 2),
        "the receive queue is the acknowledged, unread request"
    );
    println!(
        "repair spec: send_seq {} ({} bytes), recv_seq {} ({} bytes), mss {}, wscale {:?}/{:?}, sack {}, timestamps {:?}, snd_wnd {}",
        spec.send_seq,
        spec.write_queue.len(),
        spec.recv_seq,
        spec.recv_queue.len(),
        spec.mss,
        spec.snd_wscale,
        spec.rcv_wscale,
        spec.sack,
        spec.timestamps,
        spec.snd_wnd
    );

    let mss = spec.mss;
    // The client reads from now on in its own thread, so that the arrival
    // of its next byte is timed however fast it comes.
    let mut client_reader = client.try_clone().expect("cloning the client socket");
    let reader = std::thread::spawn(move || {
        let mut first = [0u8; 1];
        let n = client_reader
            .read(&mut first)
            .unwrap_or_else(|e| panic!("client waiting for its next byte: {e}"));
        let first_byte_at = Instant::now();
        assert_eq!(n, 1, "the client saw EOF instead of reply {}", STEADY + 1);
        let mut rest = vec![0u8; reply_len(STEADY + 1) - 1];
        client_reader
            .read_exact(&mut rest)
            .unwrap_or_else(|e| panic!("client reading reply {}: {e}", STEADY + 1));
        let mut got = first.to_vec();
        got.extend(rest);
        assert!(
            got == reply(STEADY + 1),
            "client: reply {} (from the repaired write queue) corrupted",
            STEADY + 1
        );
        for k in STEADY + 2..=LAST {
            read_reply(&mut client_reader, k);
        }
        let mut b = [0u8; 1];
        match client_reader.read(&mut b) {
            Ok(0) => {}
            Ok(_) => panic!("client: bytes after the last reply"),
            Err(e) => panic!("client: the connection ended with an error instead of a FIN: {e}"),
        }
        first_byte_at
    });

    // ---- server2: repair, then serve on from request STEADY + 2 ----
    let server2 = spawn_in_netns(&topo.server2, "server2", move || {
        let before = Instant::now();
        let fd = repair(&spec).unwrap_or_else(|e| panic!("repair: {e}"));
        let after = Instant::now();
        let mut conn = TcpStream::from(fd);
        conn.set_nodelay(true).expect("TCP_NODELAY");
        let snd_mss = tcp_info(&conn).tcpi_snd_mss;
        // Nothing new from the application for a while: the client's next
        // byte can only come from the repaired write queue itself (new data
        // would let a SACK recovery retransmit it).
        std::thread::sleep(SERVER2_PAUSE);
        let counts = Counts::default();
        let served = serve(&mut conn, STEADY + 2, LAST, &counts);
        // Every request read: closing sends a FIN.
        let mut b = [0u8; 1];
        assert_eq!(
            conn.read(&mut b)
                .expect("server2 waiting for the client's FIN"),
            0,
            "server2: bytes after the last request"
        );
        drop(conn);
        (before, after, served, snd_mss)
    });

    // The client carries on with new requests over the same connection.
    std::thread::sleep(Duration::from_millis(50));
    for k in STEADY + 3..=LAST {
        client
            .write_all(&request(k))
            .unwrap_or_else(|e| panic!("client writing request {k} after the failover: {e}"));
        std::thread::sleep(Duration::from_millis(5));
    }
    client.shutdown(Shutdown::Write).expect("client shutdown");
    let first_byte_at = reader.join().expect("the client failed after the failover");
    let (before, after, served, snd_mss) = server2.join().expect("server2 failed");
    // The segment size follows the client's MSS (minus the timestamp
    // option), not the kernel's 536-byte default.
    assert!(
        snd_mss + 40 >= u32::from(mss),
        "the repaired socket sends {snd_mss}-byte segments, the client's MSS is {mss}"
    );
    assert_eq!(
        served,
        LAST - STEADY - 1,
        "server2 served requests {}..={LAST}",
        STEADY + 2
    );

    let signed_ms = |a: Instant, b: Instant| {
        if a >= b {
            a.duration_since(b).as_secs_f64() * 1e3
        } else {
            -(b.duration_since(a).as_secs_f64() * 1e3)
        }
    };
    println!(
        "repair() took {:.3} ms; the client's next byte came {:.3} ms after repair() returned ({:.3} ms after it was called)",
        signed_ms(after, before),
        signed_ms(first_byte_at, after),
        signed_ms(first_byte_at, before)
    );
    assert!(
        first_byte_at.duration_since(before) < PROMPT,
        "the client's next byte came {:?} after repair() started: a retransmission timeout, not an immediate resumption",
        first_byte_at.duration_since(before)
    );
}
