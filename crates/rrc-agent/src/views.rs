//! The agent's side of views and leases (issue 15; Tardigrade §3.2): the
//! I/O and the acting around rrc-view's decisions.
//!
//! One [`ServiceView`] per service this host has a part in, kept by the
//! agent apart from the role objects so that it outlives a change of role
//! (backup -> live -> re-protected primary). Two threads per service:
//! - the renewer: a linearizable read of the view key every `lease / 4`;
//!   what it finds goes to the [`Keeper`];
//! - the watch: every 10 ms, fences the role before its lease ends (the
//!   renewer may be stuck in a request that etcd does not answer), and
//!   silences the heartbeats of a host fenced for a whole lease, so that
//!   its peer, if it can reach etcd, takes over.
//!
//! A peer's silence runs [`ServiceView::suspect_apart`]: a compare-and-swap
//! to the next view, retried while etcd cannot be reached and cancelled if
//! the peer is heard again first; the role acts only once it is applied.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rrc_view::view::KEY_PREFIX;
use rrc_view::{Action, Answer, Change, Etcd, Found, Keeper, Keys, Next, Request, Standing, Suspicion, Swap, View};
use rrc_wire::reply::{StoredView, StoredViews, ViewStatus};

use crate::{lock, Agent};

/// Each etcd request, to one endpoint. Short against the lease (1 s by
/// default): a renewal stuck longer than this is a failed one.
pub const ETCD_TIMEOUT: Duration = Duration::from_millis(200);
/// Between two attempts of a view change that etcd did not answer.
const RETRY_EVERY: Duration = Duration::from_millis(100);
/// How often the watch thread looks at the lease.
const WATCH_EVERY: Duration = Duration::from_millis(10);

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    suspicions: u64,
    false_suspicions: u64,
    view_changes: u64,
}

/// A view change this host made and is to act on.
#[derive(Debug, Clone, Copy)]
pub struct ViewChanged {
    pub number: u64,
    /// When the swap was known applied.
    pub installed: Instant,
    /// When the wait for the old holder's lease ended.
    pub acting: Instant,
}

impl ViewChanged {
    /// For a failover's timeline, whose times count from `declared`.
    pub fn report(&self, declared: Instant) -> rrc_wire::reply::FailoverViewChange {
        let ms = crate::ms;
        rrc_wire::reply::FailoverViewChange {
            view: self.number,
            installed_ms: ms(self.installed.saturating_duration_since(declared)),
            lease_wait_ms: ms(self.acting.saturating_duration_since(self.installed)),
        }
    }
}

/// What a suspicion came to.
#[derive(Debug)]
pub enum Outcome {
    /// The proposed view is installed: act in it now (its wait is done).
    Act(ViewChanged),
    /// Another view (or none) replaced ours: the service must go here.
    StoodDown(Found),
    /// The peer was heard again; the old view stands.
    Cancelled,
    /// The service is stopping.
    Stopped,
}

pub struct ServiceView {
    service: String,
    me: String,
    etcd: Arc<Etcd>,
    key: String,
    keeper: Mutex<Keeper>,
    stop: AtomicBool,
    suspecting: AtomicBool,
    counts: Mutex<Counts>,
    silenced: AtomicBool,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// Where actions go (set by `start`).
    agent: std::sync::OnceLock<Weak<Agent>>,
    /// Whether the fence is in place on this host, as last applied. Held
    /// while applying: the watch fences and the renewer unfences, and the
    /// network must end as the keeper's last word, not as the slower
    /// thread's.
    fence_applied: Mutex<bool>,
}

impl ServiceView {
    /// The service's first view, made by its primary before anything else
    /// (`rrc run`): refused if the service has a view already.
    pub fn create(etcd: &Arc<Etcd>, me: &str, service: &str, first: View) -> Result<Arc<ServiceView>> {
        let key = Keys::of(service)?.view();
        let sent = Instant::now();
        match etcd.swap_view(&key, 0, &first).with_context(|| format!("creating service {service}'s view in etcd"))? {
            Swap::Done { rev } => Ok(Self::new(etcd, me, service, key, Keeper::new(me, first, rev, sent))),
            Swap::Refused(Found::At { view, rev }) => {
                bail!("service {service} already has a view in etcd ({view}, revision {rev}): it runs (`rrc stop {service}` first), or its stop could not reach etcd (`rrc view remove {service} --revision {rev}`)")
            }
            Swap::Refused(Found::Absent) => bail!("etcd refused to create service {service}'s view, yet holds none"),
        }
    }

    /// A backup joining: the view must name this host as the backup of
    /// `primary`.
    pub fn join(etcd: &Arc<Etcd>, me: &str, service: &str, primary: &str) -> Result<Arc<ServiceView>> {
        let key = Keys::of(service)?.view();
        let sent = Instant::now();
        match etcd.read_view(&key).with_context(|| format!("reading service {service}'s view in etcd"))? {
            Found::At { view, rev } if view.backup.as_deref() == Some(me) && view.primary == primary => Ok(Self::new(etcd, me, service, key, Keeper::new(me, view, rev, sent))),
            Found::At { view, .. } => bail!("etcd holds service {service}'s {view}, not primary {primary} and backup {me}"),
            Found::Absent => bail!("service {service} has no view in etcd: its primary {primary} must make one first (is it running with --etcd?)"),
        }
    }

    fn new(etcd: &Arc<Etcd>, me: &str, service: &str, key: String, keeper: Keeper) -> Arc<ServiceView> {
        Arc::new(ServiceView {
            service: service.into(),
            me: me.into(),
            etcd: etcd.clone(),
            key,
            keeper: Mutex::new(keeper),
            stop: AtomicBool::new(false),
            suspecting: AtomicBool::new(false),
            counts: Mutex::new(Counts::default()),
            silenced: AtomicBool::new(false),
            threads: Mutex::new(Vec::new()),
            agent: std::sync::OnceLock::new(),
            fence_applied: Mutex::new(false),
        })
    }

    /// Starts the renewer and the watch; their actions go to `agent`.
    pub fn start(self: &Arc<Self>, agent: &Arc<Agent>) -> Result<()> {
        let _ = self.agent.set(Arc::downgrade(agent));
        let me = self.clone();
        let renewer = std::thread::Builder::new().name(format!("lease-{}", self.service)).spawn(move || me.renew_loop())?;
        let me = self.clone();
        let watch = std::thread::Builder::new().name(format!("fence-{}", self.service)).spawn(move || me.watch_loop())?;
        lock(&self.threads).extend([renewer, watch]);
        Ok(())
    }

    fn renew_loop(self: &Arc<Self>) {
        while !self.stop.load(Ordering::Relaxed) {
            let every = lock(&self.keeper).timing().renew_every;
            let sent = Instant::now();
            let r = self.etcd.read_view(&self.key);
            let now = Instant::now();
            let action = {
                let mut k = lock(&self.keeper);
                match r {
                    Ok(found) => k.renewed(sent, found, now),
                    Err(e) => {
                        tracing::warn!(service = %self.service, "lease renewal failed: {e}");
                        k.renewal_failed(now)
                    }
                }
            };
            if let Some(a) = action {
                self.apply(a);
            }
            if lock(&self.keeper).standing() == Standing::StoodDown {
                return;
            }
            std::thread::sleep(every.saturating_sub(sent.elapsed()));
        }
    }

    fn watch_loop(self: &Arc<Self>) {
        while !self.stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            let (action, standing, fenced_a_lease) = {
                let mut k = lock(&self.keeper);
                let a = k.tick(now);
                (a, k.standing(), k.fenced_for(now).is_some_and(|d| d >= k.timing().lease))
            };
            if let Some(a) = action {
                self.apply(a);
            }
            if standing == Standing::StoodDown {
                return;
            }
            if fenced_a_lease && !self.silenced.swap(true, Ordering::Relaxed) {
                tracing::error!(service = %self.service, "fenced for a whole lease: heartbeats stop, so that the peer takes over if it can reach etcd");
                if let Some(a) = self.agent() {
                    a.silence_heartbeats(&self.service, true);
                }
            }
            std::thread::sleep(WATCH_EVERY);
        }
    }

    fn agent(&self) -> Option<Arc<Agent>> {
        self.agent.get().and_then(Weak::upgrade)
    }

    fn apply(self: &Arc<Self>, action: Action) {
        let Some(agent) = self.agent() else { return };
        match action {
            Action::Fence => {
                tracing::error!(service = %self.service, "lease about to end (etcd unreachable): FENCED, this host releases nothing for the service");
                self.sync_fence(&agent);
            }
            Action::Unfence => {
                tracing::warn!(service = %self.service, "lease held again: acting again");
                self.sync_fence(&agent);
                if self.silenced.swap(false, Ordering::Relaxed) {
                    agent.silence_heartbeats(&self.service, false);
                }
            }
            Action::StandDown { by } => {
                let why = stand_down_reason(&self.service, &by);
                tracing::error!(service = %self.service, "{why}");
                // not on this thread: standing down joins it
                let service = self.service.clone();
                let _ = std::thread::Builder::new().name(format!("down-{service}")).spawn(move || agent.stand_down(&service, &why));
            }
        }
    }

    /// Puts the fence in place, or lifts it, as the keeper stands now.
    fn sync_fence(&self, agent: &Agent) {
        let mut applied = lock(&self.fence_applied);
        let want = lock(&self.keeper).standing() == Standing::Fenced;
        if *applied != want {
            agent.fence(&self.service, want);
            *applied = want;
        }
    }

    /// The peer was found silent (on the heartbeat's monitor thread): the
    /// suspicion runs on a thread of its own while the heartbeat goes on
    /// counting the peer's datagrams (`heard`); `act` runs there once the
    /// view of `change` is installed (and the removed host's lease waited
    /// out), and a lost race stands this host down.
    pub fn suspect_apart<F>(self: &Arc<Self>, change: Change, heard: Arc<AtomicU64>, act: F) -> crate::heartbeat::Watch
    where
        F: FnOnce(ViewChanged) + Send + 'static,
    {
        let me = self.clone();
        let spawned = std::thread::Builder::new().name(format!("suspect-{}", self.service)).spawn(move || match me.suspect(change, &heard) {
            Outcome::Act(changed) => act(changed),
            Outcome::StoodDown(by) => {
                if let Some(a) = me.agent() {
                    a.stand_down(&me.service, &stand_down_reason(&me.service, &by));
                }
            }
            Outcome::Cancelled | Outcome::Stopped => {}
        });
        if let Err(e) = spawned {
            tracing::error!(service = %self.service, "no thread for the view change: {e}");
        }
        crate::heartbeat::Watch::Continue
    }

    /// The peer was found silent: propose `change` and see it through.
    /// `heard` counts the peer's datagrams (it moves: the peer is alive).
    /// Blocks until the outcome; a suspicion already running makes this
    /// one return `Cancelled` at once.
    fn suspect(self: &Arc<Self>, change: Change, heard: &AtomicU64) -> Outcome {
        if self.suspecting.swap(true, Ordering::AcqRel) {
            return Outcome::Cancelled;
        }
        let out = self.run_suspicion(change, heard);
        self.suspecting.store(false, Ordering::Release);
        out
    }

    fn run_suspicion(self: &Arc<Self>, change: Change, heard: &AtomicU64) -> Outcome {
        let heard_at_start = heard.load(Ordering::Relaxed);
        let (old, rev) = {
            let k = lock(&self.keeper);
            (k.view().clone(), k.rev())
        };
        lock(&self.counts).suspicions += 1;
        let (mut s, mut request) = match Suspicion::start(&self.me, &old, rev, &change, RETRY_EVERY) {
            Ok(x) => x,
            Err(e) => {
                tracing::error!(service = %self.service, "no view change: {e}");
                return Outcome::Cancelled;
            }
        };
        tracing::warn!(service = %self.service, view = old.number, "peer silent: proposing {}", s.proposed());
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return Outcome::Stopped;
            }
            if heard.load(Ordering::Relaxed) != heard_at_start {
                s.peer_heard();
            }
            if let Request::Swap { next, .. } = &request {
                lock(&self.keeper).propose(next.clone());
            }
            let sent = Instant::now();
            let answer = match &request {
                Request::Swap { rev, next } => match self.etcd.swap_view(&self.key, *rev, next) {
                    Ok(Swap::Done { rev }) => Answer::Swapped { rev },
                    Ok(Swap::Refused(found)) => Answer::Found(found),
                    Err(e) => Answer::Unreachable(e.to_string()),
                },
                Request::Read => match self.etcd.read_view(&self.key) {
                    Ok(found) => Answer::Found(found),
                    Err(e) => Answer::Unreachable(e.to_string()),
                },
            };
            if let Answer::Unreachable(e) = &answer {
                tracing::warn!(service = %self.service, attempt = s.attempts, "view change: {e}; this host stays as it is");
            }
            match s.answered(answer, Instant::now()) {
                Next::Act { view, rev, not_before } => {
                    tracing::warn!(service = %self.service, "{view} installed; acting in it in {} ms", not_before.saturating_duration_since(Instant::now()).as_millis());
                    let (number, installed) = (view.number, Instant::now());
                    self.install(view, rev, sent);
                    lock(&self.counts).view_changes += 1;
                    std::thread::sleep(not_before.saturating_duration_since(Instant::now()));
                    return Outcome::Act(ViewChanged { number, installed, acting: Instant::now() });
                }
                Next::StandDown { by } => {
                    lock(&self.keeper).withdraw();
                    return Outcome::StoodDown(by);
                }
                Next::Retry { request: r, at } => {
                    request = r;
                    std::thread::sleep(at.saturating_duration_since(Instant::now()));
                }
                Next::Cancel => {
                    lock(&self.keeper).withdraw();
                    lock(&self.counts).false_suspicions += 1;
                    tracing::warn!(service = %self.service, "the peer was heard again before the view changed: a false suspicion, view {} stands", old.number);
                    return Outcome::Cancelled;
                }
            }
        }
    }

    /// This host's swap installed `view`: the keeper moves to it (and a
    /// fence of the old view's lease is lifted).
    fn install(self: &Arc<Self>, view: View, rev: i64, sent: Instant) {
        if let Some(a) = lock(&self.keeper).installed(view, rev, sent) {
            self.apply(a);
        }
    }

    /// Re-protection: this host (the primary, alone) takes `spare` as its
    /// backup, by compare-and-swap, before the spare is asked.
    pub fn reprotect(self: &Arc<Self>, spare: &str) -> Result<View> {
        let (old, rev) = {
            let k = lock(&self.keeper);
            (k.view().clone(), k.rev())
        };
        let next = old.successor(&self.me, &Change::Reprotect { spare: spare.into() })?;
        let sent = Instant::now();
        lock(&self.keeper).propose(next.clone());
        match self.etcd.swap_view(&self.key, rev, &next) {
            Ok(Swap::Done { rev }) => {
                self.install(next.clone(), rev, sent);
                lock(&self.counts).view_changes += 1;
                Ok(next)
            }
            Ok(Swap::Refused(found)) => {
                lock(&self.keeper).withdraw();
                bail!("{}", stand_down_reason(&self.service, &found))
            }
            // (left proposed: if it was applied, the renewer installs it)
            Err(e) => Err(anyhow::Error::new(e).context("installing the re-protected view")),
        }
    }

    /// `rrc stop` on the primary: the view goes (by compare-and-swap: a
    /// view another host installed meanwhile stays).
    pub fn remove(&self) {
        let rev = lock(&self.keeper).rev();
        match self.etcd.delete_view(&self.key, rev) {
            Ok(Swap::Done { .. }) => tracing::info!(service = %self.service, "view removed from etcd"),
            Ok(Swap::Refused(found)) => tracing::warn!(service = %self.service, "view left in etcd: {}", stand_down_reason(&self.service, &found)),
            Err(e) => tracing::warn!(service = %self.service, "the view could not be removed from etcd: {e}"),
        }
    }

    /// Ends both threads (waits for them unless called from one).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let me = std::thread::current().id();
        for t in lock(&self.threads).drain(..) {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
    }

    pub fn status(&self) -> ViewStatus {
        let k = lock(&self.keeper);
        let st = k.status(Instant::now());
        let v = k.view();
        let c = *lock(&self.counts);
        ViewStatus {
            number: v.number,
            primary: v.primary.clone(),
            backup: v.backup.clone(),
            spares: v.spares.clone(),
            standing: match st.standing {
                Standing::Acting => "acting",
                Standing::Fenced => "fenced",
                Standing::StoodDown => "stood_down",
            }
            .into(),
            lease_ms: st.lease_ms,
            lease_remaining_ms: st.remaining_ms,
            renewals: st.renewals,
            failed_renewals: st.failed_renewals,
            fences: st.fences,
            suspicions: c.suspicions,
            false_suspicions: c.false_suspicions,
            view_changes: c.view_changes,
            etcd: self.etcd.endpoints().to_vec(),
            etcd_tls: self.etcd.tls(),
        }
    }
}

fn stand_down_reason(service: &str, by: &Found) -> String {
    match by {
        Found::Absent => format!("service {service}'s view is gone from etcd (stopped elsewhere): standing down"),
        Found::At { view, .. } => format!("service {service}: {view} replaced the one this host acted in: standing down"),
    }
}

fn stored(service: &str, key: &str, view: &View, revision: i64) -> StoredView {
    StoredView {
        service: service.into(),
        key: key.into(),
        revision,
        number: view.number,
        primary: view.primary.clone(),
        backup: view.backup.clone(),
        spares: view.spares.clone(),
        lease_ms: view.lease_ms,
    }
}

fn etcd_of(agent: &Agent) -> Result<&Arc<Etcd>> {
    agent.etcd.as_ref().with_context(|| format!("the agent of {} keeps no views (started without --etcd)", agent.cfg.name))
}

/// `rrc view list|show`: the views etcd holds, one service's or all.
pub fn stored_views(agent: &Agent, name: Option<&str>) -> Result<StoredViews> {
    let etcd = etcd_of(agent)?;
    let mut out = StoredViews { etcd: etcd.endpoints().to_vec(), views: Vec::new(), unreadable: Vec::new() };
    if let Some(n) = name {
        let key = Keys::of(n)?.view();
        if let Found::At { view, rev } = etcd.read_view(&key)? {
            out.views.push(stored(n, &key, &view, rev));
        }
        return Ok(out);
    }
    for (key, found) in etcd.list_views(KEY_PREFIX)? {
        let service = key.strip_prefix(KEY_PREFIX).and_then(|r| r.strip_suffix("/view")).map(str::to_string);
        match (service, found) {
            (Some(s), Ok(Found::At { view, rev })) => out.views.push(stored(&s, &key, &view, rev)),
            (Some(_), Ok(Found::Absent)) => {}
            (Some(_), Err(e)) => out.unreadable.push((key, e.to_string())),
            (None, _) => out.unreadable.push((key, "not a key rrc writes".into())),
        }
    }
    Ok(out)
}

/// `rrc view remove`: a view left behind (its service gone, its `rrc stop`
/// unable to reach etcd) removed by hand, if it is still at `revision`
/// (the one the operator saw) and this host has no part in it. A host
/// that still acts under a removed view stands down at its next renewal:
/// the CLI asks every agent it reaches first.
pub fn remove_stored_view(agent: &Agent, name: &str, revision: i64) -> Result<StoredView> {
    let etcd = etcd_of(agent)?;
    if agent.names().iter().any(|n| n == name) {
        bail!("host {} has a part in service {name}: `rrc stop {name}` ends it and removes its view", agent.cfg.name);
    }
    let key = Keys::of(name)?.view();
    let (view, rev) = match etcd.read_view(&key)? {
        Found::Absent => bail!("service {name} has no view in etcd"),
        Found::At { view, rev } => (view, rev),
    };
    if rev != revision {
        bail!("service {name}'s {view} is at revision {rev}, not {revision}: not removed (see `rrc view show {name}`)");
    }
    match etcd.delete_view(&key, revision)? {
        Swap::Done { .. } => {
            tracing::warn!(service = name, "{view} (revision {revision}) removed from etcd by `rrc view remove`");
            Ok(stored(name, &key, &view, revision))
        }
        Swap::Refused(Found::At { view, rev }) => bail!("service {name}'s view changed meanwhile ({view}, revision {rev}): not removed"),
        Swap::Refused(Found::Absent) => bail!("service {name}'s view was removed meanwhile"),
    }
}
