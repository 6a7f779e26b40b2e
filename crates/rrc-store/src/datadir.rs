//! The backup's copy of the service's data directory (DESIGN §5: "file
//! writes tracked by the library, shipped").
//!
//! librrc journals every change the service makes under its data directory
//! and each image carries the changes since its parent (FILEOPS, image.h).
//! The copy here starts from the directory's initial content, shipped as
//! operations by [`snapshot_ops`] before the service starts, and advances
//! by [`apply_ops`] with each committed image, *after* the image has been
//! fully verified (every CRC and rule, by rrc-image and [`crate::Store`]).
//!
//! Applying is not atomic: a failure midway (disk full, an operation that
//! does not fit the tree) leaves the copy between two committed states.
//! [`DataDirCopy`] then marks itself inconsistent, names the image and the
//! operation, and refuses every later image: the copy must be re-shipped
//! from the primary; it never pretends to be a committed state.
//!
//! Paths come from the image and are untrusted: [`RelPath`] has no `..`,
//! no empty component and is not absolute, and [`apply_ops`] refuses a
//! symlink anywhere on the way to the file it changes (a symlink the
//! service created is itself recreated, never followed).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{self, OpenOptions, Permissions};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rrc_image::{FileOp, Image, ImageId, RelPath};

#[derive(Debug, thiserror::Error)]
pub enum DataDirError {
    #[error("{root}: op #{index} ({op} {path}): {reason}")]
    Op { root: PathBuf, index: usize, op: &'static str, path: String, reason: String },
    #[error("{path}: {what}: {source}")]
    Io { path: PathBuf, what: &'static str, source: std::io::Error },
    #[error("{path}: {reason}")]
    Unsupported { path: PathBuf, reason: String },
    #[error("the data directory copy {root} is inconsistent ({reason}); it must be shipped again from the primary")]
    Inconsistent { root: PathBuf, reason: String },
}

/// Bytes per WRITE op when shipping a file's content.
const CHUNK: usize = 1 << 20;

/// The operations that recreate the tree under `dir` in an empty directory:
/// directories (MKDIR), regular files (CREATE + WRITEs), symlinks
/// (SYMLINK), hard links within the tree (LINK). Other file types are
/// refused (a data directory holds files).
pub fn snapshot_ops(dir: &Path) -> Result<Vec<FileOp>, DataDirError> {
    let mut ops = Vec::new();
    let mut seen: HashMap<(u64, u64), RelPath> = HashMap::new();
    walk(dir, &[], &mut ops, &mut seen)?;
    Ok(ops)
}

fn walk(dir: &Path, rel: &[u8], ops: &mut Vec<FileOp>, seen: &mut HashMap<(u64, u64), RelPath>) -> Result<(), DataDirError> {
    let io = |path: &Path, what: &'static str| {
        let path = path.to_path_buf();
        move |source| DataDirError::Io { path, what, source }
    };
    let mut names: Vec<_> = fs::read_dir(dir).map_err(io(dir, "reading directory"))?.collect::<Result<Vec<_>, _>>().map_err(io(dir, "reading directory"))?;
    names.sort_by_key(|e| e.file_name());
    for e in names {
        let p = e.path();
        let mut r = rel.to_vec();
        if !r.is_empty() {
            r.push(b'/');
        }
        r.extend_from_slice(e.file_name().as_bytes());
        let rp = RelPath::new(r.clone()).map_err(|reason| DataDirError::Unsupported { path: p.clone(), reason })?;
        let md = fs::symlink_metadata(&p).map_err(io(&p, "stat"))?;
        let ft = md.file_type();
        let mode = md.mode() & 0o7777;
        if ft.is_dir() {
            ops.push(FileOp::Mkdir { path: rp, mode });
            walk(&p, &r, ops, seen)?;
        } else if ft.is_symlink() {
            let t = fs::read_link(&p).map_err(io(&p, "readlink"))?;
            ops.push(FileOp::Symlink { path: rp, target: t.as_os_str().as_bytes().to_vec() });
        } else if ft.is_file() {
            if md.nlink() > 1 {
                if let Some(first) = seen.get(&(md.dev(), md.ino())) {
                    ops.push(FileOp::Link { existing: first.clone(), new: rp });
                    continue;
                }
                seen.insert((md.dev(), md.ino()), rp.clone());
            }
            ops.push(FileOp::Create { path: rp.clone(), mode });
            let f = fs::File::open(&p).map_err(io(&p, "opening"))?;
            // Only the data extents are read and shipped: a sparse file
            // (which the service, or a peer through TRUNCATE, may make
            // terabytes long) costs what it holds, not its size.
            let size = f.metadata().map_err(io(&p, "stat"))?.len();
            let mut len = size;
            'extents: for extent in DataExtents::new(&f, 0, size) {
                let (mut off, to) = extent.map_err(io(&p, "finding data extents"))?;
                while off < to {
                    let mut buf = vec![0u8; (to - off).min(CHUNK as u64) as usize];
                    let n = f.read_at(&mut buf, off).map_err(io(&p, "reading"))?;
                    if n == 0 {
                        // shrunk meanwhile: the size is what was read
                        len = off;
                        break 'extents;
                    }
                    buf.truncate(n);
                    ops.push(FileOp::Write { path: rp.clone(), offset: off, data: buf });
                    off += n as u64;
                }
            }
            ops.push(FileOp::Truncate { path: rp, size: len });
        } else {
            return Err(DataDirError::Unsupported { path: p, reason: "not a directory, regular file or symlink".into() });
        }
    }
    Ok(())
}

/// The data extents `[start, end)` of `f` within `[from, to)`, by
/// `SEEK_DATA`/`SEEK_HOLE` (a file system without them: one extent).
struct DataExtents<'f> {
    f: &'f fs::File,
    at: u64,
    to: u64,
}

impl<'f> DataExtents<'f> {
    fn new(f: &'f fs::File, from: u64, to: u64) -> DataExtents<'f> {
        DataExtents { f, at: from, to }
    }

    fn seek(&self, at: u64, whence: libc::c_int) -> std::io::Result<u64> {
        // SAFETY: lseek on a descriptor `self.f` owns; offsets are used
        // with pread/pwrite only, so moving the file offset is harmless.
        let r = unsafe { libc::lseek(self.f.as_raw_fd(), at as libc::off_t, whence) };
        if r < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(r as u64)
        }
    }
}

impl Iterator for DataExtents<'_> {
    type Item = std::io::Result<(u64, u64)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.to {
            return None;
        }
        let (at, to) = (self.at, self.to);
        self.at = to; // unless an extent below `to` is found
        let start = match self.seek(at, libc::SEEK_DATA) {
            Ok(s) => s,
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => return None, // only a hole left
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return Some(Ok((at, to))),
            Err(e) => return Some(Err(e)),
        };
        if start >= to {
            return None;
        }
        let end = match self.seek(start, libc::SEEK_HOLE) {
            Ok(h) => h.min(to),
            Err(e) => return Some(Err(e)),
        };
        self.at = end;
        Some(Ok((start, end)))
    }
}

/// Zeroes `[from, to)` of `f` (within its size) without allocating: the
/// range is punched out; where the file system cannot punch holes, zeros
/// are written over its data extents only (a hole reads as zeros already).
/// Writing zeros over the whole range would let one ZERO of a sparse file
/// fill the disk.
fn zero_range(f: &fs::File, from: u64, to: u64) -> std::io::Result<()> {
    if from >= to {
        return Ok(());
    }
    // SAFETY: fallocate on a descriptor `f` owns; both values fit off_t
    // (`to` is at most the file's size).
    let r = unsafe {
        libc::fallocate(f.as_raw_fd(), libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, from as libc::off_t, (to - from) as libc::off_t)
    };
    if r == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::EOPNOTSUPP) {
        return Err(err);
    }
    let zeros = vec![0u8; CHUNK];
    for extent in DataExtents::new(f, from, to) {
        let (mut at, end) = extent?;
        while at < end {
            let n = ((end - at) as usize).min(CHUNK);
            f.write_all_at(&zeros[..n], at)?;
            at += n as u64;
        }
    }
    Ok(())
}

/// Where `rel` is under `root`, after checking that no component on the way
/// (and, unless `last_may_be_link`, the last one) is a symlink.
fn resolve(root: &Path, rel: &RelPath, last_may_be_link: bool) -> Result<PathBuf, String> {
    let comps: Vec<&[u8]> = rel.components().collect();
    let mut p = root.to_path_buf();
    for (i, c) in comps.iter().enumerate() {
        p.push(OsStr::from_bytes(c));
        let last = i + 1 == comps.len();
        match fs::symlink_metadata(&p) {
            Ok(md) if md.file_type().is_symlink() && !(last && last_may_be_link) => {
                return Err(format!("{} is a symlink: refusing to follow it", p.display()));
            }
            Ok(md) if !last && !md.is_dir() => return Err(format!("{} is not a directory", p.display())),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if !last {
                    return Err(format!("{}: no such directory", p.display()));
                }
            }
            Err(e) => return Err(format!("{}: {e}", p.display())),
        }
    }
    Ok(p)
}

fn open_file(p: &Path) -> Result<fs::File, String> {
    OpenOptions::new().write(true).custom_flags(libc::O_NOFOLLOW).open(p).map_err(|e| format!("opening {}: {e}", p.display()))
}

fn apply_one(root: &Path, op: &FileOp) -> Result<(), String> {
    let e = |what: &str, p: &Path| {
        let m = format!("{what} {}", p.display());
        move |err: std::io::Error| format!("{m}: {err}")
    };
    match op {
        FileOp::Create { path, mode } => {
            let p = resolve(root, path, false)?;
            match fs::symlink_metadata(&p) {
                Ok(md) if md.is_file() => Ok(()),
                Ok(_) => Err(format!("{} exists and is not a regular file", p.display())),
                Err(_) => {
                    OpenOptions::new().write(true).create_new(true).mode(*mode).open(&p).map_err(e("creating", &p))?;
                    fs::set_permissions(&p, Permissions::from_mode(*mode)).map_err(e("chmod", &p))
                }
            }
        }
        FileOp::Truncate { path, size } => {
            let p = resolve(root, path, false)?;
            open_file(&p)?.set_len(*size).map_err(e("truncating", &p))
        }
        FileOp::Write { path, offset, data } => {
            let p = resolve(root, path, false)?;
            open_file(&p)?.write_all_at(data, *offset).map_err(e("writing", &p))
        }
        FileOp::Zero { path, offset, length } => {
            let p = resolve(root, path, false)?;
            let f = open_file(&p)?;
            let size = f.metadata().map_err(e("stat", &p))?.len();
            // zeroing never extends: a TRUNCATE follows if the size changed
            let end = offset.saturating_add(*length).min(size);
            zero_range(&f, *offset, end).map_err(e("zeroing", &p))
        }
        FileOp::Rename { from, to } => {
            let a = resolve(root, from, true)?;
            let b = resolve(root, to, true)?;
            fs::rename(&a, &b).map_err(e("renaming", &a))
        }
        FileOp::Unlink { path } => {
            let p = resolve(root, path, true)?;
            fs::remove_file(&p).map_err(e("unlinking", &p))
        }
        FileOp::Mkdir { path, mode } => {
            let p = resolve(root, path, false)?;
            fs::create_dir(&p).map_err(e("mkdir", &p))?;
            fs::set_permissions(&p, Permissions::from_mode(*mode)).map_err(e("chmod", &p))
        }
        FileOp::Rmdir { path } => {
            let p = resolve(root, path, false)?;
            fs::remove_dir(&p).map_err(e("rmdir", &p))
        }
        FileOp::Link { existing, new } => {
            let a = resolve(root, existing, true)?;
            let b = resolve(root, new, false)?;
            fs::hard_link(&a, &b).map_err(e("linking", &b))
        }
        FileOp::Symlink { path, target } => {
            let p = resolve(root, path, false)?;
            std::os::unix::fs::symlink(OsStr::from_bytes(target), &p).map_err(e("symlink", &p))
        }
    }
}

fn op_path(op: &FileOp) -> String {
    match op {
        FileOp::Create { path, .. }
        | FileOp::Truncate { path, .. }
        | FileOp::Write { path, .. }
        | FileOp::Unlink { path }
        | FileOp::Mkdir { path, .. }
        | FileOp::Rmdir { path }
        | FileOp::Symlink { path, .. }
        | FileOp::Zero { path, .. } => path.to_string(),
        FileOp::Rename { from, to } => format!("{from} -> {to}"),
        FileOp::Link { existing, new } => format!("{existing} -> {new}"),
    }
}

/// Applies `ops` in order to the tree under `root`. Stops at the first
/// failure, naming it; the operations before it stay applied.
pub fn apply_ops(root: &Path, ops: &[FileOp]) -> Result<(), DataDirError> {
    let md = fs::symlink_metadata(root).map_err(|source| DataDirError::Io { path: root.to_path_buf(), what: "stat of the root", source })?;
    if !md.is_dir() {
        return Err(DataDirError::Unsupported { path: root.to_path_buf(), reason: "the root is not a directory (or is a symlink)".into() });
    }
    for (index, op) in ops.iter().enumerate() {
        apply_one(root, op).map_err(|reason| DataDirError::Op { root: root.to_path_buf(), index, op: op.name(), path: op_path(op), reason })?;
    }
    Ok(())
}

/// The backup's copy of the data directory, advanced image by image.
#[derive(Debug)]
pub struct DataDirCopy {
    root: PathBuf,
    /// Set when an apply failed midway: the copy is no committed state.
    inconsistent: Option<String>,
    /// The image whose operations were applied last.
    last: Option<ImageId>,
}

impl DataDirCopy {
    /// A copy at `root`, which must already hold the initial content
    /// (see [`snapshot_ops`]).
    pub fn new(root: &Path) -> DataDirCopy {
        DataDirCopy { root: root.to_path_buf(), inconsistent: None, last: None }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Err with the reason if a failed apply left the copy between states.
    pub fn check(&self) -> Result<(), DataDirError> {
        match &self.inconsistent {
            Some(reason) => Err(DataDirError::Inconsistent { root: self.root.clone(), reason: reason.clone() }),
            None => Ok(()),
        }
    }

    /// Applies the FILEOPS of `image`, which the caller has fully verified
    /// and committed (e.g. [`crate::Store::apply`] returned Ok). Returns
    /// the number of operations applied.
    pub fn commit(&mut self, image: &Image) -> Result<usize, DataDirError> {
        self.check()?;
        let ops = image.fileops.as_ref().map(|f| f.ops.as_slice()).unwrap_or(&[]);
        if let Err(e) = apply_ops(&self.root, ops) {
            let reason = format!("applying image {} (sequence {}) failed midway: {e}", image.header.image_id, image.header.sequence);
            tracing::error!("{reason}");
            self.inconsistent = Some(reason.clone());
            return Err(DataDirError::Inconsistent { root: self.root.clone(), reason });
        }
        self.last = Some(image.header.image_id);
        Ok(ops.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rp(s: &str) -> RelPath {
        RelPath::new(s).unwrap()
    }

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rrc-datadir-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    /// (relative path, kind, content or link target) of every entry.
    fn tree(root: &Path) -> Vec<(String, String, Vec<u8>)> {
        let mut out = Vec::new();
        for op in snapshot_ops(root).unwrap() {
            match op {
                FileOp::Mkdir { path, mode } => out.push((path.to_string(), format!("dir {mode:o}"), vec![])),
                FileOp::Create { path, mode } => out.push((path.to_string(), format!("file {mode:o}"), fs::read(root.join(path.to_string())).unwrap())),
                FileOp::Symlink { path, target } => out.push((path.to_string(), "link".into(), target)),
                FileOp::Link { existing, new } => out.push((new.to_string(), format!("hardlink {existing}"), vec![])),
                _ => {}
            }
        }
        out
    }

    #[test]
    fn ops_replay_a_tree() {
        let src = tmp("src");
        fs::create_dir_all(src.join("a/b")).unwrap();
        fs::write(src.join("a/b/f"), b"hello world").unwrap();
        fs::write(src.join("big"), vec![7u8; CHUNK * 2 + 5]).unwrap();
        fs::write(src.join("empty"), b"").unwrap();
        fs::set_permissions(src.join("empty"), Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink("a/b/f", src.join("ln")).unwrap();
        fs::hard_link(src.join("a/b/f"), src.join("hl")).unwrap();
        let ops = snapshot_ops(&src).unwrap();
        let dst = tmp("dst");
        apply_ops(&dst, &ops).unwrap();
        assert_eq!(tree(&src), tree(&dst));
        assert_eq!(fs::metadata(dst.join("hl")).unwrap().ino(), fs::metadata(dst.join("a/b/f")).unwrap().ino());

        // then a journal-like sequence
        let more = vec![
            FileOp::Create { path: rp("a/new"), mode: 0o644 },
            FileOp::Write { path: rp("a/new"), offset: 4, data: b"xyz".to_vec() },
            FileOp::Zero { path: rp("big"), offset: 1, length: 3 },
            FileOp::Truncate { path: rp("big"), size: 10 },
            FileOp::Rename { from: rp("a/new"), to: rp("a/b/f") },
            FileOp::Unlink { path: rp("ln") },
            FileOp::Mkdir { path: rp("d"), mode: 0o700 },
            FileOp::Rmdir { path: rp("d") },
        ];
        apply_ops(&dst, &more).unwrap();
        assert_eq!(fs::read(dst.join("a/b/f")).unwrap(), b"\0\0\0\0xyz");
        assert_eq!(fs::read(dst.join("big")).unwrap(), vec![7, 0, 0, 0, 7, 7, 7, 7, 7, 7]);
        assert_eq!(fs::read(dst.join("hl")).unwrap(), b"hello world", "the old inode stays with its other name");
        assert!(!dst.join("ln").exists() && !dst.join("d").exists());
        let _ = fs::remove_dir_all(&src);
        let _ = fs::remove_dir_all(&dst);
    }

    #[test]
    fn refuses_to_escape_the_root() {
        let root = tmp("esc");
        let outside = tmp("outside");
        fs::write(outside.join("victim"), b"safe").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        std::os::unix::fs::symlink(outside.join("victim"), root.join("flink")).unwrap();
        for op in [
            FileOp::Write { path: rp("link/victim"), offset: 0, data: b"owned".to_vec() },
            FileOp::Truncate { path: rp("flink"), size: 0 },
            FileOp::Create { path: rp("link/new"), mode: 0o644 },
            FileOp::Rename { from: rp("flink"), to: rp("link/moved") },
        ] {
            let err = apply_ops(&root, std::slice::from_ref(&op)).unwrap_err().to_string();
            assert!(err.contains("symlink"), "{op:?}: {err}");
        }
        assert_eq!(fs::read(outside.join("victim")).unwrap(), b"safe");
        assert!(!outside.join("new").exists() && !outside.join("moved").exists());
        // paths with .. or absolute ones cannot even be built
        assert!(RelPath::new("../x").is_err() && RelPath::new("/etc/passwd").is_err());
        let _ = fs::remove_dir_all(&root);
        let _ = fs::remove_dir_all(&outside);
    }

    /// Bytes of `p` that occupy disk blocks.
    fn allocated(p: &Path) -> u64 {
        fs::metadata(p).unwrap().blocks() * 512
    }

    /// A peer's TRUNCATE makes a sparse file of any size for free; a ZERO
    /// over it must not write that many zeros (it filled the disk).
    #[test]
    fn zeroing_a_sparse_file_allocates_nothing() {
        let root = tmp("zero");
        let size = 256u64 << 20;
        let ops = vec![
            FileOp::Create { path: rp("f"), mode: 0o644 },
            FileOp::Write { path: rp("f"), offset: 8192, data: vec![7; 4096] },
            FileOp::Truncate { path: rp("f"), size },
            FileOp::Zero { path: rp("f"), offset: 0, length: size },
        ];
        apply_ops(&root, &ops).unwrap();
        let f = root.join("f");
        assert_eq!(fs::metadata(&f).unwrap().len(), size);
        assert!(allocated(&f) <= 64 << 10, "{} bytes allocated", allocated(&f));
        let mut page = vec![1u8; 4096];
        fs::File::open(&f).unwrap().read_exact_at(&mut page, 8192).unwrap();
        assert_eq!(page, vec![0; 4096], "the data was zeroed");
        // a ZERO inside the data, not at the start
        apply_ops(&root, &[FileOp::Write { path: rp("f"), offset: 100, data: vec![9; 50] }, FileOp::Zero { path: rp("f"), offset: 110, length: 10 }]).unwrap();
        let mut b = vec![0u8; 50];
        fs::File::open(&f).unwrap().read_exact_at(&mut b, 100).unwrap();
        assert_eq!(b, [vec![9; 10], vec![0; 10], vec![9; 30]].concat());
        let _ = fs::remove_dir_all(&root);
    }

    /// A sparse file is shipped as its data extents and its size: a 4 GiB
    /// sparse file (which a peer's TRUNCATE can leave in the copy that a
    /// later re-protection ships) was read whole into WRITE operations.
    #[test]
    fn snapshot_of_a_sparse_file_ships_only_its_data() {
        let src = tmp("sparse-src");
        let f = fs::File::create(src.join("s")).unwrap();
        f.write_all_at(b"head", 0).unwrap();
        f.write_all_at(b"middle", 2 << 30).unwrap();
        f.set_len(4 << 30).unwrap();
        let ops = snapshot_ops(&src).unwrap();
        let shipped: usize = ops.iter().map(|o| if let FileOp::Write { data, .. } = o { data.len() } else { 0 }).sum();
        assert!(shipped <= 1 << 20, "{shipped} bytes shipped");
        assert!(matches!(ops.last(), Some(FileOp::Truncate { size, .. }) if *size == 4 << 30));
        let dst = tmp("sparse-dst");
        apply_ops(&dst, &ops).unwrap();
        let g = fs::File::open(dst.join("s")).unwrap();
        let mut b = [0u8; 6];
        g.read_exact_at(&mut b[..4], 0).unwrap();
        assert_eq!(&b[..4], b"head");
        g.read_exact_at(&mut b, 2 << 30).unwrap();
        assert_eq!(&b, b"middle");
        assert_eq!(g.metadata().unwrap().len(), 4 << 30);
        let _ = fs::remove_dir_all(&src);
        let _ = fs::remove_dir_all(&dst);
    }

    #[test]
    fn a_failure_midway_is_reported() {
        let root = tmp("mid");
        let ops = vec![
            FileOp::Create { path: rp("f"), mode: 0o644 },
            FileOp::Write { path: rp("nodir/g"), offset: 0, data: b"x".to_vec() },
        ];
        let err = apply_ops(&root, &ops).unwrap_err().to_string();
        assert!(err.contains("op #1 (write nodir/g)"), "{err}");
        assert!(root.join("f").exists(), "op #0 stays applied");
        let _ = fs::remove_dir_all(&root);
    }
}
