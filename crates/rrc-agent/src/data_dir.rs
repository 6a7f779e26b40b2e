//! The data directory's replication, as the primary sends it (docs/
//! protocol.md "DataDirInit", docs/failover.md): its content as
//! DataDirInit frames for a new backup, and the copy made with the service
//! held after a backup failure.

use std::time::Instant;

use anyhow::{Context, Result};
use rrc_container::control_socket_of;
use rrc_wire::reply::DataCopyReport;

use crate::primary::PAUSE_TIMEOUT;
use crate::Agent;

/// What one DataDirInit frame may carry of encoded file operations: well
/// under a frame's limit (rrc_wire::frame::MAX_PAYLOAD, 16 MiB).
const DATA_DIR_FRAME: usize = 8 << 20;
/// A write is split into pieces of at most this much data.
const DATA_DIR_WRITE: usize = 4 << 20;

/// `ops` as FILEOPS payloads for DataDirInit frames, in order, each within
/// [`DATA_DIR_FRAME`] (a data directory of any size; the backup applies the
/// frames in the order they came). At least one payload.
pub(crate) fn fileops_frames(ops: &[rrc_image::fileops::FileOp]) -> Vec<Vec<u8>> {
    use rrc_image::fileops::{encode_fileops, FileOp};
    // per op: the record header, the path (at most PATH_MAX) and padding
    const OVERHEAD: usize = 48 + 4096;
    let mut frames = Vec::new();
    let mut batch: Vec<FileOp> = Vec::new();
    let mut size = 0usize;
    let mut push = |op: FileOp, n: usize, batch: &mut Vec<FileOp>, size: &mut usize| {
        if !batch.is_empty() && *size + n > DATA_DIR_FRAME {
            frames.push(encode_fileops(batch));
            batch.clear();
            *size = 0;
        }
        *size += n;
        batch.push(op);
    };
    for op in ops {
        match op {
            FileOp::Write { path, offset, data } if data.len() > DATA_DIR_WRITE => {
                for (i, piece) in data.chunks(DATA_DIR_WRITE).enumerate() {
                    let w = FileOp::Write { path: path.clone(), offset: offset + (i * DATA_DIR_WRITE) as u64, data: piece.to_vec() };
                    push(w, piece.len() + OVERHEAD, &mut batch, &mut size);
                }
            }
            FileOp::Write { data, .. } => push(op.clone(), data.len() + OVERHEAD, &mut batch, &mut size),
            FileOp::Symlink { target, .. } => push(op.clone(), target.len() + OVERHEAD, &mut batch, &mut size),
            _ => push(op.clone(), OVERHEAD, &mut batch, &mut size),
        }
    }
    if !batch.is_empty() || frames.is_empty() {
        frames.push(encode_fileops(&batch));
    }
    frames
}

/// The longest the service may stay held for the data directory's copy:
/// past it the library resumes the threads and the copy is not used.
const DATA_COPY_HOLD_MS: u32 = rrc_control::HOLD_MAX_MS;

/// A copy of the data directory consistent with a checkpoint to come, made
/// while the service runs on after a backup failure: the library parks
/// every thread at its safe point (as for a dump: no thread inside a
/// journalled file operation) and empties its data-directory journal, the
/// directory is copied (`cp -a --reflink=auto`, into this service's own
/// directory), and the threads run again. Every change made after the park
/// is in the journal, so the spare's copy plus the first checkpoint's
/// FILEOPS is the service's directory at that checkpoint. Returns the copy
/// and its report for the failover timeline (the pause, its size).
pub(crate) fn copy_held(agent: &Agent, name: &str, data_dir: &str, pid: i32) -> Result<(std::path::PathBuf, DataCopyReport)> {
    // The directory as the service sees it (its bind mount), through its
    // mount namespace: the same path however this host got it.
    let src = std::path::PathBuf::from(format!("/proc/{pid}/root{}", data_dir.trim_end_matches('/')));
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
    let dst = agent.service_dir(name).join(format!("data-copy-{stamp}"));
    let _ = std::fs::remove_dir_all(&dst);
    let sock = control_socket_of(pid);
    let t0 = Instant::now();
    let hold = rrc_control::hold(&sock, DATA_COPY_HOLD_MS, PAUSE_TIMEOUT).context("holding the service for a copy of its data directory")?;
    let parked = t0.elapsed();
    let held = *hold.held();
    let t_copy = Instant::now();
    let copied = crate::copy_tree(&src, &dst);
    let copy_ms = crate::ms(t_copy.elapsed());
    // Resume first, whatever the copy's outcome: the service must not wait
    // on our bookkeeping.
    let resumed = hold.resume(PAUSE_TIMEOUT);
    let fail = |why: String| -> anyhow::Error {
        let _ = std::fs::remove_dir_all(&dst);
        anyhow::anyhow!(why)
    };
    let resumed = match resumed {
        Ok(r) => r,
        Err(e) => return Err(fail(format!("the hold for the data directory's copy ended before the copy did ({copy_ms:.1} ms of copying): {e}; the copy is not consistent"))),
    };
    if let Err(e) = copied {
        return Err(fail(format!("{e:#}")));
    }
    let (files, bytes) = tree_size(&dst);
    let pause_ms = resumed.held_ns as f64 / 1e6;
    let report = DataCopyReport {
        data_copy_pause_ms: pause_ms,
        data_copy_ms: copy_ms,
        data_copy_quiesce_ms: held.quiesce_ns as f64 / 1e6,
        data_copy_bytes: bytes,
        data_copy_files: files,
        data_copy_threads: resumed.threads as u64,
        data_copy_discarded_ops: held.discarded_ops,
        data_copy_hold_rtt_ms: crate::ms(parked),
    };
    tracing::info!(service = name, pause_ms, copy_ms, bytes, files, threads = resumed.threads, copy = %dst.display(),
        "data directory copied while the service was held");
    Ok((dst, report))
}

/// Regular files and their bytes below `dir` (symlinks not followed).
fn tree_size(dir: &std::path::Path) -> (u64, u64) {
    let (mut files, mut bytes) = (0, 0);
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let Ok(md) = e.path().symlink_metadata() else { continue };
            if md.is_dir() {
                todo.push(e.path());
            } else if md.is_file() {
                files += 1;
                bytes += md.len();
            }
        }
    }
    (files, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rrc_image::fileops::{parse_fileops, FileOp, RelPath};

    /// A data directory larger than a frame travels in several DataDirInit
    /// frames, each within the limit, that apply to the same tree.
    #[test]
    fn fileops_frames_split_within_the_frame_limit_and_apply_identically() {
        let big: Vec<u8> = (0..(20u32 << 20)).map(|i| (i % 251) as u8).collect();
        let mut ops = vec![FileOp::Create { path: RelPath::new("big").unwrap(), mode: 0o644 }];
        ops.push(FileOp::Write { path: RelPath::new("big").unwrap(), offset: 0, data: big.clone() });
        for i in 0..3000 {
            ops.push(FileOp::Create { path: RelPath::new(format!("f{i}")).unwrap(), mode: 0o600 });
            ops.push(FileOp::Write { path: RelPath::new(format!("f{i}")).unwrap(), offset: 0, data: format!("file {i}").into_bytes() });
        }
        let frames = fileops_frames(&ops);
        assert!(frames.len() > 3, "{} frames", frames.len());
        let root = |tag: &str| {
            let d = std::env::temp_dir().join(format!("rrc-agent-frames-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).unwrap();
            d
        };
        let (a, b) = (root("whole"), root("frames"));
        rrc_store::datadir::apply_ops(&a, &ops).unwrap();
        for f in &frames {
            assert!(f.len() <= rrc_wire::frame::MAX_PAYLOAD as usize, "a frame of {} bytes", f.len());
            rrc_store::datadir::apply_ops(&b, &parse_fileops(f).unwrap().ops).unwrap();
        }
        assert_eq!(std::fs::read(b.join("big")).unwrap(), big);
        for i in [0, 1234, 2999] {
            assert_eq!(std::fs::read(a.join(format!("f{i}"))).unwrap(), std::fs::read(b.join(format!("f{i}"))).unwrap());
        }
        assert_eq!(std::fs::read_dir(&a).unwrap().count(), std::fs::read_dir(&b).unwrap().count());
        let _ = std::fs::remove_dir_all(&a);
        let _ = std::fs::remove_dir_all(&b);
        // an empty directory still sends one (empty) frame
        assert_eq!(fileops_frames(&[]).len(), 1);
    }
}
