//! The rrc lab (DESIGN §2.4): hosts on one machine. Network namespaces
//! stand in for machines (`rrc-lab-client`, `rrc-lab-a`, `rrc-lab-b`,
//! `rrc-lab-c`), joined by veths to two bridges (`front`, the client-facing
//! network, and `repl`, the replication network) in a switch namespace
//! `rrc-lab-switch`. Nothing is made in the root network namespace.
//!
//! - [`up`] builds it and records the topology in /run/rrc-lab/lab.json;
//! - [`exec`] runs a command on a host (its netns and cgroup);
//! - [`kill`] is a fail-stop of a host (links cut, every process killed);
//! - [`partition`] cuts and heals what one host hears, and freezes hosts;
//! - [`etcd`] is the lab's etcd cluster (a member on each server host);
//! - [`status`] reports the topology and what is alive;
//! - [`down`] removes everything, also after a crash.
//!
//! `up` starts one `rrc agent` per server host ([`start_agents`]).

pub mod cgroup;
pub mod down;
pub mod error;
pub mod etcd;
pub mod etcd_pki;
pub mod exec;
pub mod ip;
pub mod kill;
pub mod ns;
pub mod partition;
pub mod state;
pub mod topology;
pub mod up;

pub use down::{down, DownReport};
pub use error::LabError;
pub use exec::{command, exec};
pub use kill::{kill, KillReport};
pub use state::{load, status, HostStatus, LinkStatus, Status};
pub use topology::{agent_socket, host_def, host_names, Host, Lab, Link, Network, AGENT_PORT, HOSTS, LAB_JSON, SERVICE_IP_RANGE};
pub use up::{start_agents, up};
