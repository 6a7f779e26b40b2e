//! The ways a failover brings the service up, in the order it tries them
//! (decisions only; failover.rs does the I/O).
//!
//! RRC §4.4 replays the log kept since the last committed checkpoint; a
//! replay can diverge where the application races on data without a lock
//! (RRC §4.7): memcached's LRU maintainer picks the lock it takes from
//! counters the workers update without one. Returning system calls in
//! their recorded order removes most of those divergences at little cost
//! (bench/README.md "replay": 8 in 1000 epochs left for memcached -t 4);
//! pacing the returns by their recorded gaps as well removed the rest (0
//! in 1000) but takes about as long as the recording did (RRC §6.3 found
//! pacing necessary for memcached). So a failover replays ordered first
//! and, only if that diverges, once more paced: the rare failover pays
//! the slower replay, the others do not. If that diverges too, the
//! service comes up from the checkpoint alone, every connection whose
//! client may hold bytes it does not reproduce reset, and the recovery
//! counts as failed.

/// One way to bring the service up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    /// Replay, system calls returning in their recorded order.
    ReplayOrdered,
    /// Replay again, the returns also paced by their recorded gaps.
    ReplayPaced,
    /// The committed checkpoint without replay.
    CheckpointOnly,
}

impl Recovery {
    /// The first attempt: a replay if there is a log to replay.
    pub fn first(have_log: bool) -> Recovery {
        if have_log {
            Recovery::ReplayOrdered
        } else {
            Recovery::CheckpointOnly
        }
    }

    /// What to try after this attempt's replay diverged or did not finish
    /// (None: nothing is left; the checkpoint alone cannot diverge).
    pub fn after_divergence(self) -> Option<Recovery> {
        match self {
            Recovery::ReplayOrdered => Some(Recovery::ReplayPaced),
            Recovery::ReplayPaced => Some(Recovery::CheckpointOnly),
            Recovery::CheckpointOnly => None,
        }
    }

    /// How the replay orders racing threads (None: no replay).
    pub fn races(self) -> Option<rrc_launch::Races> {
        match self {
            Recovery::ReplayOrdered => Some(rrc_launch::Races::Order),
            Recovery::ReplayPaced => Some(rrc_launch::Races::Pace),
            Recovery::CheckpointOnly => None,
        }
    }

    /// The longest wait a paced replay makes before one return: the
    /// recorded gaps include what the threads waited for (a client, a
    /// timer); past this they are cut short (bench/replay.py used 10 ms).
    pub fn pace_max_us(self) -> u32 {
        match self {
            Recovery::ReplayPaced => PACE_MAX_US,
            _ => 0,
        }
    }

    pub fn replays(self) -> bool {
        self.races().is_some()
    }

    /// The failover timeline's step once this attempt's service answers.
    pub fn restored_step(self) -> &'static str {
        match self {
            Recovery::ReplayOrdered => "restored, library answered",
            Recovery::ReplayPaced => "restored again to replay paced, library answered",
            Recovery::CheckpointOnly => "restored without replay (fallback), library answered",
        }
    }

    /// The step when this attempt's restore failed before its library
    /// answered (nothing of it ran), naming what follows.
    pub fn restore_failed_step(self) -> &'static str {
        match self {
            Recovery::ReplayOrdered => "the restore failed: restoring again to replay paced",
            Recovery::ReplayPaced => "the restore failed again: restoring the checkpoint without replay",
            Recovery::CheckpointOnly => "the restore failed",
        }
    }

    /// The step when this attempt's replay diverged, naming what follows.
    pub fn diverged_step(self) -> &'static str {
        match self {
            Recovery::ReplayOrdered => "the replay diverged: replaying again, paced",
            Recovery::ReplayPaced => "the paced replay diverged too: restoring the checkpoint without it",
            Recovery::CheckpointOnly => "the restore failed",
        }
    }
}

const PACE_MAX_US: u32 = 10_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failover_replays_ordered_then_paced_then_falls_back_to_the_checkpoint() {
        let mut seq = vec![Recovery::first(true)];
        while let Some(next) = seq.last().unwrap().after_divergence() {
            seq.push(next);
        }
        assert_eq!(seq, vec![Recovery::ReplayOrdered, Recovery::ReplayPaced, Recovery::CheckpointOnly]);
        assert_eq!(seq.iter().map(|r| r.races()).collect::<Vec<_>>(), vec![Some(rrc_launch::Races::Order), Some(rrc_launch::Races::Pace), None]);
        assert!(seq[0].pace_max_us() == 0 && seq[1].pace_max_us() > 0);
        assert!(seq[0].replays() && seq[1].replays() && !seq[2].replays());
    }

    #[test]
    fn without_a_log_only_the_checkpoint_is_tried() {
        assert_eq!(Recovery::first(false), Recovery::CheckpointOnly);
        assert_eq!(Recovery::CheckpointOnly.after_divergence(), None);
    }
}
