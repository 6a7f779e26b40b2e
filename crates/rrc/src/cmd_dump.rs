//! `rrc dump`: one checkpoint through the library, verified before it is
//! reported.
//!
//! The image reaches this command as a stream: the library gets the write
//! end of a pipe, and a thread here copies what arrives into
//! DIR/checkpoint.rrc (splice, no copy through user space). This is the
//! path an epoch's image takes to the agent's staging buffer (issue 3), so
//! every dump exercises the library's streaming writer; the file is then
//! verified as a whole (every CRC) before the dump is reported.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use rrc_container::{control_socket_of, is_running, Config};
use rrc_control::{DumpRequest, DUMP_F_COPY, DUMP_F_INCREMENTAL, DUMP_F_TCP_TABLE, SNAPSHOT_COPY, SNAPSHOT_FORK};
use rrc_image::{read_header, Image, ImageId, IMAGE_FILE_NAME, PARENT_LINK};
use serde::Serialize;

use crate::JsonFlag;

/// Sending the request and getting DUMP_PAUSED (the quiesce has its own
/// bound inside the library).
const PAUSE_TIMEOUT: Duration = Duration::from_secs(30);
/// The snapshot child writing the image.
const WRITE_TIMEOUT: Duration = Duration::from_secs(600);
/// After DUMP_DONE every writer of the stream is closed; the copy only has
/// what is still in the pipe to move.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// Pipe capacity asked for (the default pipe-max-size): fewer wake-ups of
/// the writer and of the copy.
const PIPE_BYTES: libc::c_int = 1 << 20;

/// How the library takes the snapshot that the image is written from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SnapshotArg {
    /// Clone of the parked process, copy-on-write (pause grows with
    /// resident memory).
    Fork,
    /// Written pages copied before and during the pause, no fork (pause
    /// grows with the pages written just before it).
    Copy,
}

impl SnapshotArg {
    fn name(self) -> &'static str {
        match self {
            SnapshotArg::Fork => "fork",
            SnapshotArg::Copy => "copy",
        }
    }
}

#[derive(Args, Debug)]
pub struct DumpArgs {
    /// Pid of the container's process (as printed by exec/restore).
    #[arg(long)]
    pub pid: i32,
    /// Directory to write the checkpoint into (created; must not hold one).
    #[arg(long, value_name = "DIR")]
    pub images: PathBuf,
    /// Take an incremental checkpoint against the image in DIR, which must
    /// be the last checkpoint of this process.
    #[arg(long, value_name = "DIR")]
    pub parent: Option<PathBuf>,
    /// Keep the process running after the checkpoint (default: remove the
    /// container once the image is verified).
    #[arg(long)]
    pub leave_running: bool,
    /// How the snapshot is taken.
    #[arg(long, value_enum, default_value = "fork")]
    pub snapshot: SnapshotArg,
    /// Also capture the TCP stream table (the image's TCP section: how far
    /// the process had written and read on every TCP connection of its
    /// network namespace). Replication epochs always take it; a restore
    /// does not use it (connections come back closed). Costs ~0.5 ms of
    /// pause.
    #[arg(long)]
    pub tcp_table: bool,
    #[command(flatten)]
    pub json: JsonFlag,
}

#[derive(Serialize)]
struct DumpReport {
    pid: i32,
    images: PathBuf,
    image_id: ImageId,
    parent_id: Option<ImageId>,
    sequence: u64,
    full: bool,
    /// The snapshot the library reports it took.
    snapshot: SnapshotArg,
    pause_us: u64,
    quiesce_us: u64,
    scan_us: u64,
    capture_us: u64,
    fork_us: u64,
    /// Copy snapshot: pages copied in the pause, and before it (the
    /// process running) in precopy_passes passes.
    copy_us: u64,
    copied_pages: u64,
    precopy_us: u64,
    precopy_pages: u64,
    precopy_passes: u32,
    write_us: u64,
    total_us: u64,
    pages: u64,
    bytes: u64,
    threads: u32,
    untracked_vmas: u32,
    written_pages: u64,
}

/// A pipe for the image stream: (read end, write end), both close-on-exec.
fn stream_pipe() -> Result<(File, OwnedFd)> {
    let (r, w) = rrc_launch::pipe().context("creating the image stream pipe")?;
    // SAFETY: plain fcntl on an fd we own; failure only leaves the default size.
    unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_BYTES) };
    Ok((File::from(r), w))
}

/// Removes what a failed dump created.
struct Partial {
    file: Option<PathBuf>,
    dir: Option<PathBuf>,
}

impl Drop for Partial {
    fn drop(&mut self) {
        if let Some(f) = self.file.take() {
            let _ = std::fs::remove_file(f);
        }
        if let Some(d) = self.dir.take() {
            let _ = std::fs::remove_dir(d);
        }
    }
}

pub fn run(a: DumpArgs) -> Result<ExitCode> {
    let t0 = Instant::now();
    let cfg = Config::default();
    let rec = cfg.registry.find_pid(a.pid)?.with_context(|| {
        format!("pid {} is not a container started by rrc (no entry in {}; see `rrc ps`)", a.pid, cfg.registry.dir().display())
    })?;
    if !is_running(&rec) {
        bail!("container {} (pid {}) is not running; remove it with `rrc kill --pid {}`", rec.id, rec.pid, rec.pid);
    }
    let images = crate::abs(&a.images)?;

    let parent = match &a.parent {
        Some(p) => {
            let dir = std::fs::canonicalize(p).with_context(|| format!("parent image directory {}", p.display()))?;
            let h = read_header(&dir.join(IMAGE_FILE_NAME)).context("reading the parent's image header")?;
            Some((dir, h))
        }
        None => None,
    };
    if let Some((pdir, _)) = &parent {
        if std::fs::canonicalize(&images).ok().as_ref() == Some(pdir) {
            bail!("--images and --parent are the same directory {}", pdir.display());
        }
    }

    let mut partial = Partial { file: None, dir: None };
    if !images.exists() {
        std::fs::create_dir_all(&images).with_context(|| format!("creating {}", images.display()))?;
        partial.dir = Some(images.clone());
    }
    let path = images.join(IMAGE_FILE_NAME);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_CLOEXEC)
        .open(&path)
        .with_context(|| format!("creating {} (a directory holds one checkpoint)", path.display()))?;
    partial.file = Some(path.clone());

    let image_id = rrc_image::ImageId::random().context("an id for the image (reading /dev/urandom)")?.0;
    let snapshot_flag = match a.snapshot {
        SnapshotArg::Fork => 0,
        SnapshotArg::Copy => DUMP_F_COPY,
    } | if a.tcp_table { DUMP_F_TCP_TABLE } else { 0 };
    let req = match &parent {
        Some((_, h)) => DumpRequest { flags: DUMP_F_INCREMENTAL | snapshot_flag, image_id, parent_id: h.image_id.0 },
        None => DumpRequest { flags: snapshot_flag, image_id, parent_id: [0; 16] },
    };
    let sock = control_socket_of(rec.pid);
    tracing::info!(pid = rec.pid, image = %path.display(), incremental = parent.is_some(), snapshot = a.snapshot.name(), "dump requested");
    let (mut stream, stream_w) = stream_pipe()?;
    // The copy ends when every write end is closed: ours once DUMP is
    // sent, the library's when its snapshot child is done (or the dump is
    // refused). If this command fails, the read end closes with it and the
    // snapshot child ends with EPIPE instead of blocking.
    let (tx, copied) = std::sync::mpsc::channel();
    let mut out = file;
    std::thread::spawn(move || {
        let r = std::io::copy(&mut stream, &mut out);
        let _ = tx.send(r);
    });
    let mut session = rrc_control::dump(&sock, &req, stream_w.as_fd(), PAUSE_TIMEOUT).context("sending DUMP")?;
    drop(stream_w);
    let paused = session.wait_paused(PAUSE_TIMEOUT).context("dump")?;
    let snapshot = match paused.snapshot {
        SNAPSHOT_FORK => SnapshotArg::Fork,
        SNAPSHOT_COPY => SnapshotArg::Copy,
        n => bail!("DUMP_PAUSED reports an unknown snapshot kind {n}"),
    };
    let done = session.wait_done(WRITE_TIMEOUT).context("dump (the process kept running)")?;
    let n = match copied.recv_timeout(DRAIN_TIMEOUT) {
        Ok(r) => r.with_context(|| format!("copying the image stream into {}", path.display()))?,
        Err(_) => bail!(
            "the image stream did not end {} s after DUMP_DONE (another process holds its write end?)",
            DRAIN_TIMEOUT.as_secs()
        ),
    };
    if n != done.bytes {
        bail!("the image stream carried {n} bytes, DUMP_DONE reports {}", done.bytes);
    }

    let img = Image::open(&path).context("verifying the new image (left in place for inspection)");
    let img = match img {
        Ok(i) => i,
        Err(e) => {
            partial.file = None;
            partial.dir = None;
            return Err(e);
        }
    };
    check_matches(&img, &req, parent.as_ref().map(|(_, h)| h), done.bytes).map_err(|e| {
        partial.file = None;
        partial.dir = None;
        e.context(format!("{} (left in place for inspection)", path.display()))
    })?;
    partial.file = None;
    partial.dir = None;
    if let Some((pdir, _)) = &parent {
        let link = images.join(PARENT_LINK);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(pdir, &link).with_context(|| format!("linking {} -> {}", link.display(), pdir.display()))?;
        // Only the new image and its link to the parent's header are
        // checked here (check_matches above): a dump runs every epoch and
        // must cost O(new image), not O(chain). `rrc restore` and
        // `rrc inspect` verify the whole chain, page lookups included.
    }
    let total = t0.elapsed();

    if !a.leave_running {
        rrc_container::kill(&cfg, &rec).context("removing the container after the checkpoint")?;
    }

    // Checked once the dump is complete: a library that ignores the flag
    // still produced a good image, but not the measurement asked for.
    if snapshot != a.snapshot {
        bail!(
            "a {} snapshot was requested, the library took a {} snapshot (it does not know the flag?); image {} is complete and verified",
            a.snapshot.name(),
            snapshot.name(),
            path.display()
        );
    }

    let us = |ns: u64| ns / 1000;
    let report = DumpReport {
        pid: rec.pid,
        images: images.clone(),
        image_id: img.header.image_id,
        parent_id: (!img.header.parent_id.is_zero()).then_some(img.header.parent_id),
        sequence: img.header.sequence,
        full: img.header.is_full(),
        snapshot,
        pause_us: us(paused.pause_ns),
        quiesce_us: us(paused.quiesce_ns),
        scan_us: us(paused.scan_ns),
        capture_us: us(paused.capture_ns),
        fork_us: us(paused.fork_ns),
        copy_us: us(paused.copy_ns),
        copied_pages: paused.copied_pages,
        precopy_us: us(paused.precopy_ns),
        precopy_pages: paused.precopy_pages,
        precopy_passes: paused.precopy_passes,
        write_us: us(done.write_ns),
        total_us: total.as_micros() as u64,
        pages: done.pages,
        bytes: done.bytes,
        threads: paused.threads,
        untracked_vmas: paused.untracked_vmas,
        written_pages: paused.written_pages,
    };
    if a.json.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "{} checkpoint {} of pid {} (seq {}): paused {} us (quiesce {}, scan {}, capture {}, {}), {} pages, {} bytes, written in {} us, verified; total {} us{}",
            if report.full { "full" } else { "incremental" },
            path.display(),
            report.pid,
            report.sequence,
            report.pause_us,
            report.quiesce_us,
            report.scan_us,
            report.capture_us,
            match report.snapshot {
                SnapshotArg::Fork => format!("fork {}", report.fork_us),
                SnapshotArg::Copy => format!(
                    "copy {} of {} pages; before the pause {} us copying {} pages in {} passes",
                    report.copy_us, report.copied_pages, report.precopy_us, report.precopy_pages, report.precopy_passes
                ),
            },
            report.pages,
            report.bytes,
            report.write_us,
            report.total_us,
            if a.leave_running { "; process left running" } else { "; container removed" },
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The image must be the one requested, and DUMP_DONE must describe it.
fn check_matches(img: &Image, req: &DumpRequest, parent: Option<&rrc_image::ImageHeader>, bytes: u64) -> Result<()> {
    let h = &img.header;
    if h.image_id.0 != req.image_id {
        bail!("image id {} is not the requested {}", h.image_id, ImageId(req.image_id));
    }
    if let Some(p) = parent {
        if h.parent_id != p.image_id || h.sequence != p.sequence + 1 {
            bail!(
                "image has parent {} sequence {}, expected parent {} sequence {}",
                h.parent_id,
                h.sequence,
                p.image_id,
                p.sequence + 1
            );
        }
    } else if !h.is_full() {
        bail!("a full checkpoint was requested, the image is incremental");
    }
    if bytes != img.file_bytes {
        bail!("DUMP_DONE reports {bytes} bytes, the file has {}", img.file_bytes);
    }
    Ok(())
}

