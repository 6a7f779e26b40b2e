//! Suspicion is not failure: a peer's silence only starts a view change,
//! and what happens next is decided here, with no I/O.
//!
//! The suspecting host proposes the successor of the view it holds by
//! compare-and-swap. It acts only once the swap is known to be applied;
//! it gives up its role if another view won; while etcd cannot be
//! reached it stays as it is and never promotes itself. If the peer is
//! heard again before the swap is known to be applied, the suspicion was
//! false: the host then only READS the view (a swap sent while etcd was
//! unreachable may have been applied all the same) and cancels if the old
//! view is still there.

use std::time::{Duration, Instant};

use crate::error::ViewError;
use crate::lease::{takeover_delay, Found};
use crate::view::{Change, View};

/// What the agent sends next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Compare-and-swap: from `rev` (the view held) to `next`.
    Swap { rev: i64, next: View },
    /// Linearizable read of the view key.
    Read,
}

/// What came back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The swap was applied; the new view is at `rev`.
    Swapped { rev: i64 },
    /// The swap was refused (the view is not at the compared revision),
    /// or a read: what is there.
    Found(Found),
    /// No answer (etcd unreachable, no quorum, timed out).
    Unreachable(String),
}

/// What the agent does after an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// The proposed view is in place at `rev`: act in it, not before
    /// `not_before` (the removed host's lease, when the service IP moves).
    Act { view: View, rev: i64, not_before: Instant },
    /// Another view replaced the one held, or none is left: stand down.
    StandDown { by: Found },
    /// Send `request` again at `at`.
    Retry { request: Request, at: Instant },
    /// The peer was heard again and the old view is still in place: the
    /// suspicion was false; carry on in the old view.
    Cancel,
}

/// One suspicion of the peer, from its start to its outcome.
#[derive(Debug, Clone)]
pub struct Suspicion {
    old: View,
    old_rev: i64,
    proposed: View,
    retry_every: Duration,
    peer_heard: bool,
    pub attempts: u32,
}

impl Suspicion {
    /// `me` suspects its peer in `old` (at `rev`) and proposes `change`.
    /// Returns the suspicion and the first request to send.
    pub fn start(me: &str, old: &View, rev: i64, change: &Change, retry_every: Duration) -> Result<(Suspicion, Request), ViewError> {
        let proposed = old.successor(me, change)?;
        let s = Suspicion { old: old.clone(), old_rev: rev, proposed: proposed.clone(), retry_every, peer_heard: false, attempts: 1 };
        Ok((s, Request::Swap { rev, next: proposed }))
    }

    pub fn proposed(&self) -> &View {
        &self.proposed
    }

    /// The peer's heartbeats arrived again.
    pub fn peer_heard(&mut self) {
        self.peer_heard = true;
    }

    /// `answer` to the last request, received at `now`.
    pub fn answered(&mut self, answer: Answer, now: Instant) -> Next {
        let act = |s: &Suspicion, rev: i64| Next::Act { view: s.proposed.clone(), rev, not_before: now + takeover_delay(&s.old, &s.proposed) };
        match answer {
            Answer::Swapped { rev } => act(self, rev),
            // our own swap, applied though its answer was lost
            Answer::Found(Found::At { view, rev }) if view == self.proposed => act(self, rev),
            Answer::Found(Found::At { rev, .. }) if rev == self.old_rev => {
                if self.peer_heard {
                    Next::Cancel
                } else {
                    // (a read found the old view: the suspicion holds)
                    self.retry(Request::Swap { rev: self.old_rev, next: self.proposed.clone() }, now)
                }
            }
            Answer::Found(other) => Next::StandDown { by: other },
            Answer::Unreachable(_) => {
                let request = if self.peer_heard { Request::Read } else { Request::Swap { rev: self.old_rev, next: self.proposed.clone() } };
                self.retry(request, now)
            }
        }
    }

    fn retry(&mut self, request: Request, now: Instant) -> Next {
        self.attempts += 1;
        Next::Retry { request, at: now + self.retry_every }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    fn view() -> View {
        View::first("a", "b", &[], MS(1000))
    }

    #[test]
    fn a_backup_that_wins_acts_at_once() {
        let t0 = Instant::now();
        let (mut s, req) = Suspicion::start("b", &view(), 7, &Change::PromoteBackup, MS(100)).unwrap();
        assert!(matches!(&req, Request::Swap { rev: 7, next } if next.primary == "b"));
        match s.answered(Answer::Swapped { rev: 9 }, t0 + MS(5)) {
            Next::Act { view, rev, not_before } => {
                assert_eq!((view.number, rev), (2, 9));
                assert_eq!(not_before, t0 + MS(5), "the IP stays at b: no wait");
            }
            n => panic!("{n:?}"),
        }
    }

    #[test]
    fn a_primary_that_wins_waits_for_the_backups_lease() {
        let t0 = Instant::now();
        let (mut s, _) = Suspicion::start("a", &view(), 7, &Change::DropBackup, MS(100)).unwrap();
        match s.answered(Answer::Swapped { rev: 9 }, t0 + MS(5)) {
            Next::Act { not_before, .. } => assert!(not_before >= t0 + MS(1015), "the backup held the IP"),
            n => panic!("{n:?}"),
        }
    }

    #[test]
    fn both_suspect_one_wins_the_other_stands_down() {
        let t0 = Instant::now();
        let (mut a, _) = Suspicion::start("a", &view(), 7, &Change::DropBackup, MS(100)).unwrap();
        let (mut b, _) = Suspicion::start("b", &view(), 7, &Change::PromoteBackup, MS(100)).unwrap();
        // b's swap applied first; a's compare fails and finds b's view
        assert!(matches!(b.answered(Answer::Swapped { rev: 8 }, t0), Next::Act { .. }));
        let found = Found::At { view: b.proposed().clone(), rev: 8 };
        assert_eq!(a.answered(Answer::Found(found.clone()), t0), Next::StandDown { by: found });
    }

    #[test]
    fn unreachable_etcd_never_promotes_it_retries() {
        let t0 = Instant::now();
        let (mut s, first) = Suspicion::start("b", &view(), 7, &Change::PromoteBackup, MS(100)).unwrap();
        for i in 1..=5 {
            match s.answered(Answer::Unreachable("timed out".into()), t0 + MS(i * 100)) {
                Next::Retry { request, at } => {
                    assert_eq!(request, first);
                    assert_eq!(at, t0 + MS(i * 100 + 100));
                }
                n => panic!("{n:?}"),
            }
        }
        assert_eq!(s.attempts, 6);
    }

    #[test]
    fn a_peer_heard_again_is_checked_by_a_read_then_cancelled() {
        let t0 = Instant::now();
        let (mut s, _) = Suspicion::start("b", &view(), 7, &Change::PromoteBackup, MS(100)).unwrap();
        assert!(matches!(s.answered(Answer::Unreachable("x".into()), t0), Next::Retry { request: Request::Swap { .. }, .. }));
        s.peer_heard();
        // the swap sent blind may have been applied: read, do not swap
        assert!(matches!(s.answered(Answer::Unreachable("x".into()), t0), Next::Retry { request: Request::Read, .. }));
        assert_eq!(s.answered(Answer::Found(Found::At { view: view(), rev: 7 }), t0), Next::Cancel);
    }

    #[test]
    fn a_swap_whose_answer_was_lost_is_recognised_as_ours() {
        let t0 = Instant::now();
        let (mut s, _) = Suspicion::start("b", &view(), 7, &Change::PromoteBackup, MS(100)).unwrap();
        s.answered(Answer::Unreachable("answer lost".into()), t0);
        s.peer_heard();
        let ours = Found::At { view: s.proposed().clone(), rev: 8 };
        assert!(matches!(s.answered(Answer::Found(ours), t0 + MS(200)), Next::Act { rev: 8, .. }));
    }

    #[test]
    fn a_read_that_finds_the_old_view_while_the_peer_is_still_silent_swaps_again() {
        let t0 = Instant::now();
        let (mut s, first) = Suspicion::start("b", &view(), 7, &Change::PromoteBackup, MS(100)).unwrap();
        assert!(matches!(s.answered(Answer::Found(Found::At { view: view(), rev: 7 }), t0), Next::Retry { request, .. } if request == first));
    }

    #[test]
    fn the_service_stopped_meanwhile() {
        let t0 = Instant::now();
        let (mut s, _) = Suspicion::start("b", &view(), 7, &Change::PromoteBackup, MS(100)).unwrap();
        assert_eq!(s.answered(Answer::Found(Found::Absent), t0), Next::StandDown { by: Found::Absent });
    }

    #[test]
    fn a_host_without_the_right_cannot_start() {
        assert!(Suspicion::start("c", &view(), 7, &Change::PromoteBackup, MS(100)).is_err());
    }
}
