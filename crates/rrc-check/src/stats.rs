//! What a run measures: latencies (a log-linear histogram), the longest
//! client-visible pause, error counts with the first samples, and the report.

use serde::{Deserialize, Serialize};

/// Latency histogram in microseconds: exact below 128 us, then 64 buckets
/// per power of two (under 1.6 % relative error), so memory stays fixed
/// however long a benchmark runs.
#[derive(Debug, Clone)]
pub struct Histogram {
    buckets: Vec<u64>,
    count: u64,
    max: u64,
    /// Exact sum of the recorded values, for the mean (benchmarks report
    /// average latency; the buckets would round it).
    sum: u128,
}

const LINEAR: u64 = 128;
const SUB: u64 = 64;

fn bucket_of(v: u64) -> usize {
    if v < LINEAR {
        return v as usize;
    }
    // v in [2^e, 2^(e+1)), e >= 7: keep the top 7 bits (64..127 after shift).
    let e = 63 - u64::from(v.leading_zeros());
    let shift = e - 6;
    let mantissa = (v >> shift) - SUB; // 0..63
    (LINEAR + (shift - 1) * SUB + mantissa) as usize
}

/// The largest value that falls in bucket `b`.
fn bucket_top(b: usize) -> u64 {
    let b = b as u64;
    if b < LINEAR {
        return b;
    }
    let shift = (b - LINEAR) / SUB + 1;
    let mantissa = (b - LINEAR) % SUB + SUB;
    let top = (u128::from(mantissa + 1) << shift) - 1;
    u64::try_from(top).unwrap_or(u64::MAX)
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram { buckets: vec![0; bucket_of(u64::MAX) + 1], count: 0, max: 0, sum: 0 }
    }
}

impl Histogram {
    pub fn record(&mut self, us: u64) {
        self.buckets[bucket_of(us)] += 1;
        self.count += 1;
        self.max = self.max.max(us);
        self.sum += u128::from(us);
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
            *a += b;
        }
        self.count += other.count;
        self.max = self.max.max(other.max);
        self.sum += other.sum;
    }

    #[cfg(test)]
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The value at quantile `q` (0..=1), as the top of its bucket (never
    /// above the true maximum); 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (b, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return bucket_top(b).min(self.max);
            }
        }
        self.max
    }

    pub fn summary(&self) -> Latency {
        let mean = if self.count == 0 { 0 } else { u64::try_from(self.sum / u128::from(self.count)).unwrap_or(u64::MAX) };
        Latency { p50: self.quantile(0.50), p90: self.quantile(0.90), p99: self.quantile(0.99), max: self.max, mean }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Latency {
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub max: u64,
    /// Arithmetic mean (exact, truncated to whole microseconds); absent in
    /// reports of older versions.
    #[serde(default)]
    pub mean: u64,
}

/// The kinds of error a run counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// A read returned a value that was never an allowed one.
    Mismatch,
    /// A read returned an older value than the last acknowledged write.
    LostWrite,
    /// The connection failed (reset, EOF, refused): the thread stops.
    ConnectionReset,
    /// No reply within --timeout: the thread stops.
    Timeout,
    /// The server answered something unexpected: the thread stops.
    Protocol,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorCounts {
    pub mismatch: u64,
    pub lost_write: u64,
    pub connection_reset: u64,
    pub timeout: u64,
    pub protocol: u64,
}

impl ErrorCounts {
    pub fn add(&mut self, kind: ErrorKind) {
        match kind {
            ErrorKind::Mismatch => self.mismatch += 1,
            ErrorKind::LostWrite => self.lost_write += 1,
            ErrorKind::ConnectionReset => self.connection_reset += 1,
            ErrorKind::Timeout => self.timeout += 1,
            ErrorKind::Protocol => self.protocol += 1,
        }
    }

    pub fn merge(&mut self, o: &ErrorCounts) {
        self.mismatch += o.mismatch;
        self.lost_write += o.lost_write;
        self.connection_reset += o.connection_reset;
        self.timeout += o.timeout;
        self.protocol += o.protocol;
    }

    pub fn total(&self) -> u64 {
        self.mismatch + self.lost_write + self.connection_reset + self.timeout + self.protocol
    }

    /// `mismatch=1 timeout=2`, or `none`.
    pub fn describe(&self) -> String {
        let all = [
            ("mismatch", self.mismatch),
            ("lost_write", self.lost_write),
            ("connection_reset", self.connection_reset),
            ("timeout", self.timeout),
            ("protocol", self.protocol),
        ];
        let parts: Vec<String> = all.iter().filter(|(_, n)| *n > 0).map(|(k, n)| format!("{k}={n}")).collect();
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join(" ")
        }
    }
}

/// One error, for the report's first samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorSample {
    pub kind: ErrorKind,
    /// Seconds since the run started.
    pub at_s: f64,
    pub thread: u32,
    /// The key (kv) or URL path (http) concerned.
    pub key: String,
    pub detail: String,
}

/// How many samples a report keeps (and each thread collects).
pub const MAX_SAMPLES: usize = 10;

/// The longest wait for a reply and when it began.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Pause {
    pub us: u64,
    pub at_us: u64,
}

impl Pause {
    pub fn note(&mut self, us: u64, at_us: u64) {
        if us > self.us {
            *self = Pause { us, at_us };
        }
    }
}

/// The result of a load run, printed as one JSON object with --json.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// redis, memcached or http.
    pub kind: String,
    /// IP:PORT, or the URL for http.
    pub server: String,
    pub threads: u32,
    pub duration_s: f64,
    /// sets + gets.
    pub ops: u64,
    pub sets: u64,
    pub gets: u64,
    pub throughput_ops_s: f64,
    pub latency_us: Latency,
    /// The longest interval any thread waited for one reply, including
    /// waits that ended in a timeout or reset.
    pub max_pause_ms: f64,
    /// When that wait began, in seconds since the start of the run.
    pub max_pause_at_s: f64,
    pub errors: ErrorCounts,
    pub error_samples: Vec<ErrorSample>,
    /// No error and at least one operation done.
    pub ok: bool,
}

impl Report {
    pub fn summary_line(&self) -> String {
        format!(
            "rrc-check {} {}: {}: {} ops ({} sets, {} gets) in {:.2} s = {:.0} ops/s, {} threads; \
latency us p50 {} p90 {} p99 {} max {}; max pause {:.1} ms at {:.2} s; errors: {}",
            self.kind,
            self.server,
            if self.ok { "ok" } else { "FAIL" },
            self.ops,
            self.sets,
            self.gets,
            self.duration_s,
            self.throughput_ops_s,
            self.threads,
            self.latency_us.p50,
            self.latency_us.p90,
            self.latency_us.p99,
            self.latency_us.max,
            self.max_pause_ms,
            self.max_pause_at_s,
            self.errors.describe(),
        )
    }
}

/// Keeps the first MAX_SAMPLES samples in time order, but always the first
/// one of each kind (so a rare kind is not crowded out by a frequent one).
pub fn first_samples(mut all: Vec<ErrorSample>) -> Vec<ErrorSample> {
    all.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    let mut kept: Vec<ErrorSample> = Vec::new();
    for s in &all {
        if !kept.iter().any(|k| k.kind == s.kind) {
            kept.push(s.clone());
        }
    }
    for s in all {
        if kept.len() >= MAX_SAMPLES {
            break;
        }
        if !kept.contains(&s) {
            kept.push(s);
        }
    }
    kept.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_tight() {
        let mut last = 0;
        for v in (0..100_000u64).chain([1 << 20, (1 << 40) + 12345, u64::MAX / 2, u64::MAX]) {
            let b = bucket_of(v);
            assert!(b >= last, "v={v}");
            last = b;
            let top = bucket_top(b);
            assert!(top >= v, "v={v} top={top}");
            // Relative error under 1/64.
            assert!((top - v) as f64 <= v as f64 / 64.0 + 1.0, "v={v} top={top}");
            if b > 0 {
                assert!(bucket_top(b - 1) < v, "v={v}");
            }
        }
    }

    #[test]
    fn quantiles() {
        let mut h = Histogram::default();
        assert_eq!(h.quantile(0.5), 0);
        for v in 1..=1000 {
            h.record(v);
        }
        let s = h.summary();
        assert_eq!(s.max, 1000);
        assert_eq!(s.mean, 500); // 500.5 truncated
        assert!((495..=510).contains(&s.p50), "{s:?}");
        assert!((895..=910).contains(&s.p90), "{s:?}");
        assert!((985..=1000).contains(&s.p99), "{s:?}");
        let mut other = Histogram::default();
        other.record(50_000);
        h.merge(&other);
        assert_eq!(h.count(), 1001);
        assert_eq!(h.summary().max, 50_000);
        assert_eq!(h.quantile(1.0), 50_000);
    }

    #[test]
    fn error_counts() {
        let mut e = ErrorCounts::default();
        assert_eq!(e.describe(), "none");
        e.add(ErrorKind::Mismatch);
        e.add(ErrorKind::Timeout);
        e.add(ErrorKind::Timeout);
        assert_eq!(e.total(), 3);
        assert_eq!(e.describe(), "mismatch=1 timeout=2");
        assert_eq!(serde_json::to_string(&ErrorKind::LostWrite).unwrap(), "\"lost_write\"");
    }

    #[test]
    fn pause_keeps_longest() {
        let mut p = Pause::default();
        p.note(5, 100);
        p.note(9, 200);
        p.note(7, 300);
        assert_eq!(p, Pause { us: 9, at_us: 200 });
    }

    #[test]
    fn samples_sorted_and_capped() {
        let s: Vec<ErrorSample> = (0..15)
            .rev()
            .map(|i| ErrorSample {
                kind: ErrorKind::Mismatch,
                at_s: i as f64,
                thread: 0,
                key: String::new(),
                detail: String::new(),
            })
            .collect();
        let f = first_samples(s);
        assert_eq!(f.len(), MAX_SAMPLES);
        assert_eq!(f[0].at_s, 0.0);
        assert_eq!(f[9].at_s, 9.0);
        // A rare kind late in the run is kept.
        let mut s: Vec<ErrorSample> = f.clone();
        s.push(ErrorSample {
            kind: ErrorKind::Timeout,
            at_s: 20.0,
            thread: 1,
            key: String::new(),
            detail: String::new(),
        });
        let f = first_samples(s);
        assert_eq!(f.len(), MAX_SAMPLES);
        assert_eq!(f[9].kind, ErrorKind::Timeout);
        assert_eq!(f[8].at_s, 8.0);
    }
}
