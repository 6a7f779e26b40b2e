//! `Gate`: the reader thread around a `GateCore`.
//!
//! One thread reads the queue (and, on the AF_XDP output path, the
//! service's output from its XDP sockets; on the observed input path, the
//! clients' frames from the ring) and gives the immediate verdicts;
//! `commit` (called from any thread) computes the releases and sends their
//! verdicts itself. Both do so while holding the core's lock,
//! so the verdicts reach the kernel in the order the core decided them: a
//! stream's packets never overtake each other.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use serde::{Deserialize, Serialize};

use crate::core::{Commit, Decision, GateCore, GateLimits, GateStats, ObservedInputStats, XdpPathStats};
use crate::error::GateError;
use crate::ipsend::IpSender;
use crate::nfqueue::{self, Event, LinkSource, NfQueue, QueueOptions};
use crate::observe::InputObserver;
use crate::stream::{PacketId, StreamData, StreamSnapshot};
use crate::xdp::XdpRedirect;
use crate::xsk::{XskRx, XskTx};

/// Kernel queue length: packets held for an epoch count against it.
pub const QUEUE_MAX_LEN: u32 = 65536;
/// Netlink receive buffer: bursts between two reads must fit.
pub const SOCKET_RCVBUF: usize = 32 << 20;
/// Datagrams read per lock hold.
const BATCH: usize = 256;
/// Datagrams read per system call (recvmmsg).
const RECV_MANY: usize = 32;
/// Frames read from one XDP socket per lock hold.
const XSK_BATCH: u32 = 256;
/// Ids of packets the AF_XDP output path took: above every NFQUEUE id.
pub const XDP_IDS: u64 = 1 << 32;
/// The observed input path's program wakes no one (`observe.rs`): the
/// ring is read before every decision on the service's output, and at
/// least this often (ms) otherwise.
const OBSERVED_READ_MS: i32 = 10;
/// Ids of clients' packets read from the observed input path's ring:
/// above those (the packets went on already; nothing to deliver).
pub const OBSERVED_IDS: u64 = 1 << 48;

/// Where the service's output (its packets to the clients) reaches the
/// gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OutputPath {
    /// The FORWARD chain's `-s SVC` rule queues it (a netlink copy, a
    /// verdict and a reinjection per packet).
    Nfqueue,
    /// An XDP program on the interface the primary's packets arrive on
    /// (`ifindex`) hands them to AF_XDP sockets; released ones leave by an
    /// AF_XDP socket on the clients' interface (`to_clients`) to the next
    /// hop each client's own packets came from, or by a raw socket for a
    /// client not heard from there (docs/gate.md "The output path"). The
    /// NFQUEUE rule stays behind it for what XDP passes on.
    Xdp { ifindex: u32, to_clients: u32 },
}

/// Where what clients send reaches the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum InputPath {
    /// The FORWARD chain's `-d SVC` rule queues it.
    Nfqueue,
    /// A tc program at the ingress of the clients' interface (`ifindex`)
    /// copies each frame to the service into a ring the gate reads, and
    /// marks the packet, which the gate chain lets by its NFQUEUE rule
    /// (`observe.rs`); what it does not copy takes the NFQUEUE.
    Observed { ifindex: u32 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateConfig {
    pub queue_num: u16,
    pub service_ip: Ipv4Addr,
    pub max_held_packets: u64,
    pub max_recorded_bytes: u64,
    pub output: OutputPath,
    pub input: InputPath,
}

impl GateConfig {
    /// Default bounds (65536 held packets, 256 MiB recorded), input and
    /// output through NFQUEUE.
    pub fn new(queue_num: u16, service_ip: Ipv4Addr) -> GateConfig {
        let l = GateLimits::default();
        GateConfig {
            queue_num,
            service_ip,
            max_held_packets: l.max_held_packets,
            max_recorded_bytes: l.max_recorded_bytes,
            output: OutputPath::Nfqueue,
            input: InputPath::Nfqueue,
        }
    }
}

/// The AF_XDP output path's state.
struct XdpOut {
    _redirect: XdpRedirect,
    sockets: Vec<XskRx>,
    /// Set by `block_output` (a fence, while it lasts) and by
    /// `seal_output` (a failover, for good): frames are dropped meanwhile.
    blocked: AtomicBool,
    sealed: AtomicBool,
    /// Locked after the core, never before.
    state: Mutex<XdpState>,
}

struct XdpState {
    next_id: u64,
    /// The bytes of every packet of this path the core holds or is about
    /// to accept, by id.
    packets: HashMap<PacketId, Vec<u8>>,
    tx: XskTx,
    /// Clients' next hops on `tx`'s interface: the link-layer source their
    /// packets to the service came from (learned from the NFQUEUE).
    next_hops: HashMap<Ipv4Addr, [u8; 6]>,
    sender: IpSender,
    frames: u64,
    blocked_dropped: u64,
    sent_xsk: u64,
    send_dropped: u64,
}

impl XdpState {
    /// Sends the packets on, in order: each readied by `ipsend::prepare`,
    /// then by the AF_XDP socket to its client's next hop, or by the raw
    /// socket. (A packet that falls back to the raw socket because the
    /// ring was full may overtake one queued before it: TCP reorders, and
    /// what goes out was released either way.)
    fn send_on(&mut self, mut packets: Vec<Vec<u8>>) {
        let mut raw: Vec<(Ipv4Addr, usize)> = Vec::new();
        for (i, p) in packets.iter_mut().enumerate() {
            let Some(dst) = crate::ipsend::prepare(p) else {
                self.send_dropped += 1;
                continue;
            };
            match self.next_hops.get(&dst) {
                Some(mac) if self.tx.push(*mac, p) => self.sent_xsk += 1,
                _ => raw.push((dst, i)),
            }
        }
        self.tx.submit();
        if !raw.is_empty() {
            let v: Vec<(Ipv4Addr, &[u8])> = raw.iter().map(|(dst, i)| (*dst, &packets[*i][..])).collect();
            self.sender.send(&v);
        }
    }

    /// A client's packet to the service came from `from`.
    fn learn(&mut self, packet: &[u8], from: LinkSource) {
        if from.ifindex != self.tx.ifindex() || packet.len() < 20 {
            return;
        }
        let src = Ipv4Addr::new(packet[12], packet[13], packet[14], packet[15]);
        if self.next_hops.get(&src) != Some(&from.mac) {
            self.next_hops.insert(src, from.mac);
        }
    }
}

impl XdpOut {
    fn open(ifindex: u32, to_clients: u32, service_ip: Ipv4Addr) -> Result<XdpOut, GateError> {
        let queues = crate::netif::rx_queues(ifindex);
        let tx = XskTx::open(to_clients)?;
        let redirect = XdpRedirect::attach(ifindex, service_ip, tx.max_frame(), queues)?;
        let mut sockets = Vec::new();
        for q in 0..queues {
            let x = XskRx::open(ifindex, q)?;
            redirect.set_socket(q, x.as_raw_fd())?;
            sockets.push(x);
        }
        let state = XdpState {
            next_id: XDP_IDS,
            packets: HashMap::new(),
            tx,
            next_hops: HashMap::new(),
            sender: IpSender::open()?,
            frames: 0,
            blocked_dropped: 0,
            sent_xsk: 0,
            send_dropped: 0,
        };
        Ok(XdpOut { _redirect: redirect, sockets, blocked: AtomicBool::new(false), sealed: AtomicBool::new(false), state: Mutex::new(state) })
    }

    fn state(&self) -> MutexGuard<'_, XdpState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn stats(&self) -> XdpPathStats {
        let st = self.state();
        let send = st.sender.stats();
        let kernel_dropped = self
            .sockets
            .iter()
            .map(|x| {
                let k = x.stats();
                k.rx_dropped + k.rx_invalid_descs + k.rx_ring_full
            })
            .sum();
        XdpPathStats {
            frames: st.frames,
            blocked_dropped: st.blocked_dropped,
            kernel_dropped,
            sent: st.sent_xsk,
            sent_raw: send.sent,
            send_dropped: st.send_dropped + st.tx.stats().tx_invalid_descs,
            send_refused: send.refused,
            next_hops: st.next_hops.len() as u64,
        }
    }
}

/// The observed input path's state. Locked after the core, before the
/// AF_XDP output path's state.
struct Observed {
    observer: InputObserver,
    next_id: u64,
    /// Packets to the service read from the queue meanwhile.
    queued: u64,
    /// A frame's IPv4 packet, its checksum completed.
    packet: Vec<u8>,
}

struct Shared {
    core: Mutex<GateCore>,
    queue: NfQueue,
    xdp: Option<XdpOut>,
    observed: Option<Mutex<Observed>>,
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

    fn observed(&self) -> Option<MutexGuard<'_, Observed>> {
        self.observed.as_ref().map(|o| o.lock().unwrap_or_else(|e| e.into_inner()))
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
        let xdp = match config.output {
            OutputPath::Nfqueue => None,
            OutputPath::Xdp { ifindex, to_clients } => {
                Some(XdpOut::open(ifindex, to_clients, config.service_ip).map_err(|e| GateError::OutputPath(Box::new(e)))?)
            }
        };
        let observed = match config.input {
            InputPath::Nfqueue => None,
            InputPath::Observed { ifindex } => {
                let attach = || {
                    let mtu = crate::netif::mtu(ifindex).map_err(GateError::io(format!("reading the MTU of interface {ifindex}")))?;
                    let max_frame = u16::try_from(14 + mtu).unwrap_or(u16::MAX);
                    Ok((InputObserver::attach(ifindex, config.service_ip, max_frame)?, max_frame))
                };
                let (observer, max_frame) = attach().map_err(|e| GateError::InputPath(Box::new(e)))?;
                Some(Mutex::new(Observed { observer, next_id: OBSERVED_IDS, queued: 0, packet: Vec::with_capacity(usize::from(max_frame)) }))
            }
        };
        let shared = Arc::new(Shared {
            core: Mutex::new(GateCore::new(config.service_ip, limits)),
            queue,
            xdp,
            observed,
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
        tracing::info!(queue = config.queue_num, service = %config.service_ip, output = ?config.output, input = ?config.input, "gate started");
        Ok(Gate { shared, thread: Mutex::new(Some(thread)) })
    }

    /// The core, with the clients' frames waiting in the observed input
    /// path's ring recorded first (and what they release sent on), so
    /// that what it tells is as current as with the queue.
    fn synced(&self) -> MutexGuard<'_, GateCore> {
        let mut core = self.shared.core();
        if let Err(e) = self.read_ring(&mut core) {
            tracing::error!(error = %e, "sending releases");
        }
        core
    }

    /// Records what waits in the observed input path's ring and sends on
    /// what that releases (called with the core locked).
    fn read_ring(&self, core: &mut GateCore) -> Result<(), GateError> {
        let mut ids = Vec::new();
        read_observed(&self.shared, core, &mut ids);
        self.send_release(&ids)
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
        self.synced().arrival_counter()
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
        // the clients' packets first: what they acknowledge or bring in
        // counts before this decision, as when the queue brought them
        let core = &mut *self.shared.core();
        self.read_ring(core)?;
        let ids = decide(core);
        self.send_release(&ids)?;
        Ok(ids.len())
    }

    /// Called with the core locked.
    fn send_release(&self, ids: &[PacketId]) -> Result<(), GateError> {
        if ids.is_empty() {
            return Ok(());
        }
        deliver(&self.shared, ids).map_err(|e| {
            self.shared.verdict_errors.fetch_add(1, Ordering::Relaxed);
            GateError::io(format!("sending {} release verdicts", ids.len()))(e)
        })
    }

    /// A fence (`on` while it lasts): what reaches the AF_XDP output path
    /// is dropped before the gate sees it, as the fence's firewall rules
    /// drop it on the NFQUEUE path (nothing of the service crosses a
    /// fenced host, pure ACKs included). Packets already held stay held.
    pub fn block_output(&self, on: bool) {
        if let Some(x) = &self.shared.xdp {
            x.blocked.store(on, Ordering::Release);
        }
    }

    /// A failover: the same drop for good (the old primary's output, which
    /// `bypass_output`'s rule drops on the NFQUEUE path; the restored
    /// service's does not come this way). A fence lifted later does not
    /// undo it.
    pub fn seal_output(&self) {
        if let Some(x) = &self.shared.xdp {
            x.sealed.store(true, Ordering::Release);
        }
    }

    /// Which way the service's output reaches this gate.
    pub fn output_path(&self) -> &'static str {
        if self.shared.xdp.is_some() {
            "xdp"
        } else {
            "nfqueue"
        }
    }

    /// Which way what clients send reaches this gate.
    pub fn input_path(&self) -> &'static str {
        if self.shared.observed.is_some() {
            "observed"
        } else {
            "nfqueue"
        }
    }

    /// Failover: holds every packet to the service from now on (see
    /// [`crate::GateCore::hold_input`]). On the observed input path the
    /// program is detached first (later packets take the NFQUEUE rule,
    /// where they are held) and the ring read to its end: what went on to
    /// the old primary is recorded before anything is held.
    pub fn hold_input(&self) -> Result<(), GateError> {
        self.running()?;
        if let Some(mut o) = self.shared.observed() {
            o.observer.detach();
        }
        // (what the ring's packets acknowledged is released: the gate
        // still releases until the failover stops it, next)
        let core = &mut *self.shared.core();
        self.read_ring(core)?;
        core.hold_input();
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
        let mut s = self.synced().stats();
        s.netlink_enobufs = self.shared.enobufs.load(Ordering::Relaxed);
        s.xdp = self.shared.xdp.as_ref().map(XdpOut::stats);
        s.observed_input = self.shared.observed().map(|o| {
            let k = o.observer.stats();
            ObservedInputStats { frames: k.frames, bytes: k.bytes, malformed: k.malformed, queued: o.queued, attached: o.observer.attached() }
        });
        s
    }

    pub fn streams(&self) -> Vec<StreamSnapshot> {
        self.synced().streams()
    }

    /// One stream with its recorded bytes (for failover).
    pub fn stream_data(&self, client: SocketAddrV4, server: SocketAddrV4) -> Option<StreamData> {
        self.synced().stream_data(client, server)
    }

    /// See [`GateCore::unanswered_syns`].
    pub fn unanswered_syns(&self) -> Vec<Vec<u8>> {
        self.synced().unanswered_syns()
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
            Event::Packet { id, payload, truncated, from } => {
                if truncated {
                    tracing::warn!(packet = id.0, "packet truncated by the copy range");
                }
                if let (Some(x), Some(from)) = (&shared.xdp, from) {
                    x.state().learn(payload, from);
                }
                if payload.len() >= 20 && payload[16..20] == core.service_ip().octets() {
                    if let Some(mut o) = shared.observed() {
                        o.queued += 1;
                    }
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
        if let Err(e) = deliver(shared, &accepts) {
            tracing::error!(error = %e, "sending verdicts");
        }
        accepts.clear();
    }
    let xsks = shared.xdp.as_ref().map_or(&[][..], |x| &x.sockets[..]);
    let ring = shared.observed().map(|o| o.observer.as_raw_fd());
    while !shared.stop.load(Ordering::Acquire) {
        // frames the driver left in the transmit ring (busy): kicked again
        // soon, not at the next release
        let tx_pending = shared.xdp.as_ref().is_some_and(|x| {
            let st = &mut *x.state();
            st.tx.pending() && {
                st.tx.submit();
                st.tx.pending()
            }
        });
        let mut fds = vec![
            libc::pollfd { fd: shared.queue.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: shared.wake.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            // (-1: ignored by poll)
            libc::pollfd { fd: ring.unwrap_or(-1), events: libc::POLLIN, revents: 0 },
        ];
        fds.extend(xsks.iter().map(|x| libc::pollfd { fd: x.as_raw_fd(), events: libc::POLLIN, revents: 0 }));
        let timeout = if tx_pending {
            1
        } else if ring.is_some() {
            OBSERVED_READ_MS
        } else {
            1000
        };
        // SAFETY: poll on descriptors we own.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                tracing::error!(error = %e, "poll on the gate queue");
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            continue;
        }
        if fds[2].revents != 0 {
            let core = &mut *shared.core();
            read_observed(shared, core, &mut accepts);
            if let Err(e) = deliver(shared, &accepts) {
                shared.verdict_errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %e, count = accepts.len(), "sending release verdicts");
            }
            accepts.clear();
        }
        if fds[3..].iter().any(|f| f.revents != 0) {
            if let Some(x) = &shared.xdp {
                let core = &mut *shared.core();
                read_observed(shared, core, &mut accepts);
                read_xdp(x, core, &mut accepts);
                if let Err(e) = deliver(shared, &accepts) {
                    shared.verdict_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(error = %e, count = accepts.len(), "sending accept verdicts");
                }
                accepts.clear();
            }
        }
        if fds[0].revents == 0 {
            continue;
        }
        let core = &mut *shared.core();
        read_observed(shared, core, &mut accepts);
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
        if let Err(e) = deliver(shared, &accepts) {
            shared.verdict_errors.fetch_add(1, Ordering::Relaxed);
            tracing::error!(error = %e, count = accepts.len(), "sending accept verdicts");
        }
        accepts.clear();
    }
}

/// Records the clients' frames waiting in the observed input path's ring
/// (with the core locked), oldest first; pushes the ids of held packets
/// they release. Called before every decision on the service's output, so
/// that the core sees a client's packet before any reply to it.
fn read_observed(shared: &Shared, core: &mut GateCore, accepts: &mut Vec<PacketId>) {
    let Some(mut guard) = shared.observed() else { return };
    let o = &mut *guard;
    let (observer, next_id, packet) = (&mut o.observer, &mut o.next_id, &mut o.packet);
    let ifindex = observer.ifindex();
    observer.drain(|frame| {
        let Some(ip) = frame.get(14..) else { return };
        // without the link layer's padding of short frames
        let ip = match ip.get(2..4).map(|t| usize::from(u16::from_be_bytes([t[0], t[1]]))) {
            Some(total) if total >= 20 && total <= ip.len() => &ip[..total],
            _ => ip,
        };
        packet.clear();
        packet.extend_from_slice(ip);
        crate::ipsend::complete_checksum(packet);
        if let Some(x) = &shared.xdp {
            let mut mac = [0u8; 6];
            mac.copy_from_slice(&frame[6..12]);
            x.state().learn(packet, LinkSource { ifindex, mac });
        }
        let id = PacketId(*next_id);
        *next_id += 1;
        // the packet went on already: a decision to hold it (only for one
        // the core cannot read) has nothing to hold
        let _ = core.on_packet(id, packet);
        accepts.extend(core.take_released());
    });
}

/// Decides on the frames waiting in the XDP sockets (with the core
/// locked); pushes the accepted ids. Each frame's IPv4 packet is kept by
/// id until `deliver` sends it on.
fn read_xdp(x: &XdpOut, core: &mut GateCore, accepts: &mut Vec<PacketId>) {
    let blocked = x.blocked.load(Ordering::Acquire) || x.sealed.load(Ordering::Acquire);
    let st = &mut *x.state();
    for s in &x.sockets {
        s.drain(XSK_BATCH, |frame| {
            st.frames += 1;
            if blocked {
                st.blocked_dropped += 1;
                return;
            }
            // past the Ethernet header (the program passed only IPv4),
            // without the link layer's padding of short frames
            let Some(ip) = frame.get(14..) else { return };
            let ip = match ip.get(2..4).map(|t| usize::from(u16::from_be_bytes([t[0], t[1]]))) {
                Some(total) if total >= 20 && total <= ip.len() => &ip[..total],
                _ => ip,
            };
            let id = PacketId(st.next_id);
            st.next_id += 1;
            st.packets.insert(id, ip.to_vec());
            let d = core.on_packet(id, ip);
            accepts.extend(core.take_released());
            if d == Decision::Accept {
                accepts.push(id);
            }
        });
    }
}

/// Lets the packets go, in order: NFQUEUE ones by an accept verdict,
/// those of the XDP path by `XdpState::send_on`. Called with the core
/// locked.
fn deliver(shared: &Shared, ids: &[PacketId]) -> std::io::Result<()> {
    // (the observed input path's packets went on already)
    let ids: std::borrow::Cow<'_, [PacketId]> = if ids.iter().any(|id| id.0 >= OBSERVED_IDS) {
        ids.iter().filter(|id| id.0 < OBSERVED_IDS).copied().collect::<Vec<_>>().into()
    } else {
        ids.into()
    };
    let Some(x) = &shared.xdp else { return shared.queue.accept(&ids) };
    let (queued, taken): (Vec<PacketId>, Vec<PacketId>) = ids.iter().partition(|id| id.0 < XDP_IDS);
    if !taken.is_empty() {
        let st = &mut *x.state();
        let out: Vec<Vec<u8>> = taken.iter().filter_map(|id| st.packets.remove(id)).collect();
        st.send_on(out);
    }
    shared.queue.accept(&queued)
}
