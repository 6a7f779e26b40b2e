//! `rrc run`, `rrc status`, `rrc stop`, `rrc fault`, `rrc export`: the
//! verbs that talk to agents (crates/rrc/src/agents.rs finds them).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use rrc_wire::msg::{Fault, Mode, Request, ServiceSpec};
use serde_json::{json, Value};

use crate::agents::{for_host, request, resolve, AgentRef};
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
    #[arg(long, value_name = "DURATION", default_value = "30ms", value_parser = parse_duration)]
    pub epoch: Duration,
    /// Heartbeat period between the primary's and the backup's agents.
    #[arg(long, value_name = "DURATION", default_value = "30ms", value_parser = parse_duration)]
    pub heartbeat: Duration,
    /// Silence after which an agent declares its peer failed and fails over.
    #[arg(long, value_name = "DURATION", default_value = "90ms", value_parser = parse_duration)]
    pub failure_timeout: Duration,
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

/// Every agent's status; unreachable agents are reported, not fatal.
fn gather(agents: &[AgentRef], name: Option<&str>) -> (Vec<Value>, Vec<Value>) {
    let mut reports = Vec::new();
    let mut hosts = Vec::new();
    for a in agents {
        match request(a, &Request::Status { name: name.map(String::from) }) {
            Ok(v) => {
                hosts.push(json!({"host": v["host"], "reachable": true, "agent_pid": v["agent_pid"], "agent_cpu_ms": v["agent_cpu_ms"], "agent_uptime_ms": v["agent_uptime_ms"], "security": v["security"]}));
                reports.push(v);
            }
            Err(e) => hosts.push(json!({"host": a.host, "reachable": false, "error": format!("{e:#}")})),
        }
    }
    (reports, hosts)
}

/// One entry per service: the primary's view, with the backup's attached.
fn merge(reports: &[Value]) -> Vec<Value> {
    let mut by_name: BTreeMap<String, (Option<Value>, Option<Value>)> = BTreeMap::new();
    for r in reports {
        for s in r["services"].as_array().into_iter().flatten() {
            let n = s["name"].as_str().unwrap_or_default().to_string();
            let e = by_name.entry(n).or_default();
            match s["role"].as_str() {
                Some("primary") => e.0 = Some(s.clone()),
                _ => e.1 = Some(s.clone()),
            }
        }
    }
    by_name
        .into_iter()
        .map(|(name, (p, b))| {
            let base = p.clone().or_else(|| b.clone()).unwrap_or(Value::Null);
            let st = &p.as_ref().map(|p| p["stats"].clone()).unwrap_or(Value::Null);
            json!({
                "name": name,
                "service_ip": base["service_ip"],
                "primary": base["primary"],
                "backup": base["backup"],
                "mode": base["mode"],
                "epoch_ms": base["epoch_ms"],
                "state": st["state"],
                "protected": p.as_ref().map(|p| p["protected"].clone()).unwrap_or(Value::Bool(false)),
                "checkpoints_committed": p.as_ref().map(|p| p["checkpoints_committed"].clone()).unwrap_or_else(|| base["checkpoints_committed"].clone()),
                "last_pause_us": st["last_pause_us"],
                "last_checkpoint_bytes": st["last_checkpoint_bytes"],
                "replication_lag_ms": st["replication_lag_ms"],
                "pid": base["pid"],
                "primary_view": p,
                "backup_view": b,
            })
        })
        .collect()
}

fn free_service_ip(agents: &[AgentRef]) -> Result<Ipv4Addr> {
    let (reports, _) = gather(agents, None);
    let used: Vec<String> = merge(&reports).iter().filter_map(|s| s["service_ip"].as_str().map(String::from)).collect();
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
    let spec = ServiceSpec {
        name: a.name.clone(),
        service_ip: service_ip.to_string(),
        primary: a.primary,
        backup: a.backup,
        mode: match a.mode {
            ModeArg::Checkpoint => Mode::Checkpoint,
        },
        epoch_ms: (a.epoch.as_micros() as u64).div_ceil(1000).max(1),
        argv: a.cmd,
        env,
        data_dir: a.data_dir,
        heartbeat_ms: a.heartbeat.as_millis().max(1) as u64,
        failure_ms: a.failure_timeout.as_millis().max(1) as u64,
        spare: a.spare,
    };
    if spec.failure_ms <= spec.heartbeat_ms {
        bail!("--failure-timeout ({} ms) must be longer than --heartbeat ({} ms)", spec.failure_ms, spec.heartbeat_ms);
    }
    let v = request(&primary, &Request::Run { spec })?;
    if a.json.json {
        println!("{}", serde_json::to_string(&v)?);
    } else {
        println!(
            "service {} running on {} (pid {}), backup {}, service IP {}, {} mode, epoch {} ms",
            v["name"].as_str().unwrap_or_default(),
            v["primary"].as_str().unwrap_or_default(),
            v["pid"],
            v["backup"].as_str().unwrap_or_default(),
            v["service_ip"].as_str().unwrap_or_default(),
            v["mode"].as_str().unwrap_or_default(),
            v["epoch_ms"]
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
        let g = &s["backup_view"]["gate"];
        println!(
            "{}  {}  primary {}  backup {}  {} mode, epoch {} ms  {}",
            s["name"].as_str().unwrap_or_default(),
            s["service_ip"].as_str().unwrap_or_default(),
            s["primary"].as_str().unwrap_or_default(),
            s["backup"].as_str().unwrap_or("none"),
            s["mode"].as_str().unwrap_or_default(),
            s["epoch_ms"],
            if s["protected"].as_bool().unwrap_or(false) { "PROTECTED" } else { "UNPROTECTED" },
        );
        if s["backup"].is_null() {
            println!("    state {}", s["state"].as_str().unwrap_or("?"));
        } else {
            println!(
                "    state {}  checkpoints committed {}  last pause {} us  last checkpoint {} bytes  replication lag {:.1} ms",
                s["state"].as_str().unwrap_or("?"),
                s["checkpoints_committed"],
                s["last_pause_us"],
                s["last_checkpoint_bytes"],
                s["replication_lag_ms"].as_f64().unwrap_or(0.0),
            );
        }
        if !g.is_null() {
            println!("    gate: {} streams, {} packets held ({} bytes), {} released, {} client bytes recorded", g["streams"], g["held_packets"], g["held_bytes"], g["packets_released"], g["recorded_client_bytes"]);
        }
        for f in s["primary_view"]["failovers"].as_array().into_iter().flatten() {
            println!(
                "    failover ({}) at {}: {} failed, detected after {:.0} ms, live {:.0} ms after the failure",
                f["kind"].as_str().unwrap_or("?"),
                f["at"].as_str().unwrap_or("?"),
                f["failed_host"].as_str().unwrap_or("?"),
                f["detection_ms"].as_f64().unwrap_or(0.0),
                f["total_ms"].as_f64().unwrap_or(0.0)
            );
            for st in f["steps"].as_array().into_iter().flatten() {
                println!("        +{:>7.1} ms  {}", st["at_ms"].as_f64().unwrap_or(0.0), st["step"].as_str().unwrap_or("?"));
            }
            if let Some(c) = f["connections"].as_array() {
                let ok = c.iter().filter(|x| x["repaired"].as_bool() == Some(true)).count();
                println!("        connections repaired: {ok} of {}", c.len());
            }
        }
        for v in [&s["primary_view"], &s["backup_view"]] {
            if let Some(e) = v["stats"]["last_error"].as_str() {
                println!("    last error at {} ({}): {e}", v["host"].as_str().unwrap_or("?"), v["role"].as_str().unwrap_or("?"));
            }
        }
    }
    for h in &hosts {
        let host = h["host"].as_str().unwrap_or("?");
        if h["reachable"].as_bool() == Some(false) {
            println!("agent of {host} unreachable: {}", h["error"].as_str().unwrap_or("?"));
            continue;
        }
        println!("{}", security_line(host, &h["security"]));
    }
    Ok(ExitCode::SUCCESS)
}

/// An agent's authentication and refusals, in plain words.
fn security_line(host: &str, sec: &Value) -> String {
    let mut line = match sec["warning"].as_str() {
        Some(w) => format!("agent {host}: {w}"),
        None if sec.is_null() => format!("agent {host}: authentication unknown (an agent older than this rrc)"),
        None => format!(
            "agent {host}: peers authenticated ({}, key {}, fingerprint {})",
            sec["authentication"].as_str().unwrap_or("?"),
            sec["key_file"].as_str().unwrap_or("?"),
            sec["key_fingerprint"].as_str().unwrap_or("?")
        ),
    };
    let refused: Vec<String> = sec["rejected"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(cause, n)| Some(format!("{} {}", n.as_u64()?, rejection_words(cause))))
        .collect();
    if !refused.is_empty() {
        line.push_str(&format!("; refused: {}", refused.join(", ")));
    }
    line
}

/// The words for a cause of `rrc_wire::Rejection` as the agent reports it.
fn rejection_words(cause: &str) -> String {
    let known: Option<rrc_wire::Rejection> = serde_json::from_value(Value::String(cause.into())).ok();
    known.map(|r| r.as_str().to_string()).unwrap_or_else(|| cause.replace('_', " "))
}

/// The agents that have a part in `name`, with their role.
fn parts(agents: &[AgentRef], name: &str) -> Vec<(AgentRef, String)> {
    let mut v = Vec::new();
    for a in agents {
        if let Ok(r) = request(a, &Request::Status { name: Some(name.into()) }) {
            for s in r["services"].as_array().into_iter().flatten() {
                v.push((a.clone(), s["role"].as_str().unwrap_or_default().to_string()));
            }
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
    p.sort_by_key(|(_, role)| role != "primary");
    let mut done = Vec::new();
    for (ag, _) in &p {
        done.push(request(ag, &Request::Stop { name: a.name.clone() })?);
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
        FaultArg::StallCommits => (Fault::StallCommits, "backup"),
        FaultArg::ResumeCommits => (Fault::ResumeCommits, "backup"),
        FaultArg::CorruptNextCheckpoint => (Fault::CorruptNextCheckpoint, "primary"),
    };
    let agents = resolve(a.agent.agent.as_deref());
    let target = parts(&agents, &a.name).into_iter().find(|(_, r)| r == role);
    let Some((ag, _)) = target else { bail!("no agent is the {role} of a service named {:?}", a.name) };
    let v = request(&ag, &Request::Fault { name: a.name.clone(), fault })?;
    if a.json.json {
        println!("{}", serde_json::to_string(&v)?);
    } else {
        println!("{} of {}: {}", role, a.name, v);
    }
    Ok(ExitCode::SUCCESS)
}

pub fn export(a: ExportArgs) -> Result<ExitCode> {
    let agents = resolve(a.agent.agent.as_deref());
    let target = parts(&agents, &a.name).into_iter().find(|(_, r)| r == "backup");
    let Some((ag, _)) = target else { bail!("no agent is the backup of a service named {:?}", a.name) };
    let dir = crate::abs(&a.images)?;
    let v = request(&ag, &Request::Export { name: a.name.clone(), dir: dir.display().to_string() })?;
    if a.json.json {
        println!("{}", serde_json::to_string(&v)?);
    } else {
        println!("committed state of {} (epoch {}) written to {}", a.name, v["epoch"], v["image"].as_str().unwrap_or_default());
    }
    Ok(ExitCode::SUCCESS)
}
