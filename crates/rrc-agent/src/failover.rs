//! Failover at the backup when the primary fails (issue 4 §2; NiLiCon
//! §III, §V-E; RRC §3, §4.3–4.4; docs/failover.md).
//!
//! The sequence, each step timed for `rrc status`:
//!  1. detected: the primary's heartbeats stopped (heartbeat.rs);
//!  2. input held: the gate holds (and records) every client packet until
//!     the service is live, so nothing reaches a half-restored service, no
//!     RST of its kernel escapes, and no client waits for a retransmission
//!     timer; the service's output bypasses the gate; the replies it held
//!     (never committed) are never released;
//!  3. restored: the store's committed state is streamed as one full
//!     image over a pipe to rrc-restore (no image file: the restorer fills
//!     the process's memory as the bytes arrive and checks every CRC) in a
//!     container network namespace of this host that holds the service IP,
//!     with this host's copy of the data directory;
//!  4. repaired: before that, every client connection of the checkpoint is
//!     rebuilt with TCP_REPAIR from the checkpoint's TCP table and the
//!     gate's recording (crates/rrc-repair), and handed to the restorer at
//!     its fd number;
//!  5. live: the service IP is routed to the local container and the gate
//!     is unhooked; leaving repair mode sent each client a window probe.

use std::net::SocketAddrV4;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use rrc_image::sections::{FdDetail, FdKind, TcpStream};
use rrc_wire::msg::{ConnSeed, Mode};
use rrc_wire::reply::{ConnOutcome, FailoverKind, FailoverReplay, FailoverReport, FailoverStep, PrimaryStats, Role, RoleStats, ServiceStatus};

use crate::backup::Backup;
use crate::ms;
use crate::recovery::{self, AttemptEnd, Next, Recovery};
use crate::repair_plan::{self, HeldConn, Listener};
use crate::heartbeat::Silence;
use crate::net::ContainerNet;
use crate::{Agent, Service};

/// A service that runs on this host after a failover, with no backup.
pub struct Live {
    pub spec: rrc_wire::msg::ServiceSpec,
    pub host: String,
    pub pid: i32,
    record: rrc_container::Record,
    ccfg: rrc_container::Config,
    net: ContainerNet,
    front_if: String,
    /// The service's directory on this host (data directory copy, image).
    dir: std::path::PathBuf,
    timeline: FailoverReport,
    /// ISNs and SYN options of the connections (for a new backup's gate).
    seeds: Vec<ConnSeed>,
    /// The data directory as restored (kept aside for re-protection).
    data_at_restore: Option<std::path::PathBuf>,
}

impl Live {
    pub fn status(&self) -> ServiceStatus {
        let stats = RoleStats::Primary(PrimaryStats { state: "unprotected: live after failover".into(), protected: false, ..Default::default() });
        ServiceStatus {
            primary: self.host.clone(),
            backup: None,
            command: Some(self.spec.argv.clone()),
            data_dir: self.spec.data_dir.clone(),
            pid: Some(self.pid),
            netns: Some(self.net.netns.clone()),
            protected: Some(false),
            failovers: Some(vec![self.timeline.clone()]),
            ..ServiceStatus::of(&self.spec, Role::Primary, &self.host, stats)
        }
    }

    /// Fenced (issue 15): this host holds the service IP; nothing of the
    /// service crosses it while fenced.
    pub fn fence(&self, on: bool) -> Result<()> {
        crate::net::fence_service(&self.spec.service_ip, &self.front_if, on)
    }

    pub fn stop(&self, reason: &str) {
        if let Err(e) = rrc_container::kill(&self.ccfg, &self.record) {
            tracing::warn!(service = %self.spec.name, "removing the container: {e}");
        }
        self.net.destroy();
        crate::net::unadvertise(&self.spec.service_ip, &self.front_if);
        crate::net::remove_fence(&self.spec.service_ip);
        let _ = std::fs::remove_dir_all(&self.dir);
        tracing::info!(service = %self.spec.name, reason, "service stopped");
    }
}

/// Records one failover step in the timeline and logs it as it happens.
fn step(steps: &mut Vec<(&'static str, f64)>, service: &str, what: &'static str, t0: std::time::Instant) {
    let at = ms(t0.elapsed());
    tracing::info!(service, at_ms = at, "failover: {what}");
    steps.push((what, at));
}


/// The socket address of an image's sockaddr bytes (IPv4, or IPv4-mapped
/// IPv6).
fn v4_of(a: &rrc_image::sections::SockAddr) -> Option<std::net::SocketAddrV4> {
    let b = &a.addr;
    match a.family as i32 {
        libc::AF_INET if b.len() >= 8 => Some(std::net::SocketAddrV4::new([b[4], b[5], b[6], b[7]].into(), u16::from_be_bytes([b[2], b[3]]))),
        libc::AF_INET6 if b.len() >= 24 => {
            let ip = std::net::Ipv6Addr::from(<[u8; 16]>::try_from(&b[8..24]).ok()?);
            ip.to_ipv4_mapped().map(|v4| std::net::SocketAddrV4::new(v4, u16::from_be_bytes([b[2], b[3]])))
        }
        _ => None,
    }
}

/// Runs `f` on a thread that joined network namespace `netns` (the
/// repaired sockets must be created there).
fn in_netns<T: Send + 'static>(netns: &str, f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    let path = format!("/run/netns/{netns}");
    let ns = std::fs::File::open(&path).with_context(|| format!("opening {path}"))?;
    std::thread::spawn(move || {
        // SAFETY: setns on this thread only (CLONE_NEWNET is per thread).
        if unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&ns), libc::CLONE_NEWNET) } != 0 {
            return Err(anyhow::Error::new(std::io::Error::last_os_error()).context("setns into the container's namespace"));
        }
        Ok(f())
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the repair thread panicked"))?
}

/// Rebuilds one connection in `netns`; returns the socket and where its
/// byte counts start (a repaired socket's kernel counters start at zero at
/// the repair: the next checkpoint's TCP table counts from there).
fn repair_conn(netns: &str, d: &rrc_gate::StreamData, t: &TcpStream, before_replay: bool) -> Result<(OwnedFd, RepairBase)> {
    let spec = if before_replay { rrc_repair::spec_for_replay(d, t)? } else { rrc_repair::spec_from_gate(d, t)? };
    let (cisn, sisn) = (d.snapshot.client_isn.unwrap_or(0), d.snapshot.server_isn.unwrap_or(0));
    let base = RepairBase {
        conn: (d.snapshot.client, d.snapshot.server),
        write_base: spec.send_seq.wrapping_sub(sisn.wrapping_add(1)),
        read_base: spec.recv_seq.wrapping_sub(cisn.wrapping_add(1)),
    };
    let sock = in_netns(netns, move || rrc_repair::repair(&spec))??;
    if before_replay {
        // the replay sends an epoch's replies on it at once, while the
        // clients' acknowledgments wait at the gate (rr-conns.c): room
        let room: libc::c_int = REPLAY_SNDBUF;
        // SAFETY: setsockopt on our socket with an int.
        let r = unsafe {
            libc::setsockopt(std::os::fd::AsRawFd::as_raw_fd(&sock), libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, (&room as *const libc::c_int).cast(), std::mem::size_of::<libc::c_int>() as u32)
        };
        if r != 0 {
            tracing::warn!("SO_SNDBUFFORCE on a repaired socket: {}", std::io::Error::last_os_error());
        }
    }
    Ok((sock, base))
}

/// A repaired socket's send buffer before a replay.
const REPLAY_SNDBUF: libc::c_int = 16 << 20;

/// Where a repaired connection's byte counts start, relative to its ISNs.
struct RepairBase {
    conn: (SocketAddrV4, SocketAddrV4),
    write_base: u32,
    read_base: u32,
}

/// What a backup makes in advance for its failover, so that none of it is
/// on the failover's clock: the container's network namespace, holding
/// the service IP but not yet routed to (~10 `ip` runs, ~30 ms), and
/// rrc-restore started as pid 1 of its container in it (~35 ms), waiting
/// for the repaired sockets, its image to come on a pipe whose write end
/// is kept here.
pub struct Standby {
    net: ContainerNet,
    restorer: Option<StandbyRestorer>,
}

struct StandbyRestorer {
    started: rrc_launch::Started,
    image_tx: OwnedFd,
    /// rr mode: the file (a memfd) the restorer's library will replay,
    /// written at the failover with the log kept since the checkpoint.
    replay_log: Option<std::fs::File>,
}

/// The service's data directory at a failover: the backup's committed copy,
/// and what the restored service gets bind-mounted (the same, or with a
/// spare, a copy made at the failover: see [`data_dirs`]).
struct DataDirs {
    target: std::path::PathBuf,
    committed: std::path::PathBuf,
    live: std::path::PathBuf,
}

impl Standby {
    /// Makes both; None (logged) if the namespace cannot be made, and no
    /// restorer (logged) if it cannot be started: the failover then makes
    /// what is missing itself.
    pub fn prepare(agent: &Arc<Agent>, spec: &rrc_wire::msg::ServiceSpec, data_root: Option<&std::path::Path>) -> Option<Standby> {
        let netns = format!("{}{}-{}", agent.cfg.netns_prefix, agent.cfg.name, spec.name);
        let net = match ContainerNet::create_standby(&netns, agent.next_index(), &spec.service_ip, None) {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(service = %spec.name, "preparing the failover's network namespace: {e:#}; the failover will make it");
                return None;
            }
        };
        let data = data_dirs(spec, data_root);
        // The copy's directory, empty, exists before the restorer
        // bind-mounts it; the failover fills it (fill_copy).
        let prepared = data.as_ref().filter(|d| d.live != d.committed).map_or(Ok(()), |d| {
            let _ = std::fs::remove_dir_all(&d.live);
            std::fs::create_dir_all(&d.live).with_context(|| format!("creating {}", d.live.display()))
        });
        let from = format!("committed state of {} (restorer started in advance)", spec.name);
        let recovery = Recovery::first(spec.mode == Mode::Rr);
        let restorer = match prepared.and_then(|()| start_restorer(agent, spec, &netns, data.as_ref(), &from, recovery)) {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::warn!(service = %spec.name, "starting the failover's restorer in advance: {e:#}; the failover will start it");
                None
            }
        };
        Some(Standby { net, restorer })
    }

    /// The backup ends without a failover.
    pub fn discard(self) {
        // Started's drop removes the container.
        drop(self.restorer);
        self.net.destroy();
    }
}

pub(crate) fn container_config(agent: &Agent) -> rrc_container::Config {
    rrc_container::Config { cgroup_root: agent.cfg.cgroup_root.clone(), registry: rrc_container::Registry::new(agent.cfg.state_dir.join("containers")) }
}

/// With a spare to re-protect onto, the restored service writes on a copy
/// (`data-live` next to the committed copy) and the committed one stays as
/// it was at the restore, for the spare; otherwise it writes on the
/// committed copy itself.
fn data_dirs(spec: &rrc_wire::msg::ServiceSpec, committed: Option<&std::path::Path>) -> Option<DataDirs> {
    let (target, committed) = (spec.data_dir.as_ref()?, committed?);
    // rr mode: a replay that diverges wrote on the copy; the fallback
    // starts again from the committed one
    let live = if spec.spare.is_some() || spec.mode == Mode::Rr { committed.with_file_name("data-live") } else { committed.to_path_buf() };
    Some(DataDirs { target: target.into(), committed: committed.to_path_buf(), live })
}

/// Copies the committed data directory's content into `live`: made empty
/// in advance, and the waiting restorer has bind-mounted that very
/// directory (so it is filled, never replaced), or made here.
fn fill_copy(committed: &std::path::Path, live: &std::path::Path) -> Result<()> {
    std::fs::create_dir_all(live).with_context(|| format!("creating {}", live.display()))?;
    crate::copy_tree(&committed.join("."), live).context("copying the data directory for the restored service")
}

/// rrc-restore started in the container's namespace `netns`, reading its
/// image from a new pipe whose write end is returned; with `replay`, also
/// told to replay a log from a file (a memfd) written later, on the
/// clients' own connections (runtime/lib/rr-conns.h).
fn start_restorer(agent: &Agent, spec: &rrc_wire::msg::ServiceSpec, netns: &str, data: Option<&DataDirs>, from: &str, recovery: Recovery) -> Result<StandbyRestorer> {
    let (images, image_tx) = rrc_launch::Images::stream(from)?;
    let (replay, replay_log) = if let Some(races) = recovery.races() {
        let log = crate::staging::memfd("rrc-replay-log")?;
        let theirs = OwnedFd::from(log.try_clone().context("duplicating the replay log's fd")?);
        let spec = rrc_launch::ReplaySpec {
            log: theirs,
            timeout_ms: REPLAY_STALL_MS,
            to: None,
            until: None,
            races,
            pace_max_us: recovery.pace_max_us(),
            connections: true,
            // recorded again for the spare's backup (re-protection)
            record: spec.spare.is_some(),
        };
        (Some(spec), Some(log))
    } else {
        (None, None)
    };
    let launch = rrc_launch::LaunchSpec {
        images,
        netns: Some(netns.into()),
        log: Some(agent.service_log(&spec.name)),
        binds: data.map(|d| rrc_container::Bind { host: d.live.clone(), target: d.target.clone() }).into_iter().collect(),
        restorer: agent.cfg.restorer.clone(),
        container: container_config(agent),
        replay,
    };
    let started = rrc_launch::start(launch)?;
    Ok(StandbyRestorer { started, image_tx, replay_log })
}

/// A replay that makes no progress this long is a divergence (the
/// library's watchdog), and the whole replay may take at most
/// [`REPLAY_WAIT`]: an epoch's log replays in a few ms (bench/replay.py).
const REPLAY_STALL_MS: u32 = 2000;
const REPLAY_WAIT: Duration = Duration::from_secs(10);


/// The committed state a failover restores.
struct Committed {
    table: Vec<TcpStream>,
    conns: Vec<HeldConn>,
    listeners: Vec<Listener>,
    epoch: u64,
}

/// A connection: (client, service).
type ConnKey = (SocketAddrV4, SocketAddrV4);

/// One attempt at bringing the service up from the committed state.
struct Attempt<'a> {
    /// The restorer started in advance, if it suits this attempt.
    restorer: Option<StandbyRestorer>,
    /// rr mode: the log to replay (its cut names `image_id`).
    replay_log: Option<&'a [u8]>,
    /// The id the committed state is streamed under.
    image_id: rrc_image::ImageId,
    /// Connections not to rebuild but to reset, and why.
    must_reset: Vec<repair_plan::MustReset>,
    /// What this attempt is: a replay (ordered, paced) or the checkpoint
    /// alone.
    recovery: Recovery,
    /// Fault injection (`damage-first-restore`): one byte of the image
    /// streamed to this attempt's restorer flipped.
    damage_image: bool,
}

/// Where `damage-first-restore` flips a byte of the image stream: past
/// the header, inside the first sections' payload (their checksums fail).
const DAMAGED_BYTE: u64 = 4096;

/// A writer that flips one byte of what goes through it (fault injection).
struct FlipByte<W> {
    inner: W,
    at: u64,
    pos: u64,
}

impl<W: std::io::Write> std::io::Write for FlipByte<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let (start, end) = (self.pos, self.pos + buf.len() as u64);
        let n = if (start..end).contains(&self.at) {
            let mut b = buf.to_vec();
            b[(self.at - start) as usize] ^= 0xff;
            self.inner.write(&b)?
        } else {
            self.inner.write(buf)?
        };
        self.pos += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The service up, not yet live (its input still held).
struct Up {
    restored: rrc_launch::Restored,
    outcomes: Vec<ConnOutcome>,
    bases: Vec<RepairBase>,
    replay: Option<FailoverReplay>,
}

enum UpError {
    /// The replay diverged or did not finish: its container is removed,
    /// its connections closed without a byte to their clients. How far
    /// each had written (absolute write_seq), for the fallback.
    Diverged { why: String, replay: Box<FailoverReplay>, written: Vec<(ConnKey, rrc_repair::Silenced)> },
    /// The restored process failed before its library answered (it
    /// crashed, refused the image): no replay ran, no byte went to a
    /// client; its container is removed.
    RestoreFailed(anyhow::Error),
    Failed(anyhow::Error),
}

impl From<anyhow::Error> for UpError {
    fn from(e: anyhow::Error) -> UpError {
        UpError::Failed(e)
    }
}

impl UpError {
    fn into_anyhow(self) -> anyhow::Error {
        match self {
            UpError::Diverged { why, .. } => anyhow::anyhow!(why),
            UpError::RestoreFailed(e) | UpError::Failed(e) => e,
        }
    }
}

/// Restores the committed state in the container network `net`, with
/// every client connection rebuilt, and replays the log if the attempt
/// has one (steps 3c to 4' of the sequence). On error nothing of the
/// attempt runs any more; the network is the caller's.
#[allow(clippy::too_many_arguments)]
fn bring_up(
    agent: &Arc<Agent>,
    b: &Arc<Backup>,
    net: &ContainerNet,
    committed: &Committed,
    data: Option<&DataDirs>,
    a: Attempt,
    steps: &mut Vec<(&'static str, f64)>,
    t0: std::time::Instant,
) -> Result<Up, UpError> {
    let replaying = a.replay_log.is_some();
    let netns = net.netns.clone();
    let ccfg = container_config(agent);
    // 3c. The committed state, streamed to the restorer from here on (the
    // store is halted: nothing changes it meanwhile).
    let from = format!("committed state of {}, epoch {}", b.spec.name, committed.epoch);
    let r = match a.restorer {
        Some(r) => r,
        None => start_restorer(agent, &b.spec, &netns, data, &from, a.recovery)?,
    };
    let (started, image_tx) = (r.started, r.image_tx);
    // the restored library maps the log once the threads are restored
    if let (Some(f), Some(log)) = (r.replay_log, a.replay_log) {
        use std::io::Write;
        (&f).write_all(log).context("writing the replay log")?;
    }
    let writer = {
        let (b, id, damage) = (b.clone(), a.image_id, a.damage_image);
        std::thread::Builder::new()
            .name("failover-image".into())
            .spawn(move || {
                let out = std::fs::File::from(image_tx);
                if damage {
                    b.store().stream_image_as(FlipByte { inner: out, at: DAMAGED_BYTE, pos: 0 }, id)
                } else {
                    b.store().stream_image_as(out, id)
                }
            })
            .context("starting the image writer")?
    };

    // 4. Repair every client connection the checkpoint holds.
    // 4b. With them, connections the primary's kernel had completed but
    // the application had not accepted: in a listener's accept queue, so in
    // the TCP table with inode 0 and in no fd. Same repair (the application
    // had read and written nothing: the table says 0 and 0); the restored
    // library hands them to the next accept() on that listener (`fd` is
    // then the listener's).
    // 4c. And those the clients opened after the checkpoint (the gate's
    // record only): rebuilt at 0/0 and handed over the same way; a replay
    // gives each to the replayed accept that took it (accept-queue.c).
    // A connection that cannot be rebuilt is reset (its client learns at
    // once). A replay's sockets are kept here too until it ends: if it
    // diverges they are silenced before its process goes.
    let streams = b.gate().streams();
    let plan = repair_plan::plan(&committed.conns, &committed.listeners, &committed.table, &streams, |peer, local| b.gate().stream_data(peer, local));
    let mut outcomes = Vec::new();
    let mut repaired: Vec<(i32, OwnedFd)> = Vec::new();
    let mut pending_accept: Vec<(i32, OwnedFd)> = Vec::new();
    let mut bases: Vec<RepairBase> = Vec::new();
    let mut kept: Vec<(ConnKey, OwnedFd)> = Vec::new();
    for r in plan {
        let (fd, peer, local, accept_queue, after_checkpoint) = (r.fd, r.peer, r.local, r.accept_queue(), r.origin == repair_plan::Origin::AfterCheckpoint);
        let forced = a.must_reset.iter().find(|m| m.conn == (peer, local));
        let done = match forced {
            Some(m) => Err(anyhow::anyhow!(m.why.clone())),
            None => r.from.map_err(|why| anyhow::anyhow!(why)).and_then(|(t, d)| repair_conn(&netns, &d, &t, replaying)),
        };
        let (reason, reset) = match done {
            Ok((sock, base)) => {
                if replaying {
                    kept.push(((peer, local), sock.try_clone().context("keeping a repaired socket")?));
                }
                bases.push(base);
                if accept_queue { &mut pending_accept } else { &mut repaired }.push((fd, sock));
                (None, false)
            }
            Err(e) => {
                let what = match r.origin {
                    repair_plan::Origin::Held => "connection not repaired",
                    repair_plan::Origin::AcceptQueue => "connection not yet accepted, not repaired",
                    repair_plan::Origin::AfterCheckpoint => "connection opened after the checkpoint, not repaired",
                };
                let reset = reset_conn(&netns, b.gate().stream_data(peer, local), forced.map(|m| m.sent_to));
                tracing::warn!(service = %b.spec.name, fd, accept_queue, client = %peer, reset = reset.is_ok(), "{what}: {e:#}");
                if let Err(re) = &reset {
                    tracing::warn!(service = %b.spec.name, client = %peer, "not reset either: {re:#}");
                }
                (Some(format!("{e:#}")), reset.is_ok())
            }
        };
        outcomes.push(ConnOutcome { fd, client: peer.to_string(), repaired: reason.is_none(), reason, accept_queue, after_checkpoint, reset });
    }
    step(steps, &b.spec.name, "connections repaired", t0);

    // 3d. Restore: the sockets go to the restorer, which then reads the
    // stream.
    let restored = started.finish(repaired, pending_accept);
    // The writer ends either way: the restorer read everything, or it
    // stopped and the writer got EPIPE.
    let written: Result<(), String> = match writer.join() {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("the image writer panicked".into()),
    };
    let remove = |r: &rrc_launch::Restored| {
        if let Err(e) = rrc_container::kill(&ccfg, &r.record) {
            tracing::error!(service = %b.spec.name, "removing the restored container: {e}");
        }
    };
    let restored = match (restored, written) {
        (Ok(r), Ok(())) => r,
        (Ok(r), Err(we)) => {
            // The restorer checked the END section, so this is not
            // expected; the restored process is not trusted either way.
            remove(&r);
            return Err(anyhow::anyhow!("restoring the committed state: the restore ended but streaming the image failed: {we}").into());
        }
        (Err(e), w) => {
            let e = match w {
                Err(we) => e.context(format!("streaming the image failed: {we}")),
                Ok(()) => e,
            };
            // The library never answered: nothing of a replay ran. The
            // restorer may have taken its sockets out of repair mode; the
            // copies kept here are the last references: back in repair
            // mode their close sends nothing (no RST for the unread client
            // bytes), and the next attempt rebuilds the connections.
            silence_all(&b.spec.name, &kept, "the failed restore");
            return Err(UpError::RestoreFailed(e.context("restoring the committed state")));
        }
    };
    step(steps, &b.spec.name, a.recovery.restored_step(), t0);

    // 4'. rr mode: the replay runs the log on the clients' connections
    // (reads take their bytes off them, outputs go out again) and every
    // thread goes live at its end.
    let Some(log) = a.replay_log else {
        return Ok(Up { restored, outcomes, bases, replay: None });
    };
    let control = rrc_container::control_socket_of(restored.record.pid);
    let watched = rrc_launch::watch_replay(&control, REPLAY_WAIT);
    let report = |st: &rrc_control::ReplayState| FailoverReplay {
        log_bytes: log.len() as u64,
        events: st.events_done,
        events_dropped: st.events_dropped,
        replay_ms: st.replay_ns as f64 / 1e6,
        connections: st.connections,
        read_bytes: st.conn_read_bytes,
        sent_bytes: st.conn_sent_bytes,
        faults: st.conn_faults,
        skipped_bytes: st.conn_skipped_bytes,
        behind: st.conn_behind,
        reset: st.conn_reset,
        ..Default::default()
    };
    let st = match watched {
        Ok(st) if st.phase == rrc_control::ReplayPhase::Live => st,
        other => {
            let (why, replay) = match other {
                Ok(st) => (format!("the replay diverged: {}", st.report), report(&st)),
                Err(e) => (format!("the replay failed: {e:#}"), FailoverReplay { log_bytes: log.len() as u64, ..Default::default() }),
            };
            // in repair mode a socket's close sends nothing: the clients'
            // connections stay as they were for the fallback
            let written = silence_all(&b.spec.name, &kept, "the diverged replay");
            remove(&restored);
            drop(kept);
            return Err(UpError::Diverged { why, replay: Box::new(replay), written });
        }
    };
    let replay = report(&st);
    // the library reset every connection out of step with its client
    // (rr-conns.c): bytes missing or different, or the replay ended short
    // of what the gate had released on it
    if st.conn_faults > 0 || st.conn_behind > 0 {
        tracing::warn!(service = %b.spec.name, faults = st.conn_faults, behind = st.conn_behind, reset = st.conn_reset, "the replay left connections out of step with their clients, reset (see the service's log)");
    }
    step(steps, &b.spec.name, "replayed up to the last released output, live", t0);
    Ok(Up { restored, outcomes, bases, replay: Some(replay) })
}

/// Puts every kept socket of an attempt (`whose`) back into repair mode
/// (rrc_repair::silence): how far each had got.
fn silence_all(service: &str, kept: &[(ConnKey, OwnedFd)], whose: &str) -> Vec<(ConnKey, rrc_repair::Silenced)> {
    kept.iter()
        .filter_map(|(k, fd)| match rrc_repair::silence(fd) {
            Ok(w) => Some((*k, w)),
            Err(e) => {
                tracing::warn!(service, client = %k.0, "silencing a connection of {whose}: {e}");
                None
            }
        })
        .collect()
}

/// Keeps, per connection, the furthest a diverged replay's socket had
/// written and sent (sequence order), over the attempts.
fn merge_written(all: &mut Vec<(ConnKey, rrc_repair::Silenced)>, more: Vec<(ConnKey, rrc_repair::Silenced)>) {
    let later = |a: u32, b: u32| if rrc_repair::seq_cmp(a, b).is_gt() { a } else { b };
    for (k, w) in more {
        match all.iter_mut().find(|(x, _)| *x == k) {
            Some((_, had)) => *had = rrc_repair::Silenced { written: later(w.written, had.written), sent: later(w.sent, had.sent) },
            None => all.push((k, w)),
        }
    }
}

/// Hands each SYN to the service's kernel in `netns`; returns how many
/// went.
fn resend_syns(netns: &str, syns: Vec<Vec<u8>>, service: &str) -> usize {
    if syns.is_empty() {
        return 0;
    }
    let results = match in_netns(netns, move || syns.iter().map(|p| rrc_repair::resend_syn(p).map_err(|e| e.to_string())).collect::<Vec<_>>()) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(service, "sending the unanswered SYNs again: {e:#}");
            return 0;
        }
    };
    for r in &results {
        match r {
            Ok((client, _)) => tracing::info!(service, %client, "SYN sent to the restored service again"),
            Err(e) => tracing::warn!(service, "a SYN not sent again: {e}"),
        }
    }
    results.iter().filter(|r| r.is_ok()).count()
}

/// Resets a connection that cannot be rebuilt, from the gate's record
/// (rrc_repair::spec_to_reset), in the container's namespace.
fn reset_conn(netns: &str, d: Option<rrc_gate::StreamData>, sent_to: Option<u32>) -> Result<()> {
    let d = d.context("the gate has no record of it")?;
    if d.snapshot.reset {
        anyhow::bail!("it was reset already");
    }
    let spec = rrc_repair::spec_to_reset(&d, sent_to)?;
    in_netns(netns, move || rrc_repair::reset(&spec))??;
    Ok(())
}

/// The primary fell silent (on the heartbeat monitor's thread). Without
/// views, it has failed. With views (issue 15), the silence starts a view
/// change on a thread of its own, the heartbeat listening on: this host
/// fails over only once the view making it the primary is installed.
pub fn primary_silent(agent: &Arc<Agent>, b: &Arc<Backup>, s: Silence) -> crate::heartbeat::Watch {
    use crate::heartbeat::Watch;
    let Some(view) = agent.view(&b.spec.name) else {
        primary_failed(agent, b, s, None);
        return Watch::Stop;
    };
    if b.is_stopping() {
        return Watch::Stop;
    }
    let Some(heard) = b.heard() else { return Watch::Stop };
    let (agent, b) = (agent.clone(), b.clone());
    view.suspect_apart(rrc_view::Change::PromoteBackup, heard, move |changed| primary_failed(&agent, &b, s, Some(changed)))
}

/// The primary has failed: fail over to this host (with views, after
/// `changed` made it the primary).
pub fn primary_failed(agent: &Arc<Agent>, b: &Arc<Backup>, s: Silence, changed: Option<crate::views::ViewChanged>) {
    if b.is_stopping() {
        return;
    }
    let name = b.spec.name.clone();
    tracing::error!(service = %name, silent_ms = s.silent_for.as_millis() as u64, "primary {} silent: failing over to this host", b.spec.primary);
    match fail_over(agent, b, &s, changed) {
        Ok(live) => {
            if live.spec.spare.is_some() {
                let r = crate::reprotect::reprotect(
                    agent,
                    &live.spec,
                    live.record.clone(),
                    live.ccfg.clone(),
                    live.net.clone(),
                    live.seeds.clone(),
                    vec![live.timeline.clone()],
                    live.data_at_restore.as_deref(),
                );
                match r {
                    Ok(p) => {
                        agent.replace(&name, Service::Primary(p));
                        return;
                    }
                    Err(e) => tracing::error!(service = %name, "re-protection failed: {e:#}; the service stays UNPROTECTED"),
                }
            }
            let live = Arc::new(live);
            agent.replace(&name, Service::Live(live.clone()));
            tracing::info!(service = %name, timeline = ?live.timeline, "service live on this host, UNPROTECTED");
        }
        Err(e) => {
            tracing::error!(service = %name, "failover FAILED: {e:#}");
            b.set_failed(format!("failover failed: {e:#}"));
        }
    }
}

fn fail_over(agent: &Arc<Agent>, b: &Arc<Backup>, s: &Silence, changed: Option<crate::views::ViewChanged>) -> Result<Live> {
    let t0 = s.declared_at;
    let mut steps: Vec<(&str, f64)> = Vec::new();
    // 2. Block, and stop replication.
    b.gate().hold_input().context("holding the clients' packets")?;
    // nothing more leaves the gate (in rr mode the log session may still
    // be handing it outputs: the log replayed below must hold every
    // reply released)
    b.gate().set_release_enabled(false).context("stopping the gate's releases")?;
    b.route().bypass_output(&agent.cfg.repl_if).context("letting the service's output past the gate")?;
    // the same drop for what the old primary sends by the AF_XDP path
    b.gate().seal_output();
    b.halt();
    step(&mut steps, &b.spec.name, "input held, gate stopped releasing", t0);

    // 3a. What the committed state holds.
    let committed = {
        let store = b.store();
        let img = store.image().context("no checkpoint was ever committed: nothing to fail over to")?;
        let conns: Vec<HeldConn> = img
            .fds
            .iter()
            .filter(|f| f.kind == FdKind::InetConn)
            .filter_map(|f| match &f.detail {
                FdDetail::Socket { local, peer, .. } => Some(HeldConn { fd: f.fd, local: v4_of(local)?, peer: v4_of(peer)?, inode: f.ino }),
                _ => None,
            })
            .collect();
        let listeners: Vec<Listener> = img
            .fds
            .iter()
            .filter(|f| f.kind == FdKind::InetListen)
            .filter_map(|f| match &f.detail {
                FdDetail::Socket { local, .. } => Some(Listener { fd: f.fd, local: v4_of(local)? }),
                _ => None,
            })
            .collect();
        Committed { table: b.corrected_table(store.tcp_streams()), conns, listeners, epoch: b.last_committed_epoch() }
    };
    let epoch = committed.epoch;
    // 3a'. rr mode (RRC §4.4): the log kept since that checkpoint, to
    // replay up to where the primary was; the gate may have released
    // replies of it. Without it (no cut committed yet) the connections
    // whose replies went past the checkpoint cannot be matched: they are
    // reset, as a repair that fails always is.
    let restored_id = rrc_image::ImageId::random().context("an id for the restored image")?;
    // (fault injection: what the first replay gets instead)
    let mut first_log: Option<Vec<u8>> = None;
    let replay_log: Option<Vec<u8>> = match b.spec.mode {
        Mode::Rr => {
            // what the clients were sent: the replay reproduces it and no
            // more (the gate released nothing since step 2)
            let released = repair_plan::released(&b.gate().streams(), &committed.table);
            let committed = b.store().committed().map(|h| h.image_id);
            let log = committed.and_then(|c| b.shipped_log().and_then(|l| crate::lock(l).replay_log(&c, restored_id, &released)));
            if log.is_none() {
                tracing::warn!(service = %b.spec.name, "no record log to replay from the committed checkpoint: restoring it without replay");
            }
            if b.take_alter_first_replay() {
                tracing::warn!(service = %b.spec.name, "fault injected: the first replay gets an altered log");
                first_log = committed.and_then(|c| b.shipped_log().and_then(|l| crate::lock(l).replay_log_altered(&c, restored_id, &released)));
            }
            log
        }
        Mode::Checkpoint => None,
    };
    let replaying = replay_log.is_some();

    // 3b. What this host prepared when it became the backup (Standby):
    // the container's network namespace, holding the service IP, now
    // routed to (the input is held by the gate meanwhile), and rrc-restore
    // waiting in its container; made here if that failed.
    let standby = b.take_standby();
    let (net, restorer) = match standby {
        Some(Standby { net, restorer }) => {
            if let Err(e) = net.activate() {
                drop(restorer);
                net.destroy();
                return Err(e.context("routing to the container's network"));
            }
            let restorer = restorer.filter(|r| {
                let alive = r.started.is_alive();
                if !alive {
                    tracing::warn!(service = %b.spec.name, "the restorer started in advance has ended (see the service's log); starting one now");
                }
                // one started to replay must get a log, one that was not cannot
                alive && r.replay_log.is_some() == replaying
            });
            (net, restorer)
        }
        None => {
            let netns = format!("{}{}-{}", agent.cfg.netns_prefix, agent.cfg.name, b.spec.name);
            (ContainerNet::create(&netns, agent.next_index(), &b.spec.service_ip, None).context("the container's network")?, None)
        }
    };

    // The data directory: the committed copy, or (with a spare to
    // re-protect onto, or in rr mode) a copy of it, so that the committed
    // one stays as it was at the restore.
    let data = data_dirs(&b.spec, b.data_root().as_deref());
    let data_at_restore = match &data {
        Some(d) if d.live != d.committed => {
            if let Err(e) = fill_copy(&d.committed, &d.live) {
                net.destroy();
                return Err(e);
            }
            Some(d.committed.clone())
        }
        _ => None,
    };

    // 3c–4'. Restore, repair, replay: ordered, then (if that diverged)
    // paced, then the checkpoint alone (recovery.rs).
    let ccfg = container_config(agent);
    let mut attempt = Attempt {
        restorer,
        replay_log: first_log.as_deref().or(replay_log.as_deref()),
        image_id: restored_id,
        must_reset: Vec::new(),
        recovery: Recovery::first(replaying),
        damage_image: b.take_damage_first_restore(),
    };
    // how far each diverged replay's sockets had got, the furthest kept
    let mut written: Vec<(ConnKey, rrc_repair::Silenced)> = Vec::new();
    let mut divergences: Vec<(Recovery, String, FailoverReplay)> = Vec::new();
    let mut up = loop {
        let recovery = attempt.recovery;
        let outcome = bring_up(agent, b, &net, &committed, data.as_ref(), attempt, &mut steps, t0);
        let end = match &outcome {
            Ok(_) => AttemptEnd::Up,
            Err(UpError::Diverged { .. }) => AttemptEnd::Diverged,
            Err(UpError::RestoreFailed(_)) => AttemptEnd::RestoreFailed,
            Err(UpError::Failed(_)) => AttemptEnd::Failed,
        };
        let next = recovery.after(end);
        let (why, replay, w) = match outcome {
            Ok(up) => break up,
            Err(UpError::Diverged { why, replay, written }) => (why, replay, written),
            Err(UpError::RestoreFailed(e)) if matches!(next, Next::Retry { .. }) => {
                (format!("the restore failed: {e:#}"), Box::default(), Vec::new())
            }
            Err(e) => {
                net.destroy();
                let e = e.into_anyhow();
                return Err(match divergences.last() {
                    Some((_, why, _)) => e.context(format!("after: {why}")),
                    None => e,
                });
            }
        };
        let (label, next) = match next {
            Next::Retry { step, attempt } => (step, Some(attempt)),
            Next::GiveUp { step } => (step.unwrap_or("the restore failed"), None),
            Next::GoLive => unreachable!("an attempt that is not up"),
        };
        tracing::error!(service = %b.spec.name, "failover: {why}; {label}");
        step(&mut steps, &b.spec.name, label, t0);
        merge_written(&mut written, w);
        divergences.push((recovery, why.clone(), *replay));
        let Some(next) = next else {
            net.destroy();
            return Err(anyhow::anyhow!("{why}"));
        };
        // a replay wrote on the data directory's copy: from the committed
        // one again
        let again = data.as_ref().filter(|d| d.live != d.committed).map_or(Ok(()), |d| {
            let _ = std::fs::remove_dir_all(&d.live);
            fill_copy(&d.committed, &d.live)
        });
        let must_reset = if next.reset_written_past_release {
            repair_plan::written_past_release(&written, &b.gate().streams())
        } else {
            Vec::new()
        };
        let id = if next.same_image_id { Ok(restored_id) } else { rrc_image::ImageId::random().context("an id for the restored image") };
        match again.and(id) {
            Ok(id) => {
                attempt = Attempt {
                    restorer: None,
                    replay_log: if next.with_log { replay_log.as_deref() } else { None },
                    image_id: id,
                    must_reset,
                    recovery: next.recovery,
                    damage_image: false,
                }
            }
            Err(e) => {
                net.destroy();
                return Err(e.context(format!("after: {why}")));
            }
        }
    };
    // The timeline's replay (recovery.rs): the one that went live, or the
    // last one's, marked diverged, when the checkpoint alone did.
    up.replay = recovery::timeline_replay(up.replay.take(), &divergences);
    let Up { restored, outcomes, bases, replay } = up;

    // 5. Live: the held input goes to the restored service (the route
    // already points to the container). From here the gate passes every
    // client packet at once (the service's output already bypasses it),
    // so unhooking it (an iptables run, ~10 ms) is done off the clock.
    match b.gate().release_input() {
        Ok(n) => tracing::info!(service = %b.spec.name, packets = n, "clients' packets held during the failover delivered"),
        Err(e) => tracing::warn!(service = %b.spec.name, "delivering the held packets: {e}"),
    }
    // 5'. Clients in SYN_SENT whose SYN the primary never answered: the
    // restored service gets it now rather than at the client's
    // retransmission timeout, 1 s on (docs/tcp-repair.md "Handshakes").
    let syns_resent = resend_syns(&net.netns, b.gate().unanswered_syns(), &b.spec.name);
    // The new backup of a re-protection joins these connections; the
    // repaired sockets count bytes from their repair on, so their seeds
    // carry where each one started (see Backup::corrected_table).
    let seeds: Vec<ConnSeed> = b
        .all_seeds()
        .into_iter()
        .map(|stream| {
            let base = bases.iter().find(|x| x.conn == (stream.client, stream.server));
            ConnSeed { write_base: base.map_or(0, |x| x.write_base), read_base: base.map_or(0, |x| x.read_base), stream }
        })
        .collect();
    step(&mut steps, &b.spec.name, "live: traffic to the local container", t0);
    {
        // The queue must stay bound until nothing jumps to it any more: a
        // packet queued to an unbound queue is dropped.
        let b = b.clone();
        std::thread::spawn(move || {
            b.route().unhook();
            b.close_gate();
            b.route().remove_chain();
        });
    }
    let total = ms(s.silent_for) + ms(t0.elapsed());
    if outcomes.iter().any(|o| !o.repaired) && outcomes.iter().all(|o| !o.repaired) && !outcomes.is_empty() {
        tracing::warn!(service = %b.spec.name, "no connection could be repaired");
    }
    let timeline = FailoverReport {
        kind: FailoverKind::PrimaryFailure,
        failed_host: b.spec.primary.clone(),
        at: crate::now_rfc3339(),
        epoch_restored: Some(epoch),
        detection_ms: ms(s.silent_for),
        steps: steps.iter().map(|(n, t)| FailoverStep { step: n.to_string(), at_ms: *t }).collect(),
        total_ms: total,
        connections: Some(outcomes),
        error: None,
        reprotected: None,
        replay,
        syns_resent: Some(syns_resent),
        view_change: changed.map(|c| c.report(t0)),
    };
    Ok(Live {
        spec: b.spec.clone(),
        host: agent.cfg.name.clone(),
        pid: restored.record.pid,
        record: restored.record,
        ccfg,
        net,
        front_if: agent.cfg.front_if.clone(),
        dir: b.dir().to_path_buf(),
        timeline,
        seeds,
        data_at_restore,
    })
}
