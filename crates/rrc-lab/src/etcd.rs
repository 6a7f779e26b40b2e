//! The lab's etcd cluster (issue 15): three members, Debian's
//! etcd-server, one on each of the hosts e1, e2 and e3, on the replication
//! network, so that losing one keeps a quorum. Each member runs in its
//! host's network namespace and cgroup: `rrc lab kill e1` ends it, and a
//! cut of the host's links cuts it too.
//!
//! Why hosts of their own rather than a member on each of a, b and c: a
//! service goes through a primary failure, re-protection on the spare and
//! a second failure (tests/test_failover.py); with members on the service
//! hosts the second failure would take etcd's quorum with it, and the
//! last host could never be promoted (safe, and dead). A deployment runs
//! etcd on machines of its own for the same reason, or five members.
//!
//! Members keep their data on tmpfs (/dev/shm/rrc-lab-etcd/HOST): every
//! etcd write is an fsync of its log, and on the machine's disk, shared
//! with the checkpoints the agents write, that fsync is what a lease
//! renewal would wait on. The lab's hosts are gone with the lab anyway.
//!
//! TLS everywhere (`etcd_pki`): clients and peers alike show a
//! certificate of the lab's CA, so that no one else on the network can
//! change a view, read one, or join the cluster.
//!
//! Raft timing: heartbeats every 50 ms, elections after 500 ms (etcd's
//! defaults are 100 / 1000 ms, for machines of their own): a lost leader
//! is replaced within the lease the views give their hosts (1 s). With
//! pre-vote (Raft §9.6): a member healed from a partition does not force
//! an election, which would stall every renewal for as long.

use std::ffi::OsString;
use std::time::{Duration, Instant};

use crate::error::{io, LabError};
use crate::etcd_pki::{Pki, AGENT_CN};
use crate::topology::{Lab, HOSTS, STATE_ROOT};

/// Where the members' data lives (tmpfs).
pub const DATA_ROOT: &str = "/dev/shm/rrc-lab-etcd";
pub const CLIENT_PORT: u16 = 2379;
pub const PEER_PORT: u16 = 2380;
const HEARTBEAT_MS: u32 = 50;
const ELECTION_MS: u32 = 500;

/// The hosts that run a member, with their replication address.
pub fn members() -> Vec<(&'static str, &'static str)> {
    HOSTS.iter().filter(|h| h.role == "etcd").filter_map(|h| h.repl.map(|r| (h.name, r))).collect()
}

/// Client URLs of every member, rotated by `start` (each agent its own
/// first, so that their requests spread over the members).
pub fn client_urls(start: usize) -> Vec<String> {
    let mut m = members();
    let n = m.len().max(1);
    m.rotate_left(start % n);
    m.iter().map(|(_, addr)| format!("https://{addr}:{CLIENT_PORT}")).collect()
}

/// Makes the cluster's certificates (`etcd_pki`), starts the members and waits (20 s at most) until the cluster answers
/// a health check through every member.
pub fn start(lab: &Lab) -> Result<(), LabError> {
    let pki = Pki::lab();
    pki.make(&members(), &[AGENT_CN])?;
    let cluster: Vec<String> = members().iter().map(|(n, a)| format!("{n}=https://{a}:{PEER_PORT}")).collect();
    let cluster = cluster.join(",");
    let ca = pki.ca().display().to_string();
    for (name, addr) in members() {
        let (cert, key) = (pki.cert(name).display().to_string(), pki.key(name).display().to_string());
        let data = format!("{DATA_ROOT}/{name}");
        std::fs::create_dir_all(&data).map_err(io(format!("creating {data}")))?;
        let client = format!("https://{addr}:{CLIENT_PORT}");
        let peer = format!("https://{addr}:{PEER_PORT}");
        let argv: Vec<OsString> = [
            "etcd",
            "--name",
            name,
            "--data-dir",
            &data,
            "--listen-client-urls",
            &client,
            "--advertise-client-urls",
            &client,
            "--listen-peer-urls",
            &peer,
            "--initial-advertise-peer-urls",
            &peer,
            "--initial-cluster",
            &cluster,
            "--initial-cluster-state",
            "new",
            "--initial-cluster-token",
            "rrc-lab",
            "--heartbeat-interval",
            &HEARTBEAT_MS.to_string(),
            "--election-timeout",
            &ELECTION_MS.to_string(),
            // a member cut off and back must not depose the leader it
            // could not hear (etcd 3.4's default is without pre-vote)
            "--pre-vote",
            // clients and peers: TLS both ways, certificates of the lab's CA
            "--cert-file",
            &cert,
            "--key-file",
            &key,
            "--client-cert-auth",
            "--trusted-ca-file",
            &ca,
            "--peer-cert-file",
            &cert,
            "--peer-key-file",
            &key,
            "--peer-client-cert-auth",
            "--peer-trusted-ca-file",
            &ca,
        ]
        .iter()
        .map(OsString::from)
        .collect();
        let log_path = format!("{STATE_ROOT}/{name}/etcd.log");
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&log_path).map_err(io(format!("opening {log_path}")))?;
        let mut cmd = crate::exec::command(lab, name, &argv)?;
        cmd.stdin(std::process::Stdio::null()).stdout(log.try_clone().map_err(io("duplicating the etcd log"))?).stderr(log);
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        match cmd.spawn() {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(LabError::Other("etcd is not installed (Debian's etcd-server; scripts/setup.sh installs it), or `rrc lab up --no-etcd`".into()))
            }
            Err(e) => return Err(io(format!("starting the etcd member of host {name}"))(e)),
        }
    }
    wait_healthy(lab, Duration::from_secs(20))
}

/// `etcdctl endpoint health` over every member, from host e1, until it
/// succeeds.
fn wait_healthy(lab: &Lab, within: Duration) -> Result<(), LabError> {
    let deadline = Instant::now() + within;
    let endpoints = client_urls(0).join(",");
    let mut argv: Vec<OsString> = ["etcdctl", "--endpoints", &endpoints, "--command-timeout=1s"].iter().map(OsString::from).collect();
    argv.extend(Pki::lab().etcdctl_args(AGENT_CN).into_iter().map(OsString::from));
    argv.extend(["endpoint", "health"].map(OsString::from));
    let mut last = String::new();
    while Instant::now() < deadline {
        let mut cmd = crate::exec::command(lab, "e1", &argv)?;
        cmd.env("ETCDCTL_API", "3").stdin(std::process::Stdio::null());
        match cmd.output() {
            Ok(o) if o.status.success() => return Ok(()),
            Ok(o) => last = format!("{}{}", String::from_utf8_lossy(&o.stdout).trim(), String::from_utf8_lossy(&o.stderr).trim()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(LabError::Other("etcdctl is not installed (Debian's etcd-client; scripts/setup.sh installs it)".into()))
            }
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(LabError::Other(format!("the lab's etcd cluster is not healthy after {within:?} (see {STATE_ROOT}/HOST/etcd.log): {last}")))
}
