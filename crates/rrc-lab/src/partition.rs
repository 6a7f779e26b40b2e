//! Partitions and pauses, for the tests of issue 15: what one host hears
//! is cut and healed, and a host can be frozen as a whole.
//!
//! - `cut X Y`: X and Y no longer hear each other on any network, and
//!   each still hears everyone else. Each drops, in its own namespace,
//!   every frame whose source MAC is one of the other's interfaces
//!   (iptables' raw table, PREROUTING: before routing, so a forwarded
//!   packet of a service container is dropped like one for the host).
//! - `cut X all`: X hears no one: its switch ports are set down (its
//!   cables unplugged, all at once; its own ends lose their carrier and
//!   keep their addresses and routes). Unlike `kill`, X keeps running
//!   and is healed later.
//! - `cut X etcd`: X and the etcd hosts (e1, e2, e3) no longer hear each
//!   other; everything else of X's still flows.
//! - `heal`: every cut removed, on every host.
//! - `freeze X` / `thaw X`: every process of X stopped (cgroup v2 freezer
//!   of the host's cgroup: the agent, the etcd member, the services),
//!   as SIGSTOP to all of them would, and resumed.
//!
//! The rules live in a chain of their own, `RRC-LAB-CUT` (raw table,
//! PREROUTING), apart from the agents' rules (filter table).

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::{io, LabError};
use crate::ip::{ip, ip_json};
use crate::state;
use crate::topology::{Host, SWITCH_NS};

/// Frames arriving (raw PREROUTING: a MAC match is valid only there).
const CHAIN: &str = "RRC-LAB-CUT";

/// What `cut` cuts X from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Host(String),
    All,
    Etcd,
}

impl Target {
    pub fn parse(s: &str) -> Target {
        match s {
            "all" => Target::All,
            "etcd" => Target::Etcd,
            h => Target::Host(h.into()),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct CutReport {
    pub host: String,
    pub from: String,
    /// Rules added, per host namespace.
    pub rules: Vec<String>,
}

fn iptables_in(netns: &str, step: &str, args: &[&str]) -> Result<String, LabError> {
    let mut v = vec!["netns", "exec", netns, "iptables", "-w", "-t", "raw"];
    v.extend_from_slice(args);
    ip(step, &v)
}

/// The chain, created and hooked first in PREROUTING, once.
fn ensure_chain(netns: &str) -> Result<(), LabError> {
    let step = format!("preparing the lab's cut chain in {netns}");
    if iptables_in(netns, &step, &["-S", CHAIN]).is_ok() {
        return Ok(());
    }
    iptables_in(netns, &step, &["-N", CHAIN])?;
    iptables_in(netns, &step, &["-I", "PREROUTING", "1", "-j", CHAIN])?;
    Ok(())
}

/// The MAC addresses of a host's interfaces on the lab's networks.
fn macs(h: &Host) -> Result<Vec<String>, LabError> {
    let j = ip_json(&h.netns, &format!("reading host {}'s MAC addresses", h.name), &["link", "show"])?;
    let names: Vec<&str> = h.links.iter().map(|l| l.ifname.as_str()).collect();
    Ok(j.as_array()
        .into_iter()
        .flatten()
        .filter(|l| l["ifname"].as_str().is_some_and(|n| names.contains(&n)))
        .filter_map(|l| l["address"].as_str().map(String::from))
        .collect())
}

fn drop_from(at: &Host, from: &Host, rules: &mut Vec<String>) -> Result<(), LabError> {
    ensure_chain(&at.netns)?;
    for mac in macs(from)? {
        let step = format!("cutting host {} from host {}", at.name, from.name);
        iptables_in(&at.netns, &step, &["-A", CHAIN, "-m", "mac", "--mac-source", &mac, "-j", "DROP"])?;
        rules.push(format!("{}: drop frames from {} ({mac})", at.name, from.name));
    }
    Ok(())
}

pub fn cut(name: &str, target: &Target) -> Result<CutReport, LabError> {
    let lab = state::load()?;
    let x = lab.live_host(name)?;
    let mut rules = Vec::new();
    match target {
        Target::Host(other) => {
            if other == name {
                return Err(LabError::Other(format!("cannot cut host {name} from itself")));
            }
            let y = lab.live_host(other)?;
            drop_from(x, y, &mut rules)?;
            drop_from(y, x, &mut rules)?;
        }
        Target::All => {
            // unplugged at the switch, all its cables at once: a cut rule
            // per peer would take effect host by host
            for l in &x.links {
                let step = format!("unplugging host {name} from the {} network", l.network);
                crate::ip::ip_in(SWITCH_NS, &step, &["link", "set", &l.switch_port, "down"])?;
                rules.push(format!("switch port {} down", l.switch_port));
            }
        }
        Target::Etcd => {
            if !lab.etcd {
                return Err(LabError::Other("this lab runs no etcd (`rrc lab up --no-etcd`)".into()));
            }
            for (member, _) in crate::etcd::members() {
                let y = lab.live_host(member)?;
                drop_from(x, y, &mut rules)?;
                drop_from(y, x, &mut rules)?;
            }
        }
    }
    let from = match target {
        Target::Host(h) => h.clone(),
        Target::All => "all".into(),
        Target::Etcd => "etcd".into(),
    };
    tracing::info!(host = name, from = %from, "cut");
    Ok(CutReport { host: name.into(), from, rules })
}

/// Removes every cut on every live host. Returns the hosts healed.
pub fn heal() -> Result<Vec<String>, LabError> {
    let lab = state::load()?;
    let mut healed = Vec::new();
    for h in lab.hosts.iter().filter(|h| h.killed_at.is_none()) {
        let step = format!("healing host {}", h.name);
        for l in &h.links {
            crate::ip::ip_in(SWITCH_NS, &step, &["link", "set", &l.switch_port, "up"])?;
        }
        if iptables_in(&h.netns, &step, &["-S", CHAIN]).is_err() {
            continue;
        }
        iptables_in(&h.netns, &step, &["-F", CHAIN])?;
        healed.push(h.name.clone());
    }
    Ok(healed)
}

/// Freezes (`on`) or thaws every process of host `name`; returns once the
/// kernel reports the cgroup frozen (or thawed), at most 10 s.
pub fn freeze(name: &str, on: bool) -> Result<(), LabError> {
    let lab = state::load()?;
    let h = lab.live_host(name)?;
    let file = format!("{}/cgroup.freeze", h.cgroup);
    std::fs::write(&file, if on { "1" } else { "0" }).map_err(io(format!("writing {file}")))?;
    let events = format!("{}/cgroup.events", h.cgroup);
    let want = if on { "frozen 1" } else { "frozen 0" };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let e = std::fs::read_to_string(&events).map_err(io(format!("reading {events}")))?;
        if e.lines().any(|l| l.trim() == want) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(LabError::Other(format!("host {name}'s cgroup is not `{want}` 10 s after writing {file}")));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}
