//! The network plumbing of a service, done with iproute2 and iptables in
//! the agent's own network namespace (the host's).
//!
//! Primary host (RRC §3: clients reach the service through the backup):
//!   container netns  eth0 = SERVICE_IP/32, default via 169.254.0.1
//!   host             veth end with 169.254.0.1/32, route SERVICE_IP -> veth,
//!                    replies from SERVICE_IP routed (policy rule) via the
//!                    backup's replication address, never out of the front.
//! Backup host:
//!   route SERVICE_IP via the primary's replication address, proxy ARP
//!   for SERVICE_IP on the client-facing interface, and every forwarded
//!   packet to or from SERVICE_IP sent to the gate's NFQUEUE.
//! Both: forwarding on, reverse-path filtering off (replies come back on
//! another interface than the one the host would route to).

use std::process::Command;

use anyhow::{bail, Context, Result};

/// The container's gateway: link-local, the same on every host.
pub const GATEWAY: &str = "169.254.0.1";

fn run(prog: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(prog).args(args).output().with_context(|| format!("running {prog}"))?;
    if !out.status.success() {
        bail!("`{} {}` failed ({}): {}", prog, args.join(" "), out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn ip(args: &[&str]) -> Result<String> {
    run("ip", args)
}

pub fn iptables(args: &[&str]) -> Result<String> {
    let mut v = vec!["-w"];
    v.extend_from_slice(args);
    run("iptables", &v)
}

/// Best effort, for teardown: logs instead of failing.
fn quietly(what: &str, r: Result<String>) {
    if let Err(e) = r {
        tracing::debug!("teardown step {what}: {e:#}");
    }
}

fn sysctl(key: &str, value: &str) -> Result<()> {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    std::fs::write(&path, value).with_context(|| format!("setting {key}={value}"))
}

/// Forwarding on, rp_filter off for `all` and the given interfaces.
pub fn host_forwarding(ifaces: &[&str]) -> Result<()> {
    sysctl("net.ipv4.ip_forward", "1")?;
    sysctl("net.ipv4.conf.all.rp_filter", "0")?;
    for i in ifaces {
        sysctl(&format!("net.ipv4.conf.{i}.rp_filter"), "0")?;
    }
    Ok(())
}

/// The container side of a service on the primary host.
#[derive(Debug, Clone)]
pub struct ContainerNet {
    pub netns: String,
    pub host_if: String,
    pub service_ip: String,
    pub table: u32,
}

impl ContainerNet {
    /// Creates the namespace and the veth pair; replies are routed via
    /// `backup_addr` on `repl_if`.
    pub fn create(netns: &str, index: u32, service_ip: &str, backup_addr: &str, repl_if: &str) -> Result<ContainerNet> {
        let n = ContainerNet { netns: netns.into(), host_if: format!("rrcsvc{index}"), service_ip: service_ip.into(), table: 1000 + index };
        if let Err(e) = n.build(backup_addr, repl_if) {
            n.destroy();
            return Err(e);
        }
        Ok(n)
    }

    fn build(&self, backup_addr: &str, repl_if: &str) -> Result<()> {
        let ns = self.netns.as_str();
        let hif = self.host_if.as_str();
        let svc = self.service_ip.as_str();
        // A private, small TCP connection hash for the new namespace: the
        // library walks it at every checkpoint (sock_diag) and the
        // machine-wide one has 256k buckets (tcp_child_ehash_entries is
        // read when a namespace is created; 0 = share the global one).
        if let Err(e) = sysctl("net.ipv4.tcp_child_ehash_entries", "1024") {
            tracing::warn!("{e:#}; the checkpoint's TCP table walk will be slower");
        }
        ip(&["netns", "add", ns])?;
        ip(&["link", "add", hif, "type", "veth", "peer", "name", "eth0", "netns", ns])?;
        ip(&["-n", ns, "link", "set", "lo", "up"])?;
        ip(&["-n", ns, "addr", "add", &format!("{svc}/32"), "dev", "eth0"])?;
        ip(&["-n", ns, "link", "set", "eth0", "up"])?;
        ip(&["-n", ns, "route", "add", GATEWAY, "dev", "eth0"])?;
        ip(&["-n", ns, "route", "add", "default", "via", GATEWAY, "dev", "eth0"])?;
        ip(&["addr", "add", &format!("{GATEWAY}/32"), "dev", hif])?;
        ip(&["link", "set", hif, "up"])?;
        ip(&["route", "add", &format!("{svc}/32"), "dev", hif])?;
        host_forwarding(&[hif, repl_if])?;
        let table = self.table.to_string();
        ip(&["route", "add", "default", "via", backup_addr, "dev", repl_if, "table", &table])?;
        ip(&["rule", "add", "from", svc, "iif", hif, "lookup", &table, "pref", &table])?;
        Ok(())
    }

    /// Removes everything `create` made (each step independent).
    pub fn destroy(&self) {
        let table = self.table.to_string();
        quietly("rule", ip(&["rule", "del", "pref", &table]));
        quietly("table", ip(&["route", "flush", "table", &table]));
        quietly("veth", ip(&["link", "del", &self.host_if]));
        quietly("netns", ip(&["netns", "del", &self.netns]));
    }
}

/// The backup host's side: routing through, proxy ARP, the gate's queue.
#[derive(Debug, Clone)]
pub struct BackupRoute {
    pub service_ip: String,
    pub front_if: String,
    pub queue_num: u16,
    chain: String,
}

impl BackupRoute {
    /// The gate must already be bound to `queue_num`: a packet sent to an
    /// unbound queue is dropped.
    pub fn create(service_ip: &str, primary_addr: &str, front_if: &str, repl_if: &str, queue_num: u16) -> Result<BackupRoute> {
        let r = BackupRoute { service_ip: service_ip.into(), front_if: front_if.into(), queue_num, chain: format!("RRC-GATE-{queue_num}") };
        if let Err(e) = r.build(primary_addr, repl_if) {
            r.destroy();
            return Err(e);
        }
        Ok(r)
    }

    fn build(&self, primary_addr: &str, repl_if: &str) -> Result<()> {
        let svc = self.service_ip.as_str();
        let q = self.queue_num.to_string();
        host_forwarding(&[&self.front_if, repl_if])?;
        iptables(&["-N", &self.chain])?;
        iptables(&["-A", &self.chain, "-d", svc, "-j", "NFQUEUE", "--queue-num", &q])?;
        iptables(&["-A", &self.chain, "-s", svc, "-j", "NFQUEUE", "--queue-num", &q])?;
        iptables(&["-I", "FORWARD", "-j", &self.chain])?;
        ip(&["route", "replace", &format!("{svc}/32"), "via", primary_addr, "dev", repl_if])?;
        ip(&["neigh", "replace", "proxy", svc, "dev", &self.front_if])?;
        Ok(())
    }

    pub fn destroy(&self) {
        let svc = self.service_ip.as_str();
        quietly("proxy arp", ip(&["neigh", "del", "proxy", svc, "dev", &self.front_if]));
        quietly("route", ip(&["route", "del", &format!("{svc}/32")]));
        quietly("jump", iptables(&["-D", "FORWARD", "-j", &self.chain]));
        quietly("flush", iptables(&["-F", &self.chain]));
        quietly("chain", iptables(&["-X", &self.chain]));
    }
}
