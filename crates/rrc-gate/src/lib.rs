//! The backup agent's packet gate (DESIGN.md §2.3 "gate"; RRC §3 and §4.3
//! PackRec/PackGate; NiLiCon §II-A/§IV output commit). See docs/gate.md.
//!
//! The backup routes the service's traffic; iptables sends every forwarded
//! packet to or from the service IP to an NFQUEUE, and the service's
//! output is taken before that by XDP and AF_XDP where the gate is told so
//! (`OutputPath::Xdp`). The gate
//! * records what clients send, per TCP stream (ISNs, SYN options, every
//!   payload byte the server app has not yet read, the client's ACK), and
//!   lets it through at once (or reads its copy while the kernel forwards
//!   it, where told so: `InputPath::Observed`);
//! * holds what the service sends (data, FIN, RST, non-TCP) until a commit
//!   of a checkpoint taken after it was produced covers it, then lets it
//!   through in arrival order; pure ACKs and SYN-ACKs pass at once;
//! * keeps released server bytes until the client acknowledges them.
//!
//! Layers: `packet` (parsing), `record` (sequence arithmetic, byte
//! records), `stream` and `core` (the decisions, no I/O: `GateCore`),
//! `nfqueue` (netlink), `bpf` (programs and maps by bpf(2)), `xdp`, `xsk`
//! and `ipsend` (the AF_XDP output path: the server's packets taken at
//! XDP, sent on by an AF_XDP or a raw socket), `observe` (the observed
//! input path: clients' frames copied by a tc program into a ring),
//! `gate` (`Gate`: the reader thread and the handle).

pub mod bpf;
pub mod core;
pub mod error;
pub mod gate;
pub mod ipsend;
pub mod logged;
pub mod netif;
pub mod nfqueue;
pub mod observe;
pub mod packet;
pub mod record;
pub mod stream;
#[cfg(test)]
mod testkit;
pub mod xdp;
pub mod xsk;

pub use crate::core::{Commit, Decision, GateCore, GateLimits, GateStats, ObservedInputStats, ServerStream, StreamSeed, XdpPathStats};
pub use crate::error::GateError;
pub use crate::gate::{Gate, GateConfig, InputPath, OutputPath};
pub use crate::logged::{LogCoverStats, LoggedOutput};
pub use crate::packet::TcpOptions;
pub use crate::stream::{PacketId, StreamData, StreamSnapshot};
