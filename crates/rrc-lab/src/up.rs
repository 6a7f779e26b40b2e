//! `rrc lab up`: builds the switch, the hosts, their links, state
//! directories and cgroups, records lab.json, then starts an agent on
//! each of a, b and c ([`start_agents`]). On any failure it removes what it made
//! (by running the same discovery-based teardown as `rrc lab down`, which is
//! safe because `up` refuses to start when anything of a lab exists).

use std::path::Path;

use crate::down;
use crate::error::{io, LabError};
use crate::ip::{ip, ip_in};
use crate::ns;
use crate::state;
use crate::topology::{Lab, CGROUP_ROOT, HOSTS, KEY_FILE, LAB_JSON, NETWORKS, RUN_DIR, STATE_ROOT, SWITCH_NS};

/// What of a lab exists now (empty when the machine is clean).
pub fn existing() -> Result<Vec<String>, LabError> {
    let mut found = Vec::new();
    for p in [LAB_JSON, RUN_DIR, STATE_ROOT, CGROUP_ROOT, crate::etcd::DATA_ROOT] {
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
/// `rrc_exe` is the `rrc` binary the agents run as (`rrc agent`). With
/// `authenticated`, the agents share a key made for this lab
/// ([`KEY_FILE`]); without, they run `--insecure-no-auth`.
/// With `etcd`, the agents keep their services' views in an etcd cluster
/// started for the lab ([`crate::etcd`]); without, they run without views
/// (no fencing, as `rrc status` says).
pub fn up(rrc_exe: &Path, authenticated: bool, etcd: bool) -> Result<Lab, LabError> {
    let found = existing()?;
    if !found.is_empty() {
        return Err(LabError::AlreadyUp { found: format!("found: {}", found.join(", ")) });
    }
    let mut lab = Lab::design(state::now_rfc3339());
    lab.agents = true;
    lab.key_file = authenticated.then(|| KEY_FILE.to_string());
    lab.etcd = etcd;
    match build(&lab, rrc_exe) {
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

/// The switch is a switch: its bridges forward frames without passing
/// them through the IP firewall's hooks. With br_netfilter in the kernel,
/// every new namespace has bridge-nf-call-iptables on, and every frame
/// crossing a bridge took the netfilter path (br_nf_pre_routing and
/// friends: 7 % of all CPU at saturation in a profile of rr redis, every
/// packet crossing twice). No rule of the lab is in the switch namespace:
/// the gates' NFQUEUE rules are in the backups' own namespaces.
fn switch_without_netfilter() -> Result<(), LabError> {
    for key in ["net.bridge.bridge-nf-call-iptables", "net.bridge.bridge-nf-call-ip6tables", "net.bridge.bridge-nf-call-arptables"] {
        match ns::sysctl_in(SWITCH_NS, key, "0") {
            Ok(()) => {}
            // no br_netfilter in this kernel: the bridges never call netfilter
            Err(LabError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn build(lab: &Lab, rrc_exe: &Path) -> Result<(), LabError> {
    // The run directory first: from here on a crash leaves a visible trace.
    std::fs::create_dir_all(RUN_DIR).map_err(io(format!("creating {RUN_DIR}")))?;

    add_netns(SWITCH_NS)?;
    switch_without_netfilter()?;
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

    if let Some(k) = &lab.key_file {
        rrc_wire::Key::create_file(Path::new(k)).map_err(|e| LabError::Other(format!("making the agents' key: {e}")))?;
    }
    std::fs::create_dir_all(CGROUP_ROOT).map_err(io(format!("creating the cgroup {CGROUP_ROOT}")))?;
    for h in &lab.hosts {
        std::fs::create_dir_all(&h.state_dir).map_err(io(format!("creating the state directory {}", h.state_dir)))?;
        std::fs::create_dir(&h.cgroup).map_err(io(format!("creating the cgroup {}", h.cgroup)))?;
    }
    state::save(lab)?;
    if lab.etcd {
        crate::etcd::start(lab)?;
    }
    start_agents(lab, rrc_exe)?;
    Ok(())
}

/// Starts one `rrc agent` per server host (a, b, c) (with the lab's etcd
/// endpoints when the lab has etcd) through
/// [`crate::exec::command`]: in the host's network namespace and cgroup,
/// so that `rrc lab kill HOST` ends its agent with everything else of the
/// host and `rrc lab down` finds it. Each agent listens for its peers on
/// the replication network and for the CLI on
/// [`crate::topology::agent_socket`]; its log is STATE_DIR/agent.log.
/// Returns once every agent accepts connections on its CLI socket.
pub fn start_agents(lab: &Lab, rrc_exe: &Path) -> Result<(), LabError> {
    use crate::topology::{agent_socket, runs_agent, AGENT_PORT, HOSTS};
    use std::ffi::OsString;
    let servers: Vec<_> = HOSTS.iter().filter(|h| runs_agent(h.role)).collect();
    for h in &servers {
        let host = lab.host(h.name).ok_or_else(|| LabError::Other(format!("host {} missing from lab.json", h.name)))?;
        let sock = agent_socket(h.name);
        let mut argv: Vec<OsString> = vec![
            rrc_exe.into(),
            "agent".into(),
            "--name".into(),
            h.name.into(),
            "--state-dir".into(),
            (&host.state_dir).into(),
            "--socket".into(),
            sock.clone().into(),
            "--listen".into(),
            format!("{}:{AGENT_PORT}", h.repl.unwrap_or_default()).into(),
            "--front-if".into(),
            crate::topology::FRONT.name.into(),
            "--repl-if".into(),
            crate::topology::REPL.name.into(),
            "--cgroup-root".into(),
            format!("{}/services", host.cgroup).into(),
            "--netns-prefix".into(),
            crate::topology::PREFIX.into(),
            // One directory for all hosts, as one path on every machine.
            "--log-dir".into(),
            format!("{STATE_ROOT}/logs").into(),
        ];
        match &lab.key_file {
            Some(k) => argv.extend(["--key-file".into(), k.into()]),
            None => argv.push("--insecure-no-auth".into()),
        }
        if lab.etcd {
            argv.push("--etcd".into());
            let index = servers.iter().position(|x| x.name == h.name).unwrap_or(0);
            argv.push(crate::etcd::client_urls(index).join(",").into());
            let pki = crate::etcd_pki::Pki::lab();
            let agent = crate::etcd_pki::AGENT_CN;
            argv.extend(["--etcd-cacert".into(), pki.ca().into(), "--etcd-cert".into(), pki.cert(agent).into(), "--etcd-key".into(), pki.key(agent).into()]);
        }
        for p in servers.iter().filter(|p| p.name != h.name) {
            argv.push("--peer".into());
            argv.push(format!("{}={}:{AGENT_PORT}", p.name, p.repl.unwrap_or_default()).into());
        }
        let log_path = format!("{}/agent.log", host.state_dir);
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&log_path).map_err(io(format!("opening {log_path}")))?;
        let log2 = log.try_clone().map_err(io(format!("duplicating {log_path}")))?;
        let mut cmd = crate::exec::command(lab, h.name, &argv)?;
        if std::env::var_os("RRC_LOG").is_none() {
            cmd.env("RRC_LOG", "info");
        }
        cmd.stdin(std::process::Stdio::null()).stdout(log).stderr(log2);
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        // The agent outlives this command: it must not keep what the caller
        // left open (a `flock` lock file held for the caller's duration
        // would stay locked as long as the lab runs).
        // SAFETY: one plain syscall between fork and exec.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                const CLOSE_RANGE_CLOEXEC: libc::c_uint = 4;
                if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd.spawn().map_err(io(format!("starting the agent of host {}", h.name)))?;
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    for h in &servers {
        let sock = agent_socket(h.name);
        loop {
            if std::os::unix::net::UnixStream::connect(&sock).is_ok() {
                break;
            }
            if std::time::Instant::now() >= deadline {
                return Err(LabError::Other(format!(
                    "the agent of host {} does not accept connections on {} after 10 s; see {}/{}/agent.log",
                    h.name,
                    sock.display(),
                    STATE_ROOT,
                    h.name
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    Ok(())
}
