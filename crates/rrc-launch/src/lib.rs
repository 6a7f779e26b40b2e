//! Launching restores (docs/restore.md): `rrc restore` and the agent's
//! failover both call [`restore`].
//!
//! [`restore`] finds the checkpoint chain (and verifies it when asked) or
//! takes the pipe one image arrives on ([`Images::Stream`]), starts `rrc-restore` as pid 1 of a new container (rrc-container: fresh
//! pid/mount/uts/ipc namespaces, the chosen network namespace, its cgroup,
//! the bind mounts) with its status pipe at fd 3, hands it the repaired TCP
//! sockets over a socketpair at fd 4 (`--repaired-fds 4`, one SCM_RIGHTS
//! message per socket whose data is the target fd number), reads its one
//! status record and waits until the restored library answers PING with
//! restored=1. It returns the container's record, the status, the PONG and
//! the timings of each step. On failure the container is removed; a
//! failure reported by rrc-restore itself is a [`RestorerFailed`] in the
//! error chain (`err.downcast_ref::<RestorerFailed>()`).
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! let req = rrc_launch::RestoreRequest {
//!     launch: rrc_launch::LaunchSpec {
//!         images: rrc_launch::Images::Chain { dir: "/var/lib/rrc/svc/committed".into(), verify: true },
//!         netns: Some("svc".into()),
//!         log: Some("/var/lib/rrc/svc/app.log".into()),
//!         binds: vec![],
//!         restorer: "/usr/lib/rrc/rrc-restore".into(),
//!         container: rrc_container::Config::default(),
//!         replay: None,
//!     },
//!     repaired: vec![], // (fd number in the process, socket made with TCP_REPAIR in netns "svc")
//!     pending_accept: vec![], // (listener's fd number, socket not yet accepted, made likewise)
//! };
//! let r = rrc_launch::restore(req)?;
//! println!("pid {} restored in {:?}", r.record.pid, r.timings);
//! # Ok(()) }
//! ```
//!
//! [`start`] and [`Started::finish`] are the same in two steps: the
//! container and rrc-restore are started first (a backup does it in
//! advance, off the failover's clock), the sockets handed over later.
//!
//! Also here, for other launchers: [`wait_for_pong`] (`rrc exec` uses it),
//! [`read_status`], [`log_tail`], and the status record [`RestoreStatus`].

mod launch;
mod repaired;
pub mod status;
mod wait;

pub use launch::{chain_images, pipe, pipe_holding, restore, start, Images, LaunchSpec, OutputPos, Races, ReplaySpec, RestoreRequest, Restored, RestorerFailed, Started, Timings, IMAGE_STREAM_FD, REPLAY_FD, STATUS_FD, RECORD_ENV, RECORD_FD, RECORD_FD_ENV, RECORD_FRAMED_ENV, RECORD_KEY_FD, RECORD_KEY_FD_ENV, RECORD_REPLACEABLE_ENV, RECORD_SEQ_ENV};
pub use repaired::{ACCEPT_QUEUE_TAG, REPAIRED_FD};
pub use status::RestoreStatus;
pub use wait::{log_tail, read_status, wait_for_pong, watch_replay, PING_TIMEOUT, STATUS_TIMEOUT};
