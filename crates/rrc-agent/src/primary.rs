//! The primary's side of a service: the container, the epochs, the
//! checkpoint stream to the backup (issue 3 §2–3; NiLiCon §II-A, RRC §3).
//!
//! One thread drives the epochs: every `epoch_ms` it asks the library for
//! a checkpoint whose image lands in the staging buffer (a memfd), sends
//! it to the backup as CheckpointBegin / CheckpointData* / CheckpointEnd,
//! and waits for the backup's Ack before the next epoch, so at most one
//! checkpoint is in flight. A second thread reads the backup's frames:
//! acks and heartbeats (which carry the gate's arrival number, echoed back
//! as the next checkpoint's `arrival_bound`).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::net::{SocketAddrV4, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rrc_container::{control_socket_of, Config as ContainerConfig, Record, Spec, CONTAINER_RUN_DIR, CONTROL_SOCKET_NAME};
use rrc_control::{DumpRequest, DUMP_F_COPY, DUMP_F_INCREMENTAL, DUMP_F_TCP_TABLE};
use rrc_wire::msg::{Ack, CheckpointBegin, CheckpointEnd, Fault, Heartbeat, Mode, Replicate, ReplicateReady, ServiceSpec, Stop};
use rrc_wire::{FrameKind, FrameWriter, WireError};
use rrc_wire::msg::ConnSeed;
use rrc_wire::reply::{FailoverKind, FailoverReport, FailoverStep, FaultSet, PausePhases, PrimaryStats, Role, RoleStats, ServiceStatus};

use crate::epochs::{take_ack, Epochs, Plan};
use crate::net::ContainerNet;
use crate::peer::PeerConn;
use crate::staging::Staging;
use crate::{lock, Agent, Service};

const READY_TIMEOUT: Duration = Duration::from_secs(20);
pub(crate) const PAUSE_TIMEOUT: Duration = Duration::from_secs(10);
const WRITE_TIMEOUT: Duration = Duration::from_secs(120);
/// How long `rrc stop` waits for the backup to close its side.
const STOP_WAIT: Duration = Duration::from_secs(5);
/// How long a primary that declared its backup failed waits for the
/// replication connection (an epoch may be writing on it) to tell the
/// backup so; a dead backup's connection can block longer than that.
const DISMISS_WAIT: Duration = Duration::from_millis(200);
/// Checkpoint data frames.
const CHUNK: usize = 1 << 20;
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

struct Shared {
    stats: PrimaryStats,
    /// Newest gate arrival number from the backup.
    arrival: u64,
    /// Acks not yet taken by the epoch thread.
    acks: Vec<Ack>,
    backup_lost: Option<String>,
    corrupt_next: bool,
    last_commit_at: Option<Instant>,
    pauses: Vec<u64>,
    /// Failovers this service went through (timelines for `rrc status`).
    failovers: Vec<FailoverReport>,
    /// ISNs and SYN options of the service's connections (those it was
    /// re-protected with, then the backup's acks'): a later backup joins
    /// them with these.
    seeds: BTreeMap<(SocketAddrV4, SocketAddrV4), ConnSeed>,
}

pub struct Primary {
    pub spec: ServiceSpec,
    pub host: String,
    pub pid: i32,
    pub backup_addr: String,
    pub queue_num: u16,
    record: Record,
    ccfg: ContainerConfig,
    net: ContainerNet,
    shared: Mutex<Shared>,
    wake: Condvar,
    stopping: AtomicBool,
    /// The replication session's writing half (frames sealed in order).
    conn: Mutex<FrameWriter<TcpStream>>,
    /// Its reading half, until the ack reader takes it.
    reader: Mutex<Option<crate::peer::PeerReader>>,
    /// A second handle on the connection, to shut it down without waiting
    /// for a writer blocked on a full socket buffer.
    conn_ctl: TcpStream,
    /// rr mode: a handle on the log session's connection, which the
    /// process's library writes. Shut down when the backup is lost: the
    /// library's writer, perhaps blocked on a dead peer's full window,
    /// gets EPIPE and stops recording, and no application thread waits
    /// for room in a ring any more.
    pub(crate) log_ctl: Option<TcpStream>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    hb: Mutex<HeartbeatSlot>,
    /// The heartbeat's UDP port, for `rrc status` (never waits on `hb`).
    hb_port: std::sync::atomic::AtomicU16,
    front_if: String,
    /// For re-protection after the backup fails.
    agent: std::sync::Weak<Agent>,
    /// The data directory's copy made for this replication's backup after
    /// a backup failure (`data_dir::copy_held`); removed when the service
    /// stops or is re-protected again.
    pub(crate) data_copy: Mutex<Option<std::path::PathBuf>>,
    /// Set once this host took the service IP (its backup failed): a
    /// fence must then stop what crosses this host.
    holds_ip: AtomicBool,
}

/// How one epoch's checkpoint ended, short of an error.
enum EpochEnd {
    Committed(crate::epochs::ImageId),
    /// With the checkpoint's data-directory operations, to send again.
    Rejected(Vec<Vec<u8>>),
}

/// The heartbeat socket and the backup's heartbeat address until started,
/// then the running heartbeat.
type HeartbeatSlot = (Option<HeartbeatStart>, Option<crate::heartbeat::Heartbeat>);

/// The heartbeat socket, the backup's heartbeat address and the session's
/// heartbeat keys.
type HeartbeatStart = (std::net::UdpSocket, std::net::SocketAddr, (rrc_wire::datagram::HeartbeatSealer, rrc_wire::datagram::HeartbeatOpener));

/// `rrc run` arrives here, at the primary's agent.
pub fn start(agent: &Arc<Agent>, spec: ServiceSpec) -> Result<ServiceStatus> {
    validate(agent, &spec)?;
    // The service's first view, before the backup is asked (it checks
    // that the view names it): refused if the service has one already.
    let view = match &agent.etcd {
        Some(etcd) => {
            let lease = Duration::from_millis(spec.lease_ms);
            let first = rrc_view::View::first(&spec.primary, &spec.backup, &spec.spare.iter().cloned().collect::<Vec<_>>(), lease);
            Some(crate::views::ServiceView::create(etcd, &agent.cfg.name, &spec.name, first)?)
        }
        None => None,
    };
    let remove_view = || {
        if let Some(v) = &view {
            v.remove();
        }
    };
    // Reserve the name before anything is built.
    let p = match build(agent, spec.clone()) {
        Ok(p) => Arc::new(p),
        Err(e) => {
            remove_view();
            return Err(e);
        }
    };
    if let Err(e) = agent.insert(&spec.name, Service::Primary(p.clone())) {
        p.stop("name taken");
        remove_view();
        return Err(e);
    }
    if let Some(v) = &view {
        agent.set_view(&spec.name, v.clone());
        if let Err(e) = v.start(agent) {
            let _ = agent.stop(&spec.name, "the lease threads did not start");
            return Err(e);
        }
    }
    if let Err(e) = p.run_threads() {
        let _ = agent.stop(&spec.name, "the replication threads did not start");
        return Err(e);
    }
    tracing::info!(service = %spec.name, pid = p.pid, backup = %spec.backup, "service running, replication started");
    Ok(p.status())
}

fn validate(agent: &Agent, spec: &ServiceSpec) -> Result<()> {
    spec.validate()?;
    if spec.primary != agent.cfg.name {
        bail!("this is host {}, the service's primary is {}", agent.cfg.name, spec.primary);
    }
    if agent.primary(&spec.name).is_some() || agent.backup(&spec.name).is_some() {
        bail!("host {} already has a service named {:?}", agent.cfg.name, spec.name);
    }
    Ok(())
}

/// The replication connection to `spec.backup`'s agent, ready: the
/// session is authenticated (peer::PeerConn) and the backup has its gate,
/// rules and routes in place.
pub(crate) fn connect_backup(agent: &Arc<Agent>, spec: &ServiceSpec, seeds: Vec<ConnSeed>) -> Result<(PeerConn, ReplicateReady, std::net::UdpSocket)> {
    let mut conn = PeerConn::connect(agent, &spec.backup)?;
    let my_ip = conn.local_addr.ip();
    let hb_sock = crate::heartbeat::bind(my_ip)?;
    let rep = Replicate { spec: spec.clone(), primary_addr: my_ip.to_string(), primary_hb_port: hb_sock.local_addr()?.port(), seeds };
    conn.writer.send_json(FrameKind::Replicate, &rep)?;
    conn.set_read_timeout(Some(READY_TIMEOUT))?;
    let f = conn.reader.recv().inspect_err(|e| agent.security.count_wire(e, &spec.backup, format!("waiting for backup {}'s answer: {e}", spec.backup))).with_context(|| format!("waiting for backup {} to get ready", spec.backup))?;
    let ready: ReplicateReady = match f.kind {
        FrameKind::ReplicateReady => f.parse()?,
        FrameKind::Response => {
            let r: rrc_wire::msg::Response<serde::de::IgnoredAny> = f.parse()?;
            bail!("backup {} refused: {}", spec.backup, r.error.unwrap_or_default());
        }
        k => bail!("backup {} answered with a {k:?} frame", spec.backup),
    };
    conn.set_read_timeout(None)?;
    Ok((conn, ready, hb_sock))
}

/// rr mode (issue 14 §2): a second session to the backup for the record
/// log, opened by the agent (the handshake, then LogStream as frame 0)
/// and handed to the process, whose library seals the log's frames from
/// number 1 on with the session's key: the fds to pass and the
/// library's environment.
#[allow(clippy::type_complexity)]
fn open_log_session(agent: &Arc<Agent>, spec: &ServiceSpec) -> Result<(Vec<(std::os::fd::OwnedFd, i32)>, Vec<(OsString, OsString)>, TcpStream)> {
    use rrc_launch::{RECORD_FD, RECORD_FD_ENV, RECORD_FRAMED_ENV, RECORD_KEY_FD, RECORD_KEY_FD_ENV, RECORD_REPLACEABLE_ENV, RECORD_SEQ_ENV};
    let conn = log_session(agent, spec)?;
    let sock = std::os::fd::OwnedFd::from(conn.ctl.try_clone()?);
    let mut fds = vec![(sock, RECORD_FD)];
    let mut env: Vec<(OsString, OsString)> = vec![(RECORD_FD_ENV.into(), RECORD_FD.to_string().into()), (RECORD_SEQ_ENV.into(), "1".into())];
    match conn.session.send_frame_key() {
        Some(k) => {
            fds.push((rrc_launch::pipe_holding(&k).context("the log session's key")?, RECORD_KEY_FD));
            env.push((RECORD_KEY_FD_ENV.into(), RECORD_KEY_FD.to_string().into()));
        }
        None => env.push((RECORD_FRAMED_ENV.into(), "1".into())),
    }
    if spec.spare.is_some() {
        // a backup failure re-protects onto the spare: the recording goes
        // on and its log goes there (RECORD, attach_log_session)
        env.push((RECORD_REPLACEABLE_ENV.into(), "1".into()));
    }
    Ok((fds, env, conn.ctl))
}

/// The log session's connection: authenticated, LogStream sent as frame 0.
fn log_session(agent: &Arc<Agent>, spec: &ServiceSpec) -> Result<PeerConn> {
    let mut conn = PeerConn::connect(agent, &spec.backup).context("opening the log session")?;
    conn.writer.send_json(FrameKind::LogStream, &rrc_wire::msg::LogStream { service: spec.name.clone() }).context("opening the log session")?;
    Ok(conn)
}

/// rr mode, re-protection: the restored process of a failover went live
/// at its replay's end recording again (failover.rs, `--replay-record`),
/// the process whose backup failed kept recording when its log's
/// connection broke (launched with RRC_RECORD_REPLACEABLE); either drops
/// its log until it has a sink: a log session to the new backup, handed
/// over by the control protocol's RECORD. Returns the handle the Primary
/// keeps on it.
pub(crate) fn attach_log_session(agent: &Arc<Agent>, spec: &ServiceSpec, pid: i32) -> Result<TcpStream> {
    let conn = log_session(agent, spec)?;
    let req = rrc_control::RecordRequest { first_frame: 1, framed: true, key: conn.session.send_frame_key() };
    let sock = conn.ctl.try_clone().context("the log session's socket")?;
    rrc_control::record_to(&control_socket_of(pid), &req, std::os::fd::AsFd::as_fd(&sock), Duration::from_secs(5)).context("handing the log's sink to the process")?;
    Ok(conn.ctl)
}

fn build(agent: &Arc<Agent>, spec: ServiceSpec) -> Result<Primary> {
    let (mut conn, ready, hb_sock) = connect_backup(agent, &spec, Vec::new())?;
    let abort = |conn: &mut PeerConn, why: &str| {
        let _ = conn.writer.send_json(FrameKind::Stop, &Stop { reason: why.into() });
    };
    let (pass_fds, record_env, log_ctl) = match spec.mode {
        Mode::Rr => match open_log_session(agent, &spec) {
            Ok((fds, env, ctl)) => (fds, env, Some(ctl)),
            Err(e) => {
                abort(&mut conn, "the log session could not be opened");
                return Err(e);
            }
        },
        Mode::Checkpoint => (Vec::new(), Vec::new(), None),
    };

    let dir = agent.service_dir(&spec.name);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let index = agent.next_index();
    let netns = format!("{}{}-{}", agent.cfg.netns_prefix, agent.cfg.name, spec.name);
    let net = match ContainerNet::create(&netns, index, &spec.service_ip, Some((&ready.backup_addr, &agent.cfg.repl_if))) {
        Ok(n) => n,
        Err(e) => {
            abort(&mut conn, "primary network set-up failed");
            return Err(e.context("setting up the container's network"));
        }
    };
    let ccfg = ContainerConfig { cgroup_root: agent.cfg.cgroup_root.clone(), registry: rrc_container::Registry::new(agent.cfg.state_dir.join("containers")) };
    let mut env: Vec<(OsString, OsString)> = vec![("PATH".into(), DEFAULT_PATH.into()), ("HOME".into(), "/root".into())];
    for (k, v) in &spec.env {
        env.push((k.into(), v.into()));
    }
    env.push(("LD_PRELOAD".into(), agent.cfg.librrc.clone().into_os_string()));
    env.push(("RRC_CONTROL".into(), format!("{CONTAINER_RUN_DIR}/{CONTROL_SOCKET_NAME}").into()));
    env.extend(record_env);
    // The data directory: this host's copy, seen by the command at the
    // path it asked for; the library journals writes below it (DESIGN §5).
    let mut binds = Vec::new();
    if let Some(d) = &spec.data_dir {
        let host_dir = dir.join("data");
        if let Err(e) = std::fs::create_dir_all(&host_dir) {
            net.destroy();
            abort(&mut conn, "primary set-up failed");
            return Err(anyhow::Error::new(e).context(format!("creating {}", host_dir.display())));
        }
        // Its content before the start reaches the backup first; from then
        // on every change travels in the checkpoint of its epoch.
        let init = rrc_store::datadir::snapshot_ops(&host_dir)
            .map(|ops| crate::data_dir::fileops_frames(&ops))
            .context("reading the data directory's initial content")
            .and_then(|frames| {
                frames.iter().try_for_each(|p| conn.writer.send(FrameKind::DataDirInit, p)).context("sending the data directory's initial content")
            });
        if let Err(e) = init {
            net.destroy();
            abort(&mut conn, "primary set-up failed");
            return Err(e);
        }
        binds.push(rrc_container::Bind { host: host_dir, target: d.into() });
        env.push(("RRC_DATA_DIR".into(), d.into()));
    }
    let cspec = Spec {
        argv: spec.argv.iter().map(OsString::from).collect(),
        env,
        netns: Some(netns.clone()),
        log: Some(agent.service_log(&spec.name)),
        pass_fds,
        restored_from: None,
        binds,
    };
    let container = match rrc_container::spawn(&ccfg, cspec) {
        Ok(c) => c,
        Err(e) => {
            net.destroy();
            abort(&mut conn, "the service did not start");
            return Err(anyhow::Error::new(e).context("starting the service's container"));
        }
    };
    let record = container.record.clone();
    // The same wait as `rrc exec`: PING until the library answers, with
    // the log's tail when the command exits first.
    if let Err(e) = rrc_launch::wait_for_pong(&container, false) {
        let _ = rrc_container::kill(&ccfg, &record);
        net.destroy();
        abort(&mut conn, "the service did not start");
        return Err(e);
    }
    let mut p = assemble(agent, spec, conn, ready, hb_sock, record, ccfg, net, Vec::new(), Vec::new())?;
    p.log_ctl = log_ctl;
    Ok(p)
}

/// The Primary of a running container with a ready backup connection.
#[allow(clippy::too_many_arguments)]
pub(crate) fn assemble(
    agent: &Arc<Agent>,
    spec: ServiceSpec,
    conn: PeerConn,
    ready: ReplicateReady,
    hb_sock: std::net::UdpSocket,
    record: Record,
    ccfg: ContainerConfig,
    net: ContainerNet,
    failovers: Vec<FailoverReport>,
    seeds: Vec<ConnSeed>,
) -> Result<Primary> {
    let hb_peer = std::net::SocketAddr::new(ready.backup_addr.parse().context("the backup's address")?, ready.backup_hb_port);
    Ok(Primary {
        hb_port: std::sync::atomic::AtomicU16::new(hb_sock.local_addr().map(|a| a.port()).unwrap_or(0)),
        hb: Mutex::new((Some((hb_sock, hb_peer, conn.session.heartbeat_keys())), None)),
        front_if: agent.cfg.front_if.clone(),
        host: agent.cfg.name.clone(),
        pid: record.pid,
        backup_addr: ready.backup_addr.clone(),
        queue_num: ready.queue_num,
        spec,
        record,
        ccfg,
        net,
        shared: Mutex::new(Shared {
            stats: PrimaryStats { state: "starting".into(), ..Default::default() },
            arrival: 0,
            acks: Vec::new(),
            backup_lost: None,
            corrupt_next: false,
            last_commit_at: None,
            pauses: Vec::new(),
            failovers,
            seeds: seeds.into_iter().map(|s| ((s.stream.client, s.stream.server), s)).collect(),
        }),
        wake: Condvar::new(),
        stopping: AtomicBool::new(false),
        conn_ctl: conn.ctl,
        log_ctl: None,
        conn: Mutex::new(conn.writer),
        reader: Mutex::new(Some(conn.reader)),
        threads: Mutex::new(Vec::new()),
        agent: Arc::downgrade(agent),
        data_copy: Mutex::new(None),
        holds_ip: AtomicBool::new(false),
    })
}

fn percentile(v: &[u64], p: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    let mut s = v.to_vec();
    s.sort_unstable();
    s[((s.len() - 1) as f64 * p).round() as usize]
}

impl Primary {
    pub fn status(&self) -> ServiceStatus {
        let sh = lock(&self.shared);
        let mut st = sh.stats.clone();
        st.since_last_commit_ms = sh.last_commit_at.map(|t| t.elapsed().as_millis() as u64);
        st.pause_us_p50 = percentile(&sh.pauses, 0.5);
        st.pause_us_p99 = percentile(&sh.pauses, 0.99);
        let failovers = sh.failovers.clone();
        drop(sh);
        ServiceStatus {
            checkpoints_committed: st.checkpoints_committed,
            command: Some(self.spec.argv.clone()),
            data_dir: self.spec.data_dir.clone(),
            pid: Some(self.pid),
            netns: Some(self.net.netns.clone()),
            protected: Some(st.protected),
            backup_addr: Some(self.backup_addr.clone()),
            queue_num: Some(self.queue_num),
            heartbeat_port: Some(self.hb_port.load(Ordering::Relaxed)).filter(|p| *p != 0),
            failovers: Some(failovers),
            ..ServiceStatus::of(&self.spec, Role::Primary, &self.host, RoleStats::Primary(st))
        }
    }

    /// The epoch loop, the backup reader and the heartbeat.
    pub(crate) fn run_threads(self: &Arc<Self>) -> Result<()> {
        let (a, b) = (self.clone(), self.clone());
        let reader = std::thread::Builder::new().name(format!("acks-{}", self.spec.name)).spawn(move || a.read_backup())?;
        let epochs = std::thread::Builder::new().name(format!("epochs-{}", self.spec.name)).spawn(move || b.epochs())?;
        lock(&self.threads).extend([reader, epochs]);
        self.start_heartbeat()
    }

    fn start_heartbeat(self: &Arc<Self>) -> Result<()> {
        let mut hb = lock(&self.hb);
        let Some((sock, peer, keys)) = hb.0.take() else { return Ok(()) };
        let me = self.clone();
        let every = Duration::from_millis(self.spec.heartbeat_ms);
        let fail_after = Duration::from_millis(self.spec.failure_ms);
        let agent = self.agent.clone();
        let refused = move |from: std::net::SocketAddr, why: String| {
            if let Some(a) = agent.upgrade() {
                a.security.reject(rrc_wire::Rejection::BadHeartbeat, &from.to_string(), why);
            }
        };
        hb.1 = Some(crate::heartbeat::Heartbeat::start(sock, peer, every, fail_after, &self.spec.name, keys, refused, move |s| me.backup_silent(s))?);
        Ok(())
    }

    /// The backup fell silent. Without views, it has failed. With views
    /// (issue 15), the silence starts a view change, on a thread of its
    /// own while the heartbeat goes on listening: this host takes the
    /// service IP only once the view without the backup is installed and
    /// the backup's lease has run out.
    fn backup_silent(self: &Arc<Self>, s: crate::heartbeat::Silence) -> crate::heartbeat::Watch {
        use crate::heartbeat::Watch;
        let Some(view) = self.agent.upgrade().and_then(|a| a.view(&self.spec.name)) else {
            self.backup_failed(s, None);
            return Watch::Stop;
        };
        let Some(heard) = lock(&self.hb).1.as_ref().map(|h| h.heard()) else { return Watch::Stop };
        let me = self.clone();
        view.suspect_apart(rrc_view::Change::DropBackup, heard, move |changed| {
            if let Some(hb) = lock(&me.hb).1.as_ref() {
                hb.signal_stop();
            }
            me.backup_failed(s, Some(changed));
        })
    }

    /// Fenced (issue 15). Replicating, this host shows clients nothing of
    /// its own: its replies reach them only through the backup's gate,
    /// released against what the backup holds, so there is nothing to
    /// stop here. Serving alone, it holds the service IP: nothing of the
    /// service crosses it while fenced.
    pub fn fence(&self, on: bool) -> Result<()> {
        if self.holds_ip.load(Ordering::Relaxed) {
            crate::net::fence_service(&self.spec.service_ip, &self.front_if, on)?;
        }
        Ok(())
    }

    pub fn silence_heartbeats(&self, on: bool) {
        if let Some(hb) = lock(&self.hb).1.as_ref() {
            hb.silence(on);
        }
    }

    /// Stood down (another view replaced ours): the service goes from this
    /// host, without waiting on a backup that may hold the new view.
    pub fn stop_fenced(&self, why: &str) {
        let _ = self.conn_ctl.shutdown(std::net::Shutdown::Both);
        if let Some(c) = &self.log_ctl {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
        self.stop(why);
    }

    /// The backup host fell silent (RRC §3): the primary takes the service
    /// IP on its own client-facing side and serves clients directly, with
    /// no output held any more. Established connections carry on: their
    /// packets now reach this host directly, and replies leave it directly.
    /// With views, `changed` is the view change that made this host the
    /// primary alone (its times go into the timeline).
    fn backup_failed(&self, s: crate::heartbeat::Silence, changed: Option<crate::views::ViewChanged>) {
        if self.stopping() {
            return;
        }
        let detected = s.declared_at;
        tracing::error!(service = %self.spec.name, silent_ms = s.silent_for.as_millis() as u64, "backup {} silent: taking over the service IP", self.spec.backup);
        let why = format!("backup {} silent for {} ms", self.spec.backup, s.silent_for.as_millis());
        self.backup_lost(why.clone());
        let mut steps = Vec::new();
        let mut err = None;
        if let Err(e) = self.net.drop_reply_route() {
            err = Some(format!("{e:#}"));
        }
        steps.push(("replies routed out of this host", detected.elapsed()));
        if let Err(e) = crate::net::advertise(&self.spec.service_ip, &self.front_if) {
            err = Some(format!("{e:#}"));
        }
        if let Ok(ip) = self.spec.service_ip.parse() {
            if let Err(e) = crate::net::gratuitous_arp(&self.front_if, ip) {
                err = Some(format!("{e:#}"));
            }
        }
        self.holds_ip.store(true, Ordering::Relaxed);
        steps.push(("service IP advertised here", detected.elapsed()));
        // A backup only slow to be heard (its heartbeat thread starved on
        // a loaded host) is alive, holds an older state and still watches
        // this host's heartbeats: told nothing, it would fail over to that
        // state when this host fails later, undoing every reply served
        // from here meanwhile. Told (Stop), it drops the service. Done
        // after the take-over, which must not wait on a dead backup's
        // connection. A backup that cannot be told (its host gone, or cut
        // off) needs the views and fencing of issue 15.
        let told = self.dismiss_backup(&format!("the primary {} declared this backup failed ({why}) and serves the service alone", self.spec.primary));
        tracing::info!(service = %self.spec.name, told, "backup {} {} it is no longer the backup", self.spec.backup, if told { "told" } else { "could not be told" });
        let ms = crate::ms;
        let timeline = FailoverReport {
            kind: FailoverKind::BackupFailure,
            failed_host: self.spec.backup.clone(),
            at: crate::now_rfc3339(),
            epoch_restored: None,
            detection_ms: ms(s.silent_for),
            steps: steps.iter().map(|(n, d)| FailoverStep { step: n.to_string(), at_ms: ms(*d) }).collect(),
            total_ms: ms(s.silent_for) + ms(detected.elapsed()),
            connections: None,
            error: err,
            reprotected: None,
            replay: None,
            syns_resent: None,
            view_change: changed.map(|c| c.report(detected)),
        };
        tracing::info!(service = %self.spec.name, timeline = ?timeline, "serving clients directly, UNPROTECTED");
        let mut sh = lock(&self.shared);
        sh.stats.state = "unprotected: backup failed, serving directly".into();
        sh.stats.protected = false;
        sh.failovers.push(timeline);
        let (failovers, seeds) = (sh.failovers.clone(), sh.seeds.values().cloned().collect::<Vec<_>>());
        drop(sh);
        if self.spec.spare.is_some() {
            if let Some(agent) = self.agent.upgrade() {
                self.retire(None);
                // The copy of the data directory made for the spare is the
                // state at its hold: a checkpoint this replication still
                // took after it would drop journal records the spare needs.
                if self.spec.data_dir.is_some() {
                    if let Err(e) = self.join_threads(Duration::from_secs(15)) {
                        tracing::error!(service = %self.spec.name, "re-protection refused: {e:#}; the service stays UNPROTECTED");
                        lock(&self.shared).stats.last_error = Some(format!("re-protection refused: {e:#}"));
                        return;
                    }
                }
                if let Some(old) = lock(&self.data_copy).take() {
                    let _ = std::fs::remove_dir_all(old);
                }
                match crate::reprotect::reprotect(&agent, &self.spec, self.record.clone(), self.ccfg.clone(), self.net.clone(), seeds, failovers, None) {
                    Ok(p) => agent.replace(&self.spec.name, Service::Primary(p)),
                    Err(e) => {
                        tracing::error!(service = %self.spec.name, "re-protection failed: {e:#}; the service stays UNPROTECTED");
                        lock(&self.shared).stats.last_error = Some(format!("re-protection failed: {e:#}"));
                    }
                }
            }
        }
    }

    /// Waits (bounded) for the epoch and backup-reader threads of a retired
    /// replication to end.
    fn join_threads(&self, within: Duration) -> Result<()> {
        let deadline = Instant::now() + within;
        let me = std::thread::current().id();
        let mut threads = lock(&self.threads);
        while threads.iter().any(|t| t.thread().id() != me && !t.is_finished()) {
            if Instant::now() >= deadline {
                bail!("the replication threads did not end within {within:?}");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        for t in threads.drain(..) {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
        Ok(())
    }

    /// Ends this replication (threads, heartbeat, connection) but leaves
    /// the container and its network to a successor.
    /// With `stop_reason`, the backup is told (Stop) before the connection
    /// closes; a writer busy on the connection keeps it, and the backup
    /// then sees the close alone.
    fn retire(&self, stop_reason: Option<&str>) {
        self.stopping.store(true, Ordering::Relaxed);
        self.wake.notify_all();
        // the log session ends with the process: this handle must not keep
        // it open for the backup's reader
        self.shut_log_session();
        // Taken out first: the join below must not hold the lock.
        let hb = lock(&self.hb).1.take();
        if let Some(mut hb) = hb {
            hb.stop();
        }
        if stop_reason.is_some_and(|reason| self.send_stop(reason, Duration::ZERO)) {
            // The backup closes the connection once its side is gone
            // (Backup::stop); the ack reader sees that EOF and ends,
            // which stop() waits for (bounded).
            let _ = self.conn_ctl.shutdown(std::net::Shutdown::Write);
            return;
        }
        let _ = self.conn_ctl.shutdown(std::net::Shutdown::Both);
    }

    /// Writes Stop{reason} on the replication connection if it can have
    /// it within `within` (an epoch's thread may be writing a checkpoint
    /// on it). True if it was written.
    fn send_stop(&self, reason: &str, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            if let Ok(mut c) = self.conn.try_lock() {
                return c.send_json(FrameKind::Stop, &Stop { reason: reason.into() }).is_ok();
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Tells the backup it is no longer one (Stop, with `reason`), then
    /// closes the sending half. The epoch thread may be in the middle of a
    /// checkpoint's frames: it gives the connection up within
    /// [`DISMISS_WAIT`] (its epoch fails once the backup is lost), or the
    /// backup is not told. True if the Stop was written.
    fn dismiss_backup(&self, reason: &str) -> bool {
        let told = self.send_stop(reason, DISMISS_WAIT);
        let _ = self.conn_ctl.shutdown(std::net::Shutdown::Write);
        told
    }

    pub fn fault(&self, f: Fault) -> Result<FaultSet> {
        match f {
            Fault::CorruptNextCheckpoint => {
                lock(&self.shared).corrupt_next = true;
                Ok(FaultSet { armed: Some("corrupt-next-checkpoint".into()), ..Default::default() })
            }
            other => bail!("fault {other:?} is injected at the backup, not the primary"),
        }
    }

    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    /// Ends the service: epochs, container, backup, network.
    pub fn stop(&self, reason: &str) {
        self.retire(Some(reason));
        // The ack reader ends when the backup has closed its side.
        if self.join_threads(STOP_WAIT).is_err() {
            tracing::warn!(service = %self.spec.name, "the backup did not close the replication connection within {STOP_WAIT:?}");
        }
        let _ = self.conn_ctl.shutdown(std::net::Shutdown::Both);
        if let Err(e) = self.join_threads(PAUSE_TIMEOUT) {
            tracing::warn!(service = %self.spec.name, "{e:#}");
        }
        if let Err(e) = rrc_container::kill(&self.ccfg, &self.record) {
            tracing::warn!(service = %self.spec.name, "removing the container: {e}");
        }
        self.net.destroy();
        if let Some(copy) = lock(&self.data_copy).take() {
            let _ = std::fs::remove_dir_all(copy);
        }
        if !lock(&self.shared).failovers.is_empty() {
            crate::net::unadvertise(&self.spec.service_ip, &self.front_if);
        }
        if self.holds_ip.load(Ordering::Relaxed) {
            crate::net::remove_fence(&self.spec.service_ip);
        }
        tracing::info!(service = %self.spec.name, reason, "service stopped");
    }

    /// The file operations of a rejected checkpoint, to send again.
    fn fileops_of(&self, image: &[u8], epoch: u64) -> Result<Vec<Vec<u8>>> {
        let label = std::path::PathBuf::from(format!("{}:epoch-{epoch}", self.spec.name));
        let img = rrc_image::Image::from_bytes(&label, image, rrc_image::VerifyPages::No)
            .context("re-reading a rejected checkpoint for its file operations")?;
        match img.fileops.as_ref().filter(|f| !f.ops.is_empty()) {
            Some(f) => {
                tracing::info!(service = %self.spec.name, epoch, ops = f.ops.len(), "file operations of the rejected checkpoint will be sent again");
                Ok(crate::data_dir::fileops_frames(&f.ops))
            }
            None => Ok(Vec::new()),
        }
    }

    /// Reads acks and heartbeats from the backup until the connection ends.
    fn read_backup(&self) {
        let Some(mut c) = lock(&self.reader).take() else {
            self.backup_lost("the replication connection's reading half is gone".into());
            return;
        };
        loop {
            let f = match c.recv() {
                Ok(f) => f,
                Err(e) => {
                    if !self.stopping() {
                        if let Some(a) = self.agent.upgrade() {
                            a.security.count_wire(&e, &self.spec.backup, format!("replication of {} from its backup: {e}", self.spec.name));
                        }
                        let why = match e {
                            WireError::Closed => "the backup closed the replication connection".to_string(),
                            e => format!("replication connection: {e}"),
                        };
                        self.backup_lost(why);
                    }
                    return;
                }
            };
            match f.kind {
                FrameKind::Ack => match f.parse::<Ack>() {
                    Ok(a) => {
                        let mut sh = lock(&self.shared);
                        sh.arrival = sh.arrival.max(a.arrival);
                        for seed in &a.new_streams {
                            // a connection the primary re-protected with
                            // keeps its byte bases
                            sh.seeds.entry((seed.client, seed.server)).or_insert_with(|| ConnSeed { stream: seed.clone(), write_base: 0, read_base: 0 });
                        }
                        sh.acks.push(a);
                        drop(sh);
                        self.wake.notify_all();
                    }
                    Err(e) => tracing::warn!(service = %self.spec.name, "bad ack: {e}"),
                },
                FrameKind::Heartbeat => {
                    if let Ok(h) = f.parse::<Heartbeat>() {
                        let mut sh = lock(&self.shared);
                        sh.arrival = sh.arrival.max(h.arrival);
                    }
                }
                FrameKind::Stop => {
                    let s: Stop = f.parse().unwrap_or(Stop { reason: "?".into() });
                    self.backup_lost(format!("the backup ended replication: {}", s.reason));
                    return;
                }
                k => tracing::warn!(service = %self.spec.name, "unexpected {k:?} frame from the backup"),
            }
        }
    }

    fn backup_lost(&self, why: String) {
        tracing::error!(service = %self.spec.name, "backup lost: {why}; the service is UNPROTECTED");
        self.shut_log_session();
        let mut sh = lock(&self.shared);
        sh.backup_lost = Some(why.clone());
        sh.stats.protected = false;
        sh.stats.state = "unprotected".into();
        sh.stats.last_error = Some(why);
        drop(sh);
        self.wake.notify_all();
    }

    /// The epoch loop.
    fn epochs(&self) {
        let staging = match Staging::new(&self.spec.name) {
            Ok(s) => s,
            Err(e) => {
                self.backup_lost(format!("{e:#}"));
                return;
            }
        };
        let period = Duration::from_millis(self.spec.epoch_ms);
        let mut epochs = Epochs::new();
        lock(&self.shared).stats.state = "replicating".into();
        while !self.stopping() {
            if lock(&self.shared).backup_lost.is_some() {
                return;
            }
            let started = Instant::now();
            let plan = epochs.plan_next();
            let epoch = plan.epoch;
            match self.one_epoch(&staging, &plan) {
                Ok(EpochEnd::Committed(id)) => epochs.committed(&plan, id),
                Ok(EpochEnd::Rejected(fileops)) => epochs.rejected(fileops),
                Err(e) => {
                    if self.stopping() {
                        return;
                    }
                    if !rrc_container::is_running(&self.record) {
                        let why = format!("the service process exited ({e:#})");
                        tracing::error!(service = %self.spec.name, "{why}");
                        let mut sh = lock(&self.shared);
                        sh.stats.state = "exited".into();
                        sh.stats.protected = false;
                        sh.stats.last_error = Some(why);
                        return;
                    }
                    tracing::error!(service = %self.spec.name, epoch, "checkpoint failed: {e:#}");
                    let mut sh = lock(&self.shared);
                    sh.stats.last_error = Some(format!("epoch {epoch}: {e:#}"));
                    epochs.failed();
                }
            }
            let spent = started.elapsed();
            if spent < period {
                let sh = lock(&self.shared);
                let _ = self.wake.wait_timeout_while(sh, period - spent, |_| !self.stopping());
            }
        }
    }

    /// rr mode: shuts our handle on the log session down (the library's
    /// writer gets EPIPE and stops recording; the backup's reader ends).
    fn shut_log_session(&self) {
        if let Some(l) = &self.log_ctl {
            let _ = l.shutdown(std::net::Shutdown::Both);
        }
    }

    fn snapshot_flag(&self) -> u32 {
        match self.spec.snapshot {
            rrc_wire::msg::Snapshot::Fork => 0,
            rrc_wire::msg::Snapshot::Copy => DUMP_F_COPY,
        }
    }

    /// Takes, sends and waits for the commit of one checkpoint.
    fn one_epoch(&self, staging: &Staging, plan: &Plan) -> Result<EpochEnd> {
        let (epoch, parent, carried) = (plan.epoch, plan.parent, &plan.carried);
        let arrival_bound = lock(&self.shared).arrival;
        staging.reset()?;
        let image_id = rrc_image::ImageId::random().context("an id for the checkpoint")?.0;
        let req = match parent {
            // the gate's release rule and the failover's repair read the TCP table
            Some(p) => DumpRequest { flags: DUMP_F_INCREMENTAL | DUMP_F_TCP_TABLE | self.snapshot_flag(), image_id, parent_id: p },
            None => DumpRequest { flags: DUMP_F_TCP_TABLE | self.snapshot_flag(), image_id, parent_id: [0; 16] },
        };
        let sock = control_socket_of(self.pid);
        let snap_t = Instant::now();
        let mut session = rrc_control::dump(&sock, &req, staging.fd(), PAUSE_TIMEOUT).context("sending DUMP")?;
        let paused = session.wait_paused(PAUSE_TIMEOUT).context("checkpoint")?;
        let done = session.wait_done(WRITE_TIMEOUT).context("checkpoint (the service runs on)")?;
        let image = staging.take(done.bytes)?;
        let pause_us = paused.pause_ns / 1000;
        let mut damaged: Option<Vec<u8>> = None;
        {
            let mut sh = lock(&self.shared);
            if sh.corrupt_next {
                sh.corrupt_next = false;
                // A byte in the middle of the sent copy: inside some
                // section's payload, never in the frames, which stay sound.
                let mut d = image.clone();
                let i = d.len() / 2;
                d[i] ^= 0xff;
                tracing::warn!(service = %self.spec.name, epoch, offset = i, "fault injected: checkpoint image corrupted");
                damaged = Some(d);
            }
            sh.pauses.push(pause_us);
            if sh.pauses.len() > 4096 {
                sh.pauses.drain(..2048);
            }
        }
        let begin = CheckpointBegin {
            epoch,
            image_id: rrc_image::ImageId(image_id).hex(),
            full: parent.is_none(),
            bytes: image.len() as u64,
            arrival_bound,
            pause_us,
        };
        let sent = damaged.as_ref().unwrap_or(&image);
        let end = CheckpointEnd { epoch, bytes: sent.len() as u64, crc32c: crc32c::crc32c(sent) };
        {
            let mut c = lock(&self.conn);
            let c = &mut *c;
            for ops in carried {
                c.send(FrameKind::DataDirInit, ops)?;
            }
            c.send_json(FrameKind::CheckpointBegin, &begin)?;
            for chunk in sent.chunks(CHUNK) {
                c.send(FrameKind::CheckpointData, chunk)?;
            }
            c.send_json(FrameKind::CheckpointEnd, &end)?;
            c.flush()?;
        }
        // Wait for this epoch's ack.
        let mut sh = lock(&self.shared);
        loop {
            if let Some(a) = take_ack(&mut sh.acks, epoch) {
                let st = &mut sh.stats;
                st.last_epoch = epoch;
                st.last_pause_us = pause_us;
                st.last_pause = Some(PausePhases {
                    quiesce_us: paused.quiesce_ns / 1000,
                    scan_us: paused.scan_ns / 1000,
                    capture_us: paused.capture_ns / 1000,
                    fork_us: paused.fork_ns / 1000,
                    copy_us: paused.copy_ns / 1000,
                    copied_pages: paused.copied_pages,
                    precopy_us: paused.precopy_ns / 1000,
                    precopy_pages: paused.precopy_pages,
                    threads: paused.threads,
                });
                st.last_checkpoint_bytes = image.len() as u64;
                st.last_checkpoint_pages = done.pages;
                if a.committed {
                    st.checkpoints_committed += 1;
                    st.protected = true;
                    st.state = "replicating".into();
                    st.replication_lag_ms = crate::ms(snap_t.elapsed());
                    if parent.is_none() {
                        st.full_checkpoints += 1;
                        st.last_full_lag_ms = st.replication_lag_ms;
                        st.last_full_bytes = image.len() as u64;
                    }
                    sh.last_commit_at = Some(Instant::now());
                    return Ok(EpochEnd::Committed(image_id));
                }
                st.checkpoints_rejected += 1;
                let why = a.error.unwrap_or_default();
                tracing::warn!(service = %self.spec.name, epoch, "backup rejected the checkpoint: {why}; next one is full");
                st.last_error = Some(format!("epoch {epoch} rejected by the backup: {why}"));
                drop(sh);
                return Ok(EpochEnd::Rejected(self.fileops_of(&image, epoch)?));
            }
            if let Some(why) = &sh.backup_lost {
                bail!("backup lost while waiting for epoch {epoch}'s ack: {why}");
            }
            if self.stopping() {
                bail!("stopping");
            }
            sh = self.wake.wait_timeout(sh, Duration::from_millis(100)).map(|(g, _)| g).unwrap_or_else(|p| p.into_inner().0);
        }
    }
}
