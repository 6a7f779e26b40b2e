//! Leases: a host acts in its role of a view only while it holds that
//! view's lease, and the lease of a host a view change removes has run
//! out before another host takes its place (lease-based fencing).
//!
//! A host renews by a linearizable read of the view key: if it still
//! finds the view it installed (same etcd mod_revision), no view change
//! was applied before that read, so none can take effect before the read
//! was sent plus the lease. The holder counts its lease from the moment it
//! SENT the read, on its own monotonic clock, and stops acting `guard`
//! before it ends (the time to fence itself: an iptables run or two).
//!
//! Whoever changes the view by compare-and-swap counts from the moment it
//! RECEIVED the swap's answer: every renewal that found the old view was
//! sent before the swap was applied, so the old holder's lease ends at the
//! latest one lease after that answer, as measured by the old holder's
//! clock. Measured by the new holder's it is at most `lease × (1 + drift)`
//! ([`LeaseTiming::drift`]: the assumed bound on how much faster one
//! host's monotonic clock may run than another's; CLOCK_MONOTONIC is
//! slewed by NTP by at most 500 ppm, the default assumes 1 %). A host that
//! takes over the service IP from another waits that long
//! ([`takeover_delay`]); a change that leaves the IP where it is (the
//! backup, which already holds it, promoted) waits for nothing, since the
//! old primary reached clients only through it.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::view::{Role, View};

/// The timing every host of a view derives from its `lease_ms`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeaseTiming {
    pub lease: Duration,
    /// A renewal every `lease / 4`: three can fail before the guard.
    pub renew_every: Duration,
    /// The holder stops acting this long before its lease ends.
    pub guard: Duration,
    /// Bound on the relative rate difference of two hosts' clocks.
    pub drift: f64,
}

/// The clock-rate bound assumed (docs/failover.md "Fencing").
pub const DEFAULT_DRIFT: f64 = 0.01;

impl LeaseTiming {
    pub fn of(view: &View) -> LeaseTiming {
        let lease = view.lease();
        LeaseTiming { lease, renew_every: lease / 4, guard: lease / 5, drift: DEFAULT_DRIFT }
    }

    /// How long after its compare-and-swap was answered a host waits
    /// before it holds what the removed host held.
    pub fn after_swap(&self) -> Duration {
        self.lease.mul_f64(1.0 + self.drift) + Duration::from_millis(1)
    }
}

/// How long the host that installed `new` (answer received) waits before
/// acting in it: the lease of `old`'s IP holder when the IP moves, else 0.
pub fn takeover_delay(old: &View, new: &View) -> Duration {
    if old.ip_holder() == new.ip_holder() {
        Duration::ZERO
    } else {
        LeaseTiming::of(old).after_swap()
    }
}

/// What a linearizable read (or a failed compare-and-swap) found at the
/// view key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// No view: the service was stopped (its view deleted).
    Absent,
    /// A view and its etcd mod_revision.
    At { view: View, rev: i64 },
}

/// Where a host stands in the view it installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Standing {
    /// Holds the lease: acts in its role.
    Acting,
    /// Its lease ran out (etcd unreachable): acts in nothing until a
    /// renewal finds the same view again.
    Fenced,
    /// Another view replaced it: this host has no role in the service
    /// any more and never will in this incarnation.
    StoodDown,
}

/// What the agent must do after an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Stop everything the role shows to the world (release, service IP,
    /// heartbeats): the lease is about to end.
    Fence,
    /// The lease is held again, in the same view: act again.
    Unfence,
    /// A later view (or none) replaced ours.
    StandDown { by: Found },
}

/// The lease of one host in one view of one service: decisions only, no
/// I/O (the agent's views module renews and acts).
#[derive(Debug, Clone)]
pub struct Keeper {
    me: String,
    view: View,
    rev: i64,
    timing: LeaseTiming,
    valid_until: Instant,
    standing: Standing,
    renewals: u64,
    failed_renewals: u64,
    fences: u64,
    /// Since when the host is fenced (None: not fenced).
    fenced_at: Option<Instant>,
    /// The view this host is installing by compare-and-swap, if any: a
    /// renewal may see it applied before the swap's own answer is in.
    proposed: Option<View>,
}

impl Keeper {
    /// `sent_at`: when this host sent the request that installed `view` at
    /// `rev` (its creation or its compare-and-swap) or the read that
    /// found it: the lease runs from there.
    pub fn new(me: &str, view: View, rev: i64, sent_at: Instant) -> Keeper {
        let timing = LeaseTiming::of(&view);
        Keeper { me: me.into(), view, rev, timing, valid_until: sent_at + timing.lease, standing: Standing::Acting, renewals: 0, failed_renewals: 0, fences: 0, fenced_at: None, proposed: None }
    }

    pub fn view(&self) -> &View {
        &self.view
    }

    pub fn rev(&self) -> i64 {
        self.rev
    }

    pub fn timing(&self) -> LeaseTiming {
        self.timing
    }

    pub fn standing(&self) -> Standing {
        self.standing
    }

    pub fn role(&self) -> Option<Role> {
        self.view.role_of(&self.me)
    }

    /// Whether the host may act at `now`.
    pub fn holds(&self, now: Instant) -> bool {
        self.standing == Standing::Acting && now + self.timing.guard < self.valid_until
    }

    /// This host is about to swap the view to `view`.
    pub fn propose(&mut self, view: View) {
        self.proposed = Some(view);
    }

    /// The swap was refused or given up: no view is being installed.
    pub fn withdraw(&mut self) {
        self.proposed = None;
    }

    /// This host's own compare-and-swap, sent at `sent_at`, installed
    /// `view` at `rev`: the new view's lease runs from that send. A host
    /// fenced meanwhile (etcd unreachable until the swap went through)
    /// acts again: `Unfence`.
    pub fn installed(&mut self, view: View, rev: i64, sent_at: Instant) -> Option<Action> {
        self.timing = LeaseTiming::of(&view);
        self.view = view;
        self.rev = rev;
        self.proposed = None;
        self.valid_until = self.valid_until.max(sent_at + self.timing.lease);
        self.unfence()
    }

    /// A fenced host acts again (its lease is held once more).
    fn unfence(&mut self) -> Option<Action> {
        if self.standing != Standing::Fenced {
            return None;
        }
        self.standing = Standing::Acting;
        self.fenced_at = None;
        Some(Action::Unfence)
    }

    /// How long the host has been fenced, at `now` (None: it is not).
    pub fn fenced_for(&self, now: Instant) -> Option<Duration> {
        self.fenced_at.filter(|_| self.standing == Standing::Fenced).map(|at| now.saturating_duration_since(at))
    }

    /// A renewal sent at `sent_at` was answered at `now` with `found`.
    pub fn renewed(&mut self, sent_at: Instant, found: Found, now: Instant) -> Option<Action> {
        if self.standing == Standing::StoodDown {
            return None;
        }
        match found {
            // read before this host installed a later view (its own swap,
            // answered meanwhile): etcd's revisions only grow, so the view
            // found is one that was replaced, and the read says nothing
            // about the lease of the view held now
            Found::At { rev, .. } if rev < self.rev => None,
            Found::At { rev, .. } if rev == self.rev => {
                self.renewals += 1;
                self.valid_until = self.valid_until.max(sent_at + self.timing.lease);
                if self.holds_if_acting(now) {
                    return self.unfence();
                }
                None
            }
            // this host's own swap, seen applied before its answer came
            Found::At { view, rev } if self.proposed.as_ref() == Some(&view) => {
                self.renewals += 1;
                self.installed(view, rev, sent_at)
            }
            other => {
                self.standing = Standing::StoodDown;
                Some(Action::StandDown { by: other })
            }
        }
    }

    /// A renewal failed (etcd unreachable, timed out): only time tells.
    pub fn renewal_failed(&mut self, now: Instant) -> Option<Action> {
        self.failed_renewals += 1;
        self.tick(now)
    }

    /// Time passed: fence before the lease ends.
    pub fn tick(&mut self, now: Instant) -> Option<Action> {
        if self.standing == Standing::Acting && !self.holds(now) {
            self.standing = Standing::Fenced;
            self.fenced_at = Some(now);
            self.fences += 1;
            return Some(Action::Fence);
        }
        None
    }

    fn holds_if_acting(&self, now: Instant) -> bool {
        now + self.timing.guard < self.valid_until
    }

    pub fn status(&self, now: Instant) -> LeaseStatus {
        LeaseStatus {
            view: self.view.number,
            standing: self.standing,
            holds: self.holds(now),
            remaining_ms: self.valid_until.saturating_duration_since(now).as_millis() as u64,
            lease_ms: self.timing.lease.as_millis() as u64,
            renewals: self.renewals,
            failed_renewals: self.failed_renewals,
            fences: self.fences,
        }
    }
}

/// For `rrc status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeaseStatus {
    pub view: u64,
    pub standing: Standing,
    pub holds: bool,
    /// Until the lease ends (0: ended).
    pub remaining_ms: u64,
    pub lease_ms: u64,
    pub renewals: u64,
    pub failed_renewals: u64,
    /// Times the lease came so near its end that the host fenced itself.
    pub fences: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::Change;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    fn view() -> View {
        View::first("a", "b", &["c".into()], MS(1000))
    }

    #[test]
    fn the_lease_runs_from_the_send_and_ends_a_guard_early() {
        let t0 = Instant::now();
        let k = Keeper::new("b", view(), 7, t0);
        assert!(k.holds(t0 + MS(799)));
        assert!(!k.holds(t0 + MS(800)), "the guard (lease / 5) is kept");
    }

    #[test]
    fn a_renewal_that_finds_the_same_view_extends_from_its_send() {
        let t0 = Instant::now();
        let mut k = Keeper::new("b", view(), 7, t0);
        // sent at 500, answered at 900 (slow etcd): valid to 1500, not 1900
        assert_eq!(k.renewed(t0 + MS(500), Found::At { view: view(), rev: 7 }, t0 + MS(900)), None);
        assert!(k.holds(t0 + MS(1299)));
        assert!(!k.holds(t0 + MS(1300)));
        // an older renewal answered late never shortens it
        k.renewed(t0 + MS(100), Found::At { view: view(), rev: 7 }, t0 + MS(950));
        assert!(k.holds(t0 + MS(1299)));
    }

    #[test]
    fn fenced_when_renewals_fail_then_unfenced_by_one_that_finds_the_view() {
        let t0 = Instant::now();
        let mut k = Keeper::new("b", view(), 7, t0);
        assert_eq!(k.renewal_failed(t0 + MS(250)), None);
        assert_eq!(k.renewal_failed(t0 + MS(500)), None);
        assert_eq!(k.renewal_failed(t0 + MS(800)), Some(Action::Fence));
        assert_eq!(k.standing(), Standing::Fenced);
        assert_eq!(k.fenced_for(t0 + MS(1800)), Some(MS(1000)));
        assert_eq!(k.status(t0 + MS(801)).fences, 1);
        assert!(!k.holds(t0 + MS(801)));
        assert_eq!(k.tick(t0 + MS(2000)), None, "fenced once");
        // etcd back, the view unchanged
        assert_eq!(k.renewed(t0 + MS(3000), Found::At { view: view(), rev: 7 }, t0 + MS(3010)), Some(Action::Unfence));
        assert!(k.holds(t0 + MS(3010)));
        assert_eq!(k.fenced_for(t0 + MS(3010)), None);
    }

    #[test]
    fn a_renewal_too_old_to_give_a_lease_does_not_unfence() {
        let t0 = Instant::now();
        let mut k = Keeper::new("b", view(), 7, t0);
        k.tick(t0 + MS(900));
        // sent at 100 (before the fence), answered at 1000: its lease
        // (to 1100) is within the guard already
        assert_eq!(k.renewed(t0 + MS(100), Found::At { view: view(), rev: 7 }, t0 + MS(1000)), None);
        assert_eq!(k.standing(), Standing::Fenced);
    }

    #[test]
    fn any_other_view_or_none_stands_down_for_good() {
        let t0 = Instant::now();
        let next = view().successor("a", &Change::DropBackup).unwrap();
        let mut k = Keeper::new("b", view(), 7, t0);
        let by = Found::At { view: next.clone(), rev: 9 };
        assert_eq!(k.renewed(t0, by.clone(), t0), Some(Action::StandDown { by }));
        assert_eq!(k.standing(), Standing::StoodDown);
        assert!(!k.holds(t0));
        // nothing brings it back, not even the old view found by a late answer
        assert_eq!(k.renewed(t0, Found::At { view: view(), rev: 7 }, t0), None);
        assert_eq!(k.tick(t0 + MS(5000)), None);
        let mut k = Keeper::new("a", view(), 7, t0);
        assert_eq!(k.renewed(t0, Found::Absent, t0), Some(Action::StandDown { by: Found::Absent }));
    }

    #[test]
    fn a_renewal_that_sees_our_own_swap_first_does_not_stand_down() {
        let t0 = Instant::now();
        let mut k = Keeper::new("b", view(), 7, t0);
        let next = view().successor("b", &Change::PromoteBackup).unwrap();
        k.propose(next.clone());
        // the renewer's read lands after the swap, before its answer
        assert_eq!(k.renewed(t0 + MS(10), Found::At { view: next.clone(), rev: 9 }, t0 + MS(12)), None);
        assert_eq!((k.standing(), k.rev(), k.role()), (Standing::Acting, 9, Some(Role::Primary)));
        // then the swap's answer
        assert_eq!(k.installed(next, 9, t0 + MS(5)), None);
        assert!(k.holds(t0 + MS(500)));
        // another host's view is still a stand-down, proposal or not
        let mut k = Keeper::new("a", view(), 7, t0);
        k.propose(view().successor("a", &Change::DropBackup).unwrap());
        let theirs = Found::At { view: view().successor("b", &Change::PromoteBackup).unwrap(), rev: 8 };
        assert!(matches!(k.renewed(t0, theirs, t0), Some(Action::StandDown { .. })));
    }

    /// Seen in a failover campaign (rr_lighttpd200c #184): the renewer read
    /// view 1 just before the suspicion's swap installed view 2, and its
    /// answer, handled after the install, stood the new primary down in
    /// the middle of its failover: nobody served the service.
    #[test]
    fn a_renewal_read_before_our_own_swap_is_ignored() {
        let t0 = Instant::now();
        let mut k = Keeper::new("b", view(), 7, t0);
        let next = view().successor("b", &Change::PromoteBackup).unwrap();
        k.propose(next.clone());
        assert_eq!(k.installed(next.clone(), 9, t0 + MS(5)), None);
        // the renewal sent at t0 found view 1 at revision 7
        assert_eq!(k.renewed(t0, Found::At { view: view(), rev: 7 }, t0 + MS(8)), None);
        assert_eq!((k.standing(), k.rev(), k.role()), (Standing::Acting, 9, Some(Role::Primary)));
        assert_eq!(k.renewals, 0, "a stale answer renews nothing");
        // a later view than the one held still stands the host down
        let later = Found::At { view: next.successor("b", &Change::Reprotect { spare: "c".into() }).unwrap(), rev: 10 };
        assert!(matches!(k.renewed(t0 + MS(20), later, t0 + MS(21)), Some(Action::StandDown { .. })));
    }

    #[test]
    fn a_fenced_host_whose_swap_goes_through_acts_in_the_new_view() {
        let t0 = Instant::now();
        let mut k = Keeper::new("b", view(), 7, t0);
        assert_eq!(k.tick(t0 + MS(900)), Some(Action::Fence));
        let next = view().successor("b", &Change::PromoteBackup).unwrap();
        assert_eq!(k.installed(next, 9, t0 + MS(3000)), Some(Action::Unfence));
        assert!(k.holds(t0 + MS(3500)));
        assert_eq!(k.role(), Some(Role::Primary));
    }

    #[test]
    fn own_swap_moves_the_keeper_to_the_new_view() {
        let t0 = Instant::now();
        let mut k = Keeper::new("b", view(), 7, t0);
        let next = view().successor("b", &Change::PromoteBackup).unwrap();
        k.installed(next.clone(), 9, t0 + MS(100));
        assert_eq!(k.role(), Some(Role::Primary));
        assert_eq!(k.renewed(t0 + MS(200), Found::At { view: next, rev: 9 }, t0 + MS(210)), None);
        assert!(k.holds(t0 + MS(999)));
        assert!(!k.holds(t0 + MS(1000)));
    }

    #[test]
    fn the_ip_moving_waits_for_the_old_holders_lease_with_the_drift() {
        let v = view();
        let promoted = v.successor("b", &Change::PromoteBackup).unwrap();
        assert_eq!(takeover_delay(&v, &promoted), Duration::ZERO, "b held the IP already");
        let alone = v.successor("a", &Change::DropBackup).unwrap();
        let d = takeover_delay(&v, &alone);
        assert!(d >= MS(1010) && d < MS(1020), "{d:?}");
        // re-protection moves the IP to the new backup: the primary hands
        // it over itself, but a delay is still what the rule gives
        let r = promoted.successor("b", &Change::Reprotect { spare: "c".into() }).unwrap();
        assert!(takeover_delay(&promoted, &r) > MS(1000));
    }

    #[test]
    fn status_reports_what_is_left() {
        let t0 = Instant::now();
        let k = Keeper::new("b", view(), 7, t0);
        let s = k.status(t0 + MS(400));
        assert_eq!((s.view, s.holds, s.remaining_ms, s.lease_ms), (1, true, 600, 1000));
    }
}
