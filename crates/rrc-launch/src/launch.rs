//! One restore: find (and optionally verify) the chain, or take the stream
//! an image arrives on; start rrc-restore as pid 1 of a new container, hand
//! it the repaired sockets, wait for its status record and for the restored
//! library's PONG. Whatever fails, the container is removed before the
//! error is returned.

use std::ffi::OsString;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use rrc_container::{spawn, Bind, Config, Container, Record, Spec, CONTAINER_RUN_DIR, CONTROL_SOCKET_NAME};
use rrc_control::Pong;
use rrc_image::{Chain, IMAGE_FILE_NAME, PARENT_LINK};

use crate::repaired::{self, REPAIRED_FD};
use crate::status::RestoreStatus;
use crate::wait;

/// The fd number rrc-restore finds its status pipe at.
pub const STATUS_FD: i32 = 3;
/// The fd number rrc-restore reads a streamed image from.
pub const IMAGE_STREAM_FD: i32 = 5;
/// The record log to replay after the restore (`--replay-fd`).
pub const REPLAY_FD: i32 = 6;
/// The restorer's PATH (it runs no other program; the restored process
/// keeps the environment of its image).
const RESTORER_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Bound on the parent links followed without verification (a link cycle).
const MAX_CHAIN: usize = 1000;

/// Where the image comes from.
#[derive(Debug)]
pub enum Images {
    /// The image directory of the newest checkpoint (DIR/checkpoint.rrc,
    /// DIR/parent -> the previous one, down to a full image). With
    /// `verify`, the whole chain is verified here first (every CRC, page
    /// data included) before anything starts; rrc-restore verifies it
    /// again in any case.
    Chain { dir: PathBuf, verify: bool },
    /// One full image arriving on the read end of a pipe (`rrc-restore
    /// --image-stream`), written by someone else meanwhile (the agent's
    /// store at a failover: no image file is written first). rrc-restore
    /// checks it as it reads: every metadata CRC before it uses anything,
    /// the pages' CRC and END before the process runs. `from` names the
    /// source in logs and the container's record. The writer sees EPIPE if
    /// the restore ends early: the request is consumed, and this end is
    /// closed once rrc-restore holds its copy.
    Stream { fd: OwnedFd, from: String },
}

impl Images {
    /// A stream and the write end its image goes into: a pipe as large as
    /// an unprivileged process may make one (fewer wake-ups of the
    /// restorer; the default 64 KiB if that fails).
    pub fn stream(from: impl Into<String>) -> Result<(Images, OwnedFd)> {
        let (rx, tx) = pipe().context("creating the image pipe")?;
        let max = std::fs::read_to_string("/proc/sys/fs/pipe-max-size").ok().and_then(|s| s.trim().parse::<i32>().ok()).unwrap_or(1 << 20);
        // SAFETY: fcntl on our fd.
        unsafe { libc::fcntl(std::os::fd::AsRawFd::as_raw_fd(&tx), libc::F_SETPIPE_SZ, max.min(1 << 20)) };
        Ok((Images::Stream { fd: rx, from: from.into() }, tx))
    }
}

/// What to restore: where from and how, and the sockets to hand over.
#[derive(Debug)]
pub struct RestoreRequest {
    pub launch: LaunchSpec,
    /// Established TCP connections rebuilt with TCP_REPAIR, each for the fd
    /// number its connection had in the image (an RRC_FD_INET_CONN record
    /// whose local and peer addresses the socket must have). Closed here
    /// once handed over (the restorer holds duplicates). In or out of
    /// repair mode: rrc-restore puts each in repair mode until every fd is
    /// placed, then leaves it.
    pub repaired: Vec<(i32, OwnedFd)>,
    /// Connections the primary's kernel had completed but the application
    /// had not accept()ed, rebuilt with TCP_REPAIR like `repaired`, each
    /// with the fd number of its listener (an RRC_FD_INET_LISTEN record
    /// with the socket's local port), in accept-queue order. The restored
    /// library hands them to the application's next accept() on that
    /// listener (runtime/lib/accept-queue.c).
    pub pending_accept: Vec<(i32, OwnedFd)>,
}

/// What rrc-restore is started with ([`start`]).
#[derive(Debug)]
pub struct LaunchSpec {
    pub images: Images,
    /// Join the network namespace /run/netns/NAME (where the repaired
    /// sockets were created).
    pub netns: Option<String>,
    /// The restorer's and the restored process's stdout/stderr (appended);
    /// None = /dev/null.
    pub log: Option<PathBuf>,
    /// Bind mounts made before the restorer reopens files (the data
    /// directory: the backup's copy at the path the service used).
    pub binds: Vec<Bind>,
    /// The rrc-restore binary.
    pub restorer: PathBuf,
    /// Where the container's cgroup and registry entry go.
    pub container: Config,
    /// Replay a record log after the restore (issue 13): the restored
    /// library replays it from the image's cut, then goes live.
    pub replay: Option<ReplaySpec>,
}

/// The log a restore replays (checked by the caller: rrc_image::rrlog).
#[derive(Debug)]
pub struct ReplaySpec {
    pub log: OwnedFd,
    /// No progress this long is a divergence (the library's watchdog).
    pub timeout_ms: u32,
    /// Go live at the cut of this image (a later checkpoint of the same
    /// recording) instead of the log's end.
    pub to: Option<[u8; 16]>,
    /// Or go live right after this output (and what it depends on).
    pub until: Option<OutputPos>,
    /// The data-race mitigation (RRC §4.7).
    pub races: Races,
    /// With [`Races::Pace`]: the longest wait before one return.
    pub pace_max_us: u32,
    /// The restored TCP connections are the clients' own (a failover,
    /// docs/failover.md): replayed reads take their bytes off them and
    /// replayed outputs go out on them (runtime/lib/rr-conns.h).
    pub connections: bool,
    /// Record again from go-live, the log waiting for a sink that the
    /// control protocol's RECORD hands over (a failover with a spare to
    /// re-protect onto: `rrc_control::record_to`).
    pub record: bool,
}

/// How a replay treats what the recording did not order (RRC §4.7;
/// `enum rrc_races` in rrc/image.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Races {
    /// Turns only where the recording numbered (locks, the fd table, epoll).
    Off,
    /// And system calls return, and lock acquisitions complete, in their
    /// recorded order (the default: it removes most divergences, for more
    /// replay time where a program takes many locks).
    #[default]
    Order,
    /// And no sooner after the previous return than they did.
    Pace,
}

impl Races {
    pub fn name(self) -> &'static str {
        match self {
            Races::Off => "off",
            Races::Order => "order",
            Races::Pace => "pace",
        }
    }
}

impl std::str::FromStr for Races {
    type Err = String;
    fn from_str(s: &str) -> Result<Races, String> {
        [Races::Off, Races::Order, Races::Pace]
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| format!("{s:?}: expected off, order (system calls return in their recorded order) or pace (and with their recorded gaps)"))
    }
}

/// A position in an output stream: the output that brings fd's stream to
/// `bytes` bytes sent (`FD:BYTES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct OutputPos {
    pub fd: i32,
    pub bytes: u64,
}

impl std::str::FromStr for OutputPos {
    type Err = String;
    fn from_str(s: &str) -> Result<OutputPos, String> {
        let bad = || format!("{s:?}: expected FD:BYTES (the output that brings fd FD's stream to BYTES bytes sent)");
        let (fd, bytes) = s.split_once(':').ok_or_else(bad)?;
        let fd = fd.parse::<i32>().ok().filter(|&f| f >= 0).ok_or_else(bad)?;
        let bytes = bytes.parse::<u64>().ok().filter(|&b| b > 0).ok_or_else(bad)?;
        Ok(OutputPos { fd, bytes })
    }
}

/// Where the time went, for the failover timeline.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timings {
    /// Finding the chain (and verifying it when asked).
    pub verify: Duration,
    /// From starting the container to rrc-restore's "ok" (repaired sockets
    /// handed in, fds placed, memory filled, threads created).
    pub spawn_to_status: Duration,
    /// From the "ok" to the library's PONG with restored=1.
    pub status_to_pong: Duration,
}

/// A restored, running process.
#[derive(Debug)]
pub struct Restored {
    /// The container (pid 1 = the restored process), as registered.
    pub record: Record,
    /// rrc-restore's record (code 0).
    pub status: RestoreStatus,
    /// The library's answer (restored = 1).
    pub pong: Pong,
    /// Images in the chain restored.
    pub images: usize,
    /// Repaired sockets handed in.
    pub repaired: usize,
    pub timings: Timings,
}

/// rrc-restore's failure record, kept typed for callers that act on the
/// code (`anyhow::Error::downcast_ref::<RestorerFailed>()`).
#[derive(Debug, Clone, thiserror::Error)]
#[error("rrc-restore failed: {status}")]
pub struct RestorerFailed {
    pub status: RestoreStatus,
}

/// The chain's image files, oldest (the full image) first. Verified with
/// `verify`; otherwise only each header is read to follow the parent links
/// (rrc-restore verifies everything before it uses anything).
pub fn chain_images(dir: &Path, verify: bool) -> Result<Vec<PathBuf>> {
    if verify {
        let chain = Chain::load(dir).context("verifying the checkpoint chain")?;
        return Ok(chain.images.into_iter().map(|i| i.path).collect());
    }
    let mut paths = Vec::new();
    let mut cur = dir.to_path_buf();
    loop {
        let path = cur.join(IMAGE_FILE_NAME);
        let header = rrc_image::read_header(&path).with_context(|| format!("reading {}", path.display()))?;
        let incremental = format!("{} is incremental", path.display());
        paths.push(path);
        if header.is_full() {
            break;
        }
        if paths.len() >= MAX_CHAIN {
            return Err(anyhow!("{}: more than {MAX_CHAIN} images without a full one (a parent link cycle?)", dir.display()));
        }
        let link = cur.join(PARENT_LINK);
        cur = std::fs::canonicalize(&link).with_context(|| format!("{incremental}: following {}", link.display()))?;
    }
    paths.reverse();
    Ok(paths)
}

/// How a process is told to record (runtime/lib/rr-sink.h): the log's
/// path, or the fd it goes to, the fd holding the key that seals it, the
/// first frame's number, frames without a key.
pub const RECORD_ENV: &str = "RRC_RECORD";
pub const RECORD_FD_ENV: &str = "RRC_RECORD_FD";
pub const RECORD_KEY_FD_ENV: &str = "RRC_RECORD_KEY_FD";
pub const RECORD_SEQ_ENV: &str = "RRC_RECORD_SEQ";
pub const RECORD_FRAMED_ENV: &str = "RRC_RECORD_FRAMED";
/// `1`: a spare waits to be the next backup; a log connection that fails
/// does not end the recording, the log waits for the sink RECORD hands
/// over next (runtime/lib/rr-sink.h).
pub const RECORD_REPLACEABLE_ENV: &str = "RRC_RECORD_REPLACEABLE";
/// Where the log's fd and its key's pipe are in the new process (the
/// library moves the first above the application's fds and closes the
/// second in its constructor, before `main`).
pub const RECORD_FD: i32 = 3;
pub const RECORD_KEY_FD: i32 = 4;

/// A pipe holding `bytes` (at most a pipe's buffer), its read end, for a
/// new process to read once: how a record log's key reaches the library
/// without ever being in the environment.
pub fn pipe_holding(bytes: &[u8]) -> Result<OwnedFd> {
    use std::io::Write;
    let (r, w) = pipe()?;
    std::fs::File::from(w).write_all(bytes).context("writing into a pipe")?;
    Ok(r)
}

/// A pipe, both ends close-on-exec: (read end, write end).
pub fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: plain syscall writing two fds.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(anyhow!(std::io::Error::last_os_error()).context("pipe2"));
    }
    // SAFETY: fresh fds we own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Restores the chain (or stream) of `req.launch.images` and returns once
/// the restored library answered PING with restored=1. On any failure
/// after the start the container is removed (and the error says so). The
/// request's descriptors are closed when this returns.
pub fn restore(req: RestoreRequest) -> Result<Restored> {
    start(req.launch)?.finish(req.repaired, req.pending_accept)
}

/// rrc-restore started as pid 1 of its container, waiting for the
/// repaired sockets (an image stream's bytes may already flow): a failover
/// starts it in advance, when the host becomes the backup, so that the
/// container is not made on the failover's clock. [`Started::finish`]
/// hands the sockets over and waits for the restore; dropping it without
/// finishing removes the container.
#[derive(Debug)]
pub struct Started {
    /// (container, status pipe, repaired-socket channel): taken by finish.
    run: Option<(Container, OwnedFd, OwnedFd)>,
    container: Config,
    source: PathBuf,
    nr_images: usize,
    verify: Duration,
    spawn: Duration,
}

/// Finds the chain (verified if asked) or takes the stream, and starts
/// rrc-restore in a new container (docs/restore.md). Nothing is started
/// if the chain cannot be found.
pub fn start(l: LaunchSpec) -> Result<Started> {
    let (status_r, status_w) = pipe().context("creating the status pipe")?;
    let mut pass_fds = vec![(status_w, STATUS_FD)];
    let t_verify = Instant::now();
    let (source, image_args, nr_images): (PathBuf, Vec<OsString>, usize) = match l.images {
        Images::Chain { ref dir, verify } => {
            let dir = std::fs::canonicalize(dir).with_context(|| format!("image directory {}", dir.display()))?;
            let images = chain_images(&dir, verify)?;
            tracing::info!(images = images.len(), dir = %dir.display(), verified = verify, "restoring");
            let n = images.len();
            (dir, images.into_iter().map(PathBuf::into_os_string).collect(), n)
        }
        Images::Stream { fd, ref from } => {
            tracing::info!(from = %from, "restoring an image stream");
            pass_fds.push((fd, IMAGE_STREAM_FD));
            (PathBuf::from(format!("<{from}>")), vec!["--image-stream".into(), IMAGE_STREAM_FD.to_string().into()], 1)
        }
    };
    let verify = t_verify.elapsed();

    let mut argv: Vec<OsString> = vec![l.restorer.clone().into(), "--status-fd".into(), STATUS_FD.to_string().into()];
    if l.log.is_some() {
        // The restorer's step-by-step log (chain, each fd placed, blob,
        // resume) goes to its stderr, the log file, ahead of the process's
        // own output.
        argv.extend(["--log-fd".into(), "2".into()]);
    }
    // Always: the restorer reads the sockets (maybe none) first, so a
    // container started in advance waits there.
    let (channel, theirs) = repaired::channel()?;
    pass_fds.push((theirs, REPAIRED_FD));
    argv.extend(["--repaired-fds".into(), REPAIRED_FD.to_string().into()]);
    if let Some(r) = l.replay {
        pass_fds.push((r.log, REPLAY_FD));
        argv.extend(["--replay-fd".into(), REPLAY_FD.to_string().into()]);
        argv.extend(["--replay-timeout-ms".into(), r.timeout_ms.to_string().into()]);
        if let Some(id) = r.to {
            let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
            argv.extend(["--replay-to".into(), hex.into()]);
        }
        if let Some(o) = r.until {
            argv.extend(["--replay-until".into(), format!("{}:{}", o.fd, o.bytes).into()]);
        }
        argv.extend(["--replay-races".into(), r.races.name().into()]);
        argv.extend(["--replay-pace-max-us".into(), r.pace_max_us.to_string().into()]);
        if r.connections {
            argv.push("--replay-connections".into());
        }
        if r.record {
            argv.push("--replay-record".into());
        }
    }
    argv.extend(image_args);
    let env: Vec<(OsString, OsString)> = vec![
        ("PATH".into(), RESTORER_PATH.into()),
        // The control socket the restored library binds again.
        ("RRC_CONTROL".into(), format!("{CONTAINER_RUN_DIR}/{CONTROL_SOCKET_NAME}").into()),
    ];
    let spec = Spec { argv, env, netns: l.netns.clone(), log: l.log.clone(), pass_fds, restored_from: Some(source.clone()), binds: l.binds.clone() };
    let t_spawn = Instant::now();
    let c = spawn(&l.container, spec).context("starting rrc-restore")?;
    Ok(Started { run: Some((c, status_r, channel)), container: l.container, source, nr_images, verify, spawn: t_spawn.elapsed() })
}

impl Started {
    /// rrc-restore's pid (the restored process's, once it runs).
    pub fn pid(&self) -> i32 {
        self.run.as_ref().map_or(0, |(c, _, _)| c.pid())
    }

    /// Whether rrc-restore still runs (it ends only by failing before the
    /// hand-over: its record says why).
    pub fn is_alive(&self) -> bool {
        let Some((c, _, _)) = self.run.as_ref() else { return false };
        let mut st = 0;
        // SAFETY: plain syscalls on the container's pid 1, our child
        // (this process is a subreaper) until reaped.
        match unsafe { libc::waitpid(c.pid(), &mut st, libc::WNOHANG) } {
            0 => true,
            r if r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD) => (unsafe { libc::kill(c.pid(), 0) }) == 0,
            _ => false,
        }
    }

    /// Hands the repaired sockets over, waits for rrc-restore's status and
    /// the restored library's PONG. On failure the container is removed.
    pub fn finish(mut self, repaired: Vec<(i32, OwnedFd)>, pending_accept: Vec<(i32, OwnedFd)>) -> Result<Restored> {
        let (c, status_r, channel) = self.run.take().expect("a Started holds its container until finish or drop");
        tracing::info!(pid = c.pid(), repaired = repaired.len(), pending_accept = pending_accept.len(), "handing over to rrc-restore");
        let t_handover = Instant::now();
        match run_restore(&c, status_r, channel, &repaired, &pending_accept) {
            Ok((status, t_status, pong)) => {
                let timings = Timings {
                    verify: self.verify,
                    spawn_to_status: self.spawn + t_status.duration_since(t_handover),
                    status_to_pong: t_status.elapsed(),
                };
                tracing::info!(pid = c.pid(), id = %c.record.id, ?timings, "restored");
                Ok(Restored { record: c.record, status, pong, images: self.nr_images, repaired: repaired.len(), timings })
            }
            Err(e) => {
                if let Err(k) = rrc_container::kill(&self.container, &c.record) {
                    tracing::error!("removing the failed container {}: {k}", c.record.id);
                }
                Err(e.context(format!("restoring {} (container {} removed)", self.source.display(), c.record.id)))
            }
        }
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        if let Some((c, _, _)) = self.run.take() {
            if let Err(e) = rrc_container::kill(&self.container, &c.record) {
                tracing::warn!("removing the unused restore container {}: {e}", c.record.id);
            }
        }
    }
}

/// Hand-over, status, PONG. Returns the status, when it came, the PONG.
fn run_restore(c: &Container, status_r: OwnedFd, chan: OwnedFd, socks: &[(i32, OwnedFd)], pending: &[(i32, OwnedFd)]) -> Result<(RestoreStatus, Instant, Pong)> {
    // send_all closes the channel after the last socket: the restorer
    // reads until EOF.
    if let Err(e) = repaired::send_all(chan, socks, pending) {
        // The restorer must not go on with some sockets missing: end it
        // first, then its record (if it wrote one) says why it stopped
        // reading.
        // SAFETY: plain kill of the container's pid 1, still our child.
        unsafe { libc::kill(c.pid(), libc::SIGKILL) };
        return Err(match wait::read_status(status_r, c) {
            Ok(st) if st.code != 0 => anyhow::Error::new(RestorerFailed { status: st }).context(format!("{e:#}")),
            _ => e,
        });
    }
    let status = wait::read_status(status_r, c)?;
    let t_status = Instant::now();
    if status.code != 0 {
        return Err(RestorerFailed { status }.into());
    }
    let pong = wait::wait_for_pong(c, true).context("the restored process")?;
    Ok((status, t_status, pong))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vectors() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors")
    }

    /// Following the parent links without verification finds the same
    /// files, oldest first, as the verified load.
    #[test]
    fn chain_images_with_and_without_verification() {
        for name in ["full", "incr"] {
            let dir = std::fs::canonicalize(vectors().join(name)).unwrap();
            let quick = chain_images(&dir, false).unwrap();
            let verified = chain_images(&dir, true).unwrap();
            assert_eq!(quick, verified, "{name}");
            assert_eq!(quick.len(), if name == "full" { 1 } else { 2 });
            assert!(quick.last().unwrap().starts_with(&dir));
        }
        // Only verification reads the page data; a missing parent stops both.
        let bad = std::fs::canonicalize(vectors().join("bad-payload-crc")).unwrap();
        assert!(chain_images(&bad, false).is_ok());
        let e = chain_images(&bad, true).unwrap_err();
        assert!(format!("{e:#}").contains("payload CRC mismatch"), "{e:#}");
        let e = chain_images(&std::fs::canonicalize(vectors().join("missing-parent")).unwrap(), false).unwrap_err();
        assert!(format!("{e:#}").contains("following"), "{e:#}");
    }
}
