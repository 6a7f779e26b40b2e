//! FILEOPS as a backup receives them: `parse_fileops`, and the operations
//! applied to the data-directory copy by `rrc_store::datadir::apply_ops`.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rrc_image::fileops::{encode_fileops, parse_fileops};
use rrc_image::{FileOp, RelPath};

use crate::Bytes;

/// `parse_fileops`; what parses re-encodes to records that parse to the
/// same operations.
pub fn fileops(data: &[u8]) {
    let Ok(ops) = parse_fileops(data) else { return };
    serde_json::to_string(&ops.summary()).expect("a FILEOPS summary serializes");
    serde_json::to_string(&ops.ops).expect("operations serialize");
    let again = parse_fileops(&encode_fileops(&ops.ops)).expect("re-encoded operations parse");
    assert_eq!(again, ops);
}

/// Names the operations are built from: plain names, and the entries the
/// sandbox puts in the root beforehand (symlinks out of it, a hard link).
const NAMES: &[&str] = &["a", "b", "d", "f", "esc", "abs", "up", "hl", "victim", "dir"];

/// What a symlink operation may point at. Only places in the sandbox: a
/// hole in the copy must show up as a change of `outside/`, never touch
/// this machine.
fn link_target(sandbox: &Path, k: u8) -> Vec<u8> {
    let abs = sandbox.join("outside/victim");
    let targets: [&[u8]; 6] = [b"../outside", b"..", abs.as_os_str().as_encoded_bytes(), b"victim", b"d/f", b"../outside/dir"];
    targets[usize::from(k) % targets.len()].to_vec()
}

fn rel_path(b: &mut Bytes<'_>) -> RelPath {
    let n = 1 + usize::from(b.u8() % 3);
    let parts: Vec<&str> = (0..n).map(|_| NAMES[usize::from(b.u8()) % NAMES.len()]).collect();
    RelPath::new(parts.join("/")).expect("names from NAMES form a relative path")
}

/// Operations decoded from the input: with its first byte's high bit set,
/// a FILEOPS payload (symlink targets replaced by sandbox ones); otherwise
/// a compact encoding over [`NAMES`], which reaches deep sequences sooner.
fn decode_ops(data: &[u8], sandbox: &Path) -> Vec<FileOp> {
    let mut b = Bytes::new(data);
    if b.u8() & 0x80 != 0 {
        let Ok(ops) = parse_fileops(b.rest()) else { return Vec::new() };
        return ops
            .ops
            .into_iter()
            .map(|op| match op {
                FileOp::Symlink { path, target } => {
                    let k = target.first().copied().unwrap_or(0);
                    FileOp::Symlink { path, target: link_target(sandbox, k) }
                }
                op => op,
            })
            .collect();
    }
    let mut ops = Vec::new();
    while !b.is_empty() && ops.len() < 32 {
        let kind = b.u8() % 10;
        let path = rel_path(&mut b);
        ops.push(match kind {
            0 => FileOp::Create { path, mode: u32::from(b.u16()) & 0o7777 },
            1 => FileOp::Truncate { path, size: u64::from(b.u32()) },
            2 => {
                let offset = u64::from(b.u32());
                let n = usize::from(b.u8() % 64);
                FileOp::Write { path, offset, data: b.take(n).to_vec() }
            }
            3 => FileOp::Rename { from: path, to: rel_path(&mut b) },
            4 => FileOp::Unlink { path },
            5 => FileOp::Mkdir { path, mode: u32::from(b.u16()) & 0o7777 },
            6 => FileOp::Rmdir { path },
            7 => FileOp::Link { existing: path, new: rel_path(&mut b) },
            8 => FileOp::Symlink { path, target: link_target(sandbox, b.u8()) },
            _ => FileOp::Zero { path, offset: u64::from(b.u32()), length: u64::from(b.u32()) },
        });
    }
    ops
}

static SANDBOXES: AtomicU64 = AtomicU64::new(0);

/// A directory holding `root/` (the copy, already holding symlinks out of
/// it and a hard link) and `outside/` (what must not change); removed on
/// drop.
struct Sandbox {
    dir: PathBuf,
}

const VICTIM: &[u8] = b"outside the root: must never change";

impl Sandbox {
    fn new() -> Sandbox {
        let n = SANDBOXES.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("rrc-fuzz-datadir-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let root = dir.join("root");
        fs::create_dir_all(root.join("d")).expect("creating the sandbox");
        fs::create_dir_all(dir.join("outside/dir")).expect("creating the sandbox");
        fs::write(dir.join("outside/victim"), VICTIM).expect("creating the sandbox");
        fs::set_permissions(dir.join("outside/victim"), fs::Permissions::from_mode(0o644)).expect("creating the sandbox");
        fs::write(root.join("d/f"), b"data").expect("creating the sandbox");
        fs::hard_link(root.join("d/f"), root.join("hl")).expect("creating the sandbox");
        std::os::unix::fs::symlink("../outside", root.join("esc")).expect("creating the sandbox");
        std::os::unix::fs::symlink(dir.join("outside/victim"), root.join("abs")).expect("creating the sandbox");
        std::os::unix::fs::symlink("..", root.join("up")).expect("creating the sandbox");
        Sandbox { dir }
    }

    fn names(p: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(p).expect("listing the sandbox").map(|e| e.expect("listing the sandbox").file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }

    /// Panics if anything outside `root/` changed.
    fn check(&self) {
        assert_eq!(Self::names(&self.dir), ["outside", "root"], "an entry appeared or went next to the root");
        let out = self.dir.join("outside");
        assert_eq!(Self::names(&out), ["dir", "victim"], "outside/ changed");
        assert!(Self::names(&out.join("dir")).is_empty(), "outside/dir changed");
        let victim = out.join("victim");
        let md = fs::symlink_metadata(&victim).expect("outside/victim is there");
        assert!(md.is_file() && md.mode() & 0o7777 == 0o644 && md.nlink() == 1, "outside/victim changed: {md:?}");
        assert_eq!(fs::read(&victim).expect("reading outside/victim"), VICTIM, "outside/victim was written");
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Every entry below `dir`: (relative path, what it is). Files larger
/// than 1 MiB (sparse ones made by TRUNCATE) by size and the CRC of
/// their first MiB.
fn tree(dir: &Path, rel: &str, out: &mut Vec<(String, String)>) {
    let mut names: Vec<_> = fs::read_dir(dir).expect("listing a tree").map(|e| e.expect("listing a tree").file_name()).collect();
    names.sort();
    for n in names {
        let p = dir.join(&n);
        let r = format!("{rel}/{}", n.to_string_lossy());
        let md = fs::symlink_metadata(&p).expect("stat in a tree");
        let what = if md.is_dir() {
            tree(&p, &r, out);
            format!("dir {:o}", md.mode() & 0o7777)
        } else if md.is_symlink() {
            format!("symlink {:?}", fs::read_link(&p).expect("readlink"))
        } else {
            let mut head = vec![0u8; md.len().min(1 << 20) as usize];
            std::os::unix::fs::FileExt::read_exact_at(&fs::File::open(&p).expect("opening a file"), &mut head, 0).expect("reading a file");
            format!("file {:o} {} bytes, crc {:08x}, {} links", md.mode() & 0o7777, md.len(), crc32c::crc32c(&head), md.nlink())
        };
        out.push((r, what));
    }
}

/// `apply_ops` on a root that holds symlinks pointing out of it: whatever
/// the operations, nothing outside the root changes, and nothing panics.
/// Then the tree they left, shipped by `snapshot_ops` (as a re-protection
/// ships a copy) and applied to an empty directory, is the same tree.
pub fn datadir(data: &[u8]) {
    let sb = Sandbox::new();
    let ops = decode_ops(data, &sb.dir);
    let root = sb.dir.join("root");
    // Applied one by one: a failing operation stops `apply_ops`, and the
    // ones after it must be tried on the state it left too.
    for op in &ops {
        let _ = rrc_store::datadir::apply_ops(&root, std::slice::from_ref(op));
    }
    sb.check();

    let shipped = rrc_store::datadir::snapshot_ops(&root).expect("a tree of directories, files and symlinks ships");
    let copy = Sandbox { dir: sb.dir.with_extension("copy") };
    let _ = fs::remove_dir_all(&copy.dir);
    fs::create_dir_all(&copy.dir).expect("creating the copy");
    if let Err(e) = rrc_store::datadir::apply_ops(&copy.dir, &shipped) {
        panic!("the shipped tree does not apply: {e}");
    }
    let (mut a, mut b) = (Vec::new(), Vec::new());
    tree(&root, "", &mut a);
    tree(&copy.dir, "", &mut b);
    assert_eq!(a, b, "the shipped copy differs from the tree");
}
