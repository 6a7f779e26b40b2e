//! lab.json (the topology as built, and which hosts were killed) and the
//! live state that `rrc lab status` reports.

use std::path::Path;

use serde::Serialize;

use crate::cgroup;
use crate::error::{io, LabError};
use crate::ip::ip_json;
use crate::ns;
use crate::topology::{Lab, LAB_JSON, RUN_DIR, SWITCH_NS};

pub fn now_rfc3339() -> String {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = t.as_secs() as libc::time_t;
    // SAFETY: gmtime_r writes into our struct.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    unsafe { libc::gmtime_r(&secs, &mut tm) };
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        t.subsec_millis()
    )
}

/// Writes lab.json atomically (temp file + rename).
pub fn save(lab: &Lab) -> Result<(), LabError> {
    std::fs::create_dir_all(RUN_DIR).map_err(io(format!("creating {RUN_DIR}")))?;
    let tmp = format!("{RUN_DIR}/.lab.json.tmp");
    let text = serde_json::to_string_pretty(lab).map_err(|e| LabError::Other(format!("encoding lab.json: {e}")))?;
    std::fs::write(&tmp, text + "\n").map_err(io(format!("writing {tmp}")))?;
    std::fs::rename(&tmp, LAB_JSON).map_err(io(format!("renaming {tmp} to {LAB_JSON}")))
}

/// Reads lab.json; NoLab when there is none.
pub fn load() -> Result<Lab, LabError> {
    let text = match std::fs::read_to_string(LAB_JSON) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(LabError::NoLab { path: LAB_JSON.into() }),
        Err(e) => return Err(io(format!("reading {LAB_JSON}"))(e)),
    };
    serde_json::from_str(&text).map_err(|e| LabError::State { path: LAB_JSON.into(), reason: format!("cannot parse: {e}") })
}

#[derive(Debug, Serialize)]
pub struct Status {
    pub up: bool,
    pub created_at: String,
    pub switch_netns: String,
    /// Whether the lab's agents were started.
    pub agents: bool,
    /// The agents' shared key (None: unauthenticated agents).
    pub key_file: Option<String>,
    pub networks: Vec<crate::topology::Network>,
    pub hosts: Vec<HostStatus>,
}

#[derive(Debug, Serialize)]
pub struct HostStatus {
    pub name: String,
    pub role: String,
    pub netns: String,
    /// "alive" or "killed".
    pub state: String,
    pub killed_at: Option<String>,
    pub netns_present: bool,
    pub processes: usize,
    pub state_dir: String,
    pub cgroup: String,
    pub links: Vec<LinkStatus>,
}

#[derive(Debug, Serialize)]
pub struct LinkStatus {
    pub network: String,
    pub ifname: String,
    pub address: String,
    /// Operational state of the host's end ("UP", "DOWN", or "absent"
    /// once the link was cut).
    pub host_end: String,
    /// Operational state of the switch's end, and whether it is still on
    /// its bridge.
    pub switch_end: String,
    pub on_bridge: bool,
}

fn link_states(netns: &str, step: &str) -> std::collections::HashMap<String, (String, Option<String>)> {
    let mut m = std::collections::HashMap::new();
    if let Ok(serde_json::Value::Array(links)) = ip_json(netns, step, &["link", "show"]) {
        for l in links {
            let name = l["ifname"].as_str().unwrap_or_default().to_string();
            let state = l["operstate"].as_str().unwrap_or("UNKNOWN").to_string();
            let master = l["master"].as_str().map(str::to_string);
            m.insert(name, (state, master));
        }
    }
    m
}

/// The recorded topology joined with what is there now.
pub fn status() -> Result<Status, LabError> {
    let lab = load()?;
    let switch_links = link_states(SWITCH_NS, "reading the switch's links");
    let hosts = lab
        .hosts
        .iter()
        .map(|h| {
            let present = ns::ns_id(&ns::netns_path(&h.netns)).is_some();
            let host_links = if present { link_states(&h.netns, "reading a host's links") } else { Default::default() };
            let links = h
                .links
                .iter()
                .map(|l| {
                    let host_end = host_links.get(&l.ifname).map(|s| s.0.clone()).unwrap_or_else(|| "absent".into());
                    let sw = switch_links.get(&l.switch_port);
                    LinkStatus {
                        network: l.network.clone(),
                        ifname: l.ifname.clone(),
                        address: l.address.clone(),
                        host_end,
                        switch_end: sw.map(|s| s.0.clone()).unwrap_or_else(|| "absent".into()),
                        on_bridge: sw.and_then(|s| s.1.as_deref()) == Some(l.network.as_str()),
                    }
                })
                .collect();
            HostStatus {
                name: h.name.clone(),
                role: h.role.clone(),
                netns: h.netns.clone(),
                state: if h.killed_at.is_some() { "killed".into() } else { "alive".into() },
                killed_at: h.killed_at.clone(),
                netns_present: present,
                processes: cgroup::count_recursive(Path::new(&h.cgroup)),
                state_dir: h.state_dir.clone(),
                cgroup: h.cgroup.clone(),
                links,
            }
        })
        .collect();
    Ok(Status {
        up: true,
        created_at: lab.created_at,
        switch_netns: lab.switch_netns,
        agents: lab.agents,
        key_file: lab.key_file,
        networks: lab.networks,
        hosts,
    })
}
