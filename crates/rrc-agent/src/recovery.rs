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
//! and, only if that diverges, paced: the rare failover pays the slower
//! replay, the others do not. A divergence is a matter of timing, not of
//! the log (bench/replay.py: the memcached epochs that diverged ordered
//! did so in 3 and 5 of their 20 replays, the others in none), so a
//! paced replay that diverges is tried once more (a campaign saw the
//! ordered and the paced replay of one failover both diverge). If that
//! diverges too, the service comes up from the checkpoint alone, every
//! connection whose client may hold bytes it does not reproduce reset,
//! and the recovery counts as failed.

/// One way to bring the service up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    /// Replay, system calls returning in their recorded order.
    ReplayOrdered,
    /// Replay again, the returns also paced by their recorded gaps.
    ReplayPaced,
    /// The paced replay once more.
    ReplayPacedAgain,
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
            Recovery::ReplayPaced => Some(Recovery::ReplayPacedAgain),
            Recovery::ReplayPacedAgain => Some(Recovery::CheckpointOnly),
            Recovery::CheckpointOnly => None,
        }
    }

    /// How the replay orders racing threads (None: no replay).
    pub fn races(self) -> Option<rrc_launch::Races> {
        match self {
            Recovery::ReplayOrdered => Some(rrc_launch::Races::Order),
            Recovery::ReplayPaced | Recovery::ReplayPacedAgain => Some(rrc_launch::Races::Pace),
            Recovery::CheckpointOnly => None,
        }
    }

    /// The longest wait a paced replay makes before one return: the
    /// recorded gaps include what the threads waited for (a client, a
    /// timer); past this they are cut short (bench/replay.py used 10 ms).
    pub fn pace_max_us(self) -> u32 {
        match self {
            Recovery::ReplayPaced | Recovery::ReplayPacedAgain => PACE_MAX_US,
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
            Recovery::ReplayPacedAgain => "restored to replay paced once more, library answered",
            Recovery::CheckpointOnly => "restored without replay (fallback), library answered",
        }
    }

    /// The step when this attempt's restore failed before its library
    /// answered (nothing of it ran), naming what follows.
    pub fn restore_failed_step(self) -> &'static str {
        match self {
            Recovery::ReplayOrdered => "the restore failed: restoring again to replay paced",
            Recovery::ReplayPaced => "the restore failed again: restoring to replay paced once more",
            Recovery::ReplayPacedAgain => "the restore failed again: restoring the checkpoint without replay",
            Recovery::CheckpointOnly => "the restore failed",
        }
    }

    /// The step when this attempt's replay diverged, naming what follows.
    pub fn diverged_step(self) -> &'static str {
        match self {
            Recovery::ReplayOrdered => "the replay diverged: replaying again, paced",
            Recovery::ReplayPaced => "the paced replay diverged too: replaying paced once more",
            Recovery::ReplayPacedAgain => "the paced replay diverged again: restoring the checkpoint without it",
            Recovery::CheckpointOnly => "the restore failed",
        }
    }
}

const PACE_MAX_US: u32 = 10_000;

/// How one attempt at bringing the service up ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptEnd {
    /// The service answers, its connections rebuilt: it can go live.
    Up,
    /// The replay diverged or did not finish (nothing of it reached a
    /// client past what the gate had released).
    Diverged,
    /// The restored process failed before its library answered (a crash,
    /// a refused image): nothing of it ran.
    RestoreFailed,
    /// Anything else (the container, the network): not worth another try.
    Failed,
}

/// What a failover does after an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    GoLive,
    /// Another attempt, after the timeline's step `step`.
    Retry { step: &'static str, attempt: NextAttempt },
    /// The failover fails. `step`: the timeline's, when the attempt's end
    /// has one (a divergence with nothing left to try).
    GiveUp { step: Option<&'static str> },
}

/// The next attempt, as the one before leaves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextAttempt {
    pub recovery: Recovery,
    /// With the log: a replay again.
    pub with_log: bool,
    /// Under the same image id: a replay's log names the image it
    /// continues by its cut; the checkpoint alone is streamed under a
    /// fresh one.
    pub same_image_id: bool,
    /// The connections an earlier replay wrote past what the gate had
    /// released are reset: only a replay reproduces those bytes (each
    /// checked against the log's CRC before it went out, so that its
    /// client drops them as duplicates); the checkpoint alone does not.
    pub reset_written_past_release: bool,
}

impl Recovery {
    /// The failover's decision once this attempt ended so. A restore
    /// that failed before its library answered ran nothing: the next way
    /// is tried as after a divergence (a crash that comes again, or a
    /// refused image, ends with the checkpoint's attempt, which has no
    /// next).
    pub fn after(self, end: AttemptEnd) -> Next {
        let step = match end {
            AttemptEnd::Up => return Next::GoLive,
            AttemptEnd::Failed => return Next::GiveUp { step: None },
            AttemptEnd::RestoreFailed if self.after_divergence().is_none() => return Next::GiveUp { step: None },
            AttemptEnd::RestoreFailed => self.restore_failed_step(),
            AttemptEnd::Diverged => self.diverged_step(),
        };
        match self.after_divergence() {
            None => Next::GiveUp { step: Some(step) },
            Some(next) => Next::Retry {
                step,
                attempt: NextAttempt {
                    recovery: next,
                    with_log: next.replays(),
                    same_image_id: next.replays(),
                    reset_written_past_release: !next.replays(),
                },
            },
        }
    }
}

/// The failover timeline's replay report: the replay that went live, or,
/// when the checkpoint alone did (`went_live` None), the last diverged
/// replay's, marked diverged (the recovery failed). After an ordered
/// replay that diverged, `retried` says why. `divergences`: every
/// attempt that diverged, in order, with why and its report.
pub fn timeline_replay(
    went_live: Option<rrc_wire::reply::FailoverReplay>,
    divergences: &[(Recovery, String, rrc_wire::reply::FailoverReplay)],
) -> Option<rrc_wire::reply::FailoverReplay> {
    let Some((_, why, last)) = divergences.last() else {
        return went_live;
    };
    let mut r = went_live.unwrap_or_else(|| rrc_wire::reply::FailoverReplay { diverged: Some(why.clone()), ..last.clone() });
    r.retried = divergences.iter().find(|(rc, _, _)| *rc == Recovery::ReplayOrdered).map(|(_, w, _)| w.clone());
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failover_replays_ordered_then_paced_then_falls_back_to_the_checkpoint() {
        let mut seq = vec![Recovery::first(true)];
        while let Some(next) = seq.last().unwrap().after_divergence() {
            seq.push(next);
        }
        assert_eq!(seq, vec![Recovery::ReplayOrdered, Recovery::ReplayPaced, Recovery::ReplayPacedAgain, Recovery::CheckpointOnly]);
        assert_eq!(
            seq.iter().map(|r| r.races()).collect::<Vec<_>>(),
            vec![Some(rrc_launch::Races::Order), Some(rrc_launch::Races::Pace), Some(rrc_launch::Races::Pace), None]
        );
        assert!(seq[0].pace_max_us() == 0 && seq[1].pace_max_us() > 0 && seq[2].pace_max_us() > 0);
        assert!(seq[0].replays() && seq[1].replays() && seq[2].replays() && !seq[3].replays());
    }

    #[test]
    fn an_attempt_that_is_up_goes_live_whatever_it_was() {
        for r in [Recovery::ReplayOrdered, Recovery::ReplayPaced, Recovery::ReplayPacedAgain, Recovery::CheckpointOnly] {
            assert_eq!(r.after(AttemptEnd::Up), Next::GoLive);
        }
    }

    #[test]
    fn a_divergence_retries_the_next_way_and_only_the_checkpoint_resets_what_replays_wrote() {
        let Next::Retry { step, attempt } = Recovery::ReplayOrdered.after(AttemptEnd::Diverged) else { panic!("no retry") };
        assert_eq!(step, "the replay diverged: replaying again, paced");
        assert_eq!(
            attempt,
            NextAttempt { recovery: Recovery::ReplayPaced, with_log: true, same_image_id: true, reset_written_past_release: false }
        );
        let Next::Retry { step, attempt } = Recovery::ReplayPaced.after(AttemptEnd::Diverged) else { panic!("no retry") };
        assert_eq!(step, "the paced replay diverged too: replaying paced once more");
        assert_eq!(
            attempt,
            NextAttempt { recovery: Recovery::ReplayPacedAgain, with_log: true, same_image_id: true, reset_written_past_release: false }
        );
        let Next::Retry { step, attempt } = Recovery::ReplayPacedAgain.after(AttemptEnd::Diverged) else { panic!("no retry") };
        assert!(step.starts_with("the paced replay diverged again"), "{step}");
        assert_eq!(
            attempt,
            NextAttempt { recovery: Recovery::CheckpointOnly, with_log: false, same_image_id: false, reset_written_past_release: true }
        );
    }

    #[test]
    fn a_failed_restore_is_tried_again_like_a_divergence_until_the_checkpoint() {
        let Next::Retry { step, attempt } = Recovery::ReplayOrdered.after(AttemptEnd::RestoreFailed) else { panic!("no retry") };
        assert_eq!(step, "the restore failed: restoring again to replay paced");
        assert_eq!(attempt.recovery, Recovery::ReplayPaced);
        let Next::Retry { attempt, .. } = Recovery::ReplayPaced.after(AttemptEnd::RestoreFailed) else { panic!("no retry") };
        assert_eq!(attempt.recovery, Recovery::ReplayPacedAgain);
        let Next::Retry { attempt, .. } = Recovery::ReplayPacedAgain.after(AttemptEnd::RestoreFailed) else { panic!("no retry") };
        assert_eq!(attempt.recovery, Recovery::CheckpointOnly);
        // the checkpoint's own restore failing ends the failover
        assert_eq!(Recovery::CheckpointOnly.after(AttemptEnd::RestoreFailed), Next::GiveUp { step: None });
    }

    #[test]
    fn other_failures_and_a_checkpoint_that_diverges_give_up() {
        for r in [Recovery::ReplayOrdered, Recovery::ReplayPaced, Recovery::ReplayPacedAgain, Recovery::CheckpointOnly] {
            assert_eq!(r.after(AttemptEnd::Failed), Next::GiveUp { step: None });
        }
        assert_eq!(Recovery::CheckpointOnly.after(AttemptEnd::Diverged), Next::GiveUp { step: Some("the restore failed") });
    }

    fn report(events: u64) -> rrc_wire::reply::FailoverReplay {
        rrc_wire::reply::FailoverReplay { events, ..Default::default() }
    }

    #[test]
    fn the_timeline_reports_the_replay_that_went_live_and_why_the_first_was_retried() {
        // no divergence: the replay as it went live
        assert_eq!(timeline_replay(Some(report(5)), &[]), Some(report(5)));
        assert_eq!(timeline_replay(None, &[]), None);
        // ordered diverged, paced went live: the paced one's, retried
        let ordered = (Recovery::ReplayOrdered, "ordered: no progress".to_string(), report(3));
        let r = timeline_replay(Some(report(7)), std::slice::from_ref(&ordered)).unwrap();
        assert_eq!((r.events, r.diverged.as_deref(), r.retried.as_deref()), (7, None, Some("ordered: no progress")));
        // both diverged, the checkpoint alone went live: the last replay's,
        // marked diverged (the recovery failed)
        let paced = (Recovery::ReplayPaced, "paced: output differs".to_string(), report(4));
        let r = timeline_replay(None, &[ordered.clone(), paced]).unwrap();
        assert_eq!((r.events, r.diverged.as_deref(), r.retried.as_deref()), (4, Some("paced: output differs"), Some("ordered: no progress")));
        // a restore that failed before the first replay: retried, no report of it
        let r = timeline_replay(Some(report(9)), &[(Recovery::ReplayOrdered, "the restore failed: x".into(), report(0))]).unwrap();
        assert_eq!((r.events, r.retried.as_deref()), (9, Some("the restore failed: x")));
    }

    #[test]
    fn without_a_log_only_the_checkpoint_is_tried() {
        assert_eq!(Recovery::first(false), Recovery::CheckpointOnly);
        assert_eq!(Recovery::CheckpointOnly.after_divergence(), None);
    }
}
