//! `rrc run`, `rrc status`, `rrc stop`, `rrc fault`, `rrc export`: the
//! verbs that talk to agents (crates/rrc/src/agents.rs finds them).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use rrc_wire::msg::{Fault, Mode, Request, ServiceSpec, Snapshot};
use rrc_wire::reply::{AgentStatus, Exported, FaultSet, Role, RoleStats, SecurityStatus, ServiceStatus, Stopped};
use serde::Serialize;
use serde_json::json;

use crate::agents::{for_host, request, request_within, resolve, AgentRef};
use crate::JsonFlag;

#[derive(Args, Debug, Clone)]
pub struct AgentFlag {
    /// Talk to the agent at this Unix socket (default: $RRC_AGENT, the
    /// lab's agents when a lab is up, else /run/rrc/agent.sock).
    #[arg(long, value_name = "SOCKET")]
    pub agent: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ModeArg {
    /// Checkpoint-only: replies leave once the epoch's checkpoint is
    /// committed at the backup (NiLiCon / Remus).
    Checkpoint,
    /// Record/replay (RRC; issue 14, in progress): the process is recorded
    /// and its library sends the log straight to the backup; a reply
    /// leaves the backup's gate as soon as the log that reproduces it is
    /// there (not at the next checkpoint), and a failover restores the
    /// last checkpoint and replays the log kept since (a replay that
    /// diverges falls back to the checkpoint alone); with --spare the
    /// restored process is recorded again for the spare.
    Rr,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum SnapshotArg {
    /// The quiesced process forks and the child writes the image.
    Fork,
    /// Pages copied in the pause, pre-copied before it: a shorter pause.
    Copy,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[arg(long)]
    pub name: String,
    /// Host that runs the service.
    #[arg(long, value_name = "HOST")]
    pub primary: String,
    /// Host that keeps the backup and routes the service's traffic.
    #[arg(long, value_name = "HOST")]
    pub backup: String,
    /// Host that becomes the new backup after a failover (re-protection):
    /// the surviving host is primary, a full checkpoint goes to the spare.
    #[arg(long, value_name = "HOST")]
    pub spare: Option<String>,
    #[arg(long, value_enum, default_value = "checkpoint")]
    pub mode: ModeArg,
    /// Epoch length: a checkpoint every DURATION (e.g. 30ms, 0.1s, 1s).
    /// Default: 30ms in checkpoint mode (replies wait for it), 100ms in rr
    /// mode (RRC-SE: checkpoints only bound the log and the recovery).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub epoch: Option<Duration>,
    /// How each epoch's checkpoint is taken.
    #[arg(long, value_enum, default_value = "copy")]
    pub snapshot: SnapshotArg,
    /// rr mode: the backup replays committed epochs in a sandbox, off the
    /// failover path, and compares every output with the log (shadow
    /// replay): `rrc status` reports how many verified and diverged.
    #[arg(long)]
    pub verify_replay: bool,
    /// Heartbeat period between the primary's and the backup's agents.
    #[arg(long, value_name = "DURATION", default_value = "30ms", value_parser = parse_duration)]
    pub heartbeat: Duration,
    /// Silence after which an agent suspects its peer: without views it
    /// fails over at once; with views (agents run with --etcd) it starts a
    /// view change.
    #[arg(long, value_name = "DURATION", default_value = "90ms", value_parser = parse_duration)]
    pub failure_timeout: Duration,
    /// With views in etcd: the lease each host acts under (500ms..60s). A
    /// host that cannot renew it stops releasing before it ends; a view
    /// change that moves the service IP (the backup dropped) waits it out.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub lease: Duration,
    /// The service's IPv4 address (default in the lab: the first free one
    /// of 198.18.0.100-199).
    #[arg(long, value_name = "IP")]
    pub service_ip: Option<Ipv4Addr>,
    /// Environment for the command: KEY=VALUE (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    /// The command's data directory (its path as the command sees it).
    #[arg(long, value_name = "PATH")]
    pub data_dir: Option<String>,
    #[command(flatten)]
    pub agent: AgentFlag,
    #[command(flatten)]
    pub json: JsonFlag,
    #[arg(last = true, required = true, value_name = "CMD")]
    pub cmd: Vec<String>,
}

pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, "ms"),
    };
    let v: f64 = num.parse().map_err(|_| format!("{s:?}: expected a number with a unit (ms, s)"))?;
    let ms = match unit {
        "ms" => v,
        "s" => v * 1000.0,
        "us" => v / 1000.0,
        u => return Err(format!("{s:?}: unknown unit {u:?} (use ms or s)")),
    };
    if ms.is_nan() || ms < 1.0 {
        return Err(format!("{s:?}: an epoch is at least 1 ms"));
    }
    Ok(Duration::from_micros((ms * 1000.0) as u64))
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// One service (default: all).
    pub name: Option<String>,
    #[command(flatten)]
    pub agent: AgentFlag,
    #[command(flatten)]
    pub json: JsonFlag,
}

#[derive(Args, Debug)]
pub struct StopArgs {
    pub name: String,
    #[command(flatten)]
    pub agent: AgentFlag,
    #[command(flatten)]
    pub json: JsonFlag,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum FaultArg {
    /// At the backup: stop committing checkpoints (replies stay held).
    StallCommits,
    /// At the backup: commit what was queued and carry on.
    ResumeCommits,
    /// At the primary: damage the next checkpoint's image (the backup must
    /// reject it and keep its state; the primary then sends a full one).
    CorruptNextCheckpoint,
    /// At the backup, rr mode: alter the next output kept in the record
    /// log (a failover's replay then diverges there and falls back to the
    /// checkpoint without replay).
    AlterNextLoggedOutput,
    /// At the backup, rr mode: the next failover's first replay gets an
    /// altered log (it diverges; the paced replay after it does not).
    AlterFirstReplay,
    /// At the backup: the next failover's first restore gets a damaged
    /// image (refused; the failover restores again).
    DamageFirstRestore,
    /// At the backup: no heartbeat for a second, the host alive otherwise
    /// (the primary declares it failed, serves alone and tells it so).
    MuteHeartbeats,
}

#[derive(Args, Debug)]
pub struct FaultArgs {
    pub name: String,
    #[arg(value_enum)]
    pub fault: FaultArg,
    #[command(flatten)]
    pub agent: AgentFlag,
    #[command(flatten)]
    pub json: JsonFlag,
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    pub name: String,
    /// Directory to write checkpoint.rrc into (on the backup's file system).
    #[arg(long, value_name = "DIR")]
    pub images: PathBuf,
    #[command(flatten)]
    pub agent: AgentFlag,
    #[command(flatten)]
    pub json: JsonFlag,
}

/// One agent as `rrc status` lists it.
#[derive(Serialize)]
struct HostView {
    host: String,
    reachable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    agent_pid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    agent_cpu_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    agent_uptime_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    security: Option<SecurityStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// Every agent's status; unreachable agents are reported, not fatal.
fn gather(agents: &[AgentRef], name: Option<&str>) -> (Vec<AgentStatus>, Vec<HostView>) {
    let mut reports = Vec::new();
    let mut hosts = Vec::new();
    for (a, r) in agents.iter().zip(ask_all(agents, name)) {
        match r {
            Ok(v) => {
                hosts.push(HostView {
                    host: v.host.clone(),
                    reachable: true,
                    agent_pid: Some(v.agent_pid),
                    agent_cpu_ms: Some(v.agent_cpu_ms),
                    agent_uptime_ms: Some(v.agent_uptime_ms),
                    security: Some(v.security.clone()),
                    error: None,
                });
                reports.push(v);
            }
            Err(e) => hosts.push(HostView {
                host: a.host.clone(),
                reachable: false,
                agent_pid: None,
                agent_cpu_ms: None,
                agent_uptime_ms: None,
                security: None,
                error: Some(format!("{e:#}")),
            }),
        }
    }
    (reports, hosts)
}

/// How long `rrc status` (and the verbs that first ask who runs what)
/// waits for each agent: they are asked at once, so a stopped agent
/// costs this, not the sum.
const STATUS_TIMEOUT: Duration = Duration::from_secs(10);

/// Every agent's status, asked at once; in the agents' order.
fn ask_all(agents: &[AgentRef], name: Option<&str>) -> Vec<Result<AgentStatus>> {
    let req = Request::Status { name: name.map(String::from) };
    std::thread::scope(|s| {
        let asks: Vec<_> = agents.iter().map(|a| s.spawn(|| request_within::<AgentStatus>(a, &req, STATUS_TIMEOUT))).collect();
        asks.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("the thread asking an agent panicked")))).collect()
    })
}

/// One service as `rrc status` shows it: the primary's view, with the
/// backup's attached.
#[derive(Serialize)]
struct ServiceView {
    name: String,
    service_ip: String,
    primary: String,
    backup: Option<String>,
    mode: Mode,
    epoch_ms: u64,
    state: Option<String>,
    protected: bool,
    checkpoints_committed: u64,
    last_pause_us: Option<u64>,
    last_pause: Option<rrc_wire::reply::PausePhases>,
    last_checkpoint_bytes: Option<u64>,
    replication_lag_ms: Option<f64>,
    pid: Option<i32>,
    primary_view: Option<ServiceStatus>,
    backup_view: Option<ServiceStatus>,
}

fn merge(reports: &[AgentStatus]) -> Vec<ServiceView> {
    let mut by_name: BTreeMap<String, (Option<ServiceStatus>, Option<ServiceStatus>)> = BTreeMap::new();
    for s in reports.iter().flat_map(|r| &r.services) {
        let e = by_name.entry(s.name.clone()).or_default();
        match s.role {
            Role::Primary => e.0 = Some(s.clone()),
            Role::Backup => e.1 = Some(s.clone()),
        }
    }
    by_name
        .into_iter()
        .filter_map(|(name, (p, b))| {
            let base = p.as_ref().or(b.as_ref())?.clone();
            let st = p.as_ref().and_then(|p| match &p.stats {
                RoleStats::Primary(st) => Some(st.clone()),
                RoleStats::Backup(_) => None,
            });
            Some(ServiceView {
                name,
                service_ip: base.service_ip,
                primary: base.primary,
                backup: base.backup,
                mode: base.mode,
                epoch_ms: base.epoch_ms,
                state: st.as_ref().map(|s| s.state.clone()),
                protected: p.as_ref().and_then(|p| p.protected).unwrap_or(false),
                checkpoints_committed: p.as_ref().map_or(base.checkpoints_committed, |p| p.checkpoints_committed),
                last_pause_us: st.as_ref().map(|s| s.last_pause_us),
                last_pause: st.as_ref().and_then(|s| s.last_pause),
                last_checkpoint_bytes: st.as_ref().map(|s| s.last_checkpoint_bytes),
                replication_lag_ms: st.as_ref().map(|s| s.replication_lag_ms),
                pid: base.pid,
                primary_view: p,
                backup_view: b,
            })
        })
        .collect()
}

fn free_service_ip(agents: &[AgentRef]) -> Result<Ipv4Addr> {
    let (reports, _) = gather(agents, None);
    let used: Vec<String> = merge(&reports).into_iter().map(|s| s.service_ip).collect();
    let (lo, hi) = rrc_lab::SERVICE_IP_RANGE;
    let (lo, hi): (Ipv4Addr, Ipv4Addr) = (lo.parse()?, hi.parse()?);
    for n in u32::from(lo)..=u32::from(hi) {
        let ip = Ipv4Addr::from(n);
        if !used.contains(&ip.to_string()) {
            return Ok(ip);
        }
    }
    bail!("every service IP of the lab ({lo}-{hi}) is taken")
}

pub fn run(a: RunArgs) -> Result<ExitCode> {
    let primary = for_host(a.agent.agent.as_deref(), &a.primary);
    let service_ip = match a.service_ip {
        Some(ip) => ip,
        None if crate::agents::lab_agents().is_some() && a.agent.agent.is_none() => free_service_ip(&resolve(None))?,
        None => bail!("--service-ip is required outside the lab"),
    };
    let mut env = Vec::new();
    for e in &a.env {
        let (k, v) = e.split_once('=').with_context(|| format!("--env {e:?}: expected KEY=VALUE"))?;
        env.push((k.to_string(), v.to_string()));
    }
    let epoch = a.epoch.unwrap_or(match a.mode {
        ModeArg::Checkpoint => Duration::from_millis(30),
        ModeArg::Rr => Duration::from_millis(100),
    });
    let spec = ServiceSpec {
        name: a.name.clone(),
        service_ip: service_ip.to_string(),
        primary: a.primary,
        backup: a.backup,
        mode: match a.mode {
            ModeArg::Checkpoint => Mode::Checkpoint,
            ModeArg::Rr => Mode::Rr,
        },
        epoch_ms: (epoch.as_micros() as u64).div_ceil(1000).max(1),
        argv: a.cmd,
        env,
        data_dir: a.data_dir,
        heartbeat_ms: a.heartbeat.as_millis().max(1) as u64,
        failure_ms: a.failure_timeout.as_millis().max(1) as u64,
        spare: a.spare,
        snapshot: match a.snapshot {
            SnapshotArg::Fork => Snapshot::Fork,
            SnapshotArg::Copy => Snapshot::Copy,
        },
        verify_replay: a.verify_replay,
        lease_ms: a.lease.as_millis() as u64,
    };
    if spec.failure_ms <= spec.heartbeat_ms {
        bail!("--failure-timeout ({} ms) must be longer than --heartbeat ({} ms)", spec.failure_ms, spec.heartbeat_ms);
    }
    let v: ServiceStatus = request(&primary, &Request::Run { spec })?;
    if a.json.json {
        println!("{}", serde_json::to_string(&v)?);
    } else {
        println!(
            "service {} running on {} (pid {}), backup {}, service IP {}, {} mode, epoch {} ms",
            v.name,
            v.primary,
            v.pid.map_or("?".into(), |p| p.to_string()),
            v.backup.as_deref().unwrap_or_default(),
            v.service_ip,
            v.mode.as_str(),
            v.epoch_ms
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn status(a: StatusArgs) -> Result<ExitCode> {
    let agents = resolve(a.agent.agent.as_deref());
    let (reports, hosts) = gather(&agents, a.name.as_deref());
    if reports.is_empty() {
        bail!("no agent answered: {}", serde_json::to_string(&hosts)?);
    }
    let services = merge(&reports);
    if let Some(n) = &a.name {
        if services.is_empty() {
            bail!("no agent knows a service named {n:?}");
        }
    }
    if a.json.json {
        match &a.name {
            Some(_) => println!("{}", serde_json::to_string(&services[0])?),
            None => println!("{}", serde_json::to_string(&json!({"services": services, "agents": hosts}))?),
        }
        return Ok(ExitCode::SUCCESS);
    }
    if services.is_empty() {
        println!("no services");
    }
    for s in &services {
        println!(
            "{}  {}  primary {}  backup {}  {} mode, epoch {} ms  {}",
            s.name,
            s.service_ip,
            s.primary,
            s.backup.as_deref().unwrap_or("none"),
            s.mode.as_str(),
            s.epoch_ms,
            if s.protected { "PROTECTED" } else { "UNPROTECTED" },
        );
        let state = s.state.as_deref().unwrap_or("?");
        if s.backup.is_none() {
            println!("    state {state}");
        } else {
            println!(
                "    state {state}  checkpoints committed {}  last pause {} us  last checkpoint {} bytes  replication lag {:.1} ms",
                s.checkpoints_committed,
                s.last_pause_us.map_or("?".into(), |x| x.to_string()),
                s.last_checkpoint_bytes.map_or("?".into(), |x| x.to_string()),
                s.replication_lag_ms.unwrap_or(0.0),
            );
        }
        if let Some(p) = &s.last_pause {
            println!(
                "    last pause: {} threads parked in {} us, dirty pages found in {} us, state captured in {} us, {} {} us ({} pages; {} pages copied before it in {} us)",
                p.threads,
                p.quiesce_us,
                p.scan_us,
                p.capture_us,
                if p.fork_us > 0 { "fork" } else { "copy" },
                if p.fork_us > 0 { p.fork_us } else { p.copy_us },
                p.copied_pages,
                p.precopy_pages,
                p.precopy_us,
            );
        }
        print_fencing(s);
        if let Some(g) = s.backup_view.as_ref().and_then(|b| b.gate.as_ref()) {
            println!(
                "    gate: {} streams, {} packets held ({} bytes), {} released, {} client bytes recorded",
                g.streams, g.held_packets, g.held_bytes, g.packets_released, g.recorded_client_bytes
            );
            match &g.xdp {
                Some(x) => println!(
                    "    gate output path: AF_XDP ({} frames, {} sent on by AF_XDP to {} clients' next hops, {} by the raw socket, {} dropped by the kernel before the gate, {} refused or dropped on the way out, {} dropped while blocked)",
                    x.frames,
                    x.sent,
                    x.next_hops,
                    x.sent_raw,
                    x.kernel_dropped,
                    x.send_refused + x.send_dropped,
                    x.blocked_dropped
                ),
                None => println!("    gate output path: NFQUEUE"),
            }
            match &g.observed_input {
                Some(o) => println!(
                    "    gate input path: observed by tc ({} frames, {} bytes recorded from the ring; {} packets took the queue; program {})",
                    o.frames,
                    o.bytes,
                    o.queued,
                    if o.attached { "attached" } else { "detached by a failover" }
                ),
                None => println!("    gate input path: NFQUEUE"),
            }
            let l = &g.log;
            if l.outputs > 0 {
                println!(
                    "    gate, the log's cover: {} outputs, {} bytes and {} FINs verified against the server's packets ({} bytes a commit covered first), {} mismatched, {} of another connection, {} unverifiable, {} to unknown streams; {}",
                    l.outputs,
                    l.verified_bytes,
                    l.verified_fins,
                    l.committed_first_bytes,
                    l.mismatched,
                    l.foreign,
                    l.unverifiable,
                    l.unknown_stream,
                    if g.log_release { format!("releasing on it ({} packets)", l.released_packets) } else { "releasing on commits only".into() }
                );
            }
        }
        let log = s.backup_view.as_ref().and_then(|b| match &b.stats {
            RoleStats::Backup(st) => st.log.as_ref(),
            RoleStats::Primary(_) => None,
        });
        if let Some(l) = log {
            println!(
                "    record log at the backup: {}, {} batches ({} events, {} bytes) received, {} cuts, kept since the last committed cut: {} batches ({} bytes)",
                l.state, l.received_batches, l.received_events, l.received_bytes, l.cuts, l.kept_batches, l.kept_bytes
            );
            println!(
                "    release marks: {} outputs covered, {} waiting for a mark, {} dropped unmarked",
                l.outputs_marked, l.outputs_waiting, l.outputs_dropped
            );
        }
        let shadow = s.backup_view.as_ref().and_then(|b| match &b.stats {
            RoleStats::Backup(st) => st.shadow.as_ref(),
            RoleStats::Primary(_) => None,
        });
        if let Some(sh) = shadow {
            let judged = sh.verified + sh.diverged;
            let rate = if judged > 0 { format!("{:.1} %", 100.0 * sh.diverged as f64 / judged as f64) } else { "n/a".into() };
            println!(
                "    shadow replay: {} epochs verified, {} DIVERGED (rate {rate}), {} not run, {} skipped; last: {} events, {} outputs compared in {:.1} ms (capture {:.1} ms)",
                sh.verified,
                sh.diverged,
                sh.failed,
                sh.skipped,
                sh.last_events,
                sh.last_outputs,
                sh.last_us as f64 / 1000.0,
                sh.last_capture_us as f64 / 1000.0
            );
            if let Some(d) = &sh.last_divergence {
                println!("      last divergence: {d}");
            }
            if let Some(e) = &sh.last_error {
                println!("      last error: {e}");
            }
        }
        for f in s.primary_view.iter().flat_map(|p| p.failovers.iter().flatten()) {
            println!(
                "    failover ({}) at {}: {} failed, detected after {:.0} ms, live {:.0} ms after the failure",
                f.kind.as_str(),
                f.at,
                f.failed_host,
                f.detection_ms,
                f.total_ms
            );
            if let Some(v) = &f.view_change {
                println!("        +{:>7.1} ms  view {} installed in etcd", v.installed_ms, v.view);
                if v.lease_wait_ms > 0.5 {
                    println!("        +{:>7.1} ms  the old holder's lease waited out ({:.0} ms)", v.installed_ms + v.lease_wait_ms, v.lease_wait_ms);
                }
            }
            for st in &f.steps {
                println!("        +{:>7.1} ms  {}", st.at_ms, st.step);
            }
            if let Some(c) = &f.connections {
                let ok = c.iter().filter(|x| x.repaired).count();
                let queued = c.iter().filter(|x| x.repaired && x.accept_queue && !x.after_checkpoint).count();
                let since = c.iter().filter(|x| x.repaired && x.after_checkpoint).count();
                println!("        connections repaired: {ok} of {} ({queued} not yet accepted at the checkpoint, {since} opened after it)", c.len());
                for x in c.iter().filter(|x| !x.repaired) {
                    let how = if x.reset { "reset" } else { "not repaired" };
                    println!("          {how}: fd {} client {}: {}", x.fd, x.client, x.reason.as_deref().unwrap_or("?"));
                }
            }
            if let Some(n) = f.syns_resent.filter(|&n| n > 0) {
                println!("        {n} client SYN(s) the primary never answered handed to the restored service");
            }
            if let Some(r) = &f.replay {
                if let Some(why) = &r.retried {
                    println!("        the first replay (returns in their recorded order) did not go live: {why}; replayed again, paced");
                }
                if let Some(why) = &r.diverged {
                    println!("        RECOVERY FAILED: {why}; restored the checkpoint without replay (the replay had done:)");
                }
                if r.behind > 0 {
                    println!("        {} connection(s) ended the replay short of what the gate had released: out of step", r.behind);
                }
                println!(
                    "        replayed {} events ({} bytes of log) in {:.1} ms: {} connections, {} bytes taken off them, {} sent ({} the clients had already), {} bytes out of step, {} connection(s) reset",
                    r.events, r.log_bytes, r.replay_ms, r.connections, r.read_bytes, r.sent_bytes, r.skipped_bytes, r.faults, r.reset
                );
            }
        }
        for v in [&s.primary_view, &s.backup_view].into_iter().flatten() {
            if let Some(e) = v.stats.last_error() {
                println!("    last error at {} ({}): {e}", v.host, v.role.as_str());
            }
        }
    }
    for h in &hosts {
        match &h.security {
            Some(sec) if h.reachable => println!("{}", security_line(&h.host, sec)),
            _ => println!("agent of {} unreachable: {}", h.host, h.error.as_deref().unwrap_or("?")),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// An agent's authentication and refusals, in plain words.
fn security_line(host: &str, sec: &SecurityStatus) -> String {
    let mut line = match &sec.warning {
        Some(w) => format!("agent {host}: {w}"),
        None => format!(
            "agent {host}: peers authenticated ({}, key {}, fingerprint {})",
            sec.authentication.as_str(),
            sec.key_file.as_deref().unwrap_or("?"),
            sec.key_fingerprint.as_deref().unwrap_or("?")
        ),
    };
    let refused: Vec<String> = sec.rejected.iter().map(|(cause, n)| format!("{n} {}", cause.as_str())).collect();
    if !refused.is_empty() {
        line.push_str(&format!("; refused: {}", refused.join(", ")));
    }
    line
}

/// The agents that have a part in `name`, with their role.
/// An agent that did not answer is named on stderr: a part it may hold
/// is not in the list.
pub(crate) fn parts(agents: &[AgentRef], name: &str) -> Vec<(AgentRef, Role)> {
    let mut v = Vec::new();
    for (a, r) in agents.iter().zip(ask_all(agents, Some(name))) {
        match r {
            Ok(r) => v.extend(r.services.iter().map(|s| (a.clone(), s.role))),
            Err(e) => eprintln!("warning: host {}: {e:#}; a part of {name} it may hold is left out", a.host),
        }
    }
    v
}

pub fn stop(a: StopArgs) -> Result<ExitCode> {
    let agents = resolve(a.agent.agent.as_deref());
    let mut p = parts(&agents, &a.name);
    if p.is_empty() {
        bail!("no agent knows a service named {:?}", a.name);
    }
    // The primary first: it stops the epochs and the container, then tells
    // its backup; the others are asked directly (idempotent).
    p.sort_by_key(|(_, role)| *role != Role::Primary);
    // Every part is asked even when one fails (two primaries after a
    // false failure detection, an agent that went away): each is told
    // and every failure is reported, not just the first.
    let mut done: Vec<Stopped> = Vec::new();
    let mut failed: Vec<String> = Vec::new();
    for (ag, role) in &p {
        match request::<Stopped>(ag, &Request::Stop { name: a.name.clone() }) {
            Ok(s) => done.push(s),
            Err(e) => failed.push(format!("host {} ({}): {e:#}", ag.host, role.as_str())),
        }
    }
    if !failed.is_empty() {
        bail!("stopping {:?}: {} of {} parts failed: {}", a.name, failed.len(), p.len(), failed.join("; "));
    }
    if a.json.json {
        println!("{}", serde_json::to_string(&json!({"stopped": a.name, "hosts": done}))?);
    } else {
        println!("service {} stopped", a.name);
    }
    Ok(ExitCode::SUCCESS)
}

pub fn fault(a: FaultArgs) -> Result<ExitCode> {
    let (fault, role) = match a.fault {
        FaultArg::StallCommits => (Fault::StallCommits, Role::Backup),
        FaultArg::ResumeCommits => (Fault::ResumeCommits, Role::Backup),
        FaultArg::CorruptNextCheckpoint => (Fault::CorruptNextCheckpoint, Role::Primary),
        FaultArg::AlterNextLoggedOutput => (Fault::AlterNextLoggedOutput, Role::Backup),
        FaultArg::MuteHeartbeats => (Fault::MuteHeartbeats, Role::Backup),
        FaultArg::AlterFirstReplay => (Fault::AlterFirstReplay, Role::Backup),
        FaultArg::DamageFirstRestore => (Fault::DamageFirstRestore, Role::Backup),
    };
    let agents = resolve(a.agent.agent.as_deref());
    let target = parts(&agents, &a.name).into_iter().find(|(_, r)| *r == role);
    let role = role.as_str();
    let Some((ag, _)) = target else { bail!("no agent is the {role} of a service named {:?}", a.name) };
    let v: FaultSet = request(&ag, &Request::Fault { name: a.name.clone(), fault })?;
    if a.json.json {
        println!("{}", serde_json::to_string(&v)?);
    } else {
        println!("{} of {}: {}", role, a.name, serde_json::to_string(&v)?);
    }
    Ok(ExitCode::SUCCESS)
}

pub fn export(a: ExportArgs) -> Result<ExitCode> {
    let agents = resolve(a.agent.agent.as_deref());
    let target = parts(&agents, &a.name).into_iter().find(|(_, r)| *r == Role::Backup);
    let Some((ag, _)) = target else { bail!("no agent is the backup of a service named {:?}", a.name) };
    let dir = crate::abs(&a.images)?;
    let v: Exported = request(&ag, &Request::Export { name: a.name.clone(), dir: dir.display().to_string() })?;
    if a.json.json {
        println!("{}", serde_json::to_string(&v)?);
    } else {
        println!("committed state of {} (epoch {}) written to {}", a.name, v.epoch, v.image);
    }
    Ok(ExitCode::SUCCESS)
}

/// The view and each host's lease (issue 15), or that there is none.
fn print_fencing(s: &ServiceView) {
    let parts: Vec<&ServiceStatus> = [s.primary_view.as_ref(), s.backup_view.as_ref()].into_iter().flatten().collect();
    if parts.iter().all(|p| p.view.is_none()) {
        println!("    NO FENCING: the agents keep no views (started without --etcd); a host believed failed is not stopped, and two could serve at once");
        return;
    }
    for p in parts {
        match &p.view {
            Some(v) => println!(
                "    view {} (primary {}, backup {}): host {} {}, lease {} ms, {} ms left ({} renewals, {} failed, {} fences); suspicions {} ({} false), view changes {}; etcd {}",
                v.number,
                v.primary,
                v.backup.as_deref().unwrap_or("none"),
                p.host,
                v.standing.to_uppercase(),
                v.lease_ms,
                v.lease_remaining_ms,
                v.renewals,
                v.failed_renewals,
                v.fences,
                v.suspicions,
                v.false_suspicions,
                v.view_changes,
                match v.etcd_tls {
                    true => "over TLS with a client certificate",
                    false => "over plain http (UNAUTHENTICATED: anyone who reaches etcd can change this view)",
                },
            ),
            None => println!("    host {}: no view (its agent runs without --etcd): NOT FENCED", p.host),
        }
    }
}
