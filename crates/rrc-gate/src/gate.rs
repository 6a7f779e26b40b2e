//! `Gate`: the NFQUEUE reader thread around a `GateCore`.
//!
//! One thread reads the queue and gives the immediate verdicts; `commit`
//! (called from any thread) computes the releases and sends their
//! verdicts itself. Both do so while holding the core's lock, so the
//! verdicts reach the kernel in the order the core decided them: a stream's
//! packets never overtake each other.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use serde::{Deserialize, Serialize};

use crate::core::{Commit, Decision, GateCore, GateLimits, GateStats};
use crate::error::GateError;
use crate::nfqueue::{self, Event, NfQueue, QueueOptions};
use crate::stream::{PacketId, StreamData, StreamSnapshot};

/// Kernel queue length: packets held for an epoch count against it.
pub const QUEUE_MAX_LEN: u32 = 65536;
/// Netlink receive buffer: bursts between two reads must fit.
pub const SOCKET_RCVBUF: usize = 32 << 20;
/// Datagrams read per lock hold.
const BATCH: usize = 256;
/// Datagrams read per system call (recvmmsg).
const RECV_MANY: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateConfig {
    pub queue_num: u16,
    pub service_ip: Ipv4Addr,
    pub max_held_packets: u64,
    pub max_recorded_bytes: u64,
}

impl GateConfig {
    /// Default bounds (65536 held packets, 256 MiB recorded).
    pub fn new(queue_num: u16, service_ip: Ipv4Addr) -> GateConfig {
        let l = GateLimits::default();
        GateConfig { queue_num, service_ip, max_held_packets: l.max_held_packets, max_recorded_bytes: l.max_recorded_bytes }
    }
}

struct Shared {
    core: Mutex<GateCore>,
    queue: NfQueue,
    stop: AtomicBool,
    /// eventfd that wakes the reader for shutdown.
    wake: OwnedFd,
    enobufs: AtomicU64,
    verdict_errors: AtomicU64,
}

impl Shared {
    fn core(&self) -> MutexGuard<'_, GateCore> {
        // A panic elsewhere must not stop the gate from answering.
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The running gate. Thread-safe: share it by reference or in an Arc.
pub struct Gate {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Gate {
    /// Binds the queue (in the network namespace of the calling thread)
    /// and starts the reader thread.
    pub fn open(config: GateConfig) -> Result<Gate, GateError> {
        let queue = NfQueue::open(QueueOptions { queue_num: config.queue_num, max_len: QUEUE_MAX_LEN, rcvbuf: SOCKET_RCVBUF })?;
        // SAFETY: plain syscall creating a descriptor we own.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if efd < 0 {
            return Err(GateError::io("creating the gate's wakeup eventfd")(std::io::Error::last_os_error()));
        }
        // SAFETY: fresh descriptor.
        let wake = unsafe { OwnedFd::from_raw_fd(efd) };
        let limits = GateLimits { max_held_packets: config.max_held_packets, max_recorded_bytes: config.max_recorded_bytes };
        let shared = Arc::new(Shared {
            core: Mutex::new(GateCore::new(config.service_ip, limits)),
            queue,
            stop: AtomicBool::new(false),
            wake,
            enobufs: AtomicU64::new(0),
            verdict_errors: AtomicU64::new(0),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("rrc-gate-q{}", config.queue_num))
            .spawn(move || reader(&s))
            .map_err(GateError::io("spawning the gate thread"))?;
        tracing::info!(queue = config.queue_num, service = %config.service_ip, "gate started");
        Ok(Gate { shared, thread: Mutex::new(Some(thread)) })
    }

    fn running(&self) -> Result<(), GateError> {
        if self.shared.stop.load(Ordering::Acquire) {
            return Err(GateError::ShutDown);
        }
        Ok(())
    }

    /// The newest arrival number (ship it to the primary; it comes back as
    /// a commit's `arrival_bound`).
    pub fn arrival_counter(&self) -> u64 {
        self.shared.core().arrival_counter()
    }

    /// Applies a commit and accepts the packets it releases, in order.
    /// Returns how many were released.
    pub fn commit(&self, commit: Commit) -> Result<usize, GateError> {
        self.release_by(|core| core.commit(commit))
    }

    /// Stops or resumes releasing (fault injection; failover stops it).
    /// Resuming applies the newest commit noted meanwhile; returns how
    /// many packets that released.
    pub fn set_release_enabled(&self, enabled: bool) -> Result<usize, GateError> {
        self.release_by(|core| core.set_release_enabled(enabled))
    }

    /// Outputs the record log now covers (rr mode; `logged.rs`): accepts
    /// what that releases, in order, with log release on. Returns how
    /// many packets.
    pub fn logged(&self, outputs: &[crate::LoggedOutput]) -> Result<usize, GateError> {
        self.release_by(|core| core.logged(outputs))
    }

    /// Releasing on the log's cover on or off (on only where a failover
    /// replays the log up to what was released).
    pub fn set_log_release(&self, on: bool) -> Result<usize, GateError> {
        self.release_by(|core| core.set_log_release(on))
    }

    /// One decision of the core that releases packets, and their verdicts,
    /// with the core locked (so that they reach the kernel in its order).
    fn release_by(&self, decide: impl FnOnce(&mut GateCore) -> Vec<PacketId>) -> Result<usize, GateError> {
        self.running()?;
        let core = &mut *self.shared.core();
        let ids = decide(core);
        self.send_release(&ids)?;
        Ok(ids.len())
    }

    /// Called with the core locked.
    fn send_release(&self, ids: &[PacketId]) -> Result<(), GateError> {
        if ids.is_empty() {
            return Ok(());
        }
        self.shared.queue.accept(ids).map_err(|e| {
            self.shared.verdict_errors.fetch_add(1, Ordering::Relaxed);
            GateError::io(format!("sending {} release verdicts", ids.len()))(e)
        })
    }

    /// Failover: holds every packet to the service from now on (see
    /// [`crate::GateCore::hold_input`]).
    pub fn hold_input(&self) -> Result<(), GateError> {
        self.running()?;
        self.shared.core().hold_input();
        Ok(())
    }

    /// Failover: the service is live; the held input goes on, in order.
    pub fn release_input(&self) -> Result<usize, GateError> {
        self.running()?;
        let ids = self.shared.core().release_input();
        self.send_release(&ids)?;
        Ok(ids.len())
    }

    /// Joins established connections (re-protection; see
    /// [`crate::GateCore::seed`]).
    pub fn seed(&self, seeds: &[crate::StreamSeed]) {
        self.shared.core().seed(seeds);
    }

    pub fn stats(&self) -> GateStats {
        let mut s = self.shared.core().stats();
        s.netlink_enobufs = self.shared.enobufs.load(Ordering::Relaxed);
        s
    }

    pub fn streams(&self) -> Vec<StreamSnapshot> {
        self.shared.core().streams()
    }

    /// One stream with its recorded bytes (for failover).
    pub fn stream_data(&self, client: SocketAddrV4, server: SocketAddrV4) -> Option<StreamData> {
        self.shared.core().stream_data(client, server)
    }

    /// See [`GateCore::unanswered_syns`].
    pub fn unanswered_syns(&self) -> Vec<Vec<u8>> {
        self.shared.core().unanswered_syns()
    }

    /// Stops the reader and unbinds the queue. Packets still held are
    /// dropped by the kernel: no commit covered them, so they must not go
    /// out (after a failover the restored service sends them again).
    /// Idempotent.
    pub fn shutdown(&self) -> Result<(), GateError> {
        self.shared.stop.store(true, Ordering::Release);
        let one: u64 = 1;
        // SAFETY: write 8 bytes to our eventfd.
        unsafe { libc::write(self.shared.wake.as_raw_fd(), &one as *const u64 as *const libc::c_void, 8) };
        let t = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some(t) = t else { return Ok(()) };
        let joined = t.join();
        let held = self.shared.core().stats().held_packets;
        let unbound = self.shared.queue.unbind();
        tracing::info!(queue = self.shared.queue.queue_num(), held_dropped = held, "gate stopped");
        if joined.is_err() {
            return Err(GateError::Other("the gate thread panicked".into()));
        }
        unbound.map_err(GateError::io("unbinding the queue"))
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            tracing::warn!(error = %e, "stopping the gate");
        }
    }
}

/// Decides on every packet of one datagram; pushes the accepted ids.
fn handle_datagram(shared: &Shared, core: &mut GateCore, d: &[u8], accepts: &mut Vec<PacketId>) {
    for ev in nfqueue::parse_datagram(d) {
        match ev {
            Event::Packet { id, payload, truncated } => {
                if truncated {
                    tracing::warn!(packet = id.0, "packet truncated by the copy range");
                }
                let d = core.on_packet(id, payload);
                // held ones this packet's bytes released (the log's cover)
                accepts.extend(core.take_released());
                if d == Decision::Accept {
                    accepts.push(id);
                }
            }
            Event::Error { errno } => {
                shared.verdict_errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %std::io::Error::from_raw_os_error(errno), "nfnetlink_queue rejected a verdict");
            }
        }
    }
}

fn reader(shared: &Shared) {
    let mut batch = nfqueue::RecvBatch::new(RECV_MANY);
    let mut accepts = Vec::new();
    {
        let core = &mut *shared.core();
        for d in shared.queue.take_early() {
            handle_datagram(shared, core, &d, &mut accepts);
        }
        if let Err(e) = shared.queue.accept(&accepts) {
            tracing::error!(error = %e, "sending verdicts");
        }
        accepts.clear();
    }
    while !shared.stop.load(Ordering::Acquire) {
        let mut fds = [
            libc::pollfd { fd: shared.queue.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: shared.wake.as_raw_fd(), events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: poll on two descriptors we own.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), 2, 1000) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                tracing::error!(error = %e, "poll on the gate queue");
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            continue;
        }
        if fds[0].revents == 0 {
            continue;
        }
        let core = &mut *shared.core();
        for _ in 0..BATCH / RECV_MANY {
            match shared.queue.recv_many(&mut batch) {
                Ok(n) => {
                    for d in batch.datagrams(n) {
                        handle_datagram(shared, core, d, &mut accepts);
                    }
                    if n < RECV_MANY {
                        break; // the socket is empty
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    let n = shared.enobufs.fetch_add(1, Ordering::Relaxed) + 1;
                    tracing::error!(
                        count = n,
                        "ENOBUFS on the NFQUEUE socket: the kernel could not deliver queued packets to the gate and dropped them \
                         (clients will retransmit); the gate is too slow or its receive buffer too small"
                    );
                }
                Err(e) => {
                    tracing::error!(error = %e, "reading the gate queue");
                    break;
                }
            }
        }
        if let Err(e) = shared.queue.accept(&accepts) {
            shared.verdict_errors.fetch_add(1, Ordering::Relaxed);
            tracing::error!(error = %e, count = accepts.len(), "sending accept verdicts");
        }
        accepts.clear();
    }
}
