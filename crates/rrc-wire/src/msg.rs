//! The JSON payloads of control frames. Field names are part of the
//! protocol (docs/protocol.md); add fields with `#[serde(default)]` so an
//! older peer's message still parses, bump `frame::VERSION` otherwise.

use rrc_gate::StreamSeed;
use serde::{Deserialize, Serialize};

/// Replication mode: checkpoint-only (NiLiCon/Remus semantics, issue 3),
/// or record/replay (RRC, issue 14: the process is recorded and its log
/// goes straight to the backup; so far the backup keeps it, while replies
/// still wait for the checkpoint and a failover restores it without replay).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Checkpoint,
    Rr,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Checkpoint => "checkpoint",
            Mode::Rr => "rr",
        }
    }
}

/// Primary agent -> backup, first frame of a log session (rr mode): the
/// connection then carries the service's record log, sealed frames
/// written by its process's library from frame number 1 on
/// ([`crate::logstream`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogStream {
    pub service: String,
}

/// Everything needed to run a service: what `rrc run` asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceSpec {
    pub name: String,
    /// IPv4 address clients use; held by the container's namespace.
    pub service_ip: String,
    pub primary: String,
    pub backup: String,
    pub mode: Mode,
    pub epoch_ms: u64,
    pub argv: Vec<String>,
    /// Extra environment for the command (the agent adds rrc's own).
    #[serde(default)]
    pub env: Vec<(String, String)>,
    /// Data directory as the application sees it (bind-mounted from the
    /// host's copy); its writes travel with the checkpoints.
    #[serde(default)]
    pub data_dir: Option<String>,
    /// Heartbeat period between the two agents.
    #[serde(default = "default_heartbeat_ms")]
    pub heartbeat_ms: u64,
    /// Silence after which the peer is declared failed.
    #[serde(default = "default_failure_ms")]
    pub failure_ms: u64,
    /// Host that becomes the new backup after a failover (re-protection).
    #[serde(default)]
    pub spare: Option<String>,
    /// How each epoch's checkpoint is taken (an older agent's spec, with
    /// no such field, meant fork).
    #[serde(default = "fork")]
    pub snapshot: Snapshot,
    /// rr mode: the backup replays committed epochs in a sandbox off the
    /// failover path and compares every output (shadow replay,
    /// crates/rrc-agent/src/shadow.rs).
    #[serde(default)]
    pub verify_replay: bool,
    /// With views in etcd (issue 15): the lease each host of the service's
    /// views acts under; what a view change that moves the service IP
    /// waits (rrc-view's lease.rs).
    #[serde(default = "default_lease_ms")]
    pub lease_ms: u64,
}

/// How an epoch's checkpoint is taken (docs/architecture.md, "The snapshot
/// by copy").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Snapshot {
    /// The quiesced process forks; the child writes the image.
    Fork,
    /// The pages are copied in the pause (pre-copied before it): a
    /// shorter pause (`RRC_DUMP_F_COPY`).
    Copy,
}

fn fork() -> Snapshot {
    Snapshot::Fork
}

impl Snapshot {
    pub fn as_str(self) -> &'static str {
        match self {
            Snapshot::Fork => "fork",
            Snapshot::Copy => "copy",
        }
    }
}

/// Why a [`ServiceSpec`] cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SpecError(pub String);

impl ServiceSpec {
    /// What every agent checks of a spec before it acts on it, whoever
    /// sent it (the CLI, or a peer's Replicate): names that become paths,
    /// namespace and interface names, addresses, and times in range.
    pub fn validate(&self) -> Result<(), SpecError> {
        let bad = |m: String| Err(SpecError(m));
        let name_ok = |n: &str| !n.is_empty() && n.len() <= 32 && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !name_ok(&self.name) {
            return bad(format!("service name {:?}: use 1-32 letters, digits, '-' or '_'", self.name));
        }
        for (what, h) in [("primary", Some(&self.primary)), ("backup", Some(&self.backup)), ("spare", self.spare.as_ref())] {
            if let Some(h) = h {
                if !crate::auth::valid_host(h) {
                    return bad(format!("{what} host {h:?}: use 1-64 letters, digits, '.', '-' or '_'"));
                }
            }
        }
        if self.backup == self.primary {
            return bad(format!("the backup must be another host than the primary ({})", self.primary));
        }
        if self.service_ip.parse::<std::net::Ipv4Addr>().is_err() {
            return bad(format!("service IP {:?}: expected an IPv4 address", self.service_ip));
        }
        if self.epoch_ms == 0 || self.epoch_ms > 60_000 {
            return bad(format!("epoch of {} ms: use 1..=60000", self.epoch_ms));
        }
        if self.heartbeat_ms == 0 || self.heartbeat_ms > 60_000 || self.failure_ms <= self.heartbeat_ms || self.failure_ms > 600_000 {
            return bad(format!("heartbeat {} ms, failure after {} ms: use 1..=60000 ms and a longer failure time (at most 600000 ms)", self.heartbeat_ms, self.failure_ms));
        }
        if !(500..=60_000).contains(&self.lease_ms) {
            return bad(format!("lease of {} ms: use 500..=60000 (renewed every quarter, each renewal may take 200 ms)", self.lease_ms));
        }
        if self.argv.is_empty() {
            return bad("no command given".into());
        }
        if let Some(d) = &self.data_dir {
            if !d.starts_with('/') || d.split('/').any(|c| c == "..") || d.contains('\0') {
                return bad(format!("data directory {d:?}: expected an absolute path without '..'"));
            }
        }
        if self.verify_replay && self.mode != Mode::Rr {
            return bad("shadow replay (--verify-replay) replays the record log: rr mode only".into());
        }
        Ok(())
    }
}

fn default_heartbeat_ms() -> u64 {
    30
}

fn default_failure_ms() -> u64 {
    90
}

fn default_lease_ms() -> u64 {
    1000
}

/// Fault injection, for tests and demos (`rrc fault`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// Backup: stop committing (and so releasing) checkpoints; they queue.
    StallCommits,
    /// Backup: commit the queued checkpoints and carry on.
    ResumeCommits,
    /// Primary: flip one byte of the next checkpoint's image before it is
    /// framed, so that the frames are sound and the image is not.
    CorruptNextCheckpoint,
    /// Backup, rr mode: alter the next output to a client kept in the
    /// record log (its CRC32C, after the gate was told of it): a failover
    /// that replays it diverges there.
    AlterNextLoggedOutput,
    /// Backup, rr mode: the next failover's first replay (returns in
    /// their recorded order) gets the log with one output's CRC32C
    /// altered, and diverges there; the paced replay after it gets the
    /// log as kept.
    AlterFirstReplay,
    /// Backup: the next failover's first restorer gets the committed image
    /// with one byte flipped (it refuses it before the process runs); the
    /// failover tries the next way, as after a divergence.
    DamageFirstRestore,
    /// Backup: send no heartbeat for [`MUTE_HEARTBEATS_MS`], alive
    /// otherwise: the primary declares it failed though it is not.
    MuteHeartbeats,
}

/// How long [`Fault::MuteHeartbeats`] silences the backup's heartbeats
/// (several failure timeouts of the default 90 ms).
pub const MUTE_HEARTBEATS_MS: u64 = 1000;

/// CLI -> agent, on the agent's Unix socket only (never between agents).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Request {
    Ping,
    /// Sent to the primary's agent.
    Run { spec: ServiceSpec },
    Status { name: Option<String> },
    /// Sent to every agent; each ends its part.
    Stop { name: String },
    Fault { name: String, fault: Fault },
    /// Backup: write the committed state as an image `rrc restore` accepts
    /// (DIR/checkpoint.rrc) and the data directory as DIR/data.
    Export { name: String, dir: String },
    /// The views etcd holds (one service's, or every one), read through
    /// this agent's etcd client (`rrc view list|show`).
    Views { name: Option<String> },
    /// Removes a service's view from etcd if it is still at `revision`
    /// (`rrc view remove`): refused while this agent has a part in it.
    RemoveView { name: String, revision: i64 },
}

/// Agent -> CLI: the answer to one [`Request`], whose reply type
/// ([`crate::reply`]) the CLI names when it reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response<T> {
    pub ok: bool,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default = "Option::default")]
    pub data: Option<T>,
}

impl<T> Response<T> {
    pub fn ok(data: T) -> Response<T> {
        Response { ok: true, error: None, data: Some(data) }
    }
    pub fn err(e: impl std::fmt::Display) -> Response<T> {
        Response { ok: false, error: Some(e.to_string()), data: None }
    }
}

/// A connection a new backup's gate joins (re-protection): what the gate
/// needs, and where the connection's byte counts start when its socket was
/// rebuilt by a failover (a repaired socket counts from its repair on, see
/// the backup's corrected TCP table).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnSeed {
    #[serde(flatten)]
    pub stream: StreamSeed,
    #[serde(default)]
    pub write_base: u32,
    #[serde(default)]
    pub read_base: u32,
}

/// Primary -> backup: first frame of a service's replication connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replicate {
    pub spec: ServiceSpec,
    /// The primary agent's address on the replication network: the backup
    /// routes the service IP there.
    pub primary_addr: String,
    /// UDP port of the primary's heartbeats (on `primary_addr`).
    #[serde(default)]
    pub primary_hb_port: u16,
    /// Established connections the new backup's gate joins (re-protection).
    #[serde(default)]
    pub seeds: Vec<ConnSeed>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicateReady {
    pub backup: String,
    /// The backup's address on the replication network: the primary sends
    /// the service's replies there.
    pub backup_addr: String,
    pub queue_num: u16,
    /// UDP port of the backup's heartbeats (on `backup_addr`).
    #[serde(default)]
    pub backup_hb_port: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointBegin {
    pub epoch: u64,
    pub image_id: String,
    pub full: bool,
    pub bytes: u64,
    /// The newest gate arrival number the primary had from the backup
    /// before it asked for this snapshot: every packet the gate numbered up
    /// to it was produced before the snapshot (docs/gate.md, rule 2).
    pub arrival_bound: u64,
    pub pause_us: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointEnd {
    pub epoch: u64,
    pub bytes: u64,
    /// CRC32C of the whole image as sent.
    pub crc32c: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ack {
    pub epoch: u64,
    pub committed: bool,
    #[serde(default)]
    pub error: Option<String>,
    /// The gate's newest arrival number when the ack was sent.
    pub arrival: u64,
    pub apply_us: u64,
    /// Connections whose start the gate saw since the last ack: the
    /// primary keeps them, so that a new backup can join them after this
    /// one fails.
    #[serde(default)]
    pub new_streams: Vec<StreamSeed>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    pub seq: u64,
    /// Backup -> primary: the gate's newest arrival number.
    #[serde(default)]
    pub arrival: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stop {
    pub reason: String,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn requests_have_stable_json() {
        let r = Request::Status { name: Some("kv".into()) };
        assert_eq!(serde_json::to_string(&r).unwrap(), r#"{"op":"status","name":"kv"}"#);
        let r = Request::Fault { name: "kv".into(), fault: Fault::StallCommits };
        assert_eq!(serde_json::to_string(&r).unwrap(), r#"{"op":"fault","name":"kv","fault":"stall-commits"}"#);
        let back: Request = serde_json::from_str(r#"{"op":"ping"}"#).unwrap();
        assert_eq!(back, Request::Ping);
    }

    /// A valid spec (the other modules' tests use it too).
    pub(crate) fn spec() -> ServiceSpec {
        ServiceSpec {
            name: "kv".into(),
            service_ip: "198.18.0.100".into(),
            primary: "a".into(),
            backup: "b".into(),
            mode: Mode::Checkpoint,
            epoch_ms: 30,
            argv: vec!["redis-server".into()],
            env: vec![],
            data_dir: None,
            heartbeat_ms: 30,
            failure_ms: 90,
            spare: None,
            snapshot: Snapshot::Copy,
            verify_replay: false,
            lease_ms: 1000,
        }
    }

    #[test]
    fn specs_that_would_become_paths_or_misbehave_are_refused() {
        assert_eq!(spec().validate(), Ok(()));
        type Case = (fn(&mut ServiceSpec), &'static str);
        let cases: Vec<Case> = vec![
            (|s| s.name = "../../etc".into(), "service name"),
            (|s| s.name = String::new(), "service name"),
            (|s| s.backup = "b/../x".into(), "backup host"),
            (|s| s.spare = Some("".into()), "spare host"),
            (|s| s.backup = "a".into(), "another host"),
            (|s| s.service_ip = "::1".into(), "service IP"),
            (|s| s.epoch_ms = 0, "epoch"),
            (|s| s.failure_ms = 30, "failure"),
            (|s| s.heartbeat_ms = 0, "heartbeat"),
            (|s| s.argv.clear(), "no command"),
            (|s| s.data_dir = Some("data".into()), "data directory"),
            (|s| s.data_dir = Some("/srv/../etc".into()), "data directory"),
        ];
        for (change, want) in cases {
            let mut s = spec();
            change(&mut s);
            let e = s.validate().unwrap_err();
            assert!(e.0.contains(want), "{e} lacks {want:?}");
        }
    }

    #[test]
    fn unknown_op_is_an_error() {
        assert!(serde_json::from_str::<Request>(r#"{"op":"format-disk"}"#).is_err());
    }
}
