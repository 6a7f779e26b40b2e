//! `rrc restore`: the command-line front of rrc_launch::restore (verify a
//! chain, start rrc-restore as pid 1 of a new container, hand it repaired
//! sockets, wait for its status and for the restored library).

use std::os::fd::{FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{anyhow, bail, Result};
use clap::Args;
use rrc_container::{Bind, Config};
use rrc_launch::RestoreRequest;

use crate::cmd_exec::print_started;
use crate::{locate, JsonFlag};

#[derive(Args, Debug)]
pub struct RestoreArgs {
    /// The image directory of the newest checkpoint of the chain.
    #[arg(long, value_name = "DIR", required_unless_present = "stdin", conflicts_with = "stdin")]
    pub images: Option<PathBuf>,
    /// Read one full image from standard input instead (a pipe, e.g.
    /// `ssh host cat DIR/checkpoint.rrc | rrc restore --stdin`): it is
    /// checked as it is read, every CRC before the process runs.
    #[arg(long)]
    pub stdin: bool,
    /// Join the network namespace /run/netns/NAME.
    #[arg(long, value_name = "NAME")]
    pub netns: Option<String>,
    /// Append the restorer's and the restored process's output to FILE
    /// (default /dev/null).
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// The data directory to give the restored service: HOSTDIR (holding
    /// the committed file state, e.g. the backup's copy with the chain's
    /// FILEOPS applied) is bind-mounted at PATH before the restorer reopens
    /// files. PATH must be the one given to `rrc exec --data-dir`.
    #[arg(long, value_name = "HOSTDIR:PATH")]
    pub data_dir: Option<Bind>,
    /// Give the restored process, as its fd N, the TCP socket this command
    /// inherited at fd M: a connection rebuilt with TCP_REPAIR in the
    /// restore's network namespace, with the local and peer addresses the
    /// image records for fd N (else the restore fails). Repeatable.
    #[arg(long = "repaired-fd", value_name = "N=M")]
    pub repaired_fd: Vec<RepairedFd>,
    /// Replay the record log LOG (`rrc exec --record LOG`) from the
    /// restored checkpoint's cut: lock acquisitions in the recorded order,
    /// recorded results for nondeterministic calls, outputs suppressed and
    /// checked; at the end of the log every thread goes live together. A
    /// divergence is reported and the container removed.
    #[arg(long, value_name = "LOG", conflicts_with = "stdin")]
    pub replay: Option<PathBuf>,
    /// With --replay: go live at the cut of the checkpoint in DIR (a later
    /// one of the same recording) instead of the log's end: every thread
    /// stops where that checkpoint found it, so the process goes live in
    /// that checkpoint's state (a replay of one epoch).
    #[arg(long, value_name = "DIR", requires = "replay", conflicts_with = "replay_until")]
    pub replay_to: Option<PathBuf>,
    /// With --replay: go live right after the output that brings fd FD's
    /// stream to BYTES bytes sent (`rrc inspect --log LOG --events` lists
    /// outputs: obj is the fd, offset + length the bytes), and the events
    /// it depends on: every thread stops at the least consistent cut that
    /// holds it (RRC §4.4: replay up to the last released output).
    #[arg(long, value_name = "FD:BYTES", requires = "replay")]
    pub replay_until: Option<rrc_launch::OutputPos>,
    /// With --replay: data-race mitigation (RRC §4.7). `order` (the
    /// default): system calls return in the order they returned in the
    /// recording; `pace`: and each no sooner after the previous one than
    /// it did (at most --replay-pace-max); `off`: only the recorded
    /// numbers are waited for. What a race changes then plays out as
    /// recorded more often, at the cost of replay time (bench/README.md
    /// "replay": over 1000 replays of real epochs, redis diverged 10 times
    /// off and never in order, memcached 100 times off and 8 in order, for
    /// 35–45 % more replay time, 1.9 and 14 ms per 100 ms of log).
    #[arg(long, value_name = "off|order|pace", default_value = "order", requires = "replay")]
    pub replay_races: rrc_launch::Races,
    /// With --replay-races pace: the longest wait before one return (an
    /// idle gap in the recording is not waited out).
    #[arg(long, value_name = "DURATION", default_value = "10ms", value_parser = crate::cmd_service::parse_duration, requires = "replay")]
    pub replay_pace_max: std::time::Duration,
    /// With --replay: no progress for this long is a divergence.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = crate::cmd_service::parse_duration, requires = "replay")]
    pub replay_timeout: std::time::Duration,
    #[command(flatten)]
    pub json: JsonFlag,
}

/// `N=M`: fd N in the restored process, inherited fd M here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepairedFd {
    pub target: i32,
    pub inherited: i32,
}

impl std::str::FromStr for RepairedFd {
    type Err = String;
    fn from_str(s: &str) -> Result<RepairedFd, String> {
        let (n, m) = s.split_once('=').ok_or_else(|| format!("{s:?}: expected N=M (fd N in the process, inherited fd M)"))?;
        let num = |v: &str| v.parse::<i32>().ok().filter(|&v| v >= 0).ok_or_else(|| format!("{s:?}: {v:?} is not an fd number"));
        Ok(RepairedFd { target: num(n)?, inherited: num(m)? })
    }
}

/// Takes ownership of the inherited sockets, refusing what is not one.
fn take_inherited(args: &[RepairedFd]) -> Result<Vec<(i32, OwnedFd)>> {
    let mut out: Vec<(i32, OwnedFd)> = Vec::with_capacity(args.len());
    for (i, a) in args.iter().enumerate() {
        if a.inherited <= 2 {
            bail!("--repaired-fd {}={}: fd {} is stdin/stdout/stderr", a.target, a.inherited, a.inherited);
        }
        if args[..i].iter().any(|b| b.inherited == a.inherited) {
            bail!("--repaired-fd: inherited fd {} given twice", a.inherited);
        }
        // SAFETY: fstat into a zeroed struct on the stack.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(a.inherited, &mut st) } < 0 {
            return Err(anyhow!(std::io::Error::last_os_error()).context(format!("--repaired-fd {}={}: fd {} is not open", a.target, a.inherited, a.inherited)));
        }
        if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
            bail!("--repaired-fd {}={}: fd {} is not a socket", a.target, a.inherited, a.inherited);
        }
        // SAFETY: an open fd of ours that nothing else owns (checked distinct above).
        out.push((a.target, unsafe { OwnedFd::from_raw_fd(a.inherited) }));
    }
    Ok(out)
}

/// The newest image of the chain in dir: the one whose cut the replay starts from.
fn newest_image_id(dir: &std::path::Path) -> Result<rrc_image::ImageId> {
    let images = rrc_launch::chain_images(dir, false)?;
    let newest = images.last().ok_or_else(|| anyhow!("{}: no image", dir.display()))?;
    Ok(rrc_image::read_header(newest)?.image_id)
}

pub fn run(a: RestoreArgs) -> Result<ExitCode> {
    if a.replay_pace_max >= a.replay_timeout {
        bail!(
            "--replay-pace-max {:?} is not below --replay-timeout {:?}: one paced return would stall the replay's watchdog",
            a.replay_pace_max,
            a.replay_timeout
        );
    }
    let repaired = take_inherited(&a.repaired_fd)?;
    let replay_to = a.replay_to.as_deref().map(newest_image_id).transpose()?;
    let replay = match (&a.replay, &a.images) {
        (Some(log), Some(dir)) => {
            let checked = crate::replay::check(log, &newest_image_id(dir)?, replay_to.as_ref())?;
            if let Some(t) = &checked.partial_tail {
                eprintln!("rrc restore: {t}: the log ends inside its last batch (a recording cut short); replaying what precedes it");
            }
            Some(checked)
        }
        _ => None,
    };
    let replaying = replay.is_some();
    let images = match a.images {
        Some(dir) => rrc_launch::Images::Chain { dir, verify: true },
        None => {
            // SAFETY: fcntl on stdin, giving a fresh fd we own.
            let fd = unsafe { libc::fcntl(0, libc::F_DUPFD_CLOEXEC, 3) };
            if fd < 0 {
                return Err(anyhow!(std::io::Error::last_os_error()).context("--stdin: standard input is not open"));
            }
            // SAFETY: fresh fd.
            rrc_launch::Images::Stream { fd: unsafe { OwnedFd::from_raw_fd(fd) }, from: "standard input".into() }
        }
    };
    let req = RestoreRequest {
        launch: rrc_launch::LaunchSpec {
            images,
            netns: a.netns,
            log: a.log,
            binds: a.data_dir.into_iter().collect(),
            restorer: locate::find(locate::RESTORER)?,
            container: Config::default(),
            replay: replay.map(|r| rrc_launch::ReplaySpec {
                connections: false,
                record: false,
                log: r.file.into(),
                timeout_ms: a.replay_timeout.as_millis().min(u32::MAX as u128) as u32,
                to: replay_to.map(|id| id.0),
                until: a.replay_until,
                races: a.replay_races,
                pace_max_us: a.replay_pace_max.as_micros().clamp(1, u32::MAX as u128) as u32,
            }),
        },
        repaired,
        pending_accept: vec![],
    };
    let r = rrc_launch::restore(req).map_err(|e| e.context("rrc restore"))?;
    let t = &r.timings;
    let c = rrc_container::Container { record: r.record };
    let mut replayed = serde_json::Value::Null;
    if replaying {
        let cfg = Config::default();
        let st = match crate::replay::watch(&c, std::time::Duration::from_secs(600)) {
            Ok(st) => st,
            Err(e) => {
                let _ = rrc_container::kill(&cfg, &c.record);
                return Err(e.context(format!("rrc restore --replay (container {} removed)", c.record.id)));
            }
        };
        if st.phase == rrc_control::ReplayPhase::Diverged {
            let _ = rrc_container::kill(&cfg, &c.record);
            bail!(
                "rrc restore --replay: {} (after {} of {} events; container {} removed)",
                st.report, st.events_done, st.events_total, c.record.id
            );
        }
        tracing::info!(events = st.events_done, "replayed");
        replayed = serde_json::to_value(&st)?;
        // where every thread went live: the log's (consistent) end, or a later checkpoint's cut
        replayed["live_at"] = match (&replay_to, &a.replay_until) {
            (Some(id), _) => serde_json::json!({ "cut_of_image": id.to_string() }),
            (None, Some(o)) => serde_json::json!({ "output": o }),
            (None, None) => serde_json::json!("end of the log"),
        };
        replayed["races"] = serde_json::to_value(a.replay_races)?;
        if !a.json.json {
            eprintln!(
                "rrc restore: replayed {} events of {} threads in {:.1} ms ({} outputs checked, {} dropped after the log's consistent end); live",
                st.events_done,
                st.threads,
                st.replay_ns as f64 / 1e6,
                st.outputs,
                st.events_dropped
            );
        }
    }
    print_started(
        &c,
        a.json.json,
        serde_json::json!({
            "threads": r.pong.nr_threads,
            "images": r.images,
            "repaired": r.repaired,
            "verify_us": t.verify.as_micros() as u64,
            "spawn_to_status_us": t.spawn_to_status.as_micros() as u64,
            "status_to_pong_us": t.status_to_pong.as_micros() as u64,
            "replay": replayed,
        }),
    )?;
    Ok(ExitCode::SUCCESS)
}
