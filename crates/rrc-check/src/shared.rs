//! The shared-key load (`rrc-check shared`): every thread, on its one
//! connection, reads and writes the same few keys, and records each
//! operation with the instants its request was sent and its reply read. At
//! the end the whole history must be linearizable (linear.rs): whatever the
//! server did behind its address (a failover, two hosts serving at once),
//! the clients together must have seen one register per key.
//!
//! Instants come from `Instant` (CLOCK_MONOTONIC on Linux), as nanoseconds
//! since the run's start, one clock for every thread; an operation is stamped
//! before its request is written and after its reply is parsed, so its true
//! interval at the server lies inside the recorded one.

use std::io::{BufRead, BufReader, BufWriter, Write as _};
use std::path::Path;
use std::time::Instant;

use anyhow::Context;

use crate::check::padded;
use crate::kv::{KvClient, KvKind, Rng};
use crate::linear::{self, Completed, Op, OpKind, Verdict};
use crate::run::{report, run_threads, Live, Plan, Tally, Worker};
use crate::stats::{ErrorKind, Report};

/// Search steps per key before the check gives up (about 50 ns each; a
/// healthy history needs about two per operation).
pub const DEFAULT_CHECK_STEPS: u64 = 10_000_000;

pub struct SharedSpec {
    pub kind: KvKind,
    pub server: String,
    pub addr: std::net::SocketAddr,
    pub keys: u32,
    pub value_size: usize,
    pub run: String,
}

/// The name of shared key `k`: `rrc-check:<run-id>:shared:<k>`.
pub fn key_name(run: &str, k: u32) -> String {
    format!("rrc-check:{run}:shared:{k}")
}

/// The value of thread `thread`'s `seq`-th write, unique in the run:
/// `rrc-check|<run-id>|t<thread>|s<seq>|` padded to `size` bytes.
pub fn value(run: &str, thread: u32, seq: u64, size: usize) -> String {
    let seed = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(thread);
    // ASCII by construction.
    String::from_utf8_lossy(&padded(format!("rrc-check|{run}|t{thread}|s{seq}|"), seed, size)).into_owned()
}

fn since(start: Instant) -> u64 {
    start.elapsed().as_nanos() as u64
}

fn thread_body(spec: &SharedSpec, plan: &Plan, live: &Live, thread: u32) -> (Tally, Vec<Op>) {
    let mut w = Worker::new(live, plan, thread);
    let mut ops = Vec::new();
    match spec.kind.connect(spec.addr, plan.timeout) {
        Ok(mut client) => run_ops(spec, &mut w, client.as_mut(), &mut ops),
        Err(e) => w.error(ErrorKind::ConnectionReset, "", format!("connect to {}: {e}", spec.addr)),
    }
    (w.finish(), ops)
}

/// Random SETs and GETs of random shared keys until the plan ends or an
/// operation fails: that one is recorded with an unknown outcome and the
/// thread stops, as in the other loads. A protocol error counts as unknown
/// too: what the server did with a request whose reply made no sense is
/// not known either.
fn run_ops(spec: &SharedSpec, w: &mut Worker, client: &mut dyn KvClient, ops: &mut Vec<Op>) {
    let names: Vec<String> = (0..spec.keys).map(|k| key_name(&spec.run, k)).collect();
    let start = w.live.start;
    let thread = w.thread;
    let mut record = |key: &str, kind, invoked_ns, completed| {
        ops.push(Op { client: thread, key: key.to_string(), kind, invoked_ns, completed });
    };
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (u64::from(thread) + 1).wrapping_mul(0xD1B5_4A32_D192_ED03));
    let mut seq = 0;
    while w.may_start() {
        let key = names[rng.below(spec.keys) as usize].as_str();
        if rng.below(2) == 0 {
            seq += 1;
            let v = value(&spec.run, thread, seq, spec.value_size);
            let invoked_ns = since(start);
            let result = w.timed(|| client.set(key, v.as_bytes()));
            let completed = if result.is_ok() { Completed::Ok(since(start)) } else { Completed::Unknown };
            record(key, OpKind::Write(v), invoked_ns, completed);
            match result {
                Ok(()) => w.tally.sets += 1,
                Err(e) => return w.failed("SET", key, &e),
            }
        } else {
            let invoked_ns = since(start);
            let result = w.timed(|| client.get(key));
            let completed_ns = since(start);
            let got = match result {
                Ok(got) => got,
                Err(e) => {
                    record(key, OpKind::Read(None), invoked_ns, Completed::Unknown);
                    return w.failed("GET", key, &e);
                }
            };
            w.tally.gets += 1;
            if let Some(m) = got.as_ref().and_then(|s| spec.kind.check_flags(s)) {
                w.error(ErrorKind::Mismatch, key, m);
            }
            // Bytes that are not UTF-8 become a string no write wrote (with
            // the replacement character), which the check reports as such.
            let seen = got.map(|s| String::from_utf8_lossy(&s.data).into_owned());
            record(key, OpKind::Read(seen), invoked_ns, Completed::Ok(completed_ns));
        }
    }
}

/// Runs the load; returns its report (without the verdict) and the history
/// in invocation order.
pub fn run(spec: &SharedSpec, plan: &Plan) -> (Report, Vec<Op>) {
    let live = Live::new(plan.threads);
    tracing::info!(kind = spec.kind.name(), server = %spec.server, run = %spec.run, keys = spec.keys, "starting");
    let results = run_threads(plan, &live, |t| thread_body(spec, plan, &live, t));
    let (tallies, ops): (Vec<_>, Vec<_>) = results.into_iter().unzip();
    let report = report(&format!("shared {}", spec.kind.name()), &spec.server, plan, &tallies);
    let mut history: Vec<Op> = ops.into_iter().flatten().collect();
    history.sort_by_key(|o| (o.invoked_ns, o.client));
    (report, history)
}

/// The check of a history, as reported.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LinearReport {
    /// true, false, or null when the search ran out of steps.
    pub linearizable: Option<bool>,
    /// Why not (or why undecided); null when linearizable.
    pub explanation: Option<String>,
    pub history_ops: u64,
    /// Operations without a reply (timeout, connection error).
    pub unknown_ops: u64,
    pub keys: u64,
    pub check_ms: f64,
}

impl LinearReport {
    pub fn of(history: &[Op], max_steps: u64) -> LinearReport {
        let t0 = Instant::now();
        let verdict = linear::check(history, max_steps);
        let check_ms = t0.elapsed().as_secs_f64() * 1e3;
        let keys: std::collections::HashSet<&str> = history.iter().map(|o| o.key.as_str()).collect();
        LinearReport {
            linearizable: verdict.linearizable(),
            explanation: (verdict != Verdict::Linearizable).then(|| verdict.to_string()),
            history_ops: history.len() as u64,
            unknown_ops: history.iter().filter(|o| o.completed == Completed::Unknown).count() as u64,
            keys: keys.len() as u64,
            check_ms,
        }
    }

    pub fn ok(&self) -> bool {
        self.linearizable == Some(true)
    }

    /// `linearizable: yes (N ops, M unknown, K keys, checked in X ms)`, then
    /// the explanation on its own line if not.
    pub fn summary(&self) -> String {
        let answer = match self.linearizable {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "UNDECIDED",
        };
        let mut s = format!(
            "linearizable: {answer} ({} ops, {} unknown, {} keys, checked in {:.0} ms)",
            self.history_ops, self.unknown_ops, self.keys, self.check_ms
        );
        if let Some(e) = &self.explanation {
            s.push_str("\n  ");
            s.push_str(e);
        }
        s
    }
}

/// A shared run's result: the load's report and the check, one JSON object.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SharedReport {
    #[serde(flatten)]
    pub load: Report,
    #[serde(flatten)]
    pub check: LinearReport,
}

impl SharedReport {
    /// `ok` then also requires a linearizable history.
    pub fn new(mut load: Report, check: LinearReport) -> SharedReport {
        load.ok = load.ok && check.ok();
        SharedReport { load, check }
    }

    pub fn summary_line(&self) -> String {
        format!("{}; {}", self.load.summary_line(), self.check.summary())
    }
}

/// Writes the history as JSON lines, one operation per line.
pub fn write_history(path: &Path, history: &[Op]) -> anyhow::Result<()> {
    let write = || -> std::io::Result<()> {
        let mut out = BufWriter::new(std::fs::File::create(path)?);
        for op in history {
            serde_json::to_writer(&mut out, op)?;
            out.write_all(b"\n")?;
        }
        out.flush()
    };
    write().with_context(|| format!("writing the history to {}", path.display()))
}

/// Reads a history written by [`write_history`] (blank lines are skipped).
pub fn read_history(path: &Path) -> anyhow::Result<Vec<Op>> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut history = Vec::new();
    for (n, line) in BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("reading {}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let op = serde_json::from_str(&line).with_context(|| format!("{} line {}", path.display(), n + 1))?;
        history.push(op);
    }
    Ok(history)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_unique_named_and_padded() {
        let a = value("r1", 3, 7, 64);
        assert_eq!(a.len(), 64);
        assert!(a.starts_with("rrc-check|r1|t3|s7|"), "{a}");
        assert_ne!(a, value("r1", 3, 8, 64));
        assert_ne!(a, value("r1", 4, 7, 64));
        assert_eq!(value("r1", 3, 7, 4), "rrc-check|r1|t3|s7|");
        assert_eq!(key_name("r1", 5), "rrc-check:r1:shared:5");
    }

    #[test]
    fn history_files_round_trip() {
        let h = vec![
            Op {
                client: 0,
                key: "k".into(),
                kind: OpKind::Write("a".into()),
                invoked_ns: 1,
                completed: Completed::Ok(2),
            },
            Op { client: 1, key: "k".into(), kind: OpKind::Read(None), invoked_ns: 3, completed: Completed::Unknown },
        ];
        let dir = std::env::temp_dir().join(format!("rrc-check-history-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("h.jsonl");
        write_history(&p, &h).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap().lines().count(), 2);
        assert_eq!(read_history(&p).unwrap(), h);
        std::fs::write(&p, "\n{\"client\":0}\n").unwrap();
        let e = read_history(&p).unwrap_err();
        assert!(format!("{e:#}").contains("line 2"), "{e:#}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn reports_say_what_was_decided() {
        let w = |v: &str, a, b| Op {
            client: 0,
            key: "k".into(),
            kind: OpKind::Write(v.into()),
            invoked_ns: a,
            completed: Completed::Ok(b),
        };
        let r = |v: Option<&str>, a, b| Op {
            client: 1,
            key: "k".into(),
            kind: OpKind::Read(v.map(String::from)),
            invoked_ns: a,
            completed: Completed::Ok(b),
        };
        let good = LinearReport::of(&[w("a", 1, 2), r(Some("a"), 3, 4)], 1000);
        assert!(good.ok() && good.explanation.is_none());
        assert!(good.summary().starts_with("linearizable: yes (2 ops, 0 unknown, 1 keys"), "{}", good.summary());
        let bad = LinearReport::of(&[w("a", 1, 2), r(None, 3, 4)], 1000);
        assert_eq!(bad.linearizable, Some(false));
        assert!(bad.summary().contains("linearizable: NO") && bad.summary().contains("\n  not linearizable: key k"));
        let json = serde_json::to_value(&bad).unwrap();
        for f in ["linearizable", "explanation", "history_ops", "unknown_ops", "keys", "check_ms"] {
            assert!(json.get(f).is_some(), "{f}");
        }
        let undecided = LinearReport::of(&[w("a", 1, 10), w("b", 2, 9), r(Some("a"), 11, 12)], 1);
        assert_eq!(undecided.linearizable, None);
        assert!(!undecided.ok());
        assert!(undecided.summary().contains("UNDECIDED"), "{}", undecided.summary());
    }
}
