//! What an agent answers the CLI: one type per request (issue 14 §7, "the
//! messages between agents typed end to end"). The field names are what
//! `rrc status --json` and the tests read; they are part of the protocol
//! (docs/protocol.md).
//!
//! | request  | reply                                   |
//! |----------|-----------------------------------------|
//! | Ping     | [`Pong`]                                |
//! | Run      | [`ServiceStatus`] of the new primary    |
//! | Status   | [`AgentStatus`]                         |
//! | Stop     | [`Stopped`]                             |
//! | Fault    | [`FaultSet`]                            |
//! | Export   | [`Exported`]                            |

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::auth::AuthMode;
use crate::msg::{Mode, ServiceSpec};
use crate::Rejection;

/// What an agent sends back, whatever the request (serialized only: the
/// CLI reads the one type its request gets, as the table above says).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Reply {
    Pong(Pong),
    Service(Box<ServiceStatus>),
    Agent(Box<AgentStatus>),
    Stopped(Stopped),
    Fault(FaultSet),
    Exported(Exported),
    Views(StoredViews),
    /// The view that was removed.
    ViewRemoved(StoredView),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pong {
    pub host: String,
    pub pid: u32,
}

/// A service's part on one host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Primary,
    Backup,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Primary => "primary",
            Role::Backup => "backup",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stopped {
    pub host: String,
    /// The part this host had; none if it had no such service.
    pub role: Option<Role>,
    pub stopped: Option<String>,
}

/// A fault armed or lifted; the field set is the fault's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultSet {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub armed: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stalled: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exported {
    pub image: String,
    pub data_dir: Option<String>,
    pub image_id: String,
    pub epoch: u64,
    pub bytes: u64,
}

/// Everything one agent has a part in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentStatus {
    pub host: String,
    pub agent_pid: u32,
    pub agent_cpu_ms: u64,
    pub agent_uptime_ms: u64,
    pub security: SecurityStatus,
    pub services: Vec<ServiceStatus>,
}

/// One refusal, for `rrc status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RejectionRecord {
    pub at: String,
    pub cause: Rejection,
    /// Who: a peer's address, a service, a CLI client's uid.
    pub from: String,
    pub detail: String,
}

/// The agent's security, as `rrc status --json` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecurityStatus {
    pub authentication: AuthMode,
    /// A hash naming the key (the same on agents that share it).
    pub key_fingerprint: Option<String>,
    pub key_file: Option<String>,
    /// Set when peers are not authenticated: what that exposes.
    pub warning: Option<String>,
    pub peer_listener: String,
    pub cli_socket: String,
    pub sessions_opened: u64,
    pub rejected_total: u64,
    pub rejected: BTreeMap<Rejection, u64>,
    pub recent: Vec<RejectionRecord>,
}

/// One service's part on one host: the primary's (replicating, or live
/// alone after a failover) or the backup's. The fields after `epoch_ms`
/// are those of the part; the others are left out of the JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServiceStatus {
    pub name: String,
    pub role: Role,
    pub host: String,
    pub service_ip: String,
    pub primary: String,
    /// None once a primary serves alone after a failover.
    pub backup: Option<String>,
    pub mode: Mode,
    pub epoch_ms: u64,
    pub checkpoints_committed: u64,
    /// Primary: the service's command, pid, network namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protected: Option<bool>,
    /// Primary: where its replies go (the backup's gate) and its queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_addr: Option<String>,
    /// Backup: where the primary is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_addr: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_num: Option<u16>,
    /// This host's heartbeat port (none before the heartbeat started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_port: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_heartbeat_port: Option<u16>,
    /// Primary: the failovers this service went through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failovers: Option<Vec<FailoverReport>>,
    pub stats: RoleStats,
    /// Backup: its gate's counters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateCounters>,
    /// The service's view in etcd and this host's lease in it (issue 15);
    /// None: the agents keep no views, nothing fences a host another
    /// believes failed.
    #[serde(default)]
    pub view: Option<ViewStatus>,
}

/// A service's view as this host holds it, and its lease (crates/rrc-view).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ViewStatus {
    pub number: u64,
    pub primary: String,
    pub backup: Option<String>,
    pub spares: Vec<String>,
    /// acting (holds the lease), fenced (lease ran out: acts in nothing),
    /// stood_down (a later view replaced this one).
    pub standing: String,
    pub lease_ms: u64,
    /// Left of this host's lease (0: ended).
    pub lease_remaining_ms: u64,
    pub renewals: u64,
    pub failed_renewals: u64,
    /// Times this host fenced itself (its lease near its end).
    #[serde(default)]
    pub fences: u64,
    /// Silences of the peer that started a view change.
    pub suspicions: u64,
    /// Of those, the ones where the peer was heard again before the
    /// change was applied (cancelled).
    pub false_suspicions: u64,
    /// View changes this host made.
    pub view_changes: u64,
    /// The etcd endpoints this agent uses.
    pub etcd: Vec<String>,
    /// Whether it reaches them over TLS with a client certificate (false:
    /// plain http, where anyone who reaches etcd could change a view).
    #[serde(default)]
    pub etcd_tls: bool,
}

/// A service's view as etcd holds it (`rrc view`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredView {
    pub service: String,
    pub key: String,
    /// The key's mod_revision: what `rrc view remove --revision` names.
    pub revision: i64,
    pub number: u64,
    pub primary: String,
    pub backup: Option<String>,
    pub spares: Vec<String>,
    pub lease_ms: u64,
}

/// The views found, and where (`rrc view list|show`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredViews {
    pub etcd: Vec<String>,
    pub views: Vec<StoredView>,
    /// Keys below rrc's prefix that hold no view rrc can read, with why.
    #[serde(default)]
    pub unreadable: Vec<(String, String)>,
}

impl ServiceStatus {
    /// The fields every part has, from the service's spec; the part's own
    /// are left empty for the caller to fill.
    pub fn of(spec: &ServiceSpec, role: Role, host: &str, stats: RoleStats) -> ServiceStatus {
        ServiceStatus {
            name: spec.name.clone(),
            role,
            host: host.to_string(),
            service_ip: spec.service_ip.clone(),
            primary: spec.primary.clone(),
            backup: Some(spec.backup.clone()),
            mode: spec.mode,
            epoch_ms: spec.epoch_ms,
            checkpoints_committed: 0,
            command: None,
            data_dir: None,
            pid: None,
            netns: None,
            protected: None,
            backup_addr: None,
            primary_addr: None,
            queue_num: None,
            heartbeat_port: None,
            primary_heartbeat_port: None,
            failovers: None,
            stats,
            gate: None,
            view: None,
        }
    }
}

/// A part's counters. Untagged: the role says which (a primary's has
/// `protected`, a backup's has not).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RoleStats {
    Primary(PrimaryStats),
    Backup(BackupStats),
}

impl RoleStats {
    pub fn state(&self) -> &str {
        match self {
            RoleStats::Primary(p) => &p.state,
            RoleStats::Backup(b) => &b.state,
        }
    }
    pub fn last_error(&self) -> Option<&str> {
        match self {
            RoleStats::Primary(p) => p.last_error.as_deref(),
            RoleStats::Backup(b) => b.last_error.as_deref(),
        }
    }
}

/// What `rrc status` shows of a primary.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PrimaryStats {
    pub state: String,
    pub protected: bool,
    pub checkpoints_committed: u64,
    pub checkpoints_rejected: u64,
    pub full_checkpoints: u64,
    pub last_epoch: u64,
    pub last_pause_us: u64,
    pub last_checkpoint_bytes: u64,
    pub last_checkpoint_pages: u64,
    /// Snapshot taken -> backup's ack received, for the last commit.
    pub replication_lag_ms: f64,
    /// The same for the last full checkpoint, and its size.
    pub last_full_lag_ms: f64,
    pub last_full_bytes: u64,
    /// Time since the last commit.
    pub since_last_commit_ms: Option<u64>,
    pub last_error: Option<String>,
    pub pause_us_p50: u64,
    pub pause_us_p99: u64,
    /// Where the last checkpoint's pause went (the library's DUMP reply).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pause: Option<PausePhases>,
}

/// The phases of one checkpoint pause (`struct rrc_ctl_dump_paused`), µs:
/// every thread parked, the dirty pages found, the thread states and the
/// rest captured, and (a copy snapshot) the dirty pages copied; with the
/// pre-copy done before the pause, the service running.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PausePhases {
    pub quiesce_us: u64,
    pub scan_us: u64,
    pub capture_us: u64,
    /// A fork snapshot's fork (0 for a copy snapshot).
    pub fork_us: u64,
    pub copy_us: u64,
    pub copied_pages: u64,
    pub precopy_us: u64,
    pub precopy_pages: u64,
    pub threads: u32,
}

/// What `rrc status` shows of a backup.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupStats {
    pub state: String,
    pub checkpoints_committed: u64,
    pub checkpoints_rejected: u64,
    pub last_committed_epoch: u64,
    pub last_apply_us: u64,
    pub last_error: Option<String>,
    pub pending: usize,
    pub stalled: bool,
    pub store_bytes: u64,
    pub received_bytes: u64,
    /// rr mode: the record log the primary's library sends (None in
    /// checkpoint mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<ShippedLogStats>,
    /// Shadow replay (`--verify-replay`; crates/rrc-agent/src/shadow.rs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<Box<ShadowStats>>,
}

/// Shadow replays at the backup: committed epochs replayed in a sandbox,
/// every output compared with the log. The divergence rate
/// (diverged / (verified + diverged)) is the standing measure of how
/// likely a failover's replay is to succeed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShadowStats {
    /// Replays that reached the later checkpoint's cut, every output equal.
    pub verified: u64,
    pub diverged: u64,
    /// Replays that could not be run (the sandbox, the restore), not counted
    /// in the rate.
    pub failed: u64,
    /// Captured checkpoints whose log segment was lost before its end came
    /// (the log lagged the next commit).
    pub skipped: u64,
    /// The last replay: events replayed, outputs compared, its time from
    /// the restore's start to its end.
    pub last_events: u64,
    pub last_outputs: u64,
    pub last_us: u64,
    /// What the capture of the last image cost the backup's commit path.
    pub last_capture_us: u64,
    pub last_divergence: Option<String>,
    pub last_error: Option<String>,
}

/// The record log at the backup (rr mode; crates/rrc-agent/src/shipped_log.rs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShippedLogStats {
    /// The log session: "waiting", "receiving", "ended".
    pub state: String,
    pub received_batches: u64,
    pub received_events: u64,
    /// Bytes of the log (its own encoding, without the frames).
    pub received_bytes: u64,
    /// Cuts received (one per checkpoint the library took).
    pub cuts: u64,
    /// Cuts received whose checkpoint is not committed yet.
    pub cuts_pending: u64,
    /// The sequence of the last committed checkpoint whose cut trimmed the log.
    pub last_cut_committed: Option<u64>,
    /// Commits whose cut had not arrived (the log lagged the checkpoint).
    pub commits_without_cut: u64,
    /// Batches kept: the log since the last committed cut.
    pub kept_batches: u64,
    pub kept_bytes: u64,
    pub trimmed_batches: u64,
    /// Outputs a release mark covered and the gate was told of; outputs
    /// waiting for their mark; outputs dropped unmarked
    /// (`crates/rrc-agent/src/marked_outputs.rs`).
    #[serde(default)]
    pub outputs_marked: u64,
    #[serde(default)]
    pub outputs_waiting: u64,
    #[serde(default)]
    pub outputs_dropped: u64,
    /// Outputs altered by the alter-next-logged-output fault (tests).
    #[serde(default)]
    pub outputs_altered: u64,
    pub last_error: Option<String>,
}

/// The backup gate's counters (rrc_gate::GateStats, as shown).
pub type GateCounters = rrc_gate::GateStats;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FailoverKind {
    /// The backup took over (docs/failover.md).
    #[serde(rename = "primary failure")]
    PrimaryFailure,
    /// The primary went on alone.
    #[serde(rename = "backup failure")]
    BackupFailure,
}

impl FailoverKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FailoverKind::PrimaryFailure => "primary failure",
            FailoverKind::BackupFailure => "backup failure",
        }
    }
}

/// One failover's timeline, kept by the service's primary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailoverReport {
    pub kind: FailoverKind,
    pub failed_host: String,
    pub at: String,
    /// Primary failure: the epoch of the checkpoint restored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch_restored: Option<u64>,
    /// Silence before the failure was declared.
    pub detection_ms: f64,
    pub steps: Vec<FailoverStep>,
    /// From the failure (the last sign of life) to the end of the last step.
    pub total_ms: f64,
    /// Primary failure: every connection of the checkpoint, repaired or not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connections: Option<Vec<ConnOutcome>>,
    /// Backup failure: what went wrong taking the service IP back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Set once a spare protects the service again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reprotected: Option<Reprotection>,
    /// rr mode: the replay of the log kept since the checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<FailoverReplay>,
    /// Primary failure: clients' SYNs the primary never answered, handed
    /// to the restored service at go-live (docs/tcp-repair.md
    /// "Handshakes").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syns_resent: Option<usize>,
    /// With views (issue 15): the view change the failover waited for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub view_change: Option<FailoverViewChange>,
}

/// The view change before a failover's steps (its times count from the
/// moment the failure was declared, as the steps' do).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailoverViewChange {
    /// The view installed.
    pub view: u64,
    /// When this host's compare-and-swap was known applied.
    pub installed_ms: f64,
    /// Then the wait for the old holder's lease to run out (0: the service
    /// IP stayed where it was).
    pub lease_wait_ms: f64,
}

/// What a failover's replay did (rr mode; runtime/lib/rr-conns.h).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FailoverReplay {
    /// Bytes of log replayed from (the committed checkpoint's cut on).
    pub log_bytes: u64,
    pub events: u64,
    /// Events after the log's consistent part (a crash's tail).
    pub events_dropped: u64,
    pub replay_ms: f64,
    /// Client connections the replay read or wrote, bytes taken off them
    /// and sent on them again.
    pub connections: u64,
    pub read_bytes: u64,
    pub sent_bytes: u64,
    /// Bytes that were not there, differed or could not be sent: those
    /// connections are out of step with their clients.
    pub faults: u64,
    /// Connections whose replay wrote less than the gate had released
    /// (the client holds bytes the replay did not reproduce).
    #[serde(default)]
    pub behind: u64,
    /// Replayed output bytes the clients had already (released by the
    /// gate before the failure): not sent again.
    #[serde(default)]
    pub skipped_bytes: u64,
    /// Connections reset at go-live, out of step or behind.
    #[serde(default)]
    pub reset: u64,
    /// The replay diverged (or did not finish): why. The failover then
    /// restored the checkpoint without replay, the connections it could
    /// not match reset; the recovery counts as failed.
    #[serde(default)]
    pub diverged: Option<String>,
    /// The first replay (returns in their recorded order) diverged, or
    /// its restore failed before the library answered, why: the failover
    /// replayed again with the returns paced as well
    /// (crates/rrc-agent/src/recovery.rs); this report is that replay's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retried: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailoverStep {
    pub step: String,
    pub at_ms: f64,
}

/// A connection of the restored checkpoint at a failover.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnOutcome {
    pub fd: i32,
    pub client: String,
    pub repaired: bool,
    pub reason: Option<String>,
    /// Not yet accepted by the application at the checkpoint (in the
    /// kernel's accept queue of the listener at `fd`): handed to its next
    /// accept() (runtime/lib/accept-queue.c).
    pub accept_queue: bool,
    /// Opened by its client after the checkpoint (handed over like those
    /// of the accept queue; in rr mode to the replayed accept that took it
    /// on the primary).
    #[serde(default)]
    pub after_checkpoint: bool,
    /// Not repaired, and reset: its client got an RST at once.
    #[serde(default)]
    pub reset: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reprotection {
    pub new_backup: Option<String>,
    pub at: String,
    pub ms: f64,
    /// After a backup failure: the copy of the data directory made for the
    /// spare while the service was held.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub data_copy: Option<DataCopyReport>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataCopyReport {
    pub data_copy_pause_ms: f64,
    pub data_copy_ms: f64,
    pub data_copy_quiesce_ms: f64,
    pub data_copy_bytes: u64,
    pub data_copy_files: u64,
    pub data_copy_threads: u64,
    pub data_copy_discarded_ops: u64,
    pub data_copy_hold_rtt_ms: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn primary_status() -> ServiceStatus {
        let spec = crate::msg::tests::spec();
        let stats = RoleStats::Primary(PrimaryStats { state: "protected".into(), protected: true, ..Default::default() });
        ServiceStatus {
            checkpoints_committed: 3,
            command: Some(spec.argv.clone()),
            pid: Some(42),
            netns: Some("rrc-kv".into()),
            protected: Some(true),
            backup_addr: Some("10.0.0.2".into()),
            queue_num: Some(100),
            failovers: Some(vec![]),
            ..ServiceStatus::of(&spec, Role::Primary, "a", stats)
        }
    }

    #[test]
    fn a_status_round_trips_and_keeps_its_role_s_stats() {
        let p = primary_status();
        let back: ServiceStatus = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
        assert_eq!(back, p);
        let mut b = p.clone();
        b.role = Role::Backup;
        b.stats = RoleStats::Backup(BackupStats { state: "waiting".into(), pending: 2, ..Default::default() });
        b.gate = Some(GateCounters { streams: 5, ..Default::default() });
        let back: ServiceStatus = serde_json::from_str(&serde_json::to_string(&b).unwrap()).unwrap();
        assert_eq!(back, b, "a backup's stats must not parse as a primary's");
    }

    #[test]
    fn the_json_has_the_names_the_cli_and_tests_read() {
        let v = serde_json::to_value(primary_status()).unwrap();
        assert_eq!(v["role"], "primary");
        assert_eq!(v["mode"], "checkpoint");
        assert_eq!(v["stats"]["protected"], true);
        assert!(v.get("gate").is_none() && v.get("primary_addr").is_none(), "a primary's status has no backup fields: {v}");
        let f = FailoverReport {
            kind: FailoverKind::PrimaryFailure,
            failed_host: "a".into(),
            at: "now".into(),
            epoch_restored: Some(7),
            detection_ms: 90.0,
            steps: vec![FailoverStep { step: "restored".into(), at_ms: 1.5 }],
            total_ms: 200.0,
            connections: Some(vec![]),
            error: None,
            replay: None,
            syns_resent: Some(2),
            view_change: Some(FailoverViewChange { view: 2, installed_ms: 12.0, lease_wait_ms: 1011.0 }),
            reprotected: Some(Reprotection {
                new_backup: Some("c".into()),
                at: "later".into(),
                ms: 3.0,
                data_copy: Some(DataCopyReport {
                    data_copy_pause_ms: 1.0,
                    data_copy_ms: 2.0,
                    data_copy_quiesce_ms: 0.5,
                    data_copy_bytes: 10,
                    data_copy_files: 1,
                    data_copy_threads: 4,
                    data_copy_discarded_ops: 0,
                    data_copy_hold_rtt_ms: 0.2,
                }),
            }),
        };
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(v["kind"], "primary failure");
        assert_eq!(v["reprotected"]["data_copy_bytes"], 10, "the copy's report sits beside new_backup: {v}");
        assert_eq!(serde_json::from_value::<FailoverReport>(v).unwrap(), f);
    }

    #[test]
    fn a_reply_of_another_shape_is_refused() {
        assert!(serde_json::from_str::<Pong>(r#"{"host":"a"}"#).is_err());
        assert!(serde_json::from_str::<Exported>(r#"{"image":"x","data_dir":null,"image_id":"i","epoch":"one","bytes":1}"#).is_err());
    }
}
