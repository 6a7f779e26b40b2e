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
//!   packet to or from SERVICE_IP sent to the gate's NFQUEUE (but those
//!   the gate's observed input path marked as recorded).
//! Both: forwarding on, reverse-path filtering off (replies come back on
//! another interface than the one the host would route to).

use std::process::Command;

use std::os::fd::{AsRawFd, FromRawFd};

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
    /// With `reply_via` = (backup address, replication interface), replies
    /// are policy-routed there (the primary of a protected service); with
    /// None they follow the host's routes (a service live after failover).
    pub fn create(netns: &str, index: u32, service_ip: &str, reply_via: Option<(&str, &str)>) -> Result<ContainerNet> {
        let n = ContainerNet::create_standby(netns, index, service_ip, reply_via)?;
        if let Err(e) = n.activate() {
            n.destroy();
            return Err(e);
        }
        Ok(n)
    }

    /// Everything of [`ContainerNet::create`] but the host's route to the
    /// service IP: the namespace is ready and unreachable. A backup keeps
    /// one for its failover (the ~10 `ip` runs it takes are then not on
    /// the failover's clock); [`ContainerNet::activate`] routes to it.
    pub fn create_standby(netns: &str, index: u32, service_ip: &str, reply_via: Option<(&str, &str)>) -> Result<ContainerNet> {
        let n = ContainerNet { netns: netns.into(), host_if: format!("rrcsvc{index}"), service_ip: service_ip.into(), table: 1000 + index };
        if let Err(e) = n.build(reply_via) {
            n.destroy();
            return Err(e);
        }
        Ok(n)
    }

    /// Routes the service IP on this host to the container. `replace`:
    /// after a failover the service IP was routed to the primary until
    /// this moment.
    pub fn activate(&self) -> Result<()> {
        ip(&["route", "replace", &format!("{}/32", self.service_ip), "dev", &self.host_if])?;
        Ok(())
    }

    fn build(&self, reply_via: Option<(&str, &str)>) -> Result<()> {
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
        host_forwarding(&[hif])?;
        if let Some((backup_addr, repl_if)) = reply_via {
            host_forwarding(&[repl_if])?;
            let table = self.table.to_string();
            ip(&["route", "add", "default", "via", backup_addr, "dev", repl_if, "table", &table])?;
            ip(&["rule", "add", "from", svc, "iif", hif, "lookup", &table, "pref", &table])?;
        }
        Ok(())
    }

    /// Replies go through the backup at `backup_addr` (re-protection of a
    /// service that ran unprotected).
    pub fn add_reply_route(&self, backup_addr: &str, repl_if: &str) -> Result<()> {
        host_forwarding(&[repl_if])?;
        let table = self.table.to_string();
        ip(&["route", "replace", "default", "via", backup_addr, "dev", repl_if, "table", &table])?;
        ip(&["rule", "add", "from", &self.service_ip, "iif", &self.host_if, "lookup", &table, "pref", &table])?;
        Ok(())
    }

    /// The backup is gone: replies leave by the host's own routes (the
    /// client-facing network) instead of through the backup.
    pub fn drop_reply_route(&self) -> Result<()> {
        let table = self.table.to_string();
        ip(&["rule", "del", "pref", &table])?;
        quietly("table", ip(&["route", "flush", "table", &table]));
        Ok(())
    }

    /// Removes everything `create` made (each step independent).
    pub fn destroy(&self) {
        let table = self.table.to_string();
        while ip(&["rule", "del", "pref", &table]).is_ok() {}
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
        // what the gate's observed input path recorded (rrc_gate::observe)
        // goes on without the queue; the rest is queued
        let mark = format!("{:#x}/{:#x}", rrc_gate::observe::OBSERVED_MARK, rrc_gate::observe::OBSERVED_MARK);
        iptables(&["-A", &self.chain, "-d", svc, "-m", "mark", "--mark", &mark, "-j", "RETURN"])?;
        iptables(&["-A", &self.chain, "-d", svc, "-j", "NFQUEUE", "--queue-num", &q])?;
        iptables(&["-A", &self.chain, "-s", svc, "-j", "NFQUEUE", "--queue-num", &q])?;
        iptables(&["-I", "FORWARD", "-j", &self.chain])?;
        ip(&["route", "replace", &format!("{svc}/32"), "via", primary_addr, "dev", repl_if])?;
        ip(&["neigh", "replace", "proxy", svc, "dev", &self.front_if])?;
        // Clients that knew the service IP at another host (re-protection:
        // it was at the new primary) switch to this one at once.
        if let Ok(addr) = svc.parse() {
            if let Err(e) = gratuitous_arp(&self.front_if, addr) {
                tracing::warn!("{e:#}");
            }
        }
        Ok(())
    }

    /// Failover, first step: what the service side sends passes, past the
    /// gate (the repaired sockets' window probes and write queues must
    /// reach the clients at once, and nothing is held any more). What
    /// clients send is held by the gate meanwhile (`Gate::hold_input`), so
    /// no packet reaches the half-restored service and its kernel never
    /// answers one with a RST (NiLiCon §III), and none is lost either.
    ///
    /// Only the restored container's output: what still comes from the old
    /// primary on the replication interface is dropped from here on. The
    /// old primary may be alive (a suspicion, not a failure): its replies
    /// must never reach a client beside those of the service restored here.
    pub fn bypass_output(&self, repl_if: &str) -> Result<()> {
        iptables(&["-I", &self.chain, "1", "-s", &self.service_ip, "-j", "ACCEPT"])?;
        iptables(&["-I", &self.chain, "1", "-i", repl_if, "-s", &self.service_ip, "-j", "DROP"])?;
        Ok(())
    }

    /// Failover, last step: the service runs here now; its traffic no
    /// longer goes through the gate (nor the block). The proxy ARP entry
    /// stays: clients keep reaching the service IP at this host.
    pub fn unhook(&self) {
        quietly("jump", iptables(&["-D", "FORWARD", "-j", &self.chain]));
    }

    /// What `unhook` left: the chain itself (no longer jumped to).
    pub fn remove_chain(&self) {
        quietly("flush", iptables(&["-F", &self.chain]));
        quietly("chain", iptables(&["-X", &self.chain]));
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

/// Lease-based fencing (issue 15): with `on`, nothing of the service
/// crosses this host any more (forwarded packets to and from `svc`
/// dropped, ahead of the gate's rules) and the host stops answering ARP
/// for it; with `!on`, both undone and the IP announced again. For the
/// host that holds the service IP (the backup, or a primary alone).
pub fn fence_service(svc: &str, front_if: &str, on: bool) -> Result<()> {
    if on {
        iptables(&["-I", "FORWARD", "1", "-d", svc, "-j", "DROP"])?;
        iptables(&["-I", "FORWARD", "1", "-s", svc, "-j", "DROP"])?;
        // a gate on the AF_XDP output path sends the service's packets on
        // from this host's own raw socket: they take OUTPUT, not FORWARD
        iptables(&["-I", "OUTPUT", "1", "-s", svc, "-j", "DROP"])?;
        unadvertise(svc, front_if);
    } else {
        remove_fence(svc);
        advertise(svc, front_if)?;
        if let Ok(addr) = svc.parse() {
            gratuitous_arp(front_if, addr)?;
        }
    }
    Ok(())
}

/// The fence's rules gone, if any (a service ending here).
pub fn remove_fence(svc: &str) {
    while iptables(&["-D", "FORWARD", "-s", svc, "-j", "DROP"]).is_ok() {}
    while iptables(&["-D", "FORWARD", "-d", svc, "-j", "DROP"]).is_ok() {}
    while iptables(&["-D", "OUTPUT", "-s", svc, "-j", "DROP"]).is_ok() {}
}

/// Answers ARP for `svc` on `front_if` (the host advertises the service).
pub fn advertise(svc: &str, front_if: &str) -> Result<()> {
    host_forwarding(&[front_if])?;
    ip(&["neigh", "replace", "proxy", svc, "dev", front_if])?;
    Ok(())
}

pub fn unadvertise(svc: &str, front_if: &str) {
    quietly("proxy arp", ip(&["neigh", "del", "proxy", svc, "dev", front_if]));
}

/// Sends a gratuitous ARP request for `ip` from `ifname`'s MAC address so
/// that neighbours update their caches at once (the service IP moved to
/// this host); Linux overrides an existing entry on a gratuitous ARP.
pub fn gratuitous_arp(ifname: &str, ip: std::net::Ipv4Addr) -> Result<()> {
    let index = rrc_gate::netif::index(ifname).with_context(|| format!("interface {ifname}"))?;
    let mac = rrc_gate::netif::mac(index).with_context(|| format!("MAC address of {ifname}"))?;
    // SAFETY: plain socket/sendto on an fd owned here; the struct is
    // zeroed and filled within its size.
    unsafe {
        let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, (libc::ETH_P_ARP as u16).to_be() as i32);
        if fd < 0 {
            return Err(std::io::Error::last_os_error()).context("AF_PACKET socket for the gratuitous ARP");
        }
        let fd = std::os::fd::OwnedFd::from_raw_fd(fd);
        let mut f = Vec::with_capacity(42);
        f.extend_from_slice(&[0xff; 6]);
        f.extend_from_slice(&mac);
        f.extend_from_slice(&0x0806u16.to_be_bytes());
        f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]); // Ethernet, IPv4, request
        f.extend_from_slice(&mac);
        f.extend_from_slice(&ip.octets());
        f.extend_from_slice(&[0; 6]);
        f.extend_from_slice(&ip.octets());
        let mut sll: libc::sockaddr_ll = std::mem::zeroed();
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ARP as u16).to_be();
        sll.sll_ifindex = index as i32;
        sll.sll_halen = 6;
        sll.sll_addr[..6].copy_from_slice(&[0xff; 6]);
        let r = libc::sendto(
            fd.as_raw_fd(),
            f.as_ptr() as *const libc::c_void,
            f.len(),
            0,
            &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        );
        if r < 0 {
            return Err(std::io::Error::last_os_error()).with_context(|| format!("sending the gratuitous ARP for {ip} on {ifname}"));
        }
    }
    Ok(())
}
