//! The key-value load (redis, memcached): each thread owns its keys and one
//! connection, writes a new version of a key, waits for the
//! acknowledgement, reads a key back and judges what it got.

use std::net::SocketAddr;
use std::time::Duration;

use crate::check::{judge, KeyId, Verdict};
use crate::conn::{Conn, OpError};
use crate::memcache::{MemcacheClient, FLAGS};
use crate::resp::RedisClient;
use crate::run::{report, run_threads, Live, Plan, Worker};
use crate::state::{KeyRecord, StateFile, Write};
use crate::stats::{ErrorKind, Report};

/// A value as the server returned it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub data: Vec<u8>,
    /// memcached's flags; None for redis.
    pub flags: Option<u32>,
}

/// The two operations the checker needs from a key-value server.
pub trait KvClient {
    /// Stores `value`; Ok only once the server acknowledged it.
    fn set(&mut self, key: &str, value: &[u8]) -> Result<(), OpError>;
    /// None when the key does not exist.
    fn get(&mut self, key: &str) -> Result<Option<Stored>, OpError>;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KvKind {
    Redis,
    Memcached,
}

impl KvKind {
    pub fn name(self) -> &'static str {
        match self {
            KvKind::Redis => "redis",
            KvKind::Memcached => "memcached",
        }
    }

    pub fn connect(self, addr: SocketAddr, timeout: Duration) -> std::io::Result<Box<dyn KvClient>> {
        let conn = Conn::connect(addr, timeout)?;
        Ok(match self {
            KvKind::Redis => Box::new(RedisClient::new(conn)),
            KvKind::Memcached => Box::new(MemcacheClient::new(conn)),
        })
    }

    /// A mismatch description if the returned flags are not ours.
    pub fn check_flags(self, stored: &Stored) -> Option<String> {
        match (self, stored.flags) {
            (KvKind::Memcached, Some(f)) if f != FLAGS => Some(format!("flags {f}, expected {FLAGS}")),
            _ => None,
        }
    }
}

pub struct KvSpec {
    pub kind: KvKind,
    pub server: String,
    pub addr: SocketAddr,
    pub keys_per_thread: u32,
    pub value_size: usize,
    pub run: String,
}

/// One key as its thread tracks it.
#[derive(Debug, Clone, Default)]
struct KeyState {
    acked: Option<u64>,
    in_flight: Option<u64>,
    next_version: u64,
}

/// A small deterministic PRNG (xorshift64*) for picking keys (and byte
/// ranges, web.rs).
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn below(&mut self, n: u32) -> u32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) as u32 % n.max(1)
    }
}

fn thread_body(spec: &KvSpec, plan: &Plan, live: &Live, thread: u32) -> (crate::run::Tally, Vec<KeyRecord>) {
    let ids: Vec<KeyId> = (0..spec.keys_per_thread).map(|key| KeyId { run: spec.run.clone(), thread, key }).collect();
    let names: Vec<String> = ids.iter().map(KeyId::name).collect();
    let mut keys = vec![KeyState { next_version: 1, ..KeyState::default() }; ids.len()];
    let mut w = Worker::new(live, plan, thread);
    match spec.kind.connect(spec.addr, plan.timeout) {
        Ok(mut client) => run_keys(spec, &mut w, client.as_mut(), &ids, &names, &mut keys),
        Err(e) => w.error(ErrorKind::ConnectionReset, "", format!("connect to {}: {e}", spec.addr)),
    }
    let records = ids
        .iter()
        .zip(&keys)
        .map(|(id, k)| KeyRecord {
            thread,
            key: id.key,
            acked: k.acked.map(|v| write_of(id, v, spec.value_size)),
            in_flight: k.in_flight.map(|v| write_of(id, v, spec.value_size)),
        })
        .collect();
    (w.finish(), records)
}

fn write_of(id: &KeyId, version: u64, size: usize) -> Write {
    // Values are ASCII by construction (KeyId::value).
    Write { version, value: String::from_utf8_lossy(&id.value(version, size)).into_owned() }
}

fn run_keys(
    spec: &KvSpec,
    w: &mut Worker,
    client: &mut dyn KvClient,
    ids: &[KeyId],
    names: &[String],
    keys: &mut [KeyState],
) {
    let n = ids.len() as u32;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (u64::from(w.thread) + 1).wrapping_mul(0xD1B5_4A32_D192_ED03));
    loop {
        if !w.may_start() {
            return;
        }
        // SET a new version and wait for the acknowledgement.
        let k = rng.below(n) as usize;
        let version = keys[k].next_version;
        keys[k].next_version += 1;
        let value = ids[k].value(version, spec.value_size);
        // In flight from the moment it is sent until its reply is read: if
        // the reply never comes, the server may or may not have applied it.
        keys[k].in_flight = Some(version);
        match w.timed(|| client.set(&names[k], &value)) {
            Ok(()) => {
                keys[k].acked = Some(version);
                keys[k].in_flight = None;
                w.tally.sets += 1;
            }
            Err(e) => return w.failed("SET", &names[k], &e),
        }
        if !w.may_start() {
            return;
        }
        // GET it back, or now and then another own key.
        let j = if rng.below(4) == 0 { rng.below(n) as usize } else { k };
        let got = match w.timed(|| client.get(&names[j])) {
            Ok(got) => got,
            Err(e) => return w.failed("GET", &names[j], &e),
        };
        w.tally.gets += 1;
        if let Some(m) = got.as_ref().and_then(|s| spec.kind.check_flags(s)) {
            w.error(ErrorKind::Mismatch, &names[j], m);
        }
        let expected = keys[j].acked.map(|v| (v, ids[j].value(v, spec.value_size)));
        let verdict = judge(
            &ids[j],
            expected.as_ref().map(|(v, b)| (*v, b.as_slice())),
            None,
            got.as_ref().map(|s| s.data.as_slice()),
        );
        match verdict {
            Verdict::Ok => {}
            Verdict::LostWrite(d) => w.error(ErrorKind::LostWrite, &names[j], d),
            Verdict::Mismatch(d) => w.error(ErrorKind::Mismatch, &names[j], d),
        }
    }
}

/// Runs the load; returns the report and the state to save.
pub fn run(spec: &KvSpec, plan: &Plan) -> (Report, StateFile) {
    let live = Live::new(plan.threads);
    tracing::info!(kind = spec.kind.name(), server = %spec.server, run = %spec.run, "starting");
    let results = run_threads(plan, &live, |t| thread_body(spec, plan, &live, t));
    let (tallies, records): (Vec<_>, Vec<_>) = results.into_iter().unzip();
    let report = report(spec.kind.name(), &spec.server, plan, &tallies);
    let state = StateFile {
        kind: spec.kind.name().to_string(),
        server: spec.server.clone(),
        run: spec.run.clone(),
        keys: records.into_iter().flatten().collect(),
    };
    (report, state)
}

/// What `verify` found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct VerifyReport {
    pub kind: String,
    pub server: String,
    pub run: String,
    pub keys: u64,
    pub checked: u64,
    pub errors: crate::stats::ErrorCounts,
    pub error_samples: Vec<crate::stats::ErrorSample>,
    pub ok: bool,
}

impl VerifyReport {
    pub fn summary_line(&self) -> String {
        format!(
            "rrc-check verify {} {}: {}: {} of {} keys checked (run {}); errors: {}",
            self.kind,
            self.server,
            if self.ok { "ok" } else { "FAIL" },
            self.checked,
            self.keys,
            self.run,
            self.errors.describe()
        )
    }
}

/// Checks that the server holds, for every key of the state, the last
/// acknowledged value or the one in flight.
pub fn verify(kind: KvKind, server: &str, addr: SocketAddr, timeout: Duration, state: &StateFile) -> VerifyReport {
    let plan = Plan { threads: 1, duration: None, ops: None, rate: 0.0, timeout, progress: false };
    let live = Live::new(1);
    let mut w = Worker::new(&live, &plan, 0);
    let mut checked = 0;
    match kind.connect(addr, timeout) {
        Err(e) => w.error(ErrorKind::ConnectionReset, "", format!("connect to {addr}: {e}")),
        Ok(mut client) => {
            for r in &state.keys {
                let id = state.key_id(r);
                let name = id.name();
                let got = match w.timed(|| client.get(&name)) {
                    Ok(got) => got,
                    Err(e) => {
                        w.failed("GET", &name, &e);
                        break;
                    }
                };
                checked += 1;
                if let Some(m) = got.as_ref().and_then(|s| kind.check_flags(s)) {
                    w.error(ErrorKind::Mismatch, &name, m);
                }
                let acked = r.acked.as_ref().map(|a| (a.version, a.value.as_bytes()));
                let in_flight = r.in_flight.as_ref().map(|f| (f.version, f.value.as_bytes()));
                match judge(&id, acked, in_flight, got.as_ref().map(|s| s.data.as_slice())) {
                    Verdict::Ok => {}
                    Verdict::LostWrite(d) => w.error(ErrorKind::LostWrite, &name, d),
                    Verdict::Mismatch(d) => w.error(ErrorKind::Mismatch, &name, d),
                }
            }
        }
    }
    let tally = w.finish();
    VerifyReport {
        kind: kind.name().to_string(),
        server: server.to_string(),
        run: state.run.clone(),
        keys: state.keys.len() as u64,
        checked,
        ok: tally.errors.total() == 0 && checked == state.keys.len() as u64,
        errors: tally.errors,
        error_samples: tally.samples,
    }
}
