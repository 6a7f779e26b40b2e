//! Is a history of reads and writes on shared keys linearizable?
//!
//! The model is a read/write register per key (Knossos, Porcupine): a key
//! starts absent, a write sets its value, a read returns the current value
//! (None while absent). Every operation has an interval, from just before its
//! request was sent to just after its reply was read, on one clock for all
//! clients; the history is linearizable if every operation can be given one
//! instant inside its interval such that, in the order of those instants,
//! every read returns the value of the write before it. An operation whose
//! outcome is unknown (timeout, reset) has no end: a write may take effect at
//! any instant after its invocation, or never; a read tells nothing and is
//! dropped.
//!
//! Keys are independent (linearizability is compositional, P-compositional
//! in Porcupine's terms), so each key is checked alone. Per key, before any
//! search, every read must return a value written to that key by a write
//! invoked before the read completed (or None): that catches corruption,
//! values from elsewhere and reads from the future with a direct
//! explanation. Then the search of Wing & Gong, as Lowe and Porcupine refine
//! it: the invocations and completions in time order in a linked list; walk
//! it from the start, and at an invocation try to let that operation take
//! effect now (a write always can, a read if the register holds its value);
//! if it can, take both its events out of the list and start over; at a
//! completion whose operation has not taken effect, undo the last choice
//! and try the next invocation. Porcupine's cache keeps it from exploring a
//! (set of operations done, register value) twice. Values are unique
//! (rrc-check's writes name their thread and a sequence number), so a read
//! fits only right after the one write of its value: a wrong order dies at
//! the next read, and a healthy history costs about two steps per operation
//! (8 clients x 2000 operations on 4 keys: about 10 ms). With repeated
//! values the check is still correct, only slower.
//!
//! The search is bounded: after `max_steps` iterations on one key it gives
//! up with [`Verdict::Undecided`], which the caller must report as such (never
//! as a pass), so a pathological history cannot hang a test. A step takes
//! about 50 ns and adds at most one 16-byte entry to the cache, so the bound
//! limits memory too.
//!
//! When a key's history is not linearizable, the explanation names the
//! operation at which the search got furthest before it failed: the first
//! completion that no order of the earlier operations could get past,
//! usually a read, with the value it returned, where that value came from,
//! and the values the key could hold instead when the read had to take
//! effect.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};

use serde::{Deserialize, Serialize};

/// One operation of the history, as a client saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "OpLine", try_from = "OpLine")]
pub struct Op {
    /// Which connection did it (its operations are sequential).
    pub client: u32,
    pub key: String,
    pub kind: OpKind,
    /// When the request was about to be sent (ns, one clock for all clients).
    pub invoked_ns: u64,
    pub completed: Completed,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpKind {
    Write(String),
    /// The value returned; None when the key did not exist.
    Read(Option<String>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completed {
    /// The reply was read at this instant (ns, >= invoked_ns).
    Ok(u64),
    /// No reply (timeout, connection error): a write may have taken effect at
    /// any instant after its invocation, or not at all.
    Unknown,
}

/// How an operation is written in a history file: one JSON object per line,
/// `{"client":0,"key":"k","op":"write","value":"v","invoked_ns":1,"completed_ns":2}`;
/// a read of an absent key has `"value":null`, an unknown outcome
/// `"completed_ns":null`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct OpLine {
    client: u32,
    key: String,
    op: OpName,
    value: Option<String>,
    invoked_ns: u64,
    completed_ns: Option<u64>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum OpName {
    Write,
    Read,
}

impl From<Op> for OpLine {
    fn from(op: Op) -> OpLine {
        let (name, value) = match op.kind {
            OpKind::Write(v) => (OpName::Write, Some(v)),
            OpKind::Read(v) => (OpName::Read, v),
        };
        let completed_ns = match op.completed {
            Completed::Ok(t) => Some(t),
            Completed::Unknown => None,
        };
        OpLine { client: op.client, key: op.key, op: name, value, invoked_ns: op.invoked_ns, completed_ns }
    }
}

impl TryFrom<OpLine> for Op {
    type Error = String;

    fn try_from(l: OpLine) -> Result<Op, String> {
        let kind = match (l.op, l.value) {
            (OpName::Write, Some(v)) => OpKind::Write(v),
            (OpName::Write, None) => return Err("a write without a value".into()),
            (OpName::Read, v) => OpKind::Read(v),
        };
        let completed = match l.completed_ns {
            Some(t) if t < l.invoked_ns => {
                return Err(format!("completed_ns {t} before invoked_ns {}", l.invoked_ns));
            }
            Some(t) => Completed::Ok(t),
            None => Completed::Unknown,
        };
        Ok(Op { client: l.client, key: l.key, kind, invoked_ns: l.invoked_ns, completed })
    }
}

/// What the check decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Linearizable,
    /// The first key (in key order) found not linearizable.
    NotLinearizable(Box<Violation>),
    /// The search ran out of steps on this key (and found no violation on
    /// any key): neither a pass nor a failure.
    Undecided {
        key: String,
        steps: u64,
    },
}

impl Verdict {
    /// true, false, or None when undecided.
    pub fn linearizable(&self) -> Option<bool> {
        match self {
            Verdict::Linearizable => Some(true),
            Verdict::NotLinearizable(_) => Some(false),
            Verdict::Undecided { .. } => None,
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Linearizable => write!(f, "linearizable"),
            Verdict::NotLinearizable(v) => write!(f, "not linearizable: {v}"),
            Verdict::Undecided { key, steps } => {
                write!(f, "undecided: the search on key {key} gave up after {steps} steps (raise the step budget)")
            }
        }
    }
}

/// Why a key's history is not linearizable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub key: String,
    /// The operation that cannot take effect anywhere in its interval.
    pub op: Op,
    /// For a read of a value: the write of that value (the earliest invoked),
    /// if there is one.
    pub source: Option<Op>,
    pub reason: Reason,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// The read returned a value no write on this key wrote.
    NeverWritten,
    /// The read returned a value whose write was invoked only after the read
    /// had completed.
    WrittenLater,
    /// No order of the operations before the completion of `op` lets it take
    /// effect: when it had to, the key could only hold one of these (None =
    /// absent, Some = that write's value). At most [`MAX_SHOWN`] of them.
    CouldOnlyHold(Vec<Option<Op>>),
}

/// How many alternative values an explanation lists.
pub const MAX_SHOWN: usize = 8;

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "key {}: {}", self.key, describe(&self.op))?;
        if let OpKind::Read(Some(_)) = self.op.kind {
            match &self.source {
                Some(w) => write!(f, " ({})", origin(w))?,
                None => write!(f, " (never written to this key)")?,
            }
        }
        match &self.reason {
            Reason::NeverWritten => write!(f, ": no write on this key wrote that value"),
            Reason::WrittenLater => write!(f, ": that write began only after the read had completed"),
            Reason::CouldOnlyHold(alternatives) => {
                let shown: Vec<String> = alternatives
                    .iter()
                    .map(|a| match a {
                        None => "absent (no write yet)".to_string(),
                        Some(w) => format!("{} ({})", short(written(w)), origin(w)),
                    })
                    .collect();
                let verb = if matches!(self.op.kind, OpKind::Read(_)) { "the read" } else { "it" };
                write!(f, "; when {verb} had to take effect the key could only hold {}", shown.join(", or "))
            }
        }
    }
}

/// `client 3's read in [1.000100, 1.000250] s returned "..."`.
fn describe(op: &Op) -> String {
    let interval = interval(op);
    match &op.kind {
        OpKind::Write(v) => format!("client {}'s write of {} in {interval}", op.client, short(v)),
        OpKind::Read(Some(v)) => format!("client {}'s read in {interval} returned {}", op.client, short(v)),
        OpKind::Read(None) => format!("client {}'s read in {interval} found the key absent", op.client),
    }
}

/// `written by client 2 in [1.000100, 1.000250] s`.
fn origin(write: &Op) -> String {
    format!("written by client {} in {}", write.client, interval(write))
}

/// `[1.000100, 1.000250] s` (seconds on the history's clock; `?`: unknown).
fn interval(op: &Op) -> String {
    let end = match op.completed {
        Completed::Ok(t) => format!("{:.6}", t as f64 / 1e9),
        Completed::Unknown => "?".to_string(),
    };
    format!("[{:.6}, {end}] s", op.invoked_ns as f64 / 1e9)
}

fn written(op: &Op) -> &str {
    match &op.kind {
        OpKind::Write(v) => v,
        OpKind::Read(v) => v.as_deref().unwrap_or(""),
    }
}

/// A value quoted and cut to its first 40 characters (rrc-check's values
/// name their writer in that much; the rest is padding).
fn short(v: &str) -> String {
    const MAX: usize = 40;
    match v.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{:?}...", &v[..cut]),
        None => format!("{v:?}"),
    }
}

/// Checks every key of `history` (in key order), giving the search at most
/// `max_steps` steps per key. Returns the first violation found; if none,
/// Undecided when a key ran out of steps.
pub fn check(history: &[Op], max_steps: u64) -> Verdict {
    let mut by_key: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in history {
        by_key.entry(op.key.as_str()).or_default().push(op);
    }
    let mut undecided = None;
    for (key, ops) in by_key {
        match check_key(key, &ops, max_steps) {
            Verdict::Linearizable => {}
            v @ Verdict::NotLinearizable(_) => return v,
            v @ Verdict::Undecided { .. } => {
                undecided.get_or_insert(v);
            }
        }
    }
    undecided.unwrap_or(Verdict::Linearizable)
}

/// One operation in the search: a write of value id `value`, or a read that
/// returned it (value ids: 0 = absent, then one per distinct written value).
struct Action<'a> {
    op: &'a Op,
    write: bool,
    value: u32,
}

/// The event list: entries 0 (head) and 1 (tail) are sentinels, then the
/// invocations and completions in time order.
const HEAD: usize = 0;
const TAIL: usize = 1;

struct Events {
    next: Vec<usize>,
    prev: Vec<usize>,
    /// Per entry: its action and whether it is the invocation.
    action: Vec<usize>,
    is_call: Vec<bool>,
    /// Per action: the entry of its completion (None: unknown outcome).
    completion: Vec<Option<usize>>,
}

impl Events {
    fn new(actions: &[Action]) -> Events {
        // At equal times invocations come first: the two operations then
        // overlap, the permissive reading of a tie.
        let mut order: Vec<(u64, bool, usize)> = Vec::with_capacity(actions.len() * 2);
        for (i, a) in actions.iter().enumerate() {
            order.push((a.op.invoked_ns, false, i));
            if let Completed::Ok(t) = a.op.completed {
                order.push((t, true, i));
            }
        }
        order.sort_unstable();
        let n = order.len() + 2;
        let mut ev = Events {
            next: vec![TAIL; n],
            prev: vec![HEAD; n],
            action: vec![usize::MAX; n],
            is_call: vec![false; n],
            completion: vec![None; actions.len()],
        };
        let chain: Vec<usize> = std::iter::once(HEAD).chain(2..n).chain(std::iter::once(TAIL)).collect();
        for link in chain.windows(2) {
            ev.next[link[0]] = link[1];
            ev.prev[link[1]] = link[0];
        }
        for (pos, &(_, is_completion, i)) in order.iter().enumerate() {
            let e = pos + 2;
            ev.action[e] = i;
            ev.is_call[e] = !is_completion;
            if is_completion {
                ev.completion[i] = Some(e);
            }
        }
        ev
    }

    fn remove(&mut self, e: usize) {
        let (p, n) = (self.prev[e], self.next[e]);
        self.next[p] = n;
        self.prev[n] = p;
    }

    /// Undoes the last remove of `e` (dancing links: in reverse order).
    fn restore(&mut self, e: usize) {
        let (p, n) = (self.prev[e], self.next[e]);
        self.next[p] = e;
        self.prev[n] = e;
    }

    fn lift(&mut self, call: usize) {
        self.remove(call);
        if let Some(c) = self.completion[self.action[call]] {
            self.remove(c);
        }
    }

    fn unlift(&mut self, call: usize) {
        if let Some(c) = self.completion[self.action[call]] {
            self.restore(c);
        }
        self.restore(call);
    }
}

/// A 128-bit random token per (domain, index): the cache key of a search
/// state is the XOR of its done operations' tokens and its value's token
/// (Zobrist hashing), updated in O(1) per step where Porcupine hashes a
/// bitset. Two different states share a key with probability 2^-128 per
/// pair, far below any other cause of a wrong answer.
fn token(domain: u64, i: usize) -> u128 {
    fn splitmix(mut x: u64) -> u64 {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^ (x >> 31)
    }
    let base = (domain << 56) | ((i as u64) << 1);
    (u128::from(splitmix(base)) << 64) | u128::from(splitmix(base | 1))
}

const DONE: u64 = 1;
const VALUE: u64 = 2;

/// The cache's keys are random already: hashing them again is wasted time.
#[derive(Default)]
struct TakeLow(u64);

impl Hasher for TakeLow {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u128(&mut self, v: u128) {
        self.0 = v as u64;
    }
}

/// Where the search got furthest: the completion entry it could not pass
/// and the values the key held there.
struct Frontier {
    entry: usize,
    values: BTreeSet<u32>,
}

fn check_key(key: &str, ops: &[&Op], max_steps: u64) -> Verdict {
    // A read with unknown outcome carries no information.
    let ops: Vec<&Op> = ops
        .iter()
        .copied()
        .filter(|o| !matches!((&o.kind, o.completed), (OpKind::Read(_), Completed::Unknown)))
        .collect();
    let read_values: HashSet<&str> = ops
        .iter()
        .filter_map(|o| match (&o.kind, o.completed) {
            (OpKind::Read(Some(v)), Completed::Ok(_)) => Some(v.as_str()),
            _ => None,
        })
        .collect();
    // A write with unknown outcome whose value nobody read can be taken to
    // have never happened: in any linearization with it, the next operation
    // on the key is a write or nothing (a read would have returned its
    // value), so leaving it out leaves a linearization. Dropping them keeps
    // their endless intervals out of the search.
    let ops: Vec<&Op> = ops
        .into_iter()
        .filter(|o| match (&o.kind, o.completed) {
            (OpKind::Write(v), Completed::Unknown) => read_values.contains(v.as_str()),
            _ => true,
        })
        .collect();

    // Value ids, and the earliest invoked write of each value.
    let mut ids: HashMap<&str, u32> = HashMap::new();
    let mut first_write: Vec<Option<&Op>> = vec![None];
    for o in &ops {
        if let OpKind::Write(v) = &o.kind {
            let id = *ids.entry(v.as_str()).or_insert_with(|| {
                first_write.push(None);
                (first_write.len() - 1) as u32
            });
            let slot = &mut first_write[id as usize];
            if slot.map_or(true, |w| o.invoked_ns < w.invoked_ns) {
                *slot = Some(o);
            }
        }
    }

    // Reads of values never written, or written only later: no search needed.
    let mut actions = Vec::with_capacity(ops.len());
    for o in &ops {
        let (write, value) = match &o.kind {
            OpKind::Write(v) => (true, ids[v.as_str()]),
            OpKind::Read(None) => (false, 0),
            OpKind::Read(Some(v)) => {
                let Some(&id) = ids.get(v.as_str()) else {
                    return violation(key, o, None, Reason::NeverWritten);
                };
                let w = first_write[id as usize].expect("a write per value id");
                if let Completed::Ok(done) = o.completed {
                    if w.invoked_ns > done {
                        return violation(key, o, Some(w), Reason::WrittenLater);
                    }
                }
                (false, id)
            }
        };
        actions.push(Action { op: o, write, value });
    }

    let mut ev = Events::new(&actions);
    let mut pending = ev.completion.iter().filter(|c| c.is_some()).count();
    let mut value = 0u32;
    let mut done = 0u128;
    let mut stack: Vec<(usize, u32)> = Vec::new();
    let mut seen: HashSet<u128, BuildHasherDefault<TakeLow>> = HashSet::default();
    let mut frontier: Option<Frontier> = None;
    let mut entry = ev.next[HEAD];
    let mut steps = 0u64;
    while pending > 0 {
        steps += 1;
        if steps > max_steps {
            return Verdict::Undecided { key: key.to_string(), steps: max_steps };
        }
        // An unfinished operation's completion is always still in the list
        // after any invocation the walk is at, so the walk never reaches the
        // tail while some are pending; if it did, it is a dead end like a
        // completion.
        if entry != TAIL && ev.is_call[entry] {
            let i = ev.action[entry];
            let a = &actions[i];
            if a.write || a.value == value {
                let after = if a.write { a.value } else { value };
                let now_done = done ^ token(DONE, i);
                if seen.insert(now_done ^ token(VALUE, after as usize)) {
                    stack.push((entry, value));
                    value = after;
                    done = now_done;
                    ev.lift(entry);
                    if ev.completion[i].is_some() {
                        pending -= 1;
                    }
                    entry = ev.next[HEAD];
                    continue;
                }
            }
            entry = ev.next[entry];
            continue;
        }
        // A completion of an operation not yet done: dead end.
        if entry != TAIL {
            match &mut frontier {
                Some(f) if f.entry == entry => {
                    if f.values.len() < MAX_SHOWN {
                        f.values.insert(value);
                    }
                }
                Some(f) if f.entry > entry => {}
                _ => frontier = Some(Frontier { entry, values: BTreeSet::from([value]) }),
            }
        }
        let Some((call, before)) = stack.pop() else {
            let Some(f) = frontier else {
                unreachable!("a dead end is a completion while operations are pending");
            };
            let a = &actions[ev.action[f.entry]];
            let source = if a.write || a.value == 0 { None } else { first_write[a.value as usize] };
            let alternatives = f.values.iter().map(|&v| if v == 0 { None } else { first_write[v as usize].cloned() });
            return violation(key, a.op, source, Reason::CouldOnlyHold(alternatives.collect()));
        };
        let i = ev.action[call];
        ev.unlift(call);
        if ev.completion[i].is_some() {
            pending += 1;
        }
        value = before;
        done ^= token(DONE, i);
        entry = ev.next[call];
    }
    Verdict::Linearizable
}

fn violation(key: &str, op: &Op, source: Option<&Op>, reason: Reason) -> Verdict {
    Verdict::NotLinearizable(Box::new(Violation {
        key: key.to_string(),
        op: op.clone(),
        source: source.cloned(),
        reason,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn op(client: u32, key: &str, kind: OpKind, from: u64, to: Option<u64>) -> Op {
        Op {
            client,
            key: key.into(),
            kind,
            invoked_ns: from * MS,
            completed: to.map_or(Completed::Unknown, |t| Completed::Ok(t * MS)),
        }
    }

    /// A write of `v` on key "k" in [from, to] ms.
    fn w(client: u32, v: &str, from: u64, to: u64) -> Op {
        op(client, "k", OpKind::Write(v.into()), from, Some(to))
    }

    /// A write with unknown outcome, invoked at `from` ms.
    fn w_unknown(client: u32, v: &str, from: u64) -> Op {
        op(client, "k", OpKind::Write(v.into()), from, None)
    }

    /// A read on key "k" that returned `v` (None: absent).
    fn r(client: u32, v: Option<&str>, from: u64, to: u64) -> Op {
        op(client, "k", OpKind::Read(v.map(String::from)), from, Some(to))
    }

    fn on(key: &str, mut o: Op) -> Op {
        o.key = key.into();
        o
    }

    const BUDGET: u64 = 1_000_000;

    fn verdict(h: &[Op]) -> Verdict {
        check(h, BUDGET)
    }

    fn violation_of(h: &[Op]) -> Violation {
        match verdict(h) {
            Verdict::NotLinearizable(v) => *v,
            other => panic!("expected a violation, got {other}"),
        }
    }

    #[test]
    fn empty_and_trivial_histories() {
        assert_eq!(verdict(&[]), Verdict::Linearizable);
        assert_eq!(verdict(&[r(0, None, 0, 1)]), Verdict::Linearizable);
        assert_eq!(verdict(&[w(0, "a", 0, 1), r(0, Some("a"), 2, 3)]), Verdict::Linearizable);
    }

    #[test]
    fn stale_read_after_a_completed_write() {
        let h = [w(0, "a", 0, 1), w(0, "b", 2, 3), r(1, Some("a"), 4, 5)];
        let v = violation_of(&h);
        assert_eq!(v.op, h[2]);
        assert_eq!(v.source.as_ref(), Some(&h[0]));
        assert_eq!(v.reason, Reason::CouldOnlyHold(vec![Some(h[1].clone())]));
        let text = v.to_string();
        assert!(text.contains("client 1's read in [0.004000, 0.005000] s returned \"a\""), "{text}");
        assert!(text.contains("returned \"a\" (written by client 0 in [0.000000, 0.001000] s)"), "{text}");
        assert!(text.contains("could only hold \"b\" (written by client 0 in [0.002000, 0.003000] s)"), "{text}");
    }

    #[test]
    fn absent_after_a_completed_write() {
        let h = [w(0, "a", 0, 1), r(1, None, 2, 3)];
        let v = violation_of(&h);
        assert_eq!(v.op, h[1]);
        assert_eq!(v.reason, Reason::CouldOnlyHold(vec![Some(h[0].clone())]));
        assert!(v.to_string().contains("found the key absent"), "{v}");
    }

    #[test]
    fn a_read_concurrent_with_a_write_may_see_either_value() {
        for seen in [None, Some("a")] {
            let h = [w(0, "a", 0, 10), r(1, seen, 2, 5)];
            assert_eq!(verdict(&h), Verdict::Linearizable, "{seen:?}");
        }
        // Overlapping by the end only, and by a tie at one instant.
        assert_eq!(verdict(&[w(0, "a", 3, 10), r(1, Some("a"), 0, 3)]), Verdict::Linearizable);
        assert_eq!(verdict(&[w(0, "a", 0, 3), r(1, None, 3, 5)]), Verdict::Linearizable);
        // One nanosecond apart: ordered.
        let mut late = r(1, None, 3, 5);
        late.invoked_ns += 1;
        assert!(matches!(verdict(&[w(0, "a", 0, 3), late]), Verdict::NotLinearizable(_)));
    }

    #[test]
    fn concurrent_writes_in_either_order() {
        // Both orders of two overlapping writes are fine, and a later read
        // decides which one came last.
        for last in ["a", "b"] {
            let h = [w(0, "a", 0, 10), w(1, "b", 1, 9), r(2, Some(last), 11, 12)];
            assert_eq!(verdict(&h), Verdict::Linearizable, "{last}");
        }
        // But not both: once "a" was seen after "b", "b" is gone for good.
        let h = [w(0, "a", 0, 10), w(1, "b", 1, 9), r(2, Some("b"), 11, 12), r(2, Some("a"), 13, 14)];
        assert_eq!(violation_of(&h).op, h[3]);
    }

    #[test]
    fn a_value_never_written() {
        let h = [w(0, "a", 0, 1), r(1, Some("zzz"), 2, 3)];
        let v = violation_of(&h);
        assert_eq!((v.op.clone(), v.source.clone(), v.reason.clone()), (h[1].clone(), None, Reason::NeverWritten));
        assert!(v.to_string().contains("never written to this key"), "{v}");
        // A value written to another key counts as never written to this one.
        let h = [on("x", w(0, "a", 0, 1)), r(1, Some("a"), 2, 3)];
        assert_eq!(violation_of(&h).reason, Reason::NeverWritten);
    }

    #[test]
    fn a_value_from_the_future() {
        let h = [r(1, Some("a"), 0, 1), w(0, "a", 2, 3)];
        let v = violation_of(&h);
        assert_eq!(
            (v.op.clone(), v.source.clone(), v.reason.clone()),
            (h[0].clone(), Some(h[1].clone()), Reason::WrittenLater)
        );
        assert!(v.to_string().contains("began only after the read"), "{v}");
    }

    #[test]
    fn non_monotonic_reads_across_clients() {
        // "b" is being written all along; client 1 sees it, then client 2,
        // strictly later, sees "a" again: the register went back.
        let h = [w(0, "a", 0, 1), w(3, "b", 2, 100), r(1, Some("b"), 10, 11), r(2, Some("a"), 12, 13)];
        let v = violation_of(&h);
        assert_eq!(v.op, h[3]);
        assert_eq!(v.reason, Reason::CouldOnlyHold(vec![Some(h[1].clone())]));
        // In the other order it is fine ("b" takes effect between the reads).
        let h = [w(0, "a", 0, 1), w(3, "b", 2, 100), r(1, Some("a"), 10, 11), r(2, Some("b"), 12, 13)];
        assert_eq!(verdict(&h), Verdict::Linearizable);
        // And overlapping reads may see them in any order.
        let h = [w(0, "a", 0, 1), w(3, "b", 2, 100), r(1, Some("b"), 10, 13), r(2, Some("a"), 11, 12)];
        assert_eq!(verdict(&h), Verdict::Linearizable);
    }

    #[test]
    fn a_lost_acknowledged_write() {
        // "b" was acknowledged; a read strictly after the acknowledgement
        // sees the value from before it.
        let h = [w(0, "a", 0, 1), w(1, "b", 2, 3), r(2, Some("b"), 4, 5), r(2, Some("a"), 6, 7)];
        let v = violation_of(&h);
        assert_eq!(v.op, h[3]);
        assert_eq!(v.source.as_ref(), Some(&h[0]));
        assert_eq!(v.reason, Reason::CouldOnlyHold(vec![Some(h[1].clone())]));
        // Lost back to absent (a FLUSHALL, a restart without the data).
        let h = [w(0, "a", 0, 1), r(1, Some("a"), 2, 3), r(1, None, 4, 5)];
        assert_eq!(violation_of(&h).op, h[2]);
    }

    #[test]
    fn unknown_writes_may_or_may_not_have_happened() {
        // Never seen: as if it never happened.
        let h = [w(0, "a", 0, 1), w_unknown(1, "b", 2), r(2, Some("a"), 50, 51)];
        assert_eq!(verdict(&h), Verdict::Linearizable);
        // Seen long after its invocation: it took effect late.
        let h = [w(0, "a", 0, 1), w_unknown(1, "b", 2), r(2, Some("a"), 50, 51), r(2, Some("b"), 60, 61)];
        assert_eq!(verdict(&h), Verdict::Linearizable);
        // Seen, then the older value again: not both.
        let h = [w(0, "a", 0, 1), w_unknown(1, "b", 2), r(2, Some("b"), 50, 51), r(2, Some("a"), 60, 61)];
        assert_eq!(violation_of(&h).op, h[3]);
        // It cannot take effect before its invocation.
        let h = [w(0, "a", 0, 1), r(2, Some("b"), 3, 4), w_unknown(1, "b", 5)];
        assert_eq!(violation_of(&h).reason, Reason::WrittenLater);
        // An unknown write may take effect after a later acknowledged one
        // ("b" after "c"), but it does not excuse losing that one ("a").
        let h = [w(0, "a", 0, 1), w_unknown(1, "b", 2), w(0, "c", 3, 4), r(2, Some("b"), 5, 6)];
        assert_eq!(verdict(&h), Verdict::Linearizable);
        let h = [w(0, "a", 0, 1), w_unknown(1, "b", 2), w(0, "c", 3, 4), r(2, Some("a"), 5, 6)];
        assert_eq!(violation_of(&h).op, h[3]);
    }

    #[test]
    fn unknown_reads_are_dropped() {
        let h = [w(0, "a", 0, 1), op(1, "k", OpKind::Read(Some("zzz".into())), 2, None)];
        assert_eq!(verdict(&h), Verdict::Linearizable);
    }

    #[test]
    fn keys_are_independent() {
        // Fine per key although a single register could not do it.
        let h = [on("x", w(0, "a", 0, 1)), on("y", w(0, "b", 2, 3)), on("x", r(1, Some("a"), 4, 5))];
        assert_eq!(verdict(&h), Verdict::Linearizable);
        // The violation names its key.
        let h = [on("x", w(0, "a", 0, 1)), on("y", w(0, "b", 2, 3)), on("y", r(1, None, 4, 5))];
        assert_eq!(violation_of(&h).key, "y");
    }

    #[test]
    fn the_explanation_lists_every_value_the_key_could_hold() {
        // Two overlapping writes completed before the stale read: either may
        // be current, but neither "a" nor the initial absence.
        let h = [w(0, "a", 0, 1), w(1, "b", 2, 20), w(2, "c", 3, 20), r(3, None, 21, 22)];
        let v = violation_of(&h);
        assert_eq!(v.reason, Reason::CouldOnlyHold(vec![Some(h[1].clone()), Some(h[2].clone())]));
        assert!(v.to_string().contains(", or "), "{v}");
    }

    #[test]
    fn the_budget_is_reported_not_passed() {
        // Needs a few backtracks: "b" is tried last first.
        let h = [w(0, "a", 0, 10), w(1, "b", 1, 9), r(2, Some("a"), 11, 12)];
        assert_eq!(check(&h, 100), Verdict::Linearizable);
        assert_eq!(check(&h, 4), Verdict::Undecided { key: "k".into(), steps: 4 });
        assert_eq!(check(&h, 4).linearizable(), None);
        assert!(check(&h, 4).to_string().starts_with("undecided"));
        // A violation on another key (found in 4 steps) still counts.
        let mut h = h.to_vec();
        h.extend([on("z", w(0, "q", 0, 1)), on("z", r(0, None, 2, 3))]);
        assert!(matches!(check(&h, 4), Verdict::NotLinearizable(v) if v.key == "z"));
    }

    #[test]
    fn repeated_values_are_still_checked_correctly() {
        let h = [w(0, "a", 0, 1), w(0, "b", 2, 3), w(0, "a", 4, 5), r(1, Some("a"), 6, 7)];
        assert_eq!(verdict(&h), Verdict::Linearizable);
        let h = [w(0, "a", 0, 1), w(0, "b", 2, 3), w(0, "a", 4, 5), r(1, Some("b"), 6, 7)];
        assert!(matches!(verdict(&h), Verdict::NotLinearizable(_)));
    }

    #[test]
    fn history_lines_round_trip_and_are_validated() {
        let h = [w(0, "a", 0, 1), w_unknown(1, "b", 2), r(2, None, 3, 4), r(2, Some("a"), 5, 6)];
        for o in &h {
            let line = serde_json::to_string(o).unwrap();
            assert_eq!(&serde_json::from_str::<Op>(&line).unwrap(), o, "{line}");
        }
        assert_eq!(
            serde_json::to_string(&h[1]).unwrap(),
            r#"{"client":1,"key":"k","op":"write","value":"b","invoked_ns":2000000,"completed_ns":null}"#
        );
        let bad = [
            r#"{"client":1,"key":"k","op":"write","value":null,"invoked_ns":2,"completed_ns":3}"#,
            r#"{"client":1,"key":"k","op":"read","value":null,"invoked_ns":5,"completed_ns":3}"#,
            r#"{"client":1,"key":"k","op":"cas","value":null,"invoked_ns":2,"completed_ns":3}"#,
        ];
        for b in bad {
            assert!(serde_json::from_str::<Op>(b).is_err(), "{b}");
        }
    }

    /// A small deterministic PRNG for the generated histories.
    struct Gen(u64);

    impl Gen {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// A linearizable history by construction: each client runs ops back to
    /// back, each takes effect at an instant inside its interval, reads
    /// return what the register holds at that instant. Some writes lose
    /// their reply (unknown outcome; the client then stops, as rrc-check's
    /// threads do) and may not have taken effect.
    fn generated(g: &mut Gen, clients: u32, ops_per_client: u32, keys: u32, unknown_per_mille: u64) -> Vec<Op> {
        // (effect instant, index into ops, whether it took effect)
        let mut effects: Vec<(u64, usize, bool)> = Vec::new();
        let mut ops = Vec::new();
        for c in 0..clients {
            let mut t = g.below(1000);
            for s in 0..ops_per_client {
                let key = format!("k{}", g.below(u64::from(keys)));
                let (inv, effect) = (t, t + 1 + g.below(3000));
                let done = effect + 1 + g.below(3000);
                let write = g.below(2) == 0;
                let kind = if write { OpKind::Write(format!("c{c}s{s}")) } else { OpKind::Read(None) };
                if write && g.below(1000) < unknown_per_mille {
                    let applied = g.below(2) == 0;
                    effects.push((effect, ops.len(), applied));
                    ops.push(Op { client: c, key, kind, invoked_ns: inv, completed: Completed::Unknown });
                    break;
                }
                effects.push((effect, ops.len(), true));
                ops.push(Op { client: c, key, kind, invoked_ns: inv, completed: Completed::Ok(done) });
                t = done + g.below(500);
            }
        }
        effects.sort_unstable();
        let mut registers: HashMap<String, String> = HashMap::new();
        for (_, i, applied) in effects {
            let o = &mut ops[i];
            match &mut o.kind {
                OpKind::Write(v) if applied => {
                    registers.insert(o.key.clone(), v.clone());
                }
                OpKind::Write(_) => {}
                OpKind::Read(got) => *got = registers.get(&o.key).cloned(),
            }
        }
        ops.sort_by_key(|o| o.invoked_ns);
        ops
    }

    #[test]
    fn generated_histories_are_linearizable_and_one_stale_read_is_not() {
        for seed in 1..=40u64 {
            let mut g = Gen(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let h = generated(&mut g, 4, 60, 2, 20);
            assert_eq!(verdict(&h), Verdict::Linearizable, "seed {seed}");
            // Make one read return, instead, the value of a write that was
            // overwritten by a write completed before the read began.
            let stale = h.iter().enumerate().find_map(|(i, o)| {
                let (OpKind::Read(_), Completed::Ok(_)) = (&o.kind, o.completed) else { return None };
                let done_before = |x: &Op| matches!(x.completed, Completed::Ok(t) if t < o.invoked_ns);
                let writes: Vec<&Op> = h
                    .iter()
                    .filter(|x| x.key == o.key && matches!(x.kind, OpKind::Write(_)) && done_before(x))
                    .collect();
                // w1 completed before w2 was invoked, both before the read.
                writes.iter().find_map(|w1| {
                    let Completed::Ok(w1_done) = w1.completed else { return None };
                    writes.iter().any(|w2| w2.invoked_ns > w1_done).then(|| (i, written(w1).to_string()))
                })
            });
            let Some((i, old)) = stale else { continue };
            let mut bad = h.clone();
            bad[i].kind = OpKind::Read(Some(old));
            assert!(matches!(verdict(&bad), Verdict::NotLinearizable(_)), "seed {seed}: read {:?}", bad[i]);
        }
    }

    /// Every way to order `ops` that respects real time (a before b when a
    /// completed before b was invoked), each unknown write placed anywhere
    /// after its invocation or left out: is one a register's history?
    fn brute_force(ops: &[Op]) -> bool {
        fn go(ops: &[Op], used: &mut Vec<bool>, value: Option<&str>) -> bool {
            let all_known_done =
                ops.iter().zip(used.iter()).all(|(o, &u)| u || matches!(o.completed, Completed::Unknown));
            if all_known_done {
                return true;
            }
            for i in 0..ops.len() {
                if used[i] {
                    continue;
                }
                // i may go next only if no unused op must come before it.
                let blocked = ops
                    .iter()
                    .zip(used.iter())
                    .any(|(x, &u)| !u && matches!(x.completed, Completed::Ok(t) if t < ops[i].invoked_ns));
                if blocked {
                    continue;
                }
                let next = match &ops[i].kind {
                    OpKind::Write(v) => Some(v.as_str()),
                    OpKind::Read(got) if got.as_deref() == value => value,
                    OpKind::Read(_) if ops[i].completed == Completed::Unknown => value,
                    OpKind::Read(_) => continue,
                };
                used[i] = true;
                let ok = go(ops, used, next);
                used[i] = false;
                if ok {
                    return true;
                }
            }
            false
        }
        go(ops, &mut vec![false; ops.len()], None)
    }

    #[test]
    fn agrees_with_brute_force_on_small_random_histories() {
        let mut g = Gen(0x1234_5678_9ABC_DEF1);
        let (mut yes, mut no) = (0, 0);
        for _ in 0..4000 {
            // 3 clients, up to 6 ops, reads of random written values.
            let n = 2 + g.below(5) as usize;
            let mut ops = Vec::new();
            let mut clock = [0u64; 3];
            for s in 0..n {
                let c = g.below(3) as usize;
                let inv = clock[c] + g.below(4);
                let done = inv + g.below(6);
                clock[c] = done + 1;
                let unknown = g.below(8) == 0;
                let kind = if g.below(2) == 0 {
                    OpKind::Write(format!("v{s}"))
                } else {
                    let pick = g.below(n as u64 + 1);
                    OpKind::Read((pick < n as u64).then(|| format!("v{pick}")))
                };
                let completed = if unknown { Completed::Unknown } else { Completed::Ok(done) };
                ops.push(Op { client: c as u32, key: "k".into(), kind, invoked_ns: inv, completed });
                if unknown {
                    clock[c] = u64::MAX / 2; // the client stops
                }
            }
            ops.retain(|o| o.invoked_ns < u64::MAX / 4);
            let expected = brute_force(&ops);
            let got = verdict(&ops);
            assert_eq!(got.linearizable(), Some(expected), "{ops:#?}\n{got}");
            if expected {
                yes += 1;
            } else {
                no += 1;
            }
        }
        // Both answers were exercised.
        assert!(yes > 500 && no > 500, "{yes} linearizable, {no} not");
    }

    #[test]
    fn many_concurrent_ops_are_checked_fast() {
        // 8 clients x 2000 ops on 4 keys, a few unknown writes: must finish
        // well inside the budget (a few hundred ms in release mode).
        let mut g = Gen(0xDEAD_BEEF_CAFE_F00D);
        let h = generated(&mut g, 8, 2000, 4, 0);
        assert_eq!(h.len(), 16_000);
        let t0 = std::time::Instant::now();
        assert_eq!(check(&h, 10_000_000), Verdict::Linearizable);
        let took = t0.elapsed();
        if !cfg!(debug_assertions) {
            assert!(took < std::time::Duration::from_millis(500), "{took:?}");
        }
        // Break it: the last read of each key sees the key's first value.
        let mut bad = h.clone();
        let first =
            bad.iter().find(|o| matches!(o.kind, OpKind::Write(_)) && o.completed != Completed::Unknown).cloned();
        let first = first.expect("a write");
        let last_read = bad
            .iter()
            .rposition(|o| {
                o.key == first.key && matches!(o.kind, OpKind::Read(_)) && o.invoked_ns > first.invoked_ns + 100_000
            })
            .expect("a read");
        bad[last_read].kind = OpKind::Read(Some(written(&first).to_string()));
        assert!(matches!(check(&bad, 10_000_000), Verdict::NotLinearizable(_)));
        // And one read in the middle of the history: the search backtracks
        // from there, still quickly.
        let (i, old) = (bad.len() / 2..bad.len())
            .find_map(|i| {
                let o = &h[i];
                let (OpKind::Read(Some(_)), Completed::Ok(_)) = (&o.kind, o.completed) else { return None };
                let long_done = |x: &&Op| matches!(x.completed, Completed::Ok(t) if t + 20_000 < o.invoked_ns);
                let old = h.iter().filter(|x| x.key == o.key && matches!(x.kind, OpKind::Write(_))).find(long_done)?;
                Some((i, written(old).to_string()))
            })
            .expect("a read long after a write");
        let mut bad = h.clone();
        bad[i].kind = OpKind::Read(Some(old));
        let t0 = std::time::Instant::now();
        match check(&bad, 10_000_000) {
            Verdict::NotLinearizable(v) => assert_eq!(v.op, bad[i]),
            other => panic!("{other}"),
        }
        if !cfg!(debug_assertions) {
            assert!(t0.elapsed() < std::time::Duration::from_millis(500), "{:?}", t0.elapsed());
        }
    }

    #[test]
    fn a_pathological_history_stops_at_the_budget() {
        // 40 overlapping writes then a read of the initial absence: the
        // search tries every subset of the writes before it can tell.
        let mut h: Vec<Op> = (0..40).map(|c| w(c, &format!("v{c}"), 0, 10)).collect();
        h.push(r(40, None, 11, 12));
        let t0 = std::time::Instant::now();
        assert_eq!(check(&h, 200_000), Verdict::Undecided { key: "k".into(), steps: 200_000 });
        assert!(t0.elapsed() < std::time::Duration::from_secs(5), "{:?}", t0.elapsed());
        // Small enough, it is decided.
        let mut h: Vec<Op> = (0..8).map(|c| w(c, &format!("v{c}"), 0, 10)).collect();
        h.push(r(8, None, 11, 12));
        assert!(matches!(check(&h, 200_000), Verdict::NotLinearizable(_)));
    }
}
