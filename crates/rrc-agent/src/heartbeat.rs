//! Failure detection between the two agents of a service (issue 4 §1;
//! Tardigrade §3.2, RRC §3).
//!
//! Each side sends a small UDP datagram to the other every `every` (30 ms
//! by default) on the replication network, and declares the peer failed
//! after `fail_after` (90 ms) without hearing from it. UDP, not the
//! replication TCP connection: a 100 MB checkpoint in flight on that
//! connection would delay a heartbeat queued behind it past the deadline.
//! A fail-stop (power off, cut links) is silence; nothing else is needed.
//!
//! The datagrams are sealed with the replication session's heartbeat keys
//! (rrc_wire::datagram, issue 12): a forged one, or one replayed to make a
//! dead peer look alive, is refused and reported, never taken for life.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rrc_wire::datagram::{HeartbeatOpener, HeartbeatSealer, RECV_BUF};

/// Until the peer is first heard, silence is judged against this instead:
/// the two sides start their heartbeats at different moments (the backup
/// when it is ready, the primary once its service answers), and a peer
/// that was never heard from is starting, not failing.
pub const STARTUP_GRACE: Duration = Duration::from_secs(10);

/// What the monitor reports when the peer falls silent.
#[derive(Debug, Clone)]
pub struct Silence {
    /// How long nothing was heard when the failure was declared.
    pub silent_for: Duration,
    /// When the last datagram arrived (None: never heard).
    pub last_heard: Option<Instant>,
    pub declared_at: Instant,
}

pub struct Heartbeat {
    pub local: SocketAddr,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// Binds the heartbeat socket on `ip` (any port); the port goes to the
/// peer in the replication handshake.
pub fn bind(ip: std::net::IpAddr) -> Result<UdpSocket> {
    let s = UdpSocket::bind(SocketAddr::new(ip, 0)).with_context(|| format!("binding the heartbeat socket on {ip}"))?;
    s.set_read_timeout(Some(Duration::from_millis(5)))?;
    Ok(s)
}

impl Heartbeat {
    /// Starts sending to `peer` and watching for it. `on_failure` runs
    /// once, on the monitor thread, when the peer has been silent for
    /// `fail_after` after it was heard at least once (or for
    /// [`STARTUP_GRACE`] if it never was).
    /// Datagrams that are not the peer's next heartbeat go to `on_refused`
    /// (sender, why), on the monitor thread.
    #[allow(clippy::too_many_arguments)]
    pub fn start<F, R>(
        sock: UdpSocket,
        peer: SocketAddr,
        every: Duration,
        fail_after: Duration,
        name: &str,
        (mut sealer, mut opener): (HeartbeatSealer, HeartbeatOpener),
        on_refused: R,
        on_failure: F,
    ) -> Result<Heartbeat>
    where
        F: FnOnce(Silence) + Send + 'static,
        R: Fn(SocketAddr, String) + Send + 'static,
    {
        let stop = Arc::new(AtomicBool::new(false));
        let local = sock.local_addr()?;
        let tx = sock.try_clone()?;
        let s1 = stop.clone();
        let sender = std::thread::Builder::new().name(format!("hb-tx-{name}")).spawn(move || {
            let mut next = Instant::now();
            while !s1.load(Ordering::Relaxed) {
                let b = sealer.seal_next();
                // A send error (peer's host gone: EHOSTUNREACH...) is
                // the monitor's business, not the sender's.
                let _ = tx.send_to(&b, peer);
                next += every;
                let now = Instant::now();
                if next > now {
                    std::thread::sleep(next - now);
                } else {
                    next = now;
                }
            }
        })?;
        let s2 = stop.clone();
        let monitor = std::thread::Builder::new().name(format!("hb-rx-{name}")).spawn(move || {
            let started = Instant::now();
            let mut last: Option<Instant> = None;
            let mut buf = [0u8; RECV_BUF];
            while !s2.load(Ordering::Relaxed) {
                if let Ok((n, from)) = sock.recv_from(&mut buf) {
                    if from.ip() != peer.ip() {
                        on_refused(from, format!("a datagram on the heartbeat port from {from}, not from the peer {}", peer.ip()));
                    } else {
                        match opener.open(&buf[..n]) {
                            Ok(_) => last = Some(Instant::now()),
                            Err(e) => on_refused(from, e.to_string()),
                        }
                    }
                }
                let since = last.unwrap_or(started).elapsed();
                let limit = if last.is_some() { fail_after } else { STARTUP_GRACE.max(fail_after) };
                if since >= limit {
                    if s2.load(Ordering::Relaxed) {
                        return;
                    }
                    on_failure(Silence { silent_for: since, last_heard: last, declared_at: Instant::now() });
                    return;
                }
            }
        })?;
        Ok(Heartbeat { local, stop, threads: vec![sender, monitor] })
    }

    /// Asks both threads to end, without waiting for them.
    pub fn signal_stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let me = std::thread::current().id();
        for t in self.threads.drain(..) {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
