//! `rrc lab up`: builds the switch, the hosts, their links, state
//! directories and cgroups, records lab.json, then starts the agents
//! (not yet: see [`start_agents`]). On any failure it removes what it made
//! (by running the same discovery-based teardown as `rrc lab down`, which is
//! safe because `up` refuses to start when anything of a lab exists).

use std::path::Path;

use crate::down;
use crate::error::{io, LabError};
use crate::ip::{ip, ip_in};
use crate::ns;
use crate::state;
use crate::topology::{Lab, CGROUP_ROOT, HOSTS, LAB_JSON, NETWORKS, RUN_DIR, STATE_ROOT, SWITCH_NS};

/// What of a lab exists now (empty when the machine is clean).
pub fn existing() -> Result<Vec<String>, LabError> {
    let mut found = Vec::new();
    for p in [LAB_JSON, RUN_DIR, STATE_ROOT, CGROUP_ROOT] {
        if Path::new(p).exists() {
            found.push(p.to_string());
        }
    }
    for n in ns::lab_namespaces()? {
        found.push(format!("network namespace {n}"));
    }
    Ok(found)
}

/// Builds the lab. Refuses if any part of a lab exists.
pub fn up() -> Result<Lab, LabError> {
    let found = existing()?;
    if !found.is_empty() {
        return Err(LabError::AlreadyUp { found: format!("found: {}", found.join(", ")) });
    }
    let lab = Lab::design(state::now_rfc3339());
    match build(&lab) {
        Ok(()) => Ok(lab),
        Err(e) => {
            tracing::warn!("lab up failed, removing what was made: {e}");
            match down::down() {
                Ok(_) => Err(e),
                Err(c) => Err(LabError::Other(format!("{e}; and removing what was made failed too: {c}"))),
            }
        }
    }
}

/// Makes the namespace NAME with lo up and IPv6 off (the lab's only
/// addresses are its IPv4 ones; no link-local addresses, router
/// solicitations or MLD reports on the wires).
fn add_netns(name: &str) -> Result<(), LabError> {
    ip(&format!("creating the network namespace {name}"), &["netns", "add", name])?;
    for key in ["net.ipv6.conf.default.disable_ipv6", "net.ipv6.conf.all.disable_ipv6"] {
        match ns::sysctl_in(name, key, "1") {
            Ok(()) => {}
            // IPv6 not built into this kernel: nothing to turn off.
            Err(LabError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    ip_in(name, &format!("bringing lo up in {name}"), &["link", "set", "lo", "up"])?;
    Ok(())
}

fn build(lab: &Lab) -> Result<(), LabError> {
    // The run directory first: from here on a crash leaves a visible trace.
    std::fs::create_dir_all(RUN_DIR).map_err(io(format!("creating {RUN_DIR}")))?;

    add_netns(SWITCH_NS)?;
    for net in NETWORKS {
        let step = format!("creating the bridge {} ({}) in {SWITCH_NS}", net.name, net.what);
        ip_in(SWITCH_NS, &step, &["link", "add", net.name, "type", "bridge"])?;
        ip_in(SWITCH_NS, &step, &["link", "set", net.name, "up"])?;
    }

    for h in HOSTS {
        let netns = h.netns();
        add_netns(&netns)?;
        for (net, addr) in h.links() {
            let port = crate::topology::switch_port(h.name, net.name);
            let step = format!("wiring host {} to the {} ({} <-> {}:{})", h.name, net.what, port, netns, net.name);
            // Both ends are created directly in their namespaces: nothing
            // ever appears in the root network namespace.
            ip_in(SWITCH_NS, &step, &["link", "add", &port, "type", "veth", "peer", "name", net.name, "netns", &netns])?;
            ip_in(SWITCH_NS, &step, &["link", "set", &port, "master", net.name])?;
            ip_in(SWITCH_NS, &step, &["link", "set", &port, "up"])?;
            let cidr = format!("{addr}/{}", net.prefix_len);
            ip_in(&netns, &format!("addressing host {} on the {}", h.name, net.what), &["addr", "add", &cidr, "dev", net.name])?;
            ip_in(&netns, &step, &["link", "set", net.name, "up"])?;
        }
    }

    std::fs::create_dir_all(CGROUP_ROOT).map_err(io(format!("creating the cgroup {CGROUP_ROOT}")))?;
    for h in &lab.hosts {
        std::fs::create_dir_all(&h.state_dir).map_err(io(format!("creating the state directory {}", h.state_dir)))?;
        std::fs::create_dir(&h.cgroup).map_err(io(format!("creating the cgroup {}", h.cgroup)))?;
    }
    state::save(lab)?;
    start_agents(lab)?;
    Ok(())
}

/// Where `rrc lab up` will start one `rrc agent` per server host (a, b, c)
/// once `rrc agent` exists. Today it does nothing: agents: not yet.
///
/// The intended change is one line per host: spawn `rrc agent` through
/// [`crate::exec::command`] (the host's netns, cgroup, RRC_LAB_HOST and
/// RRC_STATE_DIR), so that `kill` and `down` end the agents with everything
/// else of the host.
pub fn start_agents(lab: &Lab) -> Result<(), LabError> {
    let _ = lab;
    Ok(())
}
