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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rrc_wire::datagram::{HeartbeatOpener, HeartbeatSealer, RECV_BUF};

/// Until the peer is first heard, silence is judged against this instead:
/// the two sides start their heartbeats at different moments (the backup
/// when it is ready, the primary once its service answers), and a peer
/// that was never heard from is starting, not failing.
pub const STARTUP_GRACE: Duration = Duration::from_secs(10);

/// The heartbeat threads run at a real-time priority (SCHED_FIFO, low),
/// as corosync's do: on a loaded host (2 CPUs, a 100 MB checkpoint being
/// written, the service at saturation) an ordinary thread can wait longer
/// than the failure timeout for a CPU, and a live peer is declared failed
/// (a failover campaign saw a primary give up its live backup so). They
/// sleep or wait on the socket almost all the time. Without the privilege
/// (no CAP_SYS_NICE) they run at ordinary priority, said once.
const HEARTBEAT_RT_PRIORITY: libc::c_int = 10;

fn real_time(on: bool) {
    let param = libc::sched_param { sched_priority: if on { HEARTBEAT_RT_PRIORITY } else { 0 } };
    let policy = if on { libc::SCHED_FIFO } else { libc::SCHED_OTHER };
    // SAFETY: pid 0 is the calling thread; param lives across the call.
    if unsafe { libc::sched_setscheduler(0, policy, &param) } != 0 {
        static SAID: std::sync::Once = std::sync::Once::new();
        let e = std::io::Error::last_os_error();
        SAID.call_once(|| tracing::warn!("heartbeat threads at ordinary priority (SCHED_FIFO refused: {e}): a loaded host may miss heartbeats"));
    }
}

/// What the monitor does after reporting a silence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watch {
    /// Nothing more to watch (the failover ran, or the service ends).
    Stop,
    /// Keep counting the peer's datagrams (a view change is in progress
    /// elsewhere, and may be cancelled if the peer is heard again).
    Continue,
}

/// What the monitor reports when the peer falls silent.
#[derive(Debug, Clone)]
pub struct Silence {
    /// How long nothing was heard when the failure was declared.
    pub silent_for: Duration,
    /// When the last datagram arrived (None: never heard).
    pub last_heard: Option<Instant>,
    pub declared_at: Instant,
}

/// The failure decision, apart from the sockets and the threads: when a
/// peer last heard from (or never heard from, since `started`) counts as
/// failed.
#[derive(Debug, Clone, Copy)]
pub struct Detector {
    started: Instant,
    last: Option<Instant>,
    fail_after: Duration,
}

impl Detector {
    pub fn new(started: Instant, fail_after: Duration) -> Detector {
        Detector { started, last: None, fail_after }
    }

    /// A datagram of the peer's, opened and in sequence, arrived at `at`.
    pub fn heard(&mut self, at: Instant) {
        // never backwards: a late reading of the clock must not shorten
        // a silence already measured
        self.last = Some(self.last.map_or(at, |l| l.max(at)));
    }

    /// The silence at `now`, if it is a failure.
    pub fn check(&self, now: Instant) -> Option<Silence> {
        let since = now.saturating_duration_since(self.last.unwrap_or(self.started));
        let limit = if self.last.is_some() { self.fail_after } else { STARTUP_GRACE.max(self.fail_after) };
        (since >= limit).then_some(Silence { silent_for: since, last_heard: self.last, declared_at: now })
    }
}

pub struct Heartbeat {
    pub local: SocketAddr,
    stop: Arc<AtomicBool>,
    /// Fault injection: no datagram is sent before this instant, in ms
    /// after `epoch` (0: none muted).
    muted_until_ms: Arc<AtomicU64>,
    /// Nothing sent while set (fenced).
    silenced: Arc<AtomicBool>,
    /// The peer's datagrams accepted.
    heard: Arc<AtomicU64>,
    epoch: Instant,
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
    /// Starts sending to `peer` and watching for it. `on_failure` runs on
    /// the monitor thread when the peer has been silent for `fail_after`
    /// after it was heard at least once (or for [`STARTUP_GRACE`] if it
    /// never was). Returning [`Watch::Stop`] ends the monitor; with
    /// [`Watch::Continue`] it goes on counting the peer's datagrams
    /// ([`Heartbeat::heard`]: a suspicion in progress learns from it that
    /// the peer is alive) and calls `on_failure` again only after the
    /// peer was heard again and fell silent again.
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
        mut on_failure: F,
    ) -> Result<Heartbeat>
    where
        F: FnMut(Silence) -> Watch + Send + 'static,
        R: Fn(SocketAddr, String) + Send + 'static,
    {
        let stop = Arc::new(AtomicBool::new(false));
        let local = sock.local_addr()?;
        let tx = sock.try_clone()?;
        let s1 = stop.clone();
        let (epoch, muted_until_ms) = (Instant::now(), Arc::new(AtomicU64::new(0)));
        let muted = muted_until_ms.clone();
        let silenced = Arc::new(AtomicBool::new(false));
        let quiet = silenced.clone();
        let heard = Arc::new(AtomicU64::new(0));
        let heard_rx = heard.clone();
        let sender = std::thread::Builder::new().name(format!("hb-tx-{name}")).spawn(move || {
            real_time(true);
            let mut next = Instant::now();
            while !s1.load(Ordering::Relaxed) {
                // A send error (peer's host gone: EHOSTUNREACH...) is
                // the monitor's business, not the sender's.
                if epoch.elapsed().as_millis() as u64 >= muted.load(Ordering::Relaxed) && !quiet.load(Ordering::Relaxed) {
                    let _ = tx.send_to(&sealer.seal_next(), peer);
                }
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
            real_time(true);
            let mut detector = Detector::new(Instant::now(), fail_after);
            let mut buf = [0u8; RECV_BUF];
            // false after a silence was reported, until the peer is heard
            let mut armed = true;
            while !s2.load(Ordering::Relaxed) {
                if let Ok((n, from)) = sock.recv_from(&mut buf) {
                    if from.ip() != peer.ip() {
                        on_refused(from, format!("a datagram on the heartbeat port from {from}, not from the peer {}", peer.ip()));
                    } else {
                        match opener.open(&buf[..n]) {
                            Ok(_) => {
                                detector.heard(Instant::now());
                                heard_rx.fetch_add(1, Ordering::Relaxed);
                                armed = true;
                            }
                            Err(e) => on_refused(from, e.to_string()),
                        }
                    }
                }
                if !armed {
                    continue;
                }
                if let Some(silence) = detector.check(Instant::now()) {
                    if s2.load(Ordering::Relaxed) {
                        return;
                    }
                    // what follows (a failover) runs at ordinary priority:
                    // it must not starve the host's other work
                    real_time(false);
                    match on_failure(silence) {
                        Watch::Stop => return,
                        Watch::Continue => {
                            real_time(true);
                            armed = false;
                        }
                    }
                }
            }
        })?;
        Ok(Heartbeat { local, stop, muted_until_ms, silenced, heard, epoch, threads: vec![sender, monitor] })
    }

    /// How many of the peer's datagrams were accepted so far.
    pub fn heard(&self) -> Arc<AtomicU64> {
        self.heard.clone()
    }

    /// Sends nothing while `on` (a host fenced for a whole lease lets its
    /// peer take over: docs/failover.md "Fencing").
    pub fn silence(&self, on: bool) {
        self.silenced.store(on, Ordering::Relaxed);
    }

    /// Fault injection: sends nothing for `d` (this host alive otherwise,
    /// as when its heartbeat thread does not get a CPU in time).
    pub fn mute(&self, d: Duration) {
        let until = self.epoch.elapsed() + d;
        self.muted_until_ms.store(until.as_millis() as u64, Ordering::Relaxed);
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

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_peer_heard_then_silent_for_the_limit_has_failed() {
        let t0 = Instant::now();
        let mut d = Detector::new(t0, 90 * MS);
        d.heard(t0 + 10 * MS);
        assert!(d.check(t0 + 99 * MS).is_none(), "89 ms of silence is not 90");
        let s = d.check(t0 + 100 * MS).expect("90 ms of silence");
        assert_eq!((s.silent_for, s.last_heard), (90 * MS, Some(t0 + 10 * MS)));
        d.heard(t0 + 95 * MS);
        assert!(d.check(t0 + 150 * MS).is_none(), "each datagram starts the silence again");
    }

    #[test]
    fn a_peer_never_heard_gets_the_startup_grace() {
        let t0 = Instant::now();
        let d = Detector::new(t0, 90 * MS);
        assert!(d.check(t0 + 5 * 90 * MS).is_none());
        let s = d.check(t0 + STARTUP_GRACE).expect("the grace is over");
        assert_eq!(s.last_heard, None);
        // a limit longer than the grace wins
        let d = Detector::new(t0, STARTUP_GRACE * 2);
        assert!(d.check(t0 + STARTUP_GRACE).is_none());
    }

    /// The heartbeat threads take SCHED_FIFO and give it up before a
    /// failover runs on the monitor's thread (the suite runs as root).
    #[test]
    fn heartbeat_threads_run_at_real_time_priority_and_leave_it() {
        let policies = std::thread::spawn(|| {
            real_time(true);
            // SAFETY: plain syscalls on the calling thread.
            let on = unsafe { libc::sched_getscheduler(0) };
            real_time(false);
            (on, unsafe { libc::sched_getscheduler(0) })
        })
        .join()
        .unwrap();
        assert_eq!(policies, (libc::SCHED_FIFO, libc::SCHED_OTHER));
    }

    #[test]
    fn an_older_arrival_does_not_move_the_last_one_back() {
        let t0 = Instant::now();
        let mut d = Detector::new(t0, 90 * MS);
        d.heard(t0 + 50 * MS);
        d.heard(t0 + 20 * MS);
        assert!(d.check(t0 + 130 * MS).is_none());
        assert!(d.check(t0 + 140 * MS).is_some());
    }
}
