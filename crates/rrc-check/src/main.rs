//! rrc-check: a client that generates load on a server (redis, memcached,
//! an HTTP server) and checks what rrc promises across a failover: a reply
//! the client received is never undone, an acknowledged write is never lost.
//!
//! Results go to stdout (a summary line, or one JSON object with --json);
//! logs to stderr, filtered by $RRC_LOG (default warn). Exit status: 0 when
//! no error was seen, 1 when the check found errors, 2 when the check could
//! not be run (bad arguments, unreadable files).

mod check;
mod conn;
mod http;
mod kv;
mod linear;
mod memcache;
mod pace;
mod resp;
mod run;
mod shared;
mod state;
mod stats;
mod web;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};

use crate::kv::KvKind;
use crate::run::Plan;

#[derive(Parser)]
#[command(
    name = "rrc-check",
    version,
    about = "Generate load on a server and check that no acknowledged write is lost and no reply undone",
    long_about = "rrc-check drives a redis, memcached or HTTP server with several threads, each on ONE \
long-lived connection (never reconnected: a reset is an error), and checks every reply: a read must \
return the last acknowledged write (kv) or the exact local file (http); with `shared`, all threads \
read and write the same keys and their history must be linearizable. It measures per-op latency and \
the longest client-visible pause (the longest wait for one reply), e.g. across an rrc failover.\n\n\
Exit status: 0 = no error, 1 = errors found (mismatch, lost_write, connection_reset, timeout, \
protocol, a history not linearizable or not decided), 2 = could not run. Logs: RRC_LOG (stderr, \
default warn).",
    after_help = "Examples:\n  rrc-check redis --server 198.18.0.1:6379 --duration 30s --rate 20000 --state /tmp/st --progress\n  \
rrc-check verify redis --server 198.18.0.2:6379 --state /tmp/st\n  \
rrc-check memcached --server 127.0.0.1:11211 --ops 100000 --json\n  \
rrc-check shared redis --server 198.18.0.100:6379 --duration 30s --history /tmp/h.jsonl\n  \
rrc-check http --url http://198.18.0.1/index.html --file /srv/www/index.html --threads 4"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Load a redis server: SET new versions of own keys, GET them back, check.
    ///
    /// Each thread owns keys rrc-check:<run-id>:<thread>:<k>; every SET
    /// writes a value naming thread, key and a per-key version (padded to
    /// --value-size) and counts as acknowledged on +OK. A GET returning an
    /// older version is lost_write, any other value mismatch.
    Redis(KvArgs),
    /// Load a memcached server (text protocol), checked like `redis`.
    Memcached(KvArgs),
    /// GET one URL concurrently over keep-alive connections and compare
    /// every body byte for byte with a local file.
    ///
    /// The server must keep connections alive for the whole run (lighttpd:
    /// server.max-keep-alive-requests, server.max-keep-alive-idle): a
    /// `Connection: close` is counted as a protocol error, not reconnected.
    /// With --close, one connection per GET instead, closed by the server.
    Http(HttpArgs),
    /// Check a server against the state file a run left (--state): every key
    /// must hold its last acknowledged value or the write in flight.
    Verify(VerifyArgs),
    /// Several connections read and write the SAME keys; check that the
    /// history of all their operations is linearizable.
    ///
    /// Each thread, on its one connection, picks a random key
    /// rrc-check:<run-id>:shared:<k> and SETs it to a value unique in the
    /// run (naming thread and a per-thread sequence number, padded to
    /// --value-size) or GETs it, recording when the request was sent and
    /// when the reply was read (CLOCK_MONOTONIC, one clock for all). At the
    /// end the history must be linearizable as one read/write register per
    /// key, keys starting absent: every operation can be put at one instant
    /// inside its interval so that each read returns the latest write before
    /// it. A stale read after an acknowledged write, a key back to an older
    /// value or absent, two clients seeing two values in opposite orders:
    /// not linearizable (exit 1, with the read that cannot be placed, the
    /// value it saw and the values the key could hold). An operation without
    /// a reply (timeout, reset) is an error as in the other modes and ends
    /// its thread; its write may or may not have taken effect, and the check
    /// allows both. The search is bounded by --check-steps per key: if it
    /// runs out, the verdict is undecided (exit 1), never a pass.
    #[command(after_help = "Examples:\n  \
rrc-check shared redis --server 127.0.0.1:6379 --duration 5s\n  \
rrc-check shared memcached --server 198.18.0.100:11211 --keys 4 --threads 16 --rate 2000 --duration 30s \
--history /tmp/h.jsonl --json\n  \
rrc-check linearizable --history /tmp/h.jsonl")]
    Shared(SharedArgs),
    /// Check a history written by `shared --history` (again): exit 0 if it is
    /// linearizable, 1 if not or undecided, 2 if it cannot be read.
    ///
    /// The file has one operation per line: {"client":0,"key":"k","op":"write"
    /// or "read","value":"..." (null: a read of an absent key),"invoked_ns":N,
    /// "completed_ns":N (null: no reply)}.
    #[command(after_help = "Example:\n  rrc-check linearizable --history /tmp/h.jsonl --check-steps 100000000")]
    Linearizable(LinearizableArgs),
}

/// How long, how fast, how reported: shared by every load command.
#[derive(Args, Debug, Clone)]
struct LoadArgs {
    /// Threads, each with one connection [default: 8 for redis and
    /// memcached, 4 for http].
    #[arg(long)]
    threads: Option<u32>,
    /// Run for this long (e.g. 10s, 500ms, 2m). Default 10s unless --ops.
    #[arg(long, value_parser = parse_duration, conflicts_with = "ops")]
    duration: Option<Duration>,
    /// Stop after N operations in total (sets + gets).
    #[arg(long)]
    ops: Option<u64>,
    /// Total operations per second, paced evenly per thread (missed slots
    /// are dropped, never burst); 0 = as fast as possible.
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// Longest wait for one reply before it counts as `timeout` (the thread
    /// then stops); also the connect timeout.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    timeout: Duration,
    /// Print the result as one JSON object on stdout.
    #[arg(long)]
    json: bool,
    /// Print one progress line per second on stderr (ops, errors, max pause
    /// so far, counting a wait still going on).
    #[arg(long)]
    progress: bool,
}

#[derive(Args, Debug, Clone)]
struct KvArgs {
    /// The server, IP:PORT.
    #[arg(long)]
    server: String,
    /// Keys each thread owns.
    #[arg(long, default_value_t = 100)]
    keys_per_thread: u32,
    /// Bytes per value (at least the ~30-byte header that names the write).
    #[arg(long, default_value_t = 64)]
    value_size: usize,
    /// At the end, write per key the last acknowledged value and a write in
    /// flight (for `rrc-check verify`).
    #[arg(long)]
    state: Option<PathBuf>,
    #[command(flatten)]
    load: LoadArgs,
}

#[derive(Args, Debug, Clone)]
struct HttpArgs {
    /// http://IP:PORT/PATH
    #[arg(long)]
    url: String,
    /// The local file every body must equal (read once, at the start).
    #[arg(long)]
    file: PathBuf,
    /// Ask for a random byte range of the file each time (206 Partial
    /// Content, checked against that part): no two responses are alike,
    /// so one sent twice or out of place is seen.
    #[arg(long)]
    ranges: bool,
    /// One connection per GET, asking the server to close it after the
    /// response (Connection: close), read to its end: HTTP/1.0 clients'
    /// and ab's (without -k) way. A failed connect or a reset is an error.
    #[arg(long)]
    close: bool,
    #[command(flatten)]
    load: LoadArgs,
}

#[derive(Args, Debug, Clone)]
struct VerifyArgs {
    /// The protocol the state was written with.
    #[arg(value_enum)]
    kind: KvKind,
    /// The server, IP:PORT (e.g. the backup after a failover).
    #[arg(long)]
    server: String,
    /// The state file written by a run's --state.
    #[arg(long)]
    state: PathBuf,
    /// Longest wait for one reply.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    timeout: Duration,
    /// Print the result as one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug, Clone)]
struct SharedArgs {
    /// The protocol.
    #[arg(value_enum)]
    kind: KvKind,
    /// The server, IP:PORT.
    #[arg(long)]
    server: String,
    /// How many keys all threads share.
    #[arg(long, default_value_t = 8)]
    keys: u32,
    /// Bytes per value (at least the ~35-byte header that names the write).
    #[arg(long, default_value_t = 64)]
    value_size: usize,
    /// Write the history there, one operation per line (JSON), whatever
    /// the verdict: `rrc-check linearizable --history FILE` checks it again.
    #[arg(long)]
    history: Option<PathBuf>,
    /// Search steps per key (about 50 ns each) before the check gives up as
    /// undecided.
    #[arg(long, default_value_t = shared::DEFAULT_CHECK_STEPS)]
    check_steps: u64,
    #[command(flatten)]
    load: LoadArgs,
}

#[derive(Args, Debug, Clone)]
struct LinearizableArgs {
    /// The history file (JSON lines) written by `shared --history`.
    #[arg(long)]
    history: PathBuf,
    /// Search steps per key before the check gives up as undecided.
    #[arg(long, default_value_t = shared::DEFAULT_CHECK_STEPS)]
    check_steps: u64,
    /// Print the result as one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

/// Parses `10s`, `500ms`, `2m`, `1h`, `1.5s`, `250us` or a bare number of
/// seconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("{s:?}: expected a duration like 10s, 500ms, 2m"))?;
    let secs = match unit {
        "" | "s" => n,
        "ms" => n / 1e3,
        "us" => n / 1e6,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use us, ms, s, m, h)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{s:?}: {e}"))
}

fn plan_of(l: &LoadArgs, default_threads: u32) -> anyhow::Result<Plan> {
    let threads = l.threads.unwrap_or(default_threads);
    if threads == 0 {
        bail!("--threads must be at least 1");
    }
    if !(l.rate >= 0.0 && l.rate.is_finite()) {
        bail!("--rate must be a number >= 0");
    }
    Ok(Plan {
        threads,
        duration: match (l.duration, l.ops) {
            (Some(d), _) => Some(d),
            (None, Some(_)) => None,
            (None, None) => Some(Duration::from_secs(10)),
        },
        ops: l.ops,
        rate: l.rate,
        timeout: l.timeout,
        progress: l.progress,
    })
}

/// A run id unique enough that two runs never share keys.
fn new_run_id() -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    let mixed = (nanos ^ (u64::from(std::process::id()) << 40)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    format!("{:012x}", mixed >> 16)
}

fn print<T: serde::Serialize>(json: bool, value: &T, line: String, samples: &[stats::ErrorSample]) {
    if json {
        match serde_json::to_string(value) {
            Ok(s) => println!("{s}"),
            Err(e) => eprintln!("rrc-check: error: encoding the result: {e}"),
        }
        return;
    }
    println!("{line}");
    for s in samples {
        println!("  {:?} at {:.3} s, thread {}, {}: {}", s.kind, s.at_s, s.thread, s.key, s.detail);
    }
}

fn exit_of(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn run_kv(kind: KvKind, a: &KvArgs) -> anyhow::Result<ExitCode> {
    let plan = plan_of(&a.load, 8)?;
    if a.keys_per_thread == 0 {
        bail!("--keys-per-thread must be at least 1");
    }
    let spec = kv::KvSpec {
        kind,
        server: a.server.clone(),
        addr: conn::resolve(&a.server)?,
        keys_per_thread: a.keys_per_thread,
        value_size: a.value_size,
        run: new_run_id(),
    };
    let (report, state) = kv::run(&spec, &plan);
    if let Some(path) = &a.state {
        state.write(path)?;
    }
    print(a.load.json, &report, report.summary_line(), &report.error_samples);
    Ok(exit_of(report.ok))
}

fn run_shared(a: &SharedArgs) -> anyhow::Result<ExitCode> {
    let plan = plan_of(&a.load, 8)?;
    if a.keys == 0 {
        bail!("--keys must be at least 1");
    }
    // A history file that cannot be written fails now, not after the run.
    if let Some(path) = &a.history {
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    }
    let spec = shared::SharedSpec {
        kind: a.kind,
        server: a.server.clone(),
        addr: conn::resolve(&a.server)?,
        keys: a.keys,
        value_size: a.value_size,
        run: new_run_id(),
    };
    let (load, history) = shared::run(&spec, &plan);
    // Kept before the check, so a check that fails or takes long loses
    // nothing.
    if let Some(path) = &a.history {
        shared::write_history(path, &history)?;
    }
    let report = shared::SharedReport::new(load, shared::LinearReport::of(&history, a.check_steps));
    print(a.load.json, &report, report.summary_line(), &report.load.error_samples);
    Ok(exit_of(report.load.ok))
}

fn run_linearizable(a: &LinearizableArgs) -> anyhow::Result<ExitCode> {
    let history = shared::read_history(&a.history)?;
    let check = shared::LinearReport::of(&history, a.check_steps);
    let line = format!("rrc-check linearizable {}: {}", a.history.display(), check.summary());
    print(a.json, &check, line, &[]);
    Ok(exit_of(check.ok()))
}

fn run_http(a: &HttpArgs) -> anyhow::Result<ExitCode> {
    let plan = plan_of(&a.load, 4)?;
    let url = http::Url::parse(&a.url)?;
    let spec = web::HttpSpec {
        url_text: a.url.clone(),
        addr: conn::resolve(&url.authority)?,
        url,
        expected: std::fs::read(&a.file).with_context(|| format!("reading {}", a.file.display()))?,
        ranges: a.ranges,
        close: a.close,
    };
    let report = web::run(&spec, &plan);
    print(a.load.json, &report, report.summary_line(), &report.error_samples);
    Ok(exit_of(report.ok))
}

fn run_verify(a: &VerifyArgs) -> anyhow::Result<ExitCode> {
    let state = state::StateFile::read(&a.state)?;
    if state.kind != a.kind.name() {
        bail!("{} was written by a {} run, not {}", a.state.display(), state.kind, a.kind.name());
    }
    let report = kv::verify(a.kind, &a.server, conn::resolve(&a.server)?, a.timeout, &state);
    print(a.json, &report, report.summary_line(), &report.error_samples);
    Ok(exit_of(report.ok))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    {
        use tracing_subscriber::EnvFilter;
        let filter = EnvFilter::try_from_env("RRC_LOG").unwrap_or_else(|_| EnvFilter::new("warn"));
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_target(true).init();
    }
    let result = match &cli.cmd {
        Cmd::Redis(a) => run_kv(KvKind::Redis, a),
        Cmd::Memcached(a) => run_kv(KvKind::Memcached, a),
        Cmd::Http(a) => run_http(a),
        Cmd::Verify(a) => run_verify(a),
        Cmd::Shared(a) => run_shared(a),
        Cmd::Linearizable(a) => run_linearizable(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rrc-check: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5x").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn cli_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        assert!(
            Cli::try_parse_from(["rrc-check", "redis", "--server", "x:1", "--ops", "5", "--duration", "1s"]).is_err()
        );
        let c = Cli::try_parse_from(["rrc-check", "verify", "memcached", "--server", "x:1", "--state", "f"]).unwrap();
        assert!(matches!(c.cmd, Cmd::Verify(VerifyArgs { kind: KvKind::Memcached, .. })));
        let c = Cli::try_parse_from(["rrc-check", "shared", "redis", "--server", "x:1"]).unwrap();
        match c.cmd {
            Cmd::Shared(a) => {
                assert_eq!(
                    (a.kind, a.keys, a.load.threads, a.check_steps),
                    (KvKind::Redis, 8, None, shared::DEFAULT_CHECK_STEPS)
                );
                assert_eq!(plan_of(&a.load, 8).unwrap().threads, 8);
            }
            _ => panic!("not shared"),
        }
        assert!(Cli::try_parse_from(["rrc-check", "shared", "--server", "x:1"]).is_err());
        let c = Cli::try_parse_from(["rrc-check", "linearizable", "--history", "h", "--json"]).unwrap();
        assert!(matches!(c.cmd, Cmd::Linearizable(LinearizableArgs { json: true, .. })));
    }

    #[test]
    fn run_ids_differ() {
        let a = new_run_id();
        std::thread::sleep(Duration::from_millis(1));
        assert_ne!(a, new_run_id());
        assert_eq!(a.len(), 12);
    }
}
