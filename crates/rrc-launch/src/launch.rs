//! One restore: find (and optionally verify) the chain, start rrc-restore
//! as pid 1 of a new container, hand it the repaired sockets, wait for its
//! status record and for the restored library's PONG. Whatever fails, the
//! container is removed before the error is returned.

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
/// The restorer's PATH (it runs no other program; the restored process
/// keeps the environment of its image).
const RESTORER_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Bound on the parent links followed without verification (a link cycle).
const MAX_CHAIN: usize = 1000;

/// What to restore, and where.
#[derive(Debug)]
pub struct RestoreRequest {
    /// The image directory of the newest checkpoint (DIR/checkpoint.rrc,
    /// DIR/parent -> the previous one, down to a full image).
    pub images: PathBuf,
    /// Join the network namespace /run/netns/NAME (where the repaired
    /// sockets were created).
    pub netns: Option<String>,
    /// The restorer's and the restored process's stdout/stderr (appended);
    /// None = /dev/null.
    pub log: Option<PathBuf>,
    /// Bind mounts made before the restorer reopens files (the data
    /// directory: the backup's copy at the path the service used).
    pub binds: Vec<Bind>,
    /// Established TCP connections rebuilt with TCP_REPAIR, each for the fd
    /// number its connection had in the image (an RRC_FD_INET_CONN record
    /// whose local and peer addresses the socket must have). The caller
    /// keeps these descriptors (the restorer gets duplicates); close them
    /// once `restore` returned. In or out of repair mode: rrc-restore puts
    /// each in repair mode until every fd is placed, then leaves it.
    pub repaired: Vec<(i32, OwnedFd)>,
    /// Connections the primary's kernel had completed but the application
    /// had not accept()ed, rebuilt with TCP_REPAIR like `repaired`, each
    /// with the fd number of its listener (an RRC_FD_INET_LISTEN record
    /// with the socket's local port), in accept-queue order. The restored
    /// library hands them to the application's next accept() on that
    /// listener (runtime/lib/accept-queue.c). Kept by the caller likewise.
    pub pending_accept: Vec<(i32, OwnedFd)>,
    /// The rrc-restore binary.
    pub restorer: PathBuf,
    /// Where the container's cgroup and registry entry go.
    pub container: Config,
    /// Verify the whole chain here first (every CRC, page data included)
    /// before starting anything. rrc-restore verifies it again in any case;
    /// false saves that pass for an image this host just wrote itself.
    pub verify_chain: bool,
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

fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: plain syscall writing two fds.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(anyhow!(std::io::Error::last_os_error()).context("creating the status pipe"));
    }
    // SAFETY: fresh fds we own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Restores the chain ending at `req.images` and returns once the restored
/// library answered PING with restored=1. On any failure after the start
/// the container is removed (and the error says so).
pub fn restore(req: &RestoreRequest) -> Result<Restored> {
    let dir = std::fs::canonicalize(&req.images).with_context(|| format!("image directory {}", req.images.display()))?;
    let t_verify = Instant::now();
    // Nothing is started before the chain is found (and verified if asked).
    let images = chain_images(&dir, req.verify_chain)?;
    let verify = t_verify.elapsed();
    tracing::info!(images = images.len(), dir = %dir.display(), verified = req.verify_chain, repaired = req.repaired.len(), pending_accept = req.pending_accept.len(), "restoring");

    let (status_r, status_w) = pipe()?;
    let mut pass_fds = vec![(status_w, STATUS_FD)];
    let mut argv: Vec<OsString> = vec![req.restorer.clone().into(), "--status-fd".into(), STATUS_FD.to_string().into()];
    if req.log.is_some() {
        // The restorer's step-by-step log (chain, each fd placed, blob,
        // resume) goes to its stderr, the log file, ahead of the process's
        // own output.
        argv.extend(["--log-fd".into(), "2".into()]);
    }
    let mut channel = None;
    if !req.repaired.is_empty() || !req.pending_accept.is_empty() {
        let (ours, theirs) = repaired::channel()?;
        pass_fds.push((theirs, REPAIRED_FD));
        argv.extend(["--repaired-fds".into(), REPAIRED_FD.to_string().into()]);
        channel = Some(ours);
    }
    argv.extend(images.iter().map(|p| p.clone().into_os_string()));
    let env: Vec<(OsString, OsString)> = vec![
        ("PATH".into(), RESTORER_PATH.into()),
        // The control socket the restored library binds again.
        ("RRC_CONTROL".into(), format!("{CONTAINER_RUN_DIR}/{CONTROL_SOCKET_NAME}").into()),
    ];
    let spec = Spec {
        argv,
        env,
        netns: req.netns.clone(),
        log: req.log.clone(),
        pass_fds,
        restored_from: Some(dir.clone()),
        binds: req.binds.clone(),
    };
    let t_spawn = Instant::now();
    let c = spawn(&req.container, spec).context("starting rrc-restore")?;

    let res = run_restore(&c, status_r, channel, &req.repaired, &req.pending_accept);
    match res {
        Ok((status, t_status, pong)) => {
            let timings = Timings {
                verify,
                spawn_to_status: t_status.duration_since(t_spawn),
                status_to_pong: t_status.elapsed(),
            };
            tracing::info!(pid = c.pid(), id = %c.record.id, ?timings, "restored");
            Ok(Restored { record: c.record, status, pong, images: images.len(), repaired: req.repaired.len(), timings })
        }
        Err(e) => {
            if let Err(k) = rrc_container::kill(&req.container, &c.record) {
                tracing::error!("removing the failed container {}: {k}", c.record.id);
            }
            Err(e.context(format!("restoring {} (container {} removed)", dir.display(), c.record.id)))
        }
    }
}

/// Hand-over, status, PONG. Returns the status, when it came, the PONG.
fn run_restore(c: &Container, status_r: OwnedFd, channel: Option<OwnedFd>, socks: &[(i32, OwnedFd)], pending: &[(i32, OwnedFd)]) -> Result<(RestoreStatus, Instant, Pong)> {
    if let Some(chan) = channel {
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
