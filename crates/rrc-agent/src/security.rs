//! What the agent refused, and why (issue 12): every frame, handshake,
//! heartbeat or CLI client turned away is counted by cause, the first ones
//! of each cause logged, the last few kept for `rrc status`.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use rrc_wire::auth::{AuthMode, PeerAuth};
use rrc_wire::Rejection;
use rrc_wire::reply::{RejectionRecord, SecurityStatus};

use crate::lock;

/// Each cause is logged this many times, then every [`LOG_EVERY`]th.
const LOG_FIRST: u64 = 20;
const LOG_EVERY: u64 = 1000;
const RECENT: usize = 16;

#[derive(Default)]
pub struct SecurityStats {
    counts: Mutex<BTreeMap<Rejection, u64>>,
    recent: Mutex<VecDeque<RejectionRecord>>,
    sessions: AtomicU64,
}

impl SecurityStats {
    /// Counts and (rate-limited) logs one refusal.
    pub fn reject(&self, cause: Rejection, from: &str, detail: impl std::fmt::Display) {
        let n = {
            let mut c = lock(&self.counts);
            let n = c.entry(cause).or_insert(0);
            *n += 1;
            *n
        };
        let detail = detail.to_string();
        if n <= LOG_FIRST || n % LOG_EVERY == 0 {
            tracing::warn!(%from, cause = cause.as_str(), count = n, "refused: {detail}");
        }
        let mut r = lock(&self.recent);
        if r.len() == RECENT {
            r.pop_front();
        }
        r.push_back(RejectionRecord { at: crate::now_rfc3339(), cause, from: from.to_string(), detail });
    }

    /// Counts a session frame's error if it is a refusal (a bad MAC, a
    /// malformed frame...), not a plain end of the connection.
    pub fn count_wire(&self, e: &rrc_wire::WireError, from: &str, detail: impl std::fmt::Display) {
        if let Some(cause) = e.rejection() {
            self.reject(cause, from, detail);
        }
    }

    /// A peer session that passed its handshake.
    pub fn session_opened(&self) {
        self.sessions.fetch_add(1, Ordering::Relaxed);
    }

    pub fn count(&self, cause: Rejection) -> u64 {
        lock(&self.counts).get(&cause).copied().unwrap_or(0)
    }

    pub fn status(&self, auth: &PeerAuth, key_file: Option<&PathBuf>, listen: &str, socket: &str) -> SecurityStatus {
        let counts = lock(&self.counts).clone();
        let mode = auth.mode();
        SecurityStatus {
            authentication: mode,
            key_fingerprint: match auth {
                PeerAuth::Key(k) => Some(k.fingerprint()),
                PeerAuth::Unauthenticated => None,
            },
            key_file: key_file.map(|p| p.display().to_string()),
            warning: (mode == AuthMode::None).then(|| {
                format!(
                    "UNAUTHENTICATED: started with --insecure-no-auth; any host that reaches {listen} can send this agent checkpoints and stop or take over the replication of its services"
                )
            }),
            peer_listener: listen.to_string(),
            cli_socket: socket.to_string(),
            sessions_opened: self.sessions.load(Ordering::Relaxed),
            rejected_total: counts.values().sum(),
            rejected: counts,
            recent: lock(&self.recent).iter().cloned().collect(),
        }
    }
}

