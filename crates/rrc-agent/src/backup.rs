//! The backup's side of a service (issue 3 §4–5; NiLiCon §IV, §V-A; RRC §3).
//!
//! A replication connection from the primary carries the service's
//! checkpoints. The receiving thread assembles each one and queues it once
//! its end frame's length and CRC hold; a committer thread applies queued
//! checkpoints in order to the store (which verifies every checksum and
//! applies atomically or not at all), then tells the gate, which releases
//! the replies the checkpoint covers, then acknowledges the epoch. A
//! checkpoint that fails is discarded, the store keeps its last committed
//! state, and the primary is told (it resynchronises with a full one).
//! A heartbeat thread sends the gate's arrival number every 30 ms.

use std::collections::VecDeque;
use std::net::{Ipv4Addr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rrc_gate::{Gate, GateConfig, GateError};
use rrc_store::Store;
use rrc_wire::msg::{Ack, CheckpointBegin, CheckpointEnd, Fault, Heartbeat, Replicate, ReplicateReady, Response, ServiceSpec, Stop};
use rrc_wire::{Frame, FrameKind, FrameWriter, WireError};
use rrc_wire::reply::{BackupStats, Exported, FaultSet, Role, RoleStats, ServiceStatus};

use crate::intake::{Intake, IntakeLimits, Received, Step};
use crate::net::BackupRoute;
use crate::repair_plan::socket_v4;
use crate::peer::PeerConn;
use crate::{lock, Agent, Service};

const HEARTBEAT_EVERY: Duration = Duration::from_millis(30);
/// Data-directory content held ahead of the checkpoint it goes with (the
/// initial content, or what rejected checkpoints carried): bounded, so
/// that a peer cannot make the backup hold an endless stream of it.
const MAX_CARRIED: usize = 4 << 30;
/// Checkpoints received and waiting to be committed: the primary sends the
/// next only after the last one's ack, so more than one waits only while
/// commits are stalled (`rrc fault`), or if the primary misbehaves.
const MAX_PENDING: usize = 8;
/// NFQUEUE numbers used by gates: base + agent-wide index.
const QUEUE_BASE: u16 = 100;

struct Shared {
    stats: BackupStats,
    queue: VecDeque<Received>,
    stalled: bool,
    primary_lost: Option<String>,
    /// Fault `alter-first-replay` armed: the next failover's first replay
    /// gets an altered log.
    alter_first_replay: bool,
    /// Fault `damage-first-restore` armed: the next failover's first
    /// restorer gets a damaged image.
    damage_first_restore: bool,
}

pub struct Backup {
    pub spec: ServiceSpec,
    pub host: String,
    pub primary_addr: String,
    pub primary_hb_port: u16,
    pub queue_num: u16,
    dir: PathBuf,
    store: Mutex<Store>,
    /// The copy of the service's data directory, when it has one.
    data: Mutex<Option<rrc_store::datadir::DataDirCopy>>,
    gate: Gate,
    route: BackupRoute,
    /// What a failover restores into, made in advance (taken by it).
    standby: Mutex<Option<crate::failover::Standby>>,
    shared: Mutex<Shared>,
    wake: Condvar,
    stopping: AtomicBool,
    /// The replication session's writing half (acks, heartbeats; the
    /// refusals of its set-up before this Backup existed).
    writer: Arc<Mutex<FrameWriter<TcpStream>>>,
    conn_ctl: TcpStream,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    hb: Mutex<Option<crate::heartbeat::Heartbeat>>,
    /// The heartbeat's UDP port, for `rrc status` (which must not wait on
    /// `hb`: a failover joins the heartbeat threads under it).
    hb_port: std::sync::atomic::AtomicU16,
    /// Where the byte counts of connections repaired at an earlier failover
    /// start: (write_base, read_base) by (client, server), from the seeds.
    bases: std::collections::HashMap<(std::net::SocketAddrV4, std::net::SocketAddrV4), (u32, u32)>,
    /// Connections already reported to the primary (Ack.new_streams).
    reported: Mutex<std::collections::HashSet<(std::net::SocketAddrV4, std::net::SocketAddrV4)>>,
    /// rr mode: the record log since the last committed checkpoint's cut
    /// (filled by the log session, logship.rs).
    log: Option<Mutex<crate::shipped_log::ShippedLog>>,
    /// The log session's socket, shut down by [`Backup::halt`]: its reader
    /// may wait long for the next batch, and a primary that crashed closes
    /// nothing.
    log_conn: Mutex<Option<TcpStream>>,
    /// rr mode with `--verify-replay`: the shadow replays (shadow.rs).
    shadow: Option<Arc<crate::shadow::Shadow>>,
}

fn refuse(w: &Mutex<FrameWriter<TcpStream>>, e: &anyhow::Error) {
    let _ = lock(w).send_json(FrameKind::Response, &Response::<()>::err(format!("{e:#}")));
}

/// A replication session was opened with `first` (a Replicate frame).
pub fn serve(agent: &Arc<Agent>, conn: PeerConn, first: Frame) {
    let PeerConn { session, reader, writer, ctl, peer_addr, local_addr } = conn;
    let writer = Arc::new(Mutex::new(writer));
    // The handshake's deadline was for the opening; a replication is long.
    let _ = ctl.set_read_timeout(None);
    let rep: Replicate = match first.parse() {
        Ok(r) => r,
        Err(e) => {
            agent.security.count_wire(&e, &peer_addr.to_string(), format!("{}'s Replicate: {e}", session.peer_host));
            refuse(&writer, &anyhow::Error::new(e));
            return;
        }
    };
    let name = rep.spec.name.clone();
    let b = match check_peer(&session, peer_addr, &rep).and_then(|_| setup(agent, ctl, writer.clone(), rep)) {
        Ok(b) => Arc::new(b),
        Err(e) => {
            tracing::error!(service = %name, "backup set-up failed: {e:#}");
            refuse(&writer, &e);
            return;
        }
    };
    // With views (issue 15): etcd's view must name this host as the
    // backup of this primary; the lease runs from here.
    let view = match &agent.etcd {
        Some(etcd) => match crate::views::ServiceView::join(etcd, &agent.cfg.name, &name, &session.peer_host) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::error!(service = %name, "backup refused: {e:#}");
                b.teardown();
                refuse(&writer, &e);
                return;
            }
        },
        None => None,
    };
    if let Err(e) = agent.insert(&name, Service::Backup(b.clone())) {
        b.teardown();
        refuse(&writer, &e);
        return;
    }
    if let Some(v) = view {
        agent.set_view(&name, v.clone());
        if let Err(e) = v.start(agent) {
            let _ = agent.stop(&name, "the lease threads did not start");
            refuse(&writer, &e);
            return;
        }
    }
    let my_ip = local_addr.ip();
    let hb = crate::heartbeat::bind(my_ip).and_then(|sock| {
        let port = sock.local_addr()?.port();
        let peer = std::net::SocketAddr::new(b.primary_addr.parse().context("the primary's address")?, b.primary_hb_port);
        let (a2, b2) = (agent.clone(), b.clone());
        let every = Duration::from_millis(b.spec.heartbeat_ms);
        let fail_after = Duration::from_millis(b.spec.failure_ms);
        let a3 = agent.clone();
        let refused = move |from: std::net::SocketAddr, why: String| a3.security.reject(rrc_wire::Rejection::BadHeartbeat, &from.to_string(), why);
        let hb = crate::heartbeat::Heartbeat::start(sock, peer, every, fail_after, &name, session.heartbeat_keys(), refused, move |s| crate::failover::primary_silent(&a2, &b2, s))?;
        Ok((hb, port))
    });
    let hb_port = match hb {
        Ok((hb, port)) => {
            b.hb_port.store(port, Ordering::Relaxed);
            *lock(&b.hb) = Some(hb);
            port
        }
        Err(e) => {
            agent.remove(&name);
            b.teardown();
            refuse(&writer, &e);
            return;
        }
    };
    let ready = ReplicateReady { backup: agent.cfg.name.clone(), backup_addr: my_ip.to_string(), queue_num: b.queue_num, backup_hb_port: hb_port };
    if let Err(e) = lock(&b.writer).send_json(FrameKind::ReplicateReady, &ready) {
        tracing::error!(service = %name, "sending ReplicateReady: {e}");
        agent.remove(&name);
        b.teardown();
        return;
    }
    tracing::info!(service = %name, queue = b.queue_num, primary = %b.primary_addr, "backup ready");
    lock(&b.shared).stats.state = "waiting for the first checkpoint".into();
    let (b1, b2) = (b.clone(), b.clone());
    let spawned = (
        std::thread::Builder::new().name(format!("commit-{name}")).spawn(move || b1.committer()),
        std::thread::Builder::new().name(format!("hb-{name}")).spawn(move || b2.heartbeats()),
    );
    if let (Ok(t1), Ok(t2)) = spawned {
        lock(&b.threads).extend([t1, t2]);
    }
    if let Some(stop) = b.receive(agent, reader) {
        // The primary ended the service, or this backup's part in it (it
        // declared it failed): this side goes, never to fail over to a
        // state the primary has moved past.
        if agent.remove(&name).is_some() {
            b.stop(&stop.reason);
        }
    }
}

/// The gate of a new backup, on the output path the agent was told to use
/// (AF_XDP falls back to NFQUEUE, loudly, where XDP cannot be attached:
/// e.g. another service's gate holds the interface's XDP hook).
fn open_gate(cfg: &crate::AgentConfig, queue_num: u16, svc: Ipv4Addr) -> Result<Gate> {
    let mut config = GateConfig::new(queue_num, svc);
    let index = |name: &str| rrc_gate::netif::index(name).unwrap_or(0);
    let (ifindex, to_clients) = (index(&cfg.repl_if), index(&cfg.front_if));
    let want_xdp = cfg.gate_output == crate::GateOutput::Xdp;
    let want_observe = cfg.gate_input == crate::GateInput::Observe;
    if (want_xdp || want_observe) && (ifindex == 0 || to_clients == 0) {
        tracing::warn!(repl_if = %cfg.repl_if, front_if = %cfg.front_if, "an interface of the gate's AF_XDP output or observed input path is missing; using NFQUEUE");
        return Gate::open(config).context("opening the gate");
    }
    if want_xdp {
        config.output = rrc_gate::OutputPath::Xdp { ifindex, to_clients };
    }
    if want_observe {
        config.input = rrc_gate::InputPath::Observed { ifindex: to_clients };
    }
    // each path falls back to NFQUEUE on its own (one XDP program per
    // interface: a second service's gate on this backup gets EBUSY)
    loop {
        match Gate::open(config) {
            Ok(g) => return Ok(g),
            Err(e) if config.input != rrc_gate::InputPath::Nfqueue && matches!(e, GateError::InputPath(_)) => {
                tracing::warn!(front_if = %cfg.front_if, "the gate's observed input path is unavailable ({e}); what clients send goes through NFQUEUE");
                config.input = rrc_gate::InputPath::Nfqueue;
            }
            Err(e) if config.output != rrc_gate::OutputPath::Nfqueue => {
                tracing::warn!(repl_if = %cfg.repl_if, "the gate's AF_XDP output path is unavailable ({e}); the service's output goes through NFQUEUE");
                config.output = rrc_gate::OutputPath::Nfqueue;
            }
            Err(e) => return Err(e).context("opening the gate"),
        }
    }
}

/// The session's peer is the replication's primary, at the address it
/// gives (its name is authenticated by the handshake when the agents share
/// a key; its address by the connection).
fn check_peer(session: &rrc_wire::Session, from: std::net::SocketAddr, rep: &Replicate) -> Result<()> {
    if session.peer_host != rep.spec.primary {
        bail!("host {} opened a replication whose primary is {}", session.peer_host, rep.spec.primary);
    }
    if rep.primary_addr.parse::<std::net::IpAddr>().ok() != Some(from.ip()) {
        bail!("the primary {} says it is at {:?} but connects from {}", rep.spec.primary, rep.primary_addr, from.ip());
    }
    Ok(())
}

fn setup(agent: &Arc<Agent>, conn_ctl: TcpStream, writer: Arc<Mutex<FrameWriter<TcpStream>>>, rep: Replicate) -> Result<Backup> {
    let spec = rep.spec;
    spec.validate()?;
    if spec.backup != agent.cfg.name {
        bail!("this is host {}, the service's backup is {}", agent.cfg.name, spec.backup);
    }
    if agent.primary(&spec.name).is_some() || agent.backup(&spec.name).is_some() {
        bail!("host {} already has a service named {:?}", agent.cfg.name, spec.name);
    }
    let svc: Ipv4Addr = spec.service_ip.parse().with_context(|| format!("service IP {:?}", spec.service_ip))?;
    let dir = agent.service_dir(&spec.name);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let queue_num = QUEUE_BASE + (agent.next_index() % 60000) as u16;
    let gate = open_gate(&agent.cfg, queue_num, svc)?;
    let seeds: Vec<rrc_gate::StreamSeed> = rep.seeds.iter().map(|s| s.stream.clone()).collect();
    let bases = rep
        .seeds
        .iter()
        .map(|s| ((s.stream.client, s.stream.server), (s.write_base, s.read_base)))
        .filter(|(_, b)| *b != (0, 0))
        .collect();
    if !seeds.is_empty() {
        tracing::info!(service = %spec.name, connections = seeds.len(), "joining established connections");
        gate.seed(&seeds);
    }
    let route = match BackupRoute::create(&spec.service_ip, &rep.primary_addr, &agent.cfg.front_if, &agent.cfg.repl_if, queue_num) {
        Ok(r) => r,
        Err(e) => {
            let _ = gate.shutdown();
            return Err(e.context("routing the service through this host"));
        }
    };
    let data = match &spec.data_dir {
        Some(_) => {
            let root = dir.join("data");
            let _ = std::fs::remove_dir_all(&root);
            if let Err(e) = std::fs::create_dir_all(&root) {
                route.destroy();
                let _ = gate.shutdown();
                return Err(anyhow::Error::new(e).context(format!("creating {}", root.display())));
            }
            Some(rrc_store::datadir::DataDirCopy::new(&root))
        }
        None => None,
    };
    let standby = crate::failover::Standby::prepare(agent, &spec, data.as_ref().map(|d| d.root()));
    let shadow = (spec.verify_replay && spec.mode == rrc_wire::msg::Mode::Rr).then(|| {
        Arc::new(crate::shadow::Shadow::new(crate::shadow::ShadowEnv {
            service: spec.name.clone(),
            service_ip: spec.service_ip.clone(),
            netns: format!("{}{}-{}-shadow", agent.cfg.netns_prefix, agent.cfg.name, spec.name),
            dir: dir.join("shadow"),
            epoch: Duration::from_millis(spec.epoch_ms),
            restorer: agent.cfg.restorer.clone(),
            container: crate::failover::container_config(agent),
            log: agent.service_log(&spec.name),
            data_dir: spec.data_dir.clone(),
        }))
    });
    Ok(Backup {
        data: Mutex::new(data),
        host: agent.cfg.name.clone(),
        primary_addr: rep.primary_addr,
        primary_hb_port: rep.primary_hb_port,
        queue_num,
        dir,
        store: Mutex::new(Store::new()),
        gate,
        route,
        standby: Mutex::new(standby),
        shared: Mutex::new(Shared { stats: BackupStats { state: "starting".into(), ..Default::default() }, queue: VecDeque::new(), stalled: false, primary_lost: None, alter_first_replay: false, damage_first_restore: false }),
        wake: Condvar::new(),
        stopping: AtomicBool::new(false),
        writer,
        conn_ctl,
        threads: Mutex::new(Vec::new()),
        hb: Mutex::new(None),
        hb_port: std::sync::atomic::AtomicU16::new(0),
        reported: Mutex::new(std::collections::HashSet::new()),
        bases,
        log: (spec.mode == rrc_wire::msg::Mode::Rr).then(|| Mutex::new(crate::shipped_log::ShippedLog::new())),
        log_conn: Mutex::new(None),
        shadow,
        spec,
    })
}

/// The largest checkpoint this backup takes: what its memory could hold
/// (the machine's RAM), and never more than 64 GiB.
fn max_checkpoint_bytes() -> u64 {
    // SAFETY: sysinfo fills the struct.
    let mut si: libc::sysinfo = unsafe { std::mem::zeroed() };
    let ram = if unsafe { libc::sysinfo(&mut si) } == 0 { (si.totalram as u64).saturating_mul(u64::from(si.mem_unit)) } else { 0 };
    if ram == 0 {
        64 << 30
    } else {
        ram.min(64 << 30)
    }
}

/// The checkpoint's TCP table as the gate wants it: every IPv4 connection
/// with sequence numbers (IPv4-mapped IPv6 ones included), the service's
/// side as `server`. Listeners and TIME_WAIT entries carry none and are
/// left out; the gate forgets a stream that drops out of the table once
/// nothing of it is held (docs/gate.md).
fn server_streams(table: &[rrc_image::sections::TcpStream]) -> Vec<rrc_gate::ServerStream> {
    table
        .iter()
        .filter_map(|t| {
            let (w, r) = (t.write_seq_rel?, t.read_seq_rel?);
            Some(rrc_gate::ServerStream {
                client: socket_v4(t.remote)?,
                server: socket_v4(t.local)?,
                // Relative sequence numbers wrap like TCP's own.
                write_seq_rel: w as u32,
                read_seq_rel: r as u32,
                state: t.state,
            })
        })
        .collect()
}

impl Backup {
    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping()
    }

    pub fn route(&self) -> &BackupRoute {
        &self.route
    }

    pub fn gate(&self) -> &Gate {
        &self.gate
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn store(&self) -> std::sync::MutexGuard<'_, Store> {
        lock(&self.store)
    }

    pub fn last_committed_epoch(&self) -> u64 {
        lock(&self.shared).stats.last_committed_epoch
    }

    /// The data directory copy's root, if the service has one and it is
    /// consistent.
    pub fn data_root(&self) -> Option<PathBuf> {
        lock(&self.data).as_ref().filter(|c| c.check().is_ok()).map(|c| c.root().to_path_buf())
    }

    /// Failover: replication ends here (threads, connection, heartbeats);
    /// the store, the gate's recording and the routes stay for the restore.
    /// Nothing is waited for: a commit in progress finishes under the
    /// store's lock, which the failover takes next.
    pub fn halt(&self) {
        self.stopping.store(true, Ordering::Relaxed);
        if let Some(s) = &self.shadow {
            s.stop();
        }
        self.wake.notify_all();
        let _ = self.conn_ctl.shutdown(std::net::Shutdown::Both);
        if let Some(c) = lock(&self.log_conn).as_ref() {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
        if let Some(hb) = lock(&self.hb).as_ref() {
            hb.signal_stop();
        }
    }

    /// The log session's socket, for [`Backup::halt`] to end it; false
    /// if the backup is already halting (the caller ends the session).
    pub fn attach_log_session(&self, c: TcpStream) -> bool {
        let mut slot = lock(&self.log_conn);
        if self.stopping() {
            return false;
        }
        *slot = Some(c);
        true
    }

    /// The threads of a halted backup, joined (stop, or after a failover).
    fn join_threads(&self) {
        // Taken out first: the join below must not hold the lock (the
        // monitor thread being joined may be failing over).
        let hb = lock(&self.hb).take();
        if let Some(mut hb) = hb {
            hb.stop();
        }
        let me = std::thread::current().id();
        for t in lock(&self.threads).drain(..) {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
    }

    /// After a failover went live: the gate goes, the halted threads are
    /// joined.
    pub fn close_gate(&self) {
        if let Err(e) = self.gate.shutdown() {
            tracing::warn!(service = %self.spec.name, "closing the gate: {e}");
        }
        self.join_threads();
    }

    /// Fenced (issue 15): this host holds the service IP and its gate
    /// releases the replies; while fenced it releases none and nothing
    /// of the service crosses it.
    pub fn fence(&self, on: bool) -> Result<()> {
        if on {
            self.gate.set_release_enabled(false).context("stopping the gate's releases")?;
            // the AF_XDP output path passes no firewall: the gate drops it
            self.gate.block_output(true);
            crate::net::fence_service(&self.route.service_ip, &self.route.front_if, true)
        } else {
            crate::net::fence_service(&self.route.service_ip, &self.route.front_if, false)?;
            self.gate.block_output(false);
            self.gate.set_release_enabled(true).context("resuming the gate's releases")?;
            Ok(())
        }
    }

    pub fn silence_heartbeats(&self, on: bool) {
        if let Some(hb) = lock(&self.hb).as_ref() {
            hb.silence(on);
        }
    }

    /// How many of the primary's heartbeats were heard (None before the
    /// heartbeat started).
    pub fn heard(&self) -> Option<Arc<std::sync::atomic::AtomicU64>> {
        lock(&self.hb).as_ref().map(|h| h.heard())
    }

    pub fn set_failed(&self, why: String) {
        let mut sh = lock(&self.shared);
        sh.stats.state = "failover failed".into();
        sh.stats.last_error = Some(why);
    }

    pub fn status(&self) -> ServiceStatus {
        let mut st = {
            let sh = lock(&self.shared);
            let mut st = sh.stats.clone();
            st.stalled = sh.stalled;
            st.pending = sh.queue.len();
            st
        };
        st.store_bytes = lock(&self.store).bytes_held();
        st.log = self.log.as_ref().map(|l| lock(l).stats());
        st.shadow = self.shadow.as_ref().map(|s| Box::new(s.stats()));
        ServiceStatus {
            checkpoints_committed: st.checkpoints_committed,
            primary_addr: Some(self.primary_addr.clone()),
            queue_num: Some(self.queue_num),
            heartbeat_port: Some(self.hb_port.load(Ordering::Relaxed)).filter(|p| *p != 0),
            primary_heartbeat_port: Some(self.primary_hb_port),
            gate: Some(self.gate.stats()),
            ..ServiceStatus::of(&self.spec, Role::Backup, &self.host, RoleStats::Backup(st))
        }
    }

    /// Takes the `damage-first-restore` fault (armed: true, once).
    pub fn take_damage_first_restore(&self) -> bool {
        std::mem::take(&mut lock(&self.shared).damage_first_restore)
    }

    /// Takes the `alter-first-replay` fault (armed: true, once).
    pub fn take_alter_first_replay(&self) -> bool {
        std::mem::take(&mut lock(&self.shared).alter_first_replay)
    }

    /// rr mode's record log, None in checkpoint mode.
    pub fn shipped_log(&self) -> Option<&Mutex<crate::shipped_log::ShippedLog>> {
        self.log.as_ref()
    }

    pub fn fault(&self, f: Fault) -> Result<FaultSet> {
        match f {
            Fault::StallCommits => {
                lock(&self.shared).stalled = true;
                self.gate.set_release_enabled(false).context("stopping the gate's releases")?;
                Ok(FaultSet { stalled: Some(true), ..Default::default() })
            }
            Fault::ResumeCommits => {
                lock(&self.shared).stalled = false;
                self.gate.set_release_enabled(true).context("resuming the gate's releases")?;
                self.wake.notify_all();
                Ok(FaultSet { stalled: Some(false), ..Default::default() })
            }
            Fault::AlterNextLoggedOutput => {
                let log = self.log.as_ref().with_context(|| format!("{} runs in checkpoint mode: it has no record log", self.spec.name))?;
                lock(log).alter_next_output();
                Ok(FaultSet { armed: Some("alter-next-logged-output".into()), ..Default::default() })
            }
            Fault::AlterFirstReplay => {
                self.log.as_ref().with_context(|| format!("{} runs in checkpoint mode: it has no record log", self.spec.name))?;
                lock(&self.shared).alter_first_replay = true;
                Ok(FaultSet { armed: Some("alter-first-replay".into()), ..Default::default() })
            }
            Fault::DamageFirstRestore => {
                lock(&self.shared).damage_first_restore = true;
                Ok(FaultSet { armed: Some("damage-first-restore".into()), ..Default::default() })
            }
            Fault::MuteHeartbeats => {
                let hb = lock(&self.hb);
                let hb = hb.as_ref().context("the backup's heartbeat is not running")?;
                hb.mute(Duration::from_millis(rrc_wire::msg::MUTE_HEARTBEATS_MS));
                Ok(FaultSet { armed: Some("mute-heartbeats".into()), ..Default::default() })
            }
            other => bail!("fault {other:?} is injected at the primary, not the backup"),
        }
    }

    /// Writes the committed state as DIR/checkpoint.rrc.
    pub fn export(&self, dir: &Path) -> Result<Exported> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join(rrc_image::IMAGE_FILE_NAME);
        // data, then store: the committer's order (commit)
        let data = lock(&self.data);
        let store = lock(&self.store);
        if store.committed().is_none() {
            bail!("no checkpoint of {} is committed yet", self.spec.name);
        }
        let id = store.write_image(&path).with_context(|| format!("writing {}", path.display()))?;
        let mut data_dir = None;
        if let Some(copy) = data.as_ref() {
            copy.check()?;
            let to = dir.join("data");
            crate::copy_tree(copy.root(), &to).context("exporting the data directory")?;
            data_dir = Some(to);
        }
        let epoch = lock(&self.shared).stats.last_committed_epoch;
        Ok(Exported {
            bytes: std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0),
            image: path.display().to_string(),
            data_dir: data_dir.map(|d| d.display().to_string()),
            image_id: id.to_string(),
            epoch,
        })
    }

    /// Reads the replication connection until it ends. The primary's Stop
    /// if it ended it so.
    fn receive(&self, agent: &Agent, mut c: crate::peer::PeerReader) -> Option<Stop> {
        let mut intake = Intake::new(IntakeLimits { max_checkpoint_bytes: max_checkpoint_bytes(), max_carried_bytes: MAX_CARRIED, max_pending: MAX_PENDING });
        loop {
            let f = match c.recv() {
                Ok(f) => f,
                Err(e) => {
                    if !self.stopping() {
                        agent.security.count_wire(&e, &self.primary_addr, format!("replication of {} from its primary {}: {e}", self.spec.name, self.spec.primary));
                        let why = match e {
                            WireError::Closed => "the primary closed the replication connection".to_string(),
                            e => format!("replication connection: {e}"),
                        };
                        tracing::error!(service = %self.spec.name, "{why}; keeping the committed state");
                        let mut sh = lock(&self.shared);
                        sh.primary_lost = Some(why.clone());
                        sh.stats.state = "primary lost".into();
                        sh.stats.last_error = Some(why);
                    }
                    return None;
                }
            };
            let steps = match f.kind {
                FrameKind::CheckpointBegin => match f.parse::<CheckpointBegin>() {
                    Ok(b) => intake.begin(b),
                    Err(e) => vec![intake.malformed(format!("{e}"))],
                },
                FrameKind::CheckpointData => vec![intake.data(&f.payload)],
                FrameKind::CheckpointEnd => match f.parse::<CheckpointEnd>() {
                    Ok(end) => vec![intake.end(end, lock(&self.shared).queue.len())],
                    Err(e) => vec![intake.malformed(format!("{e}"))],
                },
                FrameKind::DataDirInit => vec![intake.data_dir(f.payload)],
                FrameKind::Stop => {
                    return Some(f.parse::<Stop>().unwrap_or_else(|e| Stop { reason: format!("the primary stopped the service (its Stop frame: {e})") }));
                }
                FrameKind::Heartbeat => continue,
                k => vec![Step::Ignore(format!("unexpected {k:?} frame on the replication connection"))],
            };
            for step in steps {
                match step {
                    Step::Continue => {}
                    Step::Reject { epoch, why } => self.reject(epoch, why),
                    Step::Queue(r) => {
                        let mut sh = lock(&self.shared);
                        sh.stats.received_bytes += r.image.len() as u64;
                        sh.queue.push_back(r);
                        sh.stats.pending = sh.queue.len();
                        drop(sh);
                        self.wake.notify_all();
                    }
                    Step::Ignore(why) => tracing::warn!(service = %self.spec.name, "{why}"),
                    Step::End(why) => {
                        tracing::error!(service = %self.spec.name, "{why}; ending the replication");
                        let mut sh = lock(&self.shared);
                        sh.primary_lost = Some(why);
                        sh.stats.last_error = sh.primary_lost.clone();
                        return None;
                    }
                }
            }
        }
    }

    fn send(&self, kind: FrameKind, payload: &[u8]) {
        let mut w = lock(&self.writer);
        if let Err(e) = w.send(kind, payload).and_then(|_| w.flush()) {
            if !self.stopping() {
                tracing::warn!(service = %self.spec.name, "sending {kind:?} to the primary: {e}");
            }
        }
    }

    fn reject(&self, epoch: u64, why: String) {
        tracing::error!(service = %self.spec.name, epoch, "checkpoint rejected: {why}");
        {
            let mut sh = lock(&self.shared);
            sh.stats.checkpoints_rejected += 1;
            sh.stats.last_error = Some(format!("epoch {epoch}: {why}"));
        }
        let ack = Ack { epoch, committed: false, error: Some(why), arrival: self.gate.arrival_counter(), apply_us: 0, new_streams: Vec::new() };
        self.send(FrameKind::Ack, &Frame::json(FrameKind::Ack, &ack).payload);
    }

    /// Applies queued checkpoints in order, unless commits are stalled.
    fn committer(&self) {
        loop {
            let r = {
                let mut sh = lock(&self.shared);
                loop {
                    if self.stopping() {
                        return;
                    }
                    if !sh.stalled {
                        if let Some(r) = sh.queue.pop_front() {
                            sh.stats.pending = sh.queue.len();
                            break r;
                        }
                    }
                    sh = self.wake.wait(sh).unwrap_or_else(|p| p.into_inner());
                }
            };
            self.commit(r);
        }
    }

    fn commit(&self, r: Received) {
        let t = Instant::now();
        let epoch = r.begin.epoch;
        let label = PathBuf::from(format!("{}:epoch-{epoch}", self.spec.name));
        let applied = {
            // The data directory's copy is held from before the store
            // takes the checkpoint until it has followed: an export (which
            // takes them in the same order, data then store) sees both
            // before the commit or both after it.
            let mut data = lock(&self.data);
            let applied = {
                let mut store = lock(&self.store);
                if r.begin.full {
                    // A full checkpoint starts the chain again (first one, or a
                    // resynchronisation after a rejected one).
                    let mut fresh = Store::new();
                    let applied = fresh.apply(&label, &r.image);
                    if applied.is_ok() {
                        *store = fresh;
                    }
                    applied
                } else {
                    store.apply(&label, &r.image)
                }
            };
            applied.map_err(anyhow::Error::new).and_then(|_| self.commit_files(data.as_mut(), &r))
        };
        match applied {
            Ok(_) => {
                let streams = server_streams(&self.corrected_table(lock(&self.store).tcp_streams()));
                let commit = rrc_gate::Commit { epoch, arrival_bound: r.begin.arrival_bound, streams };
                if let Err(e) = self.gate.commit(commit) {
                    // The store holds the epoch; the replies it covers stay
                    // held until a later commit reaches the gate.
                    tracing::error!(service = %self.spec.name, epoch, "gate commit: {e}");
                }
                let apply_us = t.elapsed().as_micros() as u64;
                // rr mode: the log before this checkpoint's cut is no longer needed
                if let (Some(l), Some(id)) = (&self.log, rrc_image::ImageId::from_hex(&r.begin.image_id)) {
                    let mut l = lock(l);
                    // a shadow replay's segment, before the trim drops it
                    if let Some(s) = &self.shadow {
                        s.before_trim(&id, &l);
                    }
                    l.committed(&id);
                }
                {
                    let mut sh = lock(&self.shared);
                    sh.stats.checkpoints_committed += 1;
                    sh.stats.last_committed_epoch = epoch;
                    sh.stats.last_apply_us = apply_us;
                    sh.stats.state = "protecting".into();
                }
                let ack = Ack { epoch, committed: true, error: None, arrival: self.gate.arrival_counter(), apply_us, new_streams: self.new_streams() };
                self.send(FrameKind::Ack, &Frame::json(FrameKind::Ack, &ack).payload);
                // after the ack: the capture holds the store, not the primary
                if let Some(s) = &self.shadow {
                    let data = self.data_root();
                    s.after_commit(&lock(&self.store), data.as_deref());
                }
            }
            Err(e) => self.reject(epoch, format!("{e:#}")),
        }
    }

    /// The data directory follows the store: carried operations, then the
    /// checkpoint's own. A failure here leaves the copy between states: it
    /// says so from then on (and every later checkpoint is refused), it
    /// never pretends.
    fn commit_files(&self, copy: Option<&mut rrc_store::datadir::DataDirCopy>, r: &Received) -> Result<()> {
        let Some(copy) = copy else { return Ok(()) };
        copy.check()?;
        for payload in &r.carried {
            let ops = rrc_image::fileops::parse_fileops(payload).map_err(|e| anyhow::anyhow!("carried data-directory operations: {e}"))?;
            rrc_store::datadir::apply_ops(copy.root(), &ops.ops).context("applying carried data-directory operations")?;
        }
        let store = lock(&self.store);
        if let Some(img) = store.image() {
            copy.commit(img)?;
        }
        Ok(())
    }

    /// The checkpoint's TCP table with the byte counts of connections that
    /// were repaired at an earlier failover made whole again: the kernel
    /// counts a repaired socket's bytes from its repair, the gate from the
    /// connection's start.
    pub fn corrected_table(&self, table: &[rrc_image::sections::TcpStream]) -> Vec<rrc_image::sections::TcpStream> {
        let mut t = table.to_vec();
        if self.bases.is_empty() {
            return t;
        }
        for e in &mut t {
            let Some(key) = socket_v4(e.remote).zip(socket_v4(e.local)) else { continue };
            if let Some(&(w, r)) = self.bases.get(&key) {
                e.write_seq_rel = e.write_seq_rel.map(|x| x + u64::from(w));
                e.read_seq_rel = e.read_seq_rel.map(|x| x + u64::from(r));
            }
        }
        t
    }

    /// Seeds of the connections the primary has not been told about yet.
    fn new_streams(&self) -> Vec<rrc_gate::StreamSeed> {
        let mut reported = lock(&self.reported);
        let mut v = Vec::new();
        for snap in self.gate.streams() {
            let key = (snap.client, snap.server);
            if reported.contains(&key) {
                continue;
            }
            if let Some(seed) = rrc_gate::StreamSeed::of(&snap) {
                reported.insert(key);
                v.push(seed);
            }
        }
        v
    }

    /// The seeds of every connection the gate knows (failover: the new
    /// primary hands them to its next backup).
    pub fn all_seeds(&self) -> Vec<rrc_gate::StreamSeed> {
        self.gate.streams().iter().filter_map(rrc_gate::StreamSeed::of).collect()
    }

    fn heartbeats(&self) {
        let mut seq = 0;
        while !self.stopping() {
            seq += 1;
            let hb = Heartbeat { seq, arrival: self.gate.arrival_counter() };
            self.send(FrameKind::Heartbeat, &Frame::json(FrameKind::Heartbeat, &hb).payload);
            let sh = lock(&self.shared);
            let _ = self.wake.wait_timeout_while(sh, HEARTBEAT_EVERY, |_| !self.stopping());
        }
    }

    /// Ends the backup's part: threads, gate rules, routes, gate.
    pub fn stop(&self, reason: &str) {
        // No failover from here on: the primary stopped its heartbeats
        // before it said Stop, and removing the standby below takes long
        // enough (several `ip` runs) for the silence to look like a
        // failure on a loaded machine.
        self.stopping.store(true, Ordering::Relaxed);
        if let Some(hb) = lock(&self.hb).as_ref() {
            hb.signal_stop();
        }
        // The failover's container and namespace go before the connection
        // closes: a primary stopping the service waits for that close, so
        // that `rrc stop` returns with nothing of the service left on
        // this host's side that a user could trip over.
        if let Some(s) = self.take_standby() {
            s.discard();
        }
        self.halt();
        self.join_threads();
        self.teardown();
        tracing::info!(service = %self.spec.name, reason, "backup stopped");
    }

    /// What the failover restores into, made at setup (None if that
    /// failed, or once taken).
    pub fn take_standby(&self) -> Option<crate::failover::Standby> {
        lock(&self.standby).take()
    }

    fn teardown(&self) {
        if let Some(s) = self.take_standby() {
            s.discard();
        }
        if let Some(s) = &self.shadow {
            s.stop();
        }
        // Rules first: with the gate gone, queued packets would be dropped.
        self.route.destroy();
        crate::net::remove_fence(&self.route.service_ip);
        if let Err(e) = self.gate.shutdown() {
            tracing::warn!(service = %self.spec.name, "closing the gate: {e}");
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
