//! `rrc lab kill HOST`: a fail-stop, as if the host's power went off.
//!
//! The links are cut first (the host's veths are deleted in the switch,
//! which removes both ends at once), then every process of the host is
//! killed: so nothing the dying processes' kernel sockets send on close
//! (FIN, RST) ever reaches another host, exactly as with a power loss.
//! The processes are those of the host's cgroup (cgroup.kill), any other
//! process inside the host's network namespace (e.g. a container started
//! there with `rrc exec --netns`), and the registry's containers in it.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::cgroup;
use crate::error::LabError;
use crate::ip::ip_in;
use crate::ns;
use crate::state;
use crate::topology::{host_names, SWITCH_NS};

#[derive(Debug, Serialize)]
pub struct KillReport {
    pub host: String,
    pub already_killed: bool,
    pub links_cut: Vec<String>,
    pub processes_killed: usize,
    pub killed_at: String,
}

pub fn kill(host: &str) -> Result<KillReport, LabError> {
    let mut lab = state::load()?;
    let h = lab.host(host).ok_or_else(|| LabError::UnknownHost { host: host.into(), known: host_names() })?.clone();
    if let Some(at) = &h.killed_at {
        return Ok(KillReport { host: host.into(), already_killed: true, links_cut: vec![], processes_killed: 0, killed_at: at.clone() });
    }
    let id = ns::ns_id(&ns::netns_path(&h.netns));

    // 1. Cut the wires.
    let mut links_cut = Vec::new();
    for l in &h.links {
        let step = format!("cutting host {host}'s link to the {} network", l.network);
        ip_in(SWITCH_NS, &step, &["link", "del", &l.switch_port])?;
        links_cut.push(l.network.clone());
    }

    // 2. Kill every process: the cgroup at once, then stragglers in the netns.
    let mut n = cgroup::count_recursive(Path::new(&h.cgroup));
    cgroup::kill(Path::new(&h.cgroup))?;
    if let Some(id) = id {
        n += kill_netns_pids(id, &h.netns)?;
    }
    let reg = rrc_container::Config::default();
    for r in reg.registry.list().unwrap_or_default() {
        if r.netns.as_deref() == Some(h.netns.as_str()) {
            rrc_container::kill(&reg, &r).map_err(|e| LabError::Other(format!("removing container {} on host {host}: {e}", r.id)))?;
        }
    }

    let at = state::now_rfc3339();
    lab.host_mut(host).expect("host exists").killed_at = Some(at.clone());
    state::save(&lab)?;
    tracing::info!(host, "host killed");
    Ok(KillReport { host: host.into(), already_killed: false, links_cut, processes_killed: n, killed_at: at })
}

/// SIGKILLs every process in the namespace and waits (bounded) until none
/// is left. Returns how many were signalled.
pub(crate) fn kill_netns_pids(id: (u64, u64), name: &str) -> Result<usize, LabError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut signalled = std::collections::HashSet::new();
    loop {
        let pids = ns::pids_in(id);
        if pids.is_empty() {
            return Ok(signalled.len());
        }
        for &p in &pids {
            // SAFETY: plain kill(2).
            unsafe { libc::kill(p, libc::SIGKILL) };
            signalled.insert(p);
        }
        if Instant::now() >= deadline {
            return Err(LabError::Other(format!("processes {pids:?} are still in the network namespace {name} 10 s after SIGKILL")));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
