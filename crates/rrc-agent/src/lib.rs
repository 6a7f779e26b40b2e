//! The rrc agent: one per host (DESIGN §2.3).
//!
//! It serves the CLI on a root-only Unix socket ([`cli`]) and its peers on
//! TCP (replication network, [`peer`]: authenticated sessions only), both
//! in the frame format of `rrc-wire`. For each service it
//! is either the primary (runs the container, drives the epochs, streams
//! checkpoints: [`primary`]) or the backup (keeps the committed state,
//! routes the service's traffic through the gate, acknowledges each
//! committed epoch: [`backup`]). docs/protocol.md describes the messages.

pub mod backup;
mod cli;
pub mod data_dir;
pub mod epochs;
pub mod failover;
pub mod heartbeat;
pub mod intake;
pub mod logship;
pub mod marked_outputs;
pub mod net;
pub mod peer;
pub mod primary;
pub mod recovery;
pub mod repair_plan;
pub mod reprotect;
pub mod security;
pub mod shadow;
pub mod shipped_log;
pub mod staging;
pub mod views;

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, Result};
use rrc_wire::auth::{PeerAuth, SeenNonces};
use rrc_wire::reply::{AgentStatus, Role, Stopped};

/// A poisoned lock still guards consistent data here (every critical
/// section only assigns fields): take it rather than propagate the panic.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub use rrc_container::now_rfc3339;

/// A duration as the milliseconds `rrc status` and the timelines show.
pub(crate) fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Renames the calling thread (the kernel's 15 bytes), once it knows what
/// it serves: `ps -L`, `top -H`, perf and bench/replication.py's CPU
/// breakdown tell a peer connection carrying a log from one carrying
/// checkpoints. Best effort.
pub(crate) fn name_this_thread(name: &str) {
    let mut b = [0u8; 16];
    let n = name.len().min(15);
    b[..n].copy_from_slice(&name.as_bytes()[..n]);
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, b.as_ptr() as libc::c_ulong, 0, 0, 0) };
}

/// `cp -a --reflink=auto -- src dst` (a data directory: owners, modes and
/// times kept, blocks shared where the file system can); `src` ending in
/// `/.` copies its content into an existing `dst`. The error carries cp's
/// own message.
pub(crate) fn copy_tree(src: &std::path::Path, dst: &std::path::Path) -> Result<()> {
    let out = std::process::Command::new("cp")
        .args(["-a", "--reflink=auto", "--"])
        .arg(src)
        .arg(dst)
        .stdin(std::process::Stdio::null())
        .output()
        .with_context(|| format!("running cp for {}", src.display()))?;
    if !out.status.success() {
        anyhow::bail!("copying {} to {} (cp {}): {}", src.display(), dst.display(), out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// This host's name (what `--primary`/`--backup` name).
    pub name: String,
    /// Services' data, logs and the container registry live below it.
    pub state_dir: PathBuf,
    /// The CLI's Unix socket.
    pub socket: PathBuf,
    /// Where peers connect (replication network).
    pub listen: SocketAddr,
    /// Other agents by host name.
    pub peers: BTreeMap<String, SocketAddr>,
    /// Client-facing interface (proxy ARP for service IPs held as backup).
    pub front_if: String,
    /// Replication interface (routes to and from the peer).
    pub repl_if: String,
    /// How a backup's gate takes the service's output (docs/gate.md "The
    /// output path").
    pub gate_output: GateOutput,
    /// How a backup's gate takes what clients send (docs/gate.md "The
    /// input path").
    pub gate_input: GateInput,
    /// librrc.so, preloaded into every service.
    pub librrc: PathBuf,
    /// rrc-restore, for failovers.
    pub restorer: PathBuf,
    /// cgroup v2 directory under which service containers get their group.
    pub cgroup_root: PathBuf,
    /// Where services' stdout/stderr go (NAME.log). The same path on every
    /// host: a restored process reopens its log by the path it had on the
    /// primary.
    pub log_dir: PathBuf,
    /// Prefix of the network namespaces this agent creates (the lab uses
    /// its own so that `rrc lab down` finds them).
    pub netns_prefix: String,
    /// How peers prove themselves: the shared key, or (explicitly) not.
    pub auth: PeerAuth,
    /// Where the key came from (for `rrc status`).
    pub key_file: Option<PathBuf>,
    /// etcd's client endpoints (`--etcd`); empty: no views, no fencing.
    pub etcd: Vec<String>,
    /// TLS to etcd with a client certificate (None: plain http).
    pub etcd_tls: Option<rrc_view::EtcdTls>,
}

/// `rrc agent --gate-input`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateInput {
    /// The FORWARD chain queues clients' packets (the default).
    Nfqueue,
    /// A tc program on the client-facing interface copies clients' frames
    /// into a ring the gate reads while the kernel forwards them; NFQUEUE
    /// where it cannot be attached (logged, and shown by `rrc status`).
    Observe,
}

/// `rrc agent --gate-output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateOutput {
    /// AF_XDP on the replication interface; NFQUEUE where XDP cannot be
    /// attached (logged, and shown by `rrc status`).
    Xdp,
    Nfqueue,
}

pub enum Service {
    Primary(Arc<primary::Primary>),
    Backup(Arc<backup::Backup>),
    /// Running here after a failover, with no backup.
    Live(Arc<failover::Live>),
}

impl Service {
    fn clone_handle(&self) -> Service {
        match self {
            Service::Primary(p) => Service::Primary(p.clone()),
            Service::Backup(b) => Service::Backup(b.clone()),
            Service::Live(l) => Service::Live(l.clone()),
        }
    }
}

pub struct Agent {
    pub cfg: AgentConfig,
    services: Mutex<BTreeMap<String, Service>>,
    next_index: AtomicU32,
    pub started: Instant,
    /// What was refused, by cause (`rrc status`).
    pub security: security::SecurityStats,
    /// Client nonces of recent handshakes (a replayed Hello is named).
    pub seen_nonces: SeenNonces,
    /// Where views live (None: no --etcd).
    pub etcd: Option<Arc<rrc_view::Etcd>>,
    /// Each service's view and this host's lease in it (issue 15).
    views: Mutex<BTreeMap<String, Arc<views::ServiceView>>>,
}

impl Agent {
    pub fn new(cfg: AgentConfig) -> Result<Arc<Agent>> {
        let etcd = match cfg.etcd.is_empty() {
            true => None,
            false => Some(Arc::new(rrc_view::Etcd::new(&cfg.etcd, views::ETCD_TIMEOUT, cfg.etcd_tls.as_ref())?)),
        };
        Ok(Arc::new(Agent {
            cfg,
            etcd,
            views: Mutex::new(BTreeMap::new()),
            services: Mutex::new(BTreeMap::new()),
            next_index: AtomicU32::new(0),
            started: Instant::now(),
            security: security::SecurityStats::default(),
            seen_nonces: SeenNonces::new(4096),
        }))
    }

    /// The service's view on this host (None: no etcd, or not yet made).
    pub fn view(&self, name: &str) -> Option<Arc<views::ServiceView>> {
        lock(&self.views).get(name).cloned()
    }

    pub(crate) fn set_view(&self, name: &str, v: Arc<views::ServiceView>) {
        if let Some(old) = lock(&self.views).insert(name.to_string(), v) {
            old.stop();
        }
    }

    fn take_view(&self, name: &str) -> Option<Arc<views::ServiceView>> {
        lock(&self.views).remove(name)
    }

    /// The lease is ending (`on`) or held again: the part of the service
    /// on this host stops, or resumes, showing anything to clients.
    pub(crate) fn fence(&self, name: &str, on: bool) {
        // (the part is taken out of the map first: iptables runs follow)
        let part = self.lock().get(name).map(Service::clone_handle);
        let r = match part {
            Some(Service::Primary(p)) => p.fence(on),
            Some(Service::Backup(b)) => b.fence(on),
            Some(Service::Live(l)) => l.fence(on),
            None => Ok(()),
        };
        if let Err(e) = r {
            tracing::error!(service = name, fence = on, "{e:#}");
        }
    }

    pub(crate) fn silence_heartbeats(&self, name: &str, on: bool) {
        match self.lock().get(name) {
            Some(Service::Primary(p)) => p.silence_heartbeats(on),
            Some(Service::Backup(b)) => b.silence_heartbeats(on),
            _ => {}
        }
    }

    /// A later view replaced the one this host acted in: its part of the
    /// service ends (the view in etcd is left as it is).
    pub(crate) fn stand_down(&self, name: &str, why: &str) {
        if let Some(v) = self.take_view(name) {
            v.stop();
        }
        let s = self.remove(name);
        match s {
            Some(Service::Primary(p)) => p.stop_fenced(why),
            Some(Service::Backup(b)) => b.stop(why),
            Some(Service::Live(l)) => l.stop(why),
            None => {}
        }
    }

    /// A number unique within this agent's life: interface names, routing
    /// tables and queue numbers derive from it.
    pub fn next_index(&self) -> u32 {
        self.next_index.fetch_add(1, Ordering::Relaxed)
    }

    pub fn service_log(&self, name: &str) -> PathBuf {
        self.cfg.log_dir.join(format!("{name}.log"))
    }

    pub fn service_dir(&self, name: &str) -> PathBuf {
        self.cfg.state_dir.join("services").join(name)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Service>> {
        lock(&self.services)
    }

    /// Reserves `name`; fails when this agent already has a service of
    /// that name in any role.
    pub fn insert(&self, name: &str, s: Service) -> Result<()> {
        let mut m = self.lock();
        if m.contains_key(name) {
            anyhow::bail!("host {} already has a service named {name:?}", self.cfg.name);
        }
        m.insert(name.to_string(), s);
        Ok(())
    }

    /// Swaps a service's part (a backup that became the live service).
    pub fn replace(&self, name: &str, s: Service) {
        self.lock().insert(name.to_string(), s);
    }

    pub fn remove(&self, name: &str) -> Option<Service> {
        self.lock().remove(name)
    }

    pub fn primary(&self, name: &str) -> Option<Arc<primary::Primary>> {
        match self.lock().get(name) {
            Some(Service::Primary(p)) => Some(p.clone()),
            _ => None,
        }
    }

    pub fn backup(&self, name: &str) -> Option<Arc<backup::Backup>> {
        match self.lock().get(name) {
            Some(Service::Backup(b)) => Some(b.clone()),
            _ => None,
        }
    }

    pub fn names(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    /// CPU time this agent process has used (user + system), ms.
    pub fn cpu_ms(&self) -> u64 {
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: getrusage fills the struct.
        unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
        let ms = |t: libc::timeval| t.tv_sec as u64 * 1000 + t.tv_usec as u64 / 1000;
        ms(ru.ru_utime) + ms(ru.ru_stime)
    }

    /// Status of every service (or one) this agent has a part in.
    pub fn status(&self, name: Option<&str>) -> AgentStatus {
        let services = {
            let m = self.lock();
            m.iter()
                .filter(|(n, _)| name.map(|x| x == n.as_str()).unwrap_or(true))
                .map(|(_, s)| match s {
                    Service::Primary(p) => p.status(),
                    Service::Backup(b) => b.status(),
                    Service::Live(l) => l.status(),
                })
                .collect::<Vec<_>>()
        };
        let services = services
            .into_iter()
            .map(|mut s| {
                s.view = self.view(&s.name).map(|v| v.status());
                s
            })
            .collect();
        AgentStatus {
            host: self.cfg.name.clone(),
            agent_pid: std::process::id(),
            agent_cpu_ms: self.cpu_ms(),
            agent_uptime_ms: self.started.elapsed().as_millis() as u64,
            security: self.security.status(&self.cfg.auth, self.cfg.key_file.as_ref(), &self.cfg.listen.to_string(), &self.cfg.socket.display().to_string()),
            services,
        }
    }

    /// Ends every service (agent shutdown).
    pub fn stop_all(&self) {
        for n in self.names() {
            let _ = self.stop(&n, "agent shutting down");
        }
    }

    /// Ends this agent's part of a service.
    pub fn stop(&self, name: &str, reason: &str) -> Result<Stopped> {
        let view = self.take_view(name);
        if let Some(v) = &view {
            v.stop();
        }
        let role = match self.remove(name) {
            Some(Service::Primary(p)) => {
                p.stop(reason);
                Some(Role::Primary)
            }
            Some(Service::Backup(b)) => {
                b.stop(reason);
                Some(Role::Backup)
            }
            Some(Service::Live(l)) => {
                l.stop(reason);
                Some(Role::Primary)
            }
            None => None,
        };
        // The primary's stop ends the service: its view goes too.
        if let (Some(v), Some(Role::Primary)) = (&view, role) {
            v.remove();
        }
        Ok(Stopped { host: self.cfg.name.clone(), role, stopped: role.map(|_| name.to_string()) })
    }
}

/// Runs the agent until SIGTERM/SIGINT.
pub fn run(cfg: AgentConfig) -> Result<()> {
    std::fs::create_dir_all(&cfg.state_dir).with_context(|| format!("creating {}", cfg.state_dir.display()))?;
    std::fs::create_dir_all(&cfg.log_dir).with_context(|| format!("creating {}", cfg.log_dir.display()))?;
    let cli = cli::bind(&cfg.socket)?;
    let peers = TcpListener::bind(cfg.listen).with_context(|| format!("listening for peers on {}", cfg.listen))?;
    let agent = Agent::new(cfg)?;
    match &agent.cfg.auth {
        PeerAuth::Key(k) => tracing::info!(host = %agent.cfg.name, socket = %agent.cfg.socket.display(), listen = %agent.cfg.listen, key = %k.fingerprint(), "agent started; peers must hold the key"),
        PeerAuth::Unauthenticated => tracing::warn!(host = %agent.cfg.name, socket = %agent.cfg.socket.display(), listen = %agent.cfg.listen, "agent started WITHOUT peer authentication (--insecure-no-auth): anyone who reaches {} is taken for a peer", agent.cfg.listen),
    }

    let stop = block_termination_signals()?;

    let a = agent.clone();
    std::thread::Builder::new().name("cli".into()).spawn(move || cli::serve_listener(a, cli))?;
    let a = agent.clone();
    std::thread::Builder::new().name("peers".into()).spawn(move || peer::serve_listener(a, peers))?;

    let sig = wait_signal(&stop);
    tracing::info!(signal = sig, "agent stopping");
    agent.stop_all();
    let _ = std::fs::remove_file(&agent.cfg.socket);
    Ok(())
}

/// Blocks SIGTERM, SIGINT and SIGHUP in every thread (call before any
/// thread is spawned) and returns the set to wait on.
fn block_termination_signals() -> Result<libc::sigset_t> {
    // SAFETY: plain sigset manipulation on a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGHUP);
        let r = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if r != 0 {
            return Err(std::io::Error::from_raw_os_error(r)).context("blocking termination signals");
        }
        Ok(set)
    }
}

fn wait_signal(set: &libc::sigset_t) -> i32 {
    loop {
        let mut sig: libc::c_int = 0;
        // SAFETY: sigwait on a set blocked in every thread.
        let r = unsafe { libc::sigwait(set, &mut sig) };
        if r == 0 {
            return sig;
        }
    }
}
