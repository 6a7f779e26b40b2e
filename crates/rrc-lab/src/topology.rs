//! The lab's fixed topology: which hosts, which networks, which addresses.
//!
//! Hosts are network namespaces `rrc-lab-<host>` (client, a, b, c, and
//! e1, e2, e3 for etcd); the wires are two
//! bridges, `front` (client-facing) and `repl` (replication), in a switch
//! namespace `rrc-lab-switch`. Every address comes from the benchmarking
//! range of RFC 2544 (198.18.0.0/15), which no real network routes, and no
//! host has a default route: nothing can leave the lab.

use serde::{Deserialize, Serialize};

/// Prefix of every network namespace (and the cgroup tree) of the lab.
pub const PREFIX: &str = "rrc-lab-";
/// The namespace holding the bridges.
pub const SWITCH_NS: &str = "rrc-lab-switch";
/// cgroup v2 tree of the lab; one child group per host.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup/unified/rrc-lab";
/// Per-host state directories live below this one.
pub const STATE_ROOT: &str = "/var/lib/rrc-lab";
/// The lab's run-time directory; lab.json records the topology.
pub const RUN_DIR: &str = "/run/rrc-lab";
pub const LAB_JSON: &str = "/run/rrc-lab/lab.json";
/// The key the lab's agents share (made by `up`, mode 0600).
pub const KEY_FILE: &str = "/run/rrc-lab/agent.key";
/// Where `ip netns` keeps its named namespaces.
pub const NETNS_DIR: &str = "/run/netns";
/// TCP port of the agents on the replication network.
pub const AGENT_PORT: u16 = 7400;

/// The CLI socket of HOST's agent.
pub fn agent_socket(host: &str) -> std::path::PathBuf {
    std::path::Path::new(RUN_DIR).join(host).join("agent.sock")
}

/// Service IPs will be taken from this range of the client-facing network.
pub const SERVICE_IP_RANGE: (&str, &str) = ("198.18.0.100", "198.18.0.199");

/// One of the lab's two networks (a bridge in the switch namespace).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetworkDef {
    /// Bridge name in the switch namespace, and interface name in each host.
    pub name: &'static str,
    pub subnet: &'static str,
    pub prefix_len: u8,
    pub what: &'static str,
}

pub const FRONT: NetworkDef = NetworkDef { name: "front", subnet: "198.18.0.0", prefix_len: 24, what: "client-facing network" };
pub const REPL: NetworkDef = NetworkDef { name: "repl", subnet: "198.19.0.0", prefix_len: 24, what: "replication network" };
pub const NETWORKS: [NetworkDef; 2] = [FRONT, REPL];

/// A host: its name and its address on each network it is attached to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostDef {
    pub name: &'static str,
    pub role: &'static str,
    /// The etcd hosts are not on the client-facing network.
    pub front: Option<&'static str>,
    /// The client is not on the replication network.
    pub repl: Option<&'static str>,
}

/// The hosts. e1, e2 and e3 each run one member of the lab's etcd cluster
/// (issue 15) and nothing else: the service hosts' failures, one after the
/// other (a primary, then the backup that replaced it), leave etcd its
/// quorum, as a deployment whose etcd runs on machines of its own.
pub const HOSTS: [HostDef; 7] = [
    HostDef { name: "client", role: "client", front: Some("198.18.0.10"), repl: None },
    HostDef { name: "a", role: "server", front: Some("198.18.0.1"), repl: Some("198.19.0.1") },
    HostDef { name: "b", role: "server", front: Some("198.18.0.2"), repl: Some("198.19.0.2") },
    HostDef { name: "c", role: "spare", front: Some("198.18.0.3"), repl: Some("198.19.0.3") },
    HostDef { name: "e1", role: "etcd", front: None, repl: Some("198.19.0.11") },
    HostDef { name: "e2", role: "etcd", front: None, repl: Some("198.19.0.12") },
    HostDef { name: "e3", role: "etcd", front: None, repl: Some("198.19.0.13") },
];

/// Whether a host of this role runs an rrc agent (servers and the spare).
pub fn runs_agent(role: &str) -> bool {
    role == "server" || role == "spare"
}

impl HostDef {
    pub fn netns(&self) -> String {
        format!("{PREFIX}{}", self.name)
    }

    /// (network, address) for every network the host is on.
    pub fn links(&self) -> Vec<(NetworkDef, &'static str)> {
        let mut v = Vec::new();
        if let Some(f) = self.front {
            v.push((FRONT, f));
        }
        if let Some(r) = self.repl {
            v.push((REPL, r));
        }
        v
    }
}

/// Name of the switch-side end of a host's veth on a network, e.g. `a-front`.
pub fn switch_port(host: &str, net: &str) -> String {
    format!("{host}-{net}")
}

pub fn host_def(name: &str) -> Option<&'static HostDef> {
    HOSTS.iter().find(|h| h.name == name)
}

pub fn host_names() -> String {
    HOSTS.iter().map(|h| h.name).collect::<Vec<_>>().join(", ")
}

/// What lab.json records: the topology as built, and which hosts were killed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Lab {
    pub created_at: String,
    pub switch_netns: String,
    pub cgroup_root: String,
    pub networks: Vec<Network>,
    pub hosts: Vec<Host>,
    /// Whether `up` started the agents (one per server host).
    pub agents: bool,
    /// The key file the agents share; None: they run unauthenticated
    /// (`rrc lab up --insecure-no-auth`).
    #[serde(default)]
    pub key_file: Option<String>,
    /// Whether `up` started the etcd cluster (a member on each of e1, e2, e3) and
    /// gave the agents its endpoints; false with `rrc lab up --no-etcd`.
    #[serde(default)]
    pub etcd: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Network {
    pub name: String,
    pub bridge: String,
    pub subnet: String,
    pub description: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Host {
    pub name: String,
    pub role: String,
    pub netns: String,
    pub state_dir: String,
    pub cgroup: String,
    pub links: Vec<Link>,
    /// Set by `rrc lab kill` (RFC 3339 time of the kill).
    pub killed_at: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Link {
    pub network: String,
    /// Interface name inside the host (same as the network's name).
    pub ifname: String,
    /// The veth end attached to the bridge in the switch namespace.
    pub switch_port: String,
    /// address/prefix
    pub address: String,
}

impl Lab {
    /// The topology as designed (what `up` builds).
    pub fn design(created_at: String) -> Lab {
        Lab {
            created_at,
            switch_netns: SWITCH_NS.into(),
            cgroup_root: CGROUP_ROOT.into(),
            networks: NETWORKS
                .iter()
                .map(|n| Network {
                    name: n.name.into(),
                    bridge: n.name.into(),
                    subnet: format!("{}/{}", n.subnet, n.prefix_len),
                    description: n.what.into(),
                })
                .collect(),
            hosts: HOSTS
                .iter()
                .map(|h| Host {
                    name: h.name.into(),
                    role: h.role.into(),
                    netns: h.netns(),
                    state_dir: format!("{STATE_ROOT}/{}", h.name),
                    cgroup: format!("{CGROUP_ROOT}/{}", h.name),
                    links: h
                        .links()
                        .into_iter()
                        .map(|(n, addr)| Link {
                            network: n.name.into(),
                            ifname: n.name.into(),
                            switch_port: switch_port(h.name, n.name),
                            address: format!("{addr}/{}", n.prefix_len),
                        })
                        .collect(),
                    killed_at: None,
                })
                .collect(),
            agents: false,
            key_file: None,
            etcd: false,
        }
    }

    pub fn host(&self, name: &str) -> Option<&Host> {
        self.hosts.iter().find(|h| h.name == name)
    }

    /// A host to run something on or act on: known, and not killed.
    pub fn live_host(&self, name: &str) -> Result<&Host, crate::LabError> {
        let h = self.host(name).ok_or_else(|| crate::LabError::UnknownHost { host: name.into(), known: host_names() })?;
        if h.killed_at.is_some() {
            return Err(crate::LabError::HostKilled { host: name.into() });
        }
        Ok(h)
    }

    pub fn host_mut(&mut self, name: &str) -> Option<&mut Host> {
        self.hosts.iter_mut().find(|h| h.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn design_is_as_documented() {
        let lab = Lab::design("t".into());
        let names: Vec<_> = lab.hosts.iter().map(|h| h.netns.as_str()).collect();
        assert_eq!(names, ["rrc-lab-client", "rrc-lab-a", "rrc-lab-b", "rrc-lab-c", "rrc-lab-e1", "rrc-lab-e2", "rrc-lab-e3"]);
        let e1 = lab.host("e1").unwrap();
        assert_eq!((e1.links.len(), e1.links[0].address.as_str()), (1, "198.19.0.11/24"), "etcd hosts: replication network only");
        let client = lab.host("client").unwrap();
        assert_eq!(client.links.len(), 1, "the client is not on the replication network");
        assert_eq!(client.links[0].address, "198.18.0.10/24");
        let b = lab.host("b").unwrap();
        assert_eq!(b.links[1].address, "198.19.0.2/24");
        assert_eq!(b.links[1].switch_port, "b-repl");
        // every switch port name fits IFNAMSIZ
        for h in &lab.hosts {
            for l in &h.links {
                assert!(l.switch_port.len() < 16);
            }
        }
    }
}
