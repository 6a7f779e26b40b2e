//! FILEOPS (section 9): the changes the application made under its data
//! directory since the previous checkpoint, in completion order
//! (`struct rrc_fileops_header`, `struct rrc_fileop` in image.h).
//!
//! Paths are kept as bytes (Linux names need not be UTF-8) and are checked
//! to be relative, without empty, `.` or `..` components, so that a consumer
//! can join them to a root without escaping it lexically (rrc-store still
//! refuses symlinks on the way, see `rrc_store::datadir`).

use std::fmt;

use serde::{Serialize, Serializer};

use crate::le::*;

pub const FILEOPS_VERSION: u32 = 1;
pub const FILEOPS_HEADER_SIZE: usize = 16;
pub const FILEOP_SIZE: usize = 32;

/// Longest path accepted, in bytes: librrc records paths below a data
/// directory whose absolute form fits `RRC_PATH_MAX` (4096, NUL included).
pub const REL_PATH_MAX: usize = 4095;

/// A path relative to the data directory: non-empty, at most
/// [`REL_PATH_MAX`] bytes, no NUL, not absolute, no empty, `.` or `..`
/// component.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RelPath(Vec<u8>);

impl RelPath {
    pub fn new(b: impl Into<Vec<u8>>) -> Result<RelPath, String> {
        let b = b.into();
        if b.is_empty() {
            return Err("empty path".into());
        }
        if b.len() > REL_PATH_MAX {
            return Err(format!("path of {} bytes, longer than {REL_PATH_MAX}", b.len()));
        }
        if b.contains(&0) {
            return Err(format!("path {:?} contains a NUL byte", String::from_utf8_lossy(&b)));
        }
        if b[0] == b'/' {
            return Err(format!("path {:?} is absolute", String::from_utf8_lossy(&b)));
        }
        for c in b.split(|&x| x == b'/') {
            if c.is_empty() || c == b"." || c == b".." {
                return Err(format!("path {:?} has an empty, '.' or '..' component", String::from_utf8_lossy(&b)));
            }
        }
        Ok(RelPath(b))
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// Components, in order.
    pub fn components(&self) -> impl Iterator<Item = &[u8]> {
        self.0.split(|&x| x == b'/')
    }
}

impl fmt::Debug for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.0))
    }
}

impl fmt::Display for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.0))
    }
}

impl Serialize for RelPath {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&String::from_utf8_lossy(&self.0))
    }
}

fn ser_len<S: Serializer>(d: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.len() as u64)
}

fn ser_lossy<S: Serializer>(d: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&String::from_utf8_lossy(d))
}

/// `enum rrc_fileop_type` with its operands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum FileOp {
    /// A regular file, if missing, with `mode`; an existing one is unchanged.
    Create { path: RelPath, mode: u32 },
    /// Set the size (shrink, or extend with zeros).
    Truncate { path: RelPath, size: u64 },
    /// `data` at `offset` (extends the file as needed).
    Write {
        path: RelPath,
        offset: u64,
        #[serde(rename = "bytes", serialize_with = "ser_len")]
        data: Vec<u8>,
    },
    /// rename(2): replaces `to` if it exists.
    Rename { from: RelPath, to: RelPath },
    Unlink { path: RelPath },
    Mkdir { path: RelPath, mode: u32 },
    Rmdir { path: RelPath },
    /// Hard link `new` to the existing `existing`.
    Link { existing: RelPath, new: RelPath },
    /// A symlink at `path` with `target` verbatim (never followed by rrc).
    Symlink {
        path: RelPath,
        #[serde(serialize_with = "ser_lossy")]
        target: Vec<u8>,
    },
    /// Zero `[offset, offset + length)` (hole punch, zero range).
    Zero { path: RelPath, offset: u64, length: u64 },
}

pub const FOP_CREATE: u32 = 1;
pub const FOP_TRUNCATE: u32 = 2;
pub const FOP_WRITE: u32 = 3;
pub const FOP_RENAME: u32 = 4;
pub const FOP_UNLINK: u32 = 5;
pub const FOP_MKDIR: u32 = 6;
pub const FOP_RMDIR: u32 = 7;
pub const FOP_LINK: u32 = 8;
pub const FOP_SYMLINK: u32 = 9;
pub const FOP_ZERO: u32 = 10;

impl FileOp {
    pub fn name(&self) -> &'static str {
        match self {
            FileOp::Create { .. } => "create",
            FileOp::Truncate { .. } => "truncate",
            FileOp::Write { .. } => "write",
            FileOp::Rename { .. } => "rename",
            FileOp::Unlink { .. } => "unlink",
            FileOp::Mkdir { .. } => "mkdir",
            FileOp::Rmdir { .. } => "rmdir",
            FileOp::Link { .. } => "link",
            FileOp::Symlink { .. } => "symlink",
            FileOp::Zero { .. } => "zero",
        }
    }

    /// (type, mode, path, data, offset, length) as in `struct rrc_fileop`.
    fn raw(&self) -> (u32, u32, &[u8], &[u8], u64, u64) {
        match self {
            FileOp::Create { path, mode } => (FOP_CREATE, *mode, path.as_bytes(), &[], 0, 0),
            FileOp::Truncate { path, size } => (FOP_TRUNCATE, 0, path.as_bytes(), &[], *size, 0),
            FileOp::Write { path, offset, data } => (FOP_WRITE, 0, path.as_bytes(), data, *offset, data.len() as u64),
            FileOp::Rename { from, to } => (FOP_RENAME, 0, from.as_bytes(), to.as_bytes(), 0, 0),
            FileOp::Unlink { path } => (FOP_UNLINK, 0, path.as_bytes(), &[], 0, 0),
            FileOp::Mkdir { path, mode } => (FOP_MKDIR, *mode, path.as_bytes(), &[], 0, 0),
            FileOp::Rmdir { path } => (FOP_RMDIR, 0, path.as_bytes(), &[], 0, 0),
            FileOp::Link { existing, new } => (FOP_LINK, 0, existing.as_bytes(), new.as_bytes(), 0, 0),
            FileOp::Symlink { path, target } => (FOP_SYMLINK, 0, path.as_bytes(), target, 0, 0),
            FileOp::Zero { path, offset, length } => (FOP_ZERO, 0, path.as_bytes(), &[], *offset, *length),
        }
    }
}

/// The decoded FILEOPS section.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileOps {
    pub ops: Vec<FileOp>,
    pub data_bytes: u64,
}

/// Counts per operation, for `rrc inspect`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FileOpsSummary {
    pub ops: usize,
    pub data_bytes: u64,
    pub by_op: std::collections::BTreeMap<String, usize>,
}

impl FileOps {
    pub fn summary(&self) -> FileOpsSummary {
        let mut by_op = std::collections::BTreeMap::new();
        for o in &self.ops {
            *by_op.entry(o.name().to_string()).or_insert(0) += 1;
        }
        FileOpsSummary { ops: self.ops.len(), data_bytes: self.data_bytes, by_op }
    }
}

pub fn parse_fileops(p: &[u8]) -> Result<FileOps, String> {
    if p.len() < FILEOPS_HEADER_SIZE {
        return Err(format!("payload of {} bytes, shorter than struct rrc_fileops_header ({FILEOPS_HEADER_SIZE})", p.len()));
    }
    let version = u32_at(p, 0);
    if version != FILEOPS_VERSION {
        return Err(format!("records version {version}, this reader knows {FILEOPS_VERSION}"));
    }
    let nr_ops = u32_at(p, 4);
    let data_bytes = u64_at(p, 8);
    let mut ops = Vec::new();
    let mut off = FILEOPS_HEADER_SIZE;
    let mut sum = 0u64;
    for i in 0..nr_ops {
        let at = |m: String| format!("op #{i} at payload offset {off}: {m}");
        if p.len() - off < FILEOP_SIZE {
            return Err(at(format!("record cut short ({} of {FILEOP_SIZE} bytes)", p.len() - off)));
        }
        let r = &p[off..off + FILEOP_SIZE];
        let (ty, mode, path_len, data_len) = (u32_at(r, 0), u32_at(r, 4), u32_at(r, 8) as usize, u32_at(r, 12) as usize);
        let (offset, length) = (u64_at(r, 16), u64_at(r, 24));
        let body = off + FILEOP_SIZE;
        let rec_end = pad8((FILEOP_SIZE + path_len + data_len) as u64) as usize + off;
        if rec_end > p.len() {
            return Err(at(format!("path ({path_len}) and data ({data_len} bytes) run past the payload")));
        }
        let path = RelPath::new(&p[body..body + path_len]).map_err(at)?;
        let data = &p[body + path_len..body + path_len + data_len];
        if mode & !0o7777 != 0 {
            return Err(at(format!("mode {mode:#o} has bits outside 07777")));
        }
        let no_data = |what: &str| -> Result<(), String> {
            if data_len != 0 {
                return Err(at(format!("{what} carries {data_len} data bytes")));
            }
            Ok(())
        };
        let second = || RelPath::new(data).map_err(|m| at(format!("second path: {m}")));
        let op = match ty {
            FOP_CREATE => {
                no_data("CREATE")?;
                FileOp::Create { path, mode }
            }
            FOP_TRUNCATE => {
                no_data("TRUNCATE")?;
                FileOp::Truncate { path, size: offset }
            }
            FOP_WRITE => {
                if length != data_len as u64 {
                    return Err(at(format!("WRITE length {length} is not its data_len {data_len}")));
                }
                if offset.checked_add(length).map_or(true, |e| e > i64::MAX as u64) {
                    return Err(at(format!("WRITE at {offset} + {length} beyond the largest file offset")));
                }
                FileOp::Write { path, offset, data: data.to_vec() }
            }
            FOP_RENAME => FileOp::Rename { from: path, to: second()? },
            FOP_UNLINK => {
                no_data("UNLINK")?;
                FileOp::Unlink { path }
            }
            FOP_MKDIR => {
                no_data("MKDIR")?;
                FileOp::Mkdir { path, mode }
            }
            FOP_RMDIR => {
                no_data("RMDIR")?;
                FileOp::Rmdir { path }
            }
            FOP_LINK => FileOp::Link { existing: path, new: second()? },
            FOP_SYMLINK => {
                if data.is_empty() || data.contains(&0) {
                    return Err(at("SYMLINK target empty or with a NUL byte".into()));
                }
                FileOp::Symlink { path, target: data.to_vec() }
            }
            FOP_ZERO => {
                no_data("ZERO")?;
                FileOp::Zero { path, offset, length }
            }
            t => return Err(at(format!("unknown operation type {t}"))),
        };
        sum += data_len as u64;
        ops.push(op);
        off = rec_end;
    }
    if off != p.len() {
        return Err(format!("{} bytes after the {nr_ops} records the header announces", p.len() - off));
    }
    if sum != data_bytes {
        return Err(format!("header says {data_bytes} data bytes, the records hold {sum}"));
    }
    Ok(FileOps { ops, data_bytes })
}

/// The FILEOPS payload for `ops` (what librrc writes).
pub fn encode_fileops(ops: &[FileOp]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&FILEOPS_VERSION.to_le_bytes());
    out.extend_from_slice(&(ops.len() as u32).to_le_bytes());
    let data_bytes: u64 = ops.iter().map(|o| o.raw().3.len() as u64).sum();
    out.extend_from_slice(&data_bytes.to_le_bytes());
    for o in ops {
        let (ty, mode, path, data, offset, length) = o.raw();
        out.extend_from_slice(&ty.to_le_bytes());
        out.extend_from_slice(&mode.to_le_bytes());
        out.extend_from_slice(&(path.len() as u32).to_le_bytes());
        out.extend_from_slice(&(data.len() as u32).to_le_bytes());
        out.extend_from_slice(&offset.to_le_bytes());
        out.extend_from_slice(&length.to_le_bytes());
        out.extend_from_slice(path);
        out.extend_from_slice(data);
        while out.len() % 8 != 0 {
            out.push(0);
        }
    }
    out
}

/// One operation of every kind, in an order that applies to an empty
/// directory (for tests, and the fuzz seeds of crates/rrc-fuzz).
#[doc(hidden)]
pub fn sample_ops() -> Vec<FileOp> {
    let rp = |s: &str| RelPath::new(s).expect("a sample path");
    vec![
        FileOp::Mkdir { path: rp("d"), mode: 0o755 },
        FileOp::Create { path: rp("d/f"), mode: 0o644 },
        FileOp::Write { path: rp("d/f"), offset: 3, data: b"hello".to_vec() },
        FileOp::Truncate { path: rp("d/f"), size: 5 },
        FileOp::Rename { from: rp("d/f"), to: rp("g") },
        FileOp::Link { existing: rp("g"), new: rp("h") },
        FileOp::Symlink { path: rp("s"), target: b"../x".to_vec() },
        FileOp::Zero { path: rp("g"), offset: 1, length: 2 },
        FileOp::Unlink { path: rp("h") },
        FileOp::Rmdir { path: rp("d") },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rp(s: &str) -> RelPath {
        RelPath::new(s).unwrap()
    }

    #[test]
    fn round_trip() {
        let ops = sample_ops();
        let b = encode_fileops(&ops);
        assert_eq!(b.len() % 8, 0);
        let back = parse_fileops(&b).unwrap();
        assert_eq!(back.ops, ops);
        assert_eq!(back.data_bytes, 5 + 1 + 1 + 4);
    }

    #[test]
    fn rejects_bad_paths_and_records() {
        for bad in ["", "/abs", "a/../b", "./a", "a//b", "..", "a/"] {
            assert!(RelPath::new(bad).is_err(), "{bad:?} accepted");
        }
        let mut b = encode_fileops(&[FileOp::Unlink { path: rp("abc") }]);
        b[16 + 32] = b'/';
        assert!(parse_fileops(&b).unwrap_err().contains("absolute"));
        let mut b = encode_fileops(&[FileOp::Unlink { path: rp("abc") }]);
        b[16] = 99;
        assert!(parse_fileops(&b).unwrap_err().contains("unknown operation type 99"));
        let b = encode_fileops(&[FileOp::Write { path: rp("a"), offset: 0, data: vec![1; 9] }]);
        assert!(parse_fileops(&b[..b.len() - 8]).unwrap_err().contains("run past"));
        let mut b = encode_fileops(&[]);
        b[0] = 2;
        assert!(parse_fileops(&b).unwrap_err().contains("version 2"));
    }

    /// A path is bounded like the paths librrc records: a long one (here
    /// 2 MiB of "a/a/...") would otherwise cost a consumer that walks its
    /// components 8 times its size in component slices.
    #[test]
    fn rejects_paths_longer_than_path_max() {
        assert!(RelPath::new("a".repeat(REL_PATH_MAX)).is_ok());
        let err = RelPath::new("a".repeat(REL_PATH_MAX + 1)).unwrap_err();
        assert!(err.contains("longer than 4095"), "{err}");
        let deep = "a/".repeat(1 << 20) + "a";
        let mut b = encode_fileops(&[FileOp::Unlink { path: rp("x") }]);
        b.truncate(16);
        b.extend_from_slice(&FOP_UNLINK.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&(deep.len() as u32).to_le_bytes());
        b.extend_from_slice(&[0; 20]);
        b.extend_from_slice(deep.as_bytes());
        b.resize(b.len().next_multiple_of(8), 0);
        assert!(parse_fileops(&b).unwrap_err().contains("longer than"));
    }
}
