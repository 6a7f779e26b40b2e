//! `rrc agent`: the per-host daemon (crates/rrc-agent).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;
use rrc_agent::AgentConfig;
use rrc_wire::auth::{Key, PeerAuth};

use crate::locate;

#[derive(Args, Debug)]
pub struct AgentArgs {
    /// This host's name, as `rrc run --primary/--backup` name it.
    #[arg(long)]
    pub name: String,
    /// Directory for services' data, logs and the container registry.
    #[arg(long, value_name = "DIR", default_value = "/var/lib/rrc")]
    pub state_dir: PathBuf,
    /// The CLI's Unix socket.
    #[arg(long, value_name = "PATH", default_value = crate::agents::DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// Address:port for peers (on the replication network).
    #[arg(long, value_name = "ADDR:PORT", default_value = "0.0.0.0:7400")]
    pub listen: SocketAddr,
    /// Another agent: NAME=ADDR:PORT (repeatable).
    #[arg(long = "peer", value_name = "NAME=ADDR:PORT")]
    pub peers: Vec<String>,
    /// Client-facing interface (service IPs are advertised there when this
    /// host is a backup).
    #[arg(long, value_name = "IF", default_value = "eth0")]
    pub front_if: String,
    /// Replication interface (towards the peers).
    #[arg(long, value_name = "IF", default_value = "eth1")]
    pub repl_if: String,
    /// How a backup's gate takes the service's output: `xdp` (an XDP
    /// program on --repl-if hands the primary's packets to AF_XDP sockets;
    /// NFQUEUE where it cannot be attached) or `nfqueue` (the FORWARD
    /// chain queues them). See docs/gate.md "The output path". `rrc lab
    /// up` passes RRC_GATE_OUTPUT on to the lab's agents.
    #[arg(long, value_name = "PATH", env = "RRC_GATE_OUTPUT", default_value = "xdp", value_parser = ["xdp", "nfqueue"])]
    pub gate_output: String,
    /// How a backup's gate takes what clients send: `nfqueue` (the FORWARD
    /// chain queues them) or `observe` (a tc program at the ingress of
    /// --front-if copies each frame to the service into a ring the gate
    /// reads, and the kernel forwards the packet itself; NFQUEUE where it
    /// cannot be attached). `nfqueue` is the default: on the 2 CPUs
    /// measured, the queue's batching made rr mode serve more (docs/gate.md
    /// "The input path"). `rrc lab up` passes RRC_GATE_INPUT on to the
    /// lab's agents.
    #[arg(long, value_name = "PATH", env = "RRC_GATE_INPUT", default_value = "nfqueue", value_parser = ["observe", "nfqueue"])]
    pub gate_input: String,
    /// cgroup v2 directory for the services' containers.
    #[arg(long, value_name = "DIR", default_value = "/sys/fs/cgroup/unified/rrc/services")]
    pub cgroup_root: PathBuf,
    /// Services' logs (NAME.log): use the same path on every host.
    #[arg(long, value_name = "DIR", default_value = "/var/log/rrc")]
    pub log_dir: PathBuf,
    /// Prefix of the network namespaces made for services.
    #[arg(long, default_value = "rrc-")]
    pub netns_prefix: String,
    /// The key this host's agent shares with its peers (`rrc keygen FILE`
    /// makes one; copy it to every host, mode 0600, owned by root). Peers
    /// prove they hold it and every frame between agents carries a MAC.
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<PathBuf>,
    /// Run without peer authentication: anyone who reaches --listen is
    /// taken for a peer (it can send checkpoints, stop replication). For a
    /// closed test network only; `rrc status` says so.
    #[arg(long, conflicts_with = "key_file")]
    pub insecure_no_auth: bool,
    /// etcd's client endpoints, comma-separated (e.g.
    /// http://10.0.0.1:2379,http://10.0.0.2:2379,http://10.0.0.3:2379):
    /// the services' views and this host's leases live there, so that a
    /// host another believes failed is fenced before anyone takes its
    /// place (docs/failover.md "Views and fencing"). Every agent of a
    /// deployment names the same cluster. Without it, no fencing: `rrc
    /// status` says so.
    #[arg(long, value_name = "URL,...", value_delimiter = ',')]
    pub etcd: Vec<String>,
    /// TLS to etcd (`https://` endpoints): the CA that signed the
    /// members' certificates (PEM), as etcdctl's --cacert. Run the members
    /// with --client-cert-auth and this CA as --trusted-ca-file: they
    /// then answer only hosts that hold a certificate it signed.
    #[arg(long, value_name = "FILE", requires_all = ["etcd", "etcd_cert", "etcd_key"])]
    pub etcd_cacert: Option<PathBuf>,
    /// This host's client certificate for etcd (PEM), as etcdctl's --cert.
    #[arg(long, value_name = "FILE", requires_all = ["etcd_cacert", "etcd_key"])]
    pub etcd_cert: Option<PathBuf>,
    /// Its private key (PEM; root's, mode 0600), as etcdctl's --key.
    #[arg(long, value_name = "FILE", requires_all = ["etcd_cacert", "etcd_cert"])]
    pub etcd_key: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct KeygenArgs {
    /// Where to write the new key (mode 0600; an existing file is never
    /// overwritten).
    pub file: PathBuf,
}

/// `rrc keygen FILE`: a new key for a deployment's agents.
pub fn keygen(a: KeygenArgs) -> Result<ExitCode> {
    let k = Key::create_file(&a.file)?;
    println!("key written to {} (fingerprint {}); give every agent of the deployment the same file with --key-file", a.file.display(), k.fingerprint());
    Ok(ExitCode::SUCCESS)
}

pub fn run(a: AgentArgs) -> Result<ExitCode> {
    let mut peers = BTreeMap::new();
    for p in &a.peers {
        let (n, addr) = p.split_once('=').with_context(|| format!("--peer {p:?}: expected NAME=ADDR:PORT"))?;
        let addr: SocketAddr = addr.parse().with_context(|| format!("--peer {p:?}: bad address"))?;
        if n == a.name {
            bail!("--peer {p:?} names this host itself");
        }
        peers.insert(n.to_string(), addr);
    }
    let auth = match (&a.key_file, a.insecure_no_auth) {
        (Some(f), _) => PeerAuth::Key(Key::load(f)?),
        (None, true) => PeerAuth::Unauthenticated,
        (None, false) => bail!("no --key-file: an agent authenticates its peers with a shared key (make one with `rrc keygen FILE`), or runs without only when told so (--insecure-no-auth)"),
    };
    let etcd_tls = match (a.etcd_cacert, a.etcd_cert, a.etcd_key) {
        (Some(ca), Some(cert), Some(key)) => {
            // the client key is a secret as the agents' key is
            rrc_wire::auth::open_private_file(&key).context("--etcd-key")?;
            Some(rrc_view::EtcdTls { ca, cert, key })
        }
        _ => None,
    };
    let cfg = AgentConfig {
        name: a.name,
        state_dir: a.state_dir,
        socket: a.socket,
        listen: a.listen,
        peers,
        front_if: a.front_if,
        repl_if: a.repl_if,
        gate_output: if a.gate_output == "nfqueue" { rrc_agent::GateOutput::Nfqueue } else { rrc_agent::GateOutput::Xdp },
        gate_input: if a.gate_input == "observe" { rrc_agent::GateInput::Observe } else { rrc_agent::GateInput::Nfqueue },
        librrc: locate::find(locate::LIBRRC)?,
        restorer: locate::find(locate::RESTORER)?,
        cgroup_root: a.cgroup_root,
        netns_prefix: a.netns_prefix,
        log_dir: a.log_dir,
        auth,
        key_file: a.key_file,
        etcd: a.etcd.into_iter().filter(|e| !e.trim().is_empty()).collect(),
        etcd_tls,
    };
    rrc_agent::run(cfg)?;
    Ok(ExitCode::SUCCESS)
}
