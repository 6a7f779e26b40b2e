//! Shadow replay (issue 14 §6; `rrc run --verify-replay`, which none of the
//! papers' systems has): the backup replays committed epochs in a sandbox,
//! off the failover path, and the replay compares every output with the
//! log. Its divergence rate is the standing measure of how likely a
//! failover's replay is to succeed, without injecting a fault.
//!
//! One replay at a time, a capture at most every second of epochs (every
//! epoch of 1 s or more; one in ten of 100 ms: a capture copies the whole
//! image):
//! 1. after the commit of checkpoint N the backup writes the committed
//!    image (the store's state, under an id of its own) to a file, in the
//!    one of two slots that no replay is reading;
//! 2. at the commit of the next checkpoint M, before the log before M's
//!    cut is trimmed, it takes the log from N's cut to M's (`ShippedLog::
//!    segment`); without M's cut (the log lags the checkpoint), or with a
//!    replay still running, the round is skipped;
//! 3. a thread restores N in a network namespace of its own, with nothing
//!    routed to it, and replays the segment to M's cut (`--replay-to`, the
//!    connections stand-ins): every output checked against the log's offset
//!    and CRC32C, every read fed from the log. Live at M's cut: verified;
//!    stopped: diverged, with the replay's report. The sandbox is removed.
//!
//! The decisions are [`ShadowCore`]'s, without I/O (unit-tested below);
//! [`Shadow`] carries them out.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rrc_image::ImageId;
use rrc_wire::reply::ShadowStats;

use crate::lock;

/// How a shadow replay ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Verified { events: u64, outputs: u64, us: u64 },
    Diverged { why: String, events: u64, us: u64 },
    /// Could not be run (not counted in the divergence rate).
    Failed(String),
}

/// A captured image: the checkpoint it is, the id it is restored under,
/// the slot (one of two files) it is in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Captured {
    pub from: ImageId,
    pub as_id: ImageId,
    pub slot: usize,
}

/// What the backup does about shadow replays at each commit.
pub struct ShadowCore {
    /// A capture at most every this many commits.
    every: u64,
    since_capture: u64,
    captured: Option<Captured>,
    /// The slot of the replay running.
    running: Option<usize>,
    stats: ShadowStats,
}

impl ShadowCore {
    pub fn new(every_commits: u64) -> ShadowCore {
        ShadowCore { every: every_commits.max(1), since_capture: u64::MAX, captured: None, running: None, stats: ShadowStats::default() }
    }

    /// At the commit of `image`, before the log is trimmed: the capture
    /// whose segment (its checkpoint to this one) to take now, if one
    /// waits for a later cut and no replay runs. A capture that cannot
    /// run is dropped (its segment is trimmed at this commit): skipped.
    pub fn segment_wanted(&mut self, image: &ImageId) -> Option<Captured> {
        self.since_capture = self.since_capture.saturating_add(1);
        let c = self.captured.filter(|c| c.from != *image)?;
        self.captured = None;
        if self.running.is_some() {
            self.stats.skipped += 1;
            return None;
        }
        Some(c)
    }

    /// The segment of `c` was taken (its replay starts) or was not there
    /// (the log had not brought this commit's cut yet: skipped).
    pub fn segment_taken(&mut self, c: Captured, taken: bool) {
        if taken {
            self.running = Some(c.slot);
        } else {
            self.stats.skipped += 1;
        }
    }

    /// After a commit: the slot to capture the committed image into now,
    /// if a capture is due (none waiting, enough commits since the last).
    pub fn capture_due(&self) -> Option<usize> {
        let free = if self.running == Some(0) { 1 } else { 0 };
        (self.captured.is_none() && self.since_capture >= self.every).then_some(free)
    }

    pub fn captured(&mut self, c: Captured, took: Duration) {
        self.captured = Some(c);
        self.since_capture = 0;
        self.stats.last_capture_us = took.as_micros() as u64;
    }

    pub fn capture_failed(&mut self, why: String) {
        self.since_capture = 0;
        self.stats.failed += 1;
        self.stats.last_error = Some(why);
    }

    pub fn finished(&mut self, o: Outcome) {
        self.running = None;
        match o {
            Outcome::Verified { events, outputs, us } => {
                self.stats.verified += 1;
                (self.stats.last_events, self.stats.last_outputs, self.stats.last_us) = (events, outputs, us);
            }
            Outcome::Diverged { why, events, us } => {
                self.stats.diverged += 1;
                (self.stats.last_events, self.stats.last_outputs, self.stats.last_us) = (events, 0, us);
                self.stats.last_divergence = Some(why);
            }
            Outcome::Failed(why) => {
                self.stats.failed += 1;
                self.stats.last_error = Some(why);
            }
        }
    }

    pub fn stats(&self) -> ShadowStats {
        self.stats.clone()
    }
}

/// A capture copies the whole image: at most one per this much time of
/// epochs (every epoch of 1 s or more; one in ten of 100 ms).
pub const SHADOW_EVERY: Duration = Duration::from_secs(1);
/// A shadow replay's watchdog and its longest run.
const STALL_MS: u32 = 2000;
const WAIT: Duration = Duration::from_secs(20);

/// What a shadow replay needs of the agent.
pub struct ShadowEnv {
    pub service: String,
    pub service_ip: String,
    /// The network namespace made for each replay (removed after).
    pub netns: String,
    /// Where the captured images are written (DIR/0/checkpoint.rrc and
    /// DIR/1/: one replayed while the next is captured).
    pub dir: PathBuf,
    pub epoch: Duration,
    pub restorer: PathBuf,
    pub container: rrc_container::Config,
    pub log: PathBuf,
    /// The service's data directory (its path in the container): each
    /// capture copies the committed copy beside the image, and the
    /// replay runs on that copy of its own.
    pub data_dir: Option<String>,
}

/// The shadow replays of one backup: the core's decisions carried out.
pub struct Shadow {
    core: Mutex<ShadowCore>,
    env: ShadowEnv,
    /// The replay running: its container, removed by [`Shadow::stop`].
    running: Mutex<Option<rrc_container::Record>>,
    stopping: std::sync::atomic::AtomicBool,
}

impl Shadow {
    pub fn new(env: ShadowEnv) -> Shadow {
        let every = SHADOW_EVERY.as_micros().div_ceil(env.epoch.as_micros().max(1)) as u64;
        Shadow { core: Mutex::new(ShadowCore::new(every)), env, running: Mutex::new(None), stopping: false.into() }
    }

    fn slot_dir(&self, slot: usize) -> PathBuf {
        self.env.dir.join(slot.to_string())
    }

    pub fn stats(&self) -> ShadowStats {
        lock(&self.core).stats()
    }

    /// At the commit of `image`, before `log` is trimmed to its cut: takes
    /// the segment a captured image waits for and starts its replay.
    pub fn before_trim(self: &Arc<Shadow>, image: &ImageId, log: &crate::shipped_log::ShippedLog) {
        let mut core = lock(&self.core);
        let Some(c) = core.segment_wanted(image) else { return };
        let segment = log.segment(&c.from, c.as_id, image);
        core.segment_taken(c, segment.is_some());
        drop(core);
        let Some(segment) = segment else {
            tracing::info!(service = %self.env.service, "shadow replay skipped: the log had not brought the cut of the next checkpoint at its commit");
            return;
        };
        let (me, to) = (self.clone(), *image);
        let spawned = std::thread::Builder::new().name("shadow-replay".into()).spawn(move || {
            let o = me.run(c.slot, &segment, to).unwrap_or_else(|e| Outcome::Failed(format!("{e:#}")));
            match &o {
                Outcome::Diverged { why, .. } => tracing::error!(service = %me.env.service, "shadow replay DIVERGED: {why}"),
                Outcome::Failed(why) => tracing::warn!(service = %me.env.service, "shadow replay not run: {why}"),
                Outcome::Verified { events, us, .. } => tracing::debug!(service = %me.env.service, events, us, "shadow replay verified"),
            }
            lock(&me.core).finished(o);
        });
        if let Err(e) = spawned {
            lock(&self.core).finished(Outcome::Failed(format!("starting the shadow replay's thread: {e}")));
        }
    }

    /// After a commit: writes the committed image for a later replay, if
    /// one is due (the caller holds the store: nothing changes it
    /// meanwhile), and with a data directory a copy of its committed copy
    /// (`data`, None if that is not consistent: no capture), which the
    /// committer changes only at the next commit, after this returns.
    pub fn after_commit(&self, store: &rrc_store::Store, data: Option<&std::path::Path>) {
        if self.stopping.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let Some(slot) = lock(&self.core).capture_due() else { return };
        let Some(from) = store.committed().map(|h| h.image_id) else { return };
        let t0 = Instant::now();
        let captured = (|| -> Result<ImageId> {
            let as_id = rrc_image::ImageId::random().context("an id for the shadow's image")?;
            let dir = self.slot_dir(slot);
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let path = dir.join("checkpoint.rrc");
            let f = std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
            store.stream_image_as(std::io::BufWriter::with_capacity(1 << 20, f), as_id).context("writing the committed image")?;
            if self.env.data_dir.is_some() {
                let committed = data.context("the data directory's committed copy is not consistent")?;
                let copy = dir.join("data");
                let _ = std::fs::remove_dir_all(&copy); // the last replay's, written on
                std::fs::create_dir_all(&copy).with_context(|| format!("creating {}", copy.display()))?;
                crate::copy_tree(&committed.join("."), &copy).context("copying the committed data directory")?;
            }
            Ok(as_id)
        })();
        let mut core = lock(&self.core);
        match captured {
            Ok(as_id) => core.captured(Captured { from, as_id, slot }, t0.elapsed()),
            Err(e) => core.capture_failed(format!("{e:#}")),
        }
    }

    /// Restores the captured image in a sandbox and replays `segment` to
    /// the cut of `to`.
    fn run(&self, slot: usize, segment: &[u8], to: ImageId) -> Result<Outcome> {
        let t0 = Instant::now();
        let netns = &self.env.netns;
        let _ = crate::net::ip(&["netns", "del", netns]); // left by an agent that died
        crate::net::ip(&["netns", "add", netns]).context("the sandbox's network namespace")?;
        let result = (|| -> Result<Outcome> {
            crate::net::ip(&["-n", netns, "link", "set", "lo", "up"])?;
            // the listeners bind where they did; nothing is routed here
            crate::net::ip(&["-n", netns, "addr", "add", &format!("{}/32", self.env.service_ip), "dev", "lo"])?;
            let log = crate::staging::memfd("rrc-shadow-log")?;
            std::io::Write::write_all(&mut &log, segment).context("writing the segment")?;
            let replay = rrc_launch::ReplaySpec {
                log: std::os::fd::OwnedFd::from(log),
                timeout_ms: STALL_MS,
                to: Some(to.0),
                until: None,
                races: rrc_launch::Races::Order,
                pace_max_us: 0,
                connections: false,
                record: false,
            };
            let launch = rrc_launch::LaunchSpec {
                images: rrc_launch::Images::Chain { dir: self.slot_dir(slot), verify: false },
                netns: Some(netns.clone()),
                log: Some(self.env.log.clone()),
                // the capture's copy: the replay writes on it, nothing else reads it
                binds: self
                    .env
                    .data_dir
                    .iter()
                    .map(|target| rrc_container::Bind { host: self.slot_dir(slot).join("data"), target: target.into() })
                    .collect(),
                restorer: self.env.restorer.clone(),
                container: self.env.container.clone(),
                replay: Some(replay),
            };
            let restored = rrc_launch::restore(rrc_launch::RestoreRequest { launch, repaired: Vec::new(), pending_accept: Vec::new() })
                .context("restoring the captured checkpoint")?;
            *lock(&self.running) = Some(restored.record.clone());
            let watched = rrc_launch::watch_replay(&rrc_container::control_socket_of(restored.record.pid), WAIT);
            let us = t0.elapsed().as_micros() as u64;
            Ok(match watched {
                Ok(st) if st.phase == rrc_control::ReplayPhase::Live => Outcome::Verified { events: st.events_done, outputs: st.outputs, us },
                Ok(st) => Outcome::Diverged { why: st.report, events: st.events_done, us },
                Err(e) => Outcome::Diverged { why: format!("the replay did not finish: {e:#}"), events: 0, us },
            })
        })();
        self.remove_sandbox();
        result
    }

    fn remove_sandbox(&self) {
        if let Some(r) = lock(&self.running).take() {
            if let Err(e) = rrc_container::kill(&self.env.container, &r) {
                tracing::warn!(service = %self.env.service, "removing the shadow replay's container: {e}");
            }
        }
        let _ = crate::net::ip(&["netns", "del", &self.env.netns]);
    }

    /// The backup ends: no capture any more, a replay running is removed
    /// (its thread then finds its container gone), the image file too.
    pub fn stop(&self) {
        self.stopping.store(true, std::sync::atomic::Ordering::Relaxed);
        self.remove_sandbox();
        let _ = std::fs::remove_dir_all(&self.env.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(b: u8) -> ImageId {
        ImageId([b; 16])
    }

    fn cap(from: u8, slot: usize) -> Captured {
        Captured { from: id(from), as_id: id(from + 100), slot }
    }

    /// One capture per commit (epochs of 1 s): each replay runs while the
    /// next image is captured into the other slot, every epoch verified.
    #[test]
    fn with_long_epochs_every_epoch_is_replayed() {
        let mut c = ShadowCore::new(1);
        assert_eq!(c.segment_wanted(&id(1)), None, "nothing captured: no segment");
        assert_eq!(c.capture_due(), Some(0));
        c.captured(cap(1, 0), Duration::from_millis(30));
        assert_eq!(c.capture_due(), None, "one waits already");
        // commit 2: image 1's segment, its replay in slot 0; image 2 into slot 1
        assert_eq!(c.segment_wanted(&id(2)), Some(cap(1, 0)));
        c.segment_taken(cap(1, 0), true);
        assert_eq!(c.capture_due(), Some(1), "the slot the replay does not use");
        c.captured(cap(2, 1), Duration::from_millis(30));
        c.finished(Outcome::Verified { events: 40, outputs: 7, us: 12_000 });
        // commit 3: image 2's segment
        assert_eq!(c.segment_wanted(&id(3)), Some(cap(2, 1)));
        c.segment_taken(cap(2, 1), true);
        assert_eq!(c.capture_due(), Some(0));
        let s = c.stats();
        assert_eq!((s.verified, s.diverged, s.skipped, s.last_events, s.last_outputs, s.last_capture_us), (1, 0, 0, 40, 7, 30_000));
    }

    /// Short epochs: a capture every `every` commits; a capture whose
    /// segment comes while a replay still runs, or without its cut, is
    /// skipped.
    #[test]
    fn captures_are_spaced_and_what_cannot_run_is_skipped() {
        let mut c = ShadowCore::new(3);
        c.captured(cap(1, 0), Duration::ZERO);
        assert_eq!(c.segment_wanted(&id(1)), None, "its own commit is no end");
        assert_eq!(c.segment_wanted(&id(2)), Some(cap(1, 0)));
        c.segment_taken(cap(1, 0), true);
        assert_eq!(c.capture_due(), None, "two commits since the capture");
        c.segment_wanted(&id(3));
        assert_eq!(c.capture_due(), Some(1), "three");
        c.captured(cap(3, 1), Duration::ZERO);
        // the replay of 1 still runs at the next commit: 3 is dropped
        assert_eq!(c.segment_wanted(&id(4)), None);
        assert_eq!(c.stats().skipped, 1);
        c.finished(Outcome::Diverged { why: "thread 3 at event #5".into(), events: 5, us: 1_000 });
        for i in 5..8 {
            c.segment_wanted(&id(i));
        }
        assert_eq!(c.capture_due(), Some(0));
        c.captured(cap(7, 0), Duration::ZERO);
        assert_eq!(c.segment_wanted(&id(8)), Some(cap(7, 0)));
        c.segment_taken(cap(7, 0), false);
        c.capture_failed("disk full".into());
        c.finished(Outcome::Failed("no netns".into()));
        let s = c.stats();
        assert_eq!((s.verified, s.diverged, s.failed, s.skipped), (0, 1, 2, 2));
        assert_eq!(s.last_divergence.as_deref(), Some("thread 3 at event #5"));
        assert_eq!(s.last_error.as_deref(), Some("no netns"));
    }
}
