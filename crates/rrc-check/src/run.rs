//! What every load run shares: when to stop, live counters for --progress,
//! per-thread tallies, timing of one wait for a reply, and the final report.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::conn::{is_timeout, OpError};
use crate::pace::Pacer;
use crate::stats::{first_samples, ErrorCounts, ErrorKind, ErrorSample, Histogram, Pause, Report, MAX_SAMPLES};

/// How long a run lasts and how fast it goes.
#[derive(Debug, Clone)]
pub struct Plan {
    pub threads: u32,
    /// Stop after this long (None with --ops).
    pub duration: Option<Duration>,
    /// Stop after this many ops in total (sets + gets), split over threads.
    pub ops: Option<u64>,
    /// Total ops per second; 0 = as fast as possible.
    pub rate: f64,
    /// Per-reply timeout (also the connect timeout).
    pub timeout: Duration,
    pub progress: bool,
}

impl Plan {
    /// The ops quota of thread `t` with --ops (the remainder goes to the
    /// first threads).
    pub fn quota(&self, t: u32) -> Option<u64> {
        self.ops.map(|n| n / u64::from(self.threads) + u64::from(u64::from(t) < n % u64::from(self.threads)))
    }
}

/// Counters the threads update as they go, read by the progress printer.
pub struct Live {
    pub start: Instant,
    ops: AtomicU64,
    errors: AtomicU64,
    max_pause_us: AtomicU64,
    /// Per thread: 1 + microseconds since start when its current wait for
    /// a reply began, 0 when not waiting. Shows a pause while it lasts.
    waiting_since: Vec<AtomicU64>,
}

impl Live {
    pub fn new(threads: u32) -> Live {
        Live {
            start: Instant::now(),
            ops: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            max_pause_us: AtomicU64::new(0),
            waiting_since: (0..threads).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    pub fn since_start_us(&self) -> u64 {
        self.start.elapsed().as_micros() as u64
    }

    /// The longest pause so far, counting waits still going on.
    fn current_max_pause_us(&self) -> u64 {
        let now = self.since_start_us();
        let ongoing = self
            .waiting_since
            .iter()
            .map(|w| w.load(Ordering::Relaxed))
            .filter(|&w| w > 0)
            .map(|w| now.saturating_sub(w - 1))
            .max()
            .unwrap_or(0);
        ongoing.max(self.max_pause_us.load(Ordering::Relaxed))
    }

    /// Prints one progress line per second to stderr until `stop` is set.
    pub fn print_progress(&self, stop: &AtomicBool) {
        let mut last_ops = 0;
        let mut next = self.start + Duration::from_secs(1);
        while !stop.load(Ordering::Relaxed) {
            if Instant::now() < next {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            next += Duration::from_secs(1);
            let ops = self.ops.load(Ordering::Relaxed);
            eprintln!(
                "rrc-check: {:6.1} s  ops {} (+{}/s)  errors {}  max pause {:.1} ms",
                self.start.elapsed().as_secs_f64(),
                ops,
                ops - last_ops,
                self.errors.load(Ordering::Relaxed),
                self.current_max_pause_us() as f64 / 1000.0
            );
            last_ops = ops;
        }
    }
}

/// Classifies a failed operation.
pub fn classify(e: &OpError) -> ErrorKind {
    match e {
        OpError::Io(io) if is_timeout(io) => ErrorKind::Timeout,
        OpError::Io(_) => ErrorKind::ConnectionReset,
        OpError::Protocol(_) => ErrorKind::Protocol,
    }
}

/// One thread's view of the run.
pub struct Worker<'a> {
    pub live: &'a Live,
    pub thread: u32,
    deadline: Option<Instant>,
    quota: Option<u64>,
    pacer: Option<Pacer>,
    pub tally: Tally,
}

/// What one thread counted.
#[derive(Default)]
pub struct Tally {
    pub latency: Histogram,
    pub sets: u64,
    pub gets: u64,
    pub errors: ErrorCounts,
    pub samples: Vec<ErrorSample>,
    pub pause: Pause,
    /// When the thread stopped (us since start).
    pub ended_us: u64,
}

impl<'a> Worker<'a> {
    pub fn new(live: &'a Live, plan: &Plan, thread: u32) -> Worker<'a> {
        let pacer = (plan.rate > 0.0).then(|| Pacer::for_thread(plan.rate, plan.threads, thread, live.start));
        Worker {
            live,
            thread,
            deadline: plan.duration.map(|d| live.start + d),
            quota: plan.quota(thread),
            pacer,
            tally: Tally::default(),
        }
    }

    /// Whether another op may start (quota, deadline, rate schedule);
    /// sleeps until the op's slot with --rate.
    pub fn may_start(&mut self) -> bool {
        if self.quota.is_some_and(|q| self.tally.sets + self.tally.gets >= q) {
            return false;
        }
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return false;
        }
        match &mut self.pacer {
            Some(p) => p.wait(self.deadline),
            None => true,
        }
    }

    /// Runs one request/reply exchange, timing the wait: latency when it
    /// completes, and the pause in any case (a wait that ends in a timeout
    /// or reset is a pause the client saw too).
    pub fn timed<T>(&mut self, op: impl FnOnce() -> Result<T, OpError>) -> Result<T, OpError> {
        let began = self.live.since_start_us();
        let slot = &self.live.waiting_since[self.thread as usize];
        slot.store(began + 1, Ordering::Relaxed);
        let t0 = Instant::now();
        let result = op();
        let us = t0.elapsed().as_micros() as u64;
        slot.store(0, Ordering::Relaxed);
        self.tally.pause.note(us, began);
        self.live.max_pause_us.fetch_max(us, Ordering::Relaxed);
        if result.is_ok() {
            self.tally.latency.record(us);
            self.live.ops.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    /// Counts an error, keeping the first samples.
    pub fn error(&mut self, kind: ErrorKind, key: &str, detail: String) {
        tracing::debug!(thread = self.thread, ?kind, key, %detail, "error");
        self.tally.errors.add(kind);
        self.live.errors.fetch_add(1, Ordering::Relaxed);
        // The first of each kind is kept even past MAX_SAMPLES, so one
        // reset is not hidden behind a flood of mismatches.
        if self.tally.samples.len() < MAX_SAMPLES || !self.tally.samples.iter().any(|s| s.kind == kind) {
            self.tally.samples.push(ErrorSample {
                kind,
                at_s: self.live.since_start_us() as f64 / 1e6,
                thread: self.thread,
                key: key.to_string(),
                detail,
            });
        }
    }

    /// Counts a failed exchange; the thread must stop afterwards.
    pub fn failed(&mut self, what: &str, key: &str, e: &OpError) {
        let kind = classify(e);
        self.error(kind, key, format!("{what}: {e}"));
    }

    pub fn finish(mut self) -> Tally {
        self.tally.ended_us = self.live.since_start_us();
        self.tally
    }
}

/// Merges the threads' tallies into the report.
pub fn report(kind: &str, server: &str, plan: &Plan, tallies: &[Tally]) -> Report {
    let mut latency = Histogram::default();
    let mut errors = ErrorCounts::default();
    let mut pause = Pause::default();
    let mut samples = Vec::new();
    let (mut sets, mut gets, mut ended_us) = (0, 0, 0);
    for t in tallies {
        latency.merge(&t.latency);
        errors.merge(&t.errors);
        pause.note(t.pause.us, t.pause.at_us);
        samples.extend(t.samples.iter().cloned());
        sets += t.sets;
        gets += t.gets;
        ended_us = ended_us.max(t.ended_us);
    }
    let duration_s = ended_us as f64 / 1e6;
    let ops = sets + gets;
    Report {
        kind: kind.to_string(),
        server: server.to_string(),
        threads: plan.threads,
        duration_s,
        ops,
        sets,
        gets,
        throughput_ops_s: if duration_s > 0.0 { ops as f64 / duration_s } else { 0.0 },
        latency_us: latency.summary(),
        max_pause_ms: pause.us as f64 / 1000.0,
        max_pause_at_s: pause.at_us as f64 / 1e6,
        ok: errors.total() == 0 && ops > 0,
        errors,
        error_samples: first_samples(samples),
    }
}

/// Runs `body` on `plan.threads` threads (and the progress printer if
/// asked), returning what each thread returned, in thread order.
pub fn run_threads<T: Send>(plan: &Plan, live: &Live, body: impl Fn(u32) -> T + Sync) -> Vec<T> {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let progress = plan.progress.then(|| s.spawn(|| live.print_progress(&stop)));
        let body = &body;
        let handles: Vec<_> = (0..plan.threads)
            .map(|t| {
                std::thread::Builder::new()
                    .name(format!("check-{t}"))
                    .spawn_scoped(s, move || body(t))
                    .expect("spawning a checker thread")
            })
            .collect();
        let results: Vec<T> =
            handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect();
        stop.store(true, Ordering::Relaxed);
        if let Some(p) = progress {
            let _ = p.join();
        }
        results
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(threads: u32, ops: Option<u64>) -> Plan {
        Plan { threads, duration: None, ops, rate: 0.0, timeout: Duration::from_secs(1), progress: false }
    }

    #[test]
    fn quotas_add_up() {
        let p = plan(3, Some(10));
        assert_eq!((0..3).map(|t| p.quota(t).unwrap()).collect::<Vec<_>>(), vec![4, 3, 3]);
        assert_eq!(plan(3, None).quota(0), None);
    }

    #[test]
    fn classification() {
        use std::io::{Error, ErrorKind as K};
        assert_eq!(classify(&OpError::Io(Error::from(K::WouldBlock))), ErrorKind::Timeout);
        assert_eq!(classify(&OpError::Io(Error::from(K::TimedOut))), ErrorKind::Timeout);
        assert_eq!(classify(&OpError::Io(Error::from(K::ConnectionReset))), ErrorKind::ConnectionReset);
        assert_eq!(classify(&OpError::Io(Error::from(K::UnexpectedEof))), ErrorKind::ConnectionReset);
        assert_eq!(classify(&OpError::Io(Error::from(K::BrokenPipe))), ErrorKind::ConnectionReset);
        assert_eq!(classify(&OpError::Protocol("x".into())), ErrorKind::Protocol);
    }

    #[test]
    fn worker_times_waits_and_reports() {
        let p = plan(1, Some(2));
        let live = Live::new(1);
        let mut w = Worker::new(&live, &p, 0);
        assert!(w.may_start());
        w.timed(|| {
            std::thread::sleep(Duration::from_millis(20));
            Ok(())
        })
        .unwrap();
        w.tally.sets += 1;
        let r: Result<(), _> = w.timed(|| Err(OpError::Protocol("bad".into())));
        w.failed("GET", "k", &r.unwrap_err());
        let t = w.finish();
        assert!(t.pause.us >= 20_000);
        assert_eq!(t.latency.count(), 1);
        let rep = report("redis", "x", &p, &[t]);
        assert!(!rep.ok);
        assert_eq!(rep.errors.protocol, 1);
        assert_eq!(rep.error_samples[0].detail, "GET: bad");
        assert!(rep.max_pause_ms >= 20.0);
        let json = serde_json::to_value(&rep).unwrap();
        for f in [
            "kind",
            "server",
            "threads",
            "duration_s",
            "ops",
            "sets",
            "gets",
            "throughput_ops_s",
            "latency_us",
            "max_pause_ms",
            "max_pause_at_s",
            "errors",
            "error_samples",
            "ok",
        ] {
            assert!(json.get(f).is_some(), "{f}");
        }
    }
}
