//! Typed mirrors of the section payloads of image.h, decoded at explicit
//! little-endian offsets. Each `parse_*` takes a payload whose CRC has
//! already been checked and returns the records or the reason the payload
//! violates the format (the reader adds file and section to the message).

use std::collections::HashSet;
use std::fmt;

use serde::Serialize;

use crate::le::*;
use crate::PAGE_SIZE;

/// `enum rrc_section_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum SectionKind {
    Process,
    Vmas,
    Pagemap,
    Threads,
    Fds,
    Signals,
    Tcp,
    Pages,
    /// Optional: present when the process has a data directory.
    Fileops,
    /// Optional: process attributes (images from before it have none).
    ProcAttr,
    /// Optional: credentials (images from before it have none).
    Creds,
    /// Optional: the IPC namespace's sysctls and SysV objects (only when
    /// there is something).
    SysvIpc,
    /// Optional: which file each file mapping maps (size, mtime).
    FileIds,
    End,
}

impl SectionKind {
    /// In the order snapshot.c writes them (readers accept any order).
    pub const REQUIRED: [SectionKind; 8] = [
        SectionKind::Process,
        SectionKind::Vmas,
        SectionKind::Pagemap,
        SectionKind::Threads,
        SectionKind::Fds,
        SectionKind::Signals,
        SectionKind::Tcp,
        SectionKind::Pages,
    ];

    pub fn from_raw(t: u32) -> Option<SectionKind> {
        Some(match t {
            1 => SectionKind::Process,
            2 => SectionKind::Vmas,
            3 => SectionKind::Pagemap,
            4 => SectionKind::Threads,
            5 => SectionKind::Fds,
            6 => SectionKind::Signals,
            7 => SectionKind::Pages,
            8 => SectionKind::Tcp,
            9 => SectionKind::Fileops,
            10 => SectionKind::ProcAttr,
            11 => SectionKind::Creds,
            12 => SectionKind::SysvIpc,
            13 => SectionKind::FileIds,
            0xffff => SectionKind::End,
            _ => return None,
        })
    }

    pub fn raw(self) -> u32 {
        match self {
            SectionKind::Process => 1,
            SectionKind::Vmas => 2,
            SectionKind::Pagemap => 3,
            SectionKind::Threads => 4,
            SectionKind::Fds => 5,
            SectionKind::Signals => 6,
            SectionKind::Pages => 7,
            SectionKind::Tcp => 8,
            SectionKind::Fileops => 9,
            SectionKind::ProcAttr => 10,
            SectionKind::Creds => 11,
            SectionKind::SysvIpc => 12,
            SectionKind::FileIds => 13,
            SectionKind::End => 0xffff,
        }
    }
}

impl fmt::Display for SectionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SectionKind::Process => "PROCESS",
            SectionKind::Vmas => "VMAS",
            SectionKind::Pagemap => "PAGEMAP",
            SectionKind::Threads => "THREADS",
            SectionKind::Fds => "FDS",
            SectionKind::Signals => "SIGNALS",
            SectionKind::Pages => "PAGES",
            SectionKind::Tcp => "TCP",
            SectionKind::Fileops => "FILEOPS",
            SectionKind::ProcAttr => "PROCATTR",
            SectionKind::Creds => "CREDS",
            SectionKind::SysvIpc => "SYSVIPC",
            SectionKind::FileIds => "FILEIDS",
            SectionKind::End => "END",
        })
    }
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/* ---- PROCATTR --------------------------------------------------------- */

/// sizeof(struct rrc_procattr) as this reader knows it.
pub const PROCATTR_SIZE: usize = 136;
/// `RRC_PA_OOM_SCORE_ADJ`.
pub const PA_OOM_SCORE_ADJ: u32 = 1;
/// `RRC_PA_ITIMERS`.
pub const PA_ITIMERS: u32 = 2;
/// `RRC_PA_UTS`.
pub const PA_UTS: u32 = 4;
/// `RRC_PA_MEMBARRIER`.
pub const PA_MEMBARRIER: u32 = 8;
/// The size of a PROCATTR with the UTS names (`nodename` at `PROCATTR_SIZE`).
pub const PROCATTR_UTS_SIZE: usize = 272;

/// `struct rrc_itimer`: an interval timer's period and the time it had left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Itimer {
    pub interval_sec: i64,
    pub interval_usec: i64,
    pub value_sec: i64,
    pub value_usec: i64,
}

/// `struct rrc_procattr`: process attributes the restorer sets again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProcAttr {
    /// None: not read at the snapshot.
    pub oom_score_adj: Option<i32>,
    pub no_new_privs: bool,
    pub child_subreaper: bool,
    pub thp_disable: bool,
    /// ITIMER_REAL, ITIMER_VIRTUAL, ITIMER_PROF (None: not read).
    pub itimers: Option<[Itimer; 3]>,
    /// The UTS namespace's host and domain names (None: not read, or an
    /// image of before them).
    pub nodename: Option<String>,
    pub domainname: Option<String>,
    /// The private expedited membarrier commands registered for (their
    /// MEMBARRIER_CMD_* bits; None: not read).
    pub membarrier: Option<u32>,
}

/// The size-versioned structs (`struct rrc_sockopts`, `struct
/// rrc_procattr`) begin with the writer's sizeof: a reader takes the
/// fields it knows of a larger one (a later version) and refuses a smaller
/// one, or one larger than the bytes there.
fn check_versioned(p: &[u8], known: usize, what: &str) -> Result<(), String> {
    if p.len() < 8 {
        return Err(format!("{what} of {} bytes: truncated", p.len()));
    }
    let size = u32_at(p, 0) as usize;
    if size < known || size > p.len() {
        return Err(format!("{what} say {size} bytes in {} of data (this reader knows {known})", p.len()));
    }
    Ok(())
}

/// This version's fields of a PROCATTR payload of this size or a later,
/// larger one; a smaller one, or one whose `size` disagrees, is refused.
pub fn parse_procattr(p: &[u8]) -> Result<ProcAttr, String> {
    check_versioned(p, PROCATTR_SIZE, "process attributes")?;
    let valid = u32_at(p, 4);
    let uts = valid & PA_UTS != 0 && u32_at(p, 0) as usize >= PROCATTR_UTS_SIZE;
    let flag = |o: usize, what: &str| match u32_at(p, o) {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(format!("{what} is {v}, not 0 or 1")),
    };
    Ok(ProcAttr {
        oom_score_adj: (valid & PA_OOM_SCORE_ADJ != 0).then(|| i32_at(p, 8)),
        no_new_privs: flag(12, "no_new_privs")?,
        child_subreaper: flag(16, "child_subreaper")?,
        thp_disable: flag(20, "thp_disable")?,
        itimers: (valid & PA_ITIMERS != 0).then(|| {
            std::array::from_fn(|w| {
                let o = 40 + 32 * w;
                Itimer { interval_sec: i64_at(p, o), interval_usec: i64_at(p, o + 8), value_sec: i64_at(p, o + 16), value_usec: i64_at(p, o + 24) }
            })
        }),
        nodename: uts.then(|| c_string(&p[PROCATTR_SIZE..PROCATTR_SIZE + 65])),
        domainname: uts.then(|| c_string(&p[PROCATTR_SIZE + 65..PROCATTR_SIZE + 130])),
        membarrier: (valid & PA_MEMBARRIER != 0 && u32_at(p, 0) as usize >= PROCATTR_UTS_SIZE).then(|| u32_at(p, 268)),
    })
}

/// The bytes before the first NUL (all of them if none), lossily.
fn c_string(b: &[u8]) -> String {
    lossy(&b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())])
}

/* ---- CREDS ------------------------------------------------------------ */

/// sizeof(struct rrc_creds): the CREDS section's exact length.
pub const CREDS_SIZE: usize = 344;
/// `RRC_CREDS_GROUPS_MAX`.
pub const CREDS_GROUPS_MAX: usize = 64;

/// `struct rrc_creds`: the process's credentials (every thread's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Creds {
    /// real, effective, saved, file-system
    pub uids: [u32; 4],
    pub gids: [u32; 4],
    pub groups: Vec<u32>,
    pub cap_inheritable: u64,
    pub cap_permitted: u64,
    pub cap_effective: u64,
    pub cap_bounding: u64,
    pub cap_ambient: u64,
    pub securebits: u32,
    /// the application's PR_GET_DUMPABLE (a dump makes it dumpable meanwhile)
    pub dumpable: bool,
    /// Threads whose capability sets are their own (`struct
    /// rrc_thread_caps` after the struct): each gets them back.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub thread_caps: Vec<ThreadCaps>,
}

/// `struct rrc_thread_caps`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ThreadCaps {
    pub tid: u32,
    pub cap_inheritable: u64,
    pub cap_permitted: u64,
    pub cap_effective: u64,
    pub cap_ambient: u64,
}

/// `RRC_THREAD_CAPS_MAX`, and sizeof(struct rrc_thread_caps).
pub const THREAD_CAPS_MAX: usize = 64;
const THREAD_CAPS_SIZE: usize = 40;

/// A thread's sets: effective within permitted, ambient within permitted
/// and inheritable (what the kernel keeps).
fn caps_in_order(eff: u64, prm: u64, inh: u64, amb: u64) -> bool {
    eff & !prm == 0 && amb & !(prm & inh) == 0
}

pub fn parse_creds(p: &[u8]) -> Result<Creds, String> {
    // the struct, then maybe a count, a reserved word and the threads
    let n = if p.len() > CREDS_SIZE && p.len() >= CREDS_SIZE + 8 { u32_at(p, CREDS_SIZE) as usize } else { 0 };
    if p.len() != CREDS_SIZE && (n == 0 || n > THREAD_CAPS_MAX || p.len() != CREDS_SIZE + 8 + n * THREAD_CAPS_SIZE) {
        return Err(format!(
            "{} bytes: struct rrc_creds is {CREDS_SIZE}, followed by nothing or by a count and at most {THREAD_CAPS_MAX} threads' sets",
            p.len()
        ));
    }
    let thread_caps: Vec<ThreadCaps> = (0..n)
        .map(|i| {
            let o = CREDS_SIZE + 8 + i * THREAD_CAPS_SIZE;
            ThreadCaps {
                tid: u32_at(p, o),
                cap_inheritable: u64_at(p, o + 8),
                cap_permitted: u64_at(p, o + 16),
                cap_effective: u64_at(p, o + 24),
                cap_ambient: u64_at(p, o + 32),
            }
        })
        .collect();
    if let Some(t) = thread_caps.iter().find(|t| !caps_in_order(t.cap_effective, t.cap_permitted, t.cap_inheritable, t.cap_ambient)) {
        return Err(format!("thread {}'s effective or ambient capabilities exceed its permitted ones", t.tid));
    }
    let ids = |o: usize| std::array::from_fn(|i| u32_at(p, o + 4 * i));
    let nr_groups = u32_at(p, 80) as usize;
    if nr_groups > CREDS_GROUPS_MAX {
        return Err(format!("{nr_groups} supplementary groups, at most {CREDS_GROUPS_MAX}"));
    }
    let dumpable = match u32_at(p, 76) {
        0 => false,
        1 => true,
        v => return Err(format!("dumpable is {v}, not 0 or 1")),
    };
    let c = Creds {
        uids: ids(0),
        gids: ids(16),
        cap_inheritable: u64_at(p, 32),
        cap_permitted: u64_at(p, 40),
        cap_effective: u64_at(p, 48),
        cap_bounding: u64_at(p, 56),
        cap_ambient: u64_at(p, 64),
        securebits: u32_at(p, 72),
        dumpable,
        groups: (0..nr_groups).map(|i| u32_at(p, 88 + 4 * i)).collect(),
        thread_caps,
    };
    if !caps_in_order(c.cap_effective, c.cap_permitted, c.cap_inheritable, c.cap_ambient) {
        return Err(format!(
            "effective capabilities {:#x} not within the permitted {:#x}, or ambient {:#x} not within permitted and inheritable",
            c.cap_effective, c.cap_permitted, c.cap_ambient
        ));
    }
    Ok(c)
}

/* ---- FILEIDS --------------------------------------------------------- */

/// `struct rrc_file_id` and its path: the file a mapping maps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileId {
    pub path: String,
    pub size: u64,
    pub mtime_sec: i64,
    pub mtime_nsec: u32,
    /// `RRC_FILEID_REPLACED`: another file was at the path by the time
    /// the image was written (a restore refuses it).
    pub replaced: bool,
}

pub fn parse_file_ids(p: &[u8]) -> Result<Vec<FileId>, String> {
    if p.len() < 8 {
        return Err(format!("{} bytes, shorter than its header", p.len()));
    }
    let count = u32_at(p, 0);
    let mut off = 8usize;
    let mut out = Vec::new();
    for i in 0..count {
        if p.len() - off < 32 {
            return Err(format!("record {i} runs past the section"));
        }
        let (flags, path_len) = (u32_at(p, off + 20), u32_at(p, off + 24) as usize);
        let rec = (32 + path_len + 7) & !7;
        if p.len() - off < rec || flags & !1 != 0 {
            return Err(format!("record {i} runs past the section, or has flags {flags:#x}"));
        }
        let path = &p[off + 32..off + 32 + path_len];
        if path.contains(&0) || path.first() != Some(&b'/') {
            return Err(format!("record {i}: a path that is not absolute or holds a NUL"));
        }
        out.push(FileId {
            path: lossy(path),
            size: u64_at(p, off),
            mtime_sec: u64_at(p, off + 8) as i64,
            mtime_nsec: u32_at(p, off + 16),
            replaced: flags & 1 != 0,
        });
        off += rec;
    }
    if off != p.len() {
        return Err(format!("{} bytes after its {count} records", p.len() - off));
    }
    Ok(out)
}

/* ---- END -------------------------------------------------------------- */

pub const END_SIZE: usize = 16;

/// `struct rrc_end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct End {
    pub sections: u32,
    pub image_bytes: u64,
}

pub fn parse_end(p: &[u8]) -> Result<End, String> {
    if p.len() != END_SIZE {
        return Err(format!("payload is {} bytes, struct rrc_end is {END_SIZE}", p.len()));
    }
    if u32_at(p, 4) != 0 {
        return Err("reserved field is not zero".into());
    }
    Ok(End { sections: u32_at(p, 0), image_bytes: u64_at(p, 8) })
}

/* ---- PROCESS ---------------------------------------------------------- */

pub const AUXV_MAX: usize = 64;
pub const RLIMIT_MAX: usize = 16;
pub const PATH_MAX: usize = 4096;
/// sizeof(struct rrc_process)
pub const PROCESS_SIZE: usize = 9096;

mod process_off {
    pub const PID: usize = 0;
    pub const UMASK: usize = 4;
    pub const PERSONALITY: usize = 8;
    pub const NR_THREADS: usize = 12;
    pub const MM: usize = 16; // 11 u64: start_code .. env_end
    pub const AUXV: usize = 104;
    pub const AUXV_WORDS: usize = 616;
    pub const FLAGS: usize = 620;
    pub const RLIMITS: usize = 624;
    pub const RESTORE_AREA_ADDR: usize = 880;
    pub const COMM: usize = 888;
    pub const EXE_PATH: usize = 904;
    pub const CWD: usize = 5000;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Rlimit {
    pub cur: u64,
    pub max: u64,
}

/// `struct rrc_process`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Process {
    pub pid: u32,
    pub umask: u32,
    pub personality: u32,
    pub nr_threads: u32,
    pub start_code: u64,
    pub end_code: u64,
    pub start_data: u64,
    pub end_data: u64,
    pub start_brk: u64,
    pub brk: u64,
    pub start_stack: u64,
    pub arg_start: u64,
    pub arg_end: u64,
    pub env_start: u64,
    pub env_end: u64,
    /// The valid words of auxv (`auxv_words` of them).
    pub auxv: Vec<u64>,
    pub rlimits: Vec<Rlimit>,
    pub restore_area_addr: u64,
    pub comm: String,
    pub exe_path: String,
    /// The executable was deleted since the start (`RRC_PROC_EXE_REPLACED`):
    /// `exe_path` is its path, and a restore takes the file there now.
    pub exe_replaced: bool,
    pub cwd: String,
}

/// `RRC_PROC_EXE_REPLACED` in struct rrc_process's flags.
pub const PROC_EXE_REPLACED: u32 = 1;

pub fn parse_process(p: &[u8]) -> Result<Process, String> {
    use process_off::*;
    if p.len() != PROCESS_SIZE {
        return Err(format!(
            "payload is {} bytes, struct rrc_process is {PROCESS_SIZE}",
            p.len()
        ));
    }
    let mm = |i: usize| u64_at(p, MM + 8 * i);
    let auxv_words = u32_at(p, AUXV_WORDS) as usize;
    if auxv_words > AUXV_MAX || auxv_words % 2 != 0 {
        return Err(format!("auxv_words {auxv_words} is not an even number <= {AUXV_MAX}"));
    }
    let auxv: Vec<u64> = (0..auxv_words).map(|i| u64_at(p, AUXV + 8 * i)).collect();
    if auxv_words >= 2 && (auxv[auxv_words - 2] != 0) {
        return Err("auxv does not end with AT_NULL".into());
    }
    let flags = u32_at(p, FLAGS);
    if flags & !PROC_EXE_REPLACED != 0 {
        return Err(format!("flags {flags:#x} has bits this reader does not know"));
    }
    let rlimits = (0..RLIMIT_MAX)
        .map(|i| Rlimit { cur: u64_at(p, RLIMITS + 16 * i), max: u64_at(p, RLIMITS + 16 * i + 8) })
        .collect();
    let comm_field = &p[COMM..COMM + 16];
    let comm = cstr_field(comm_field).unwrap_or(comm_field);
    let exe = cstr_field(&p[EXE_PATH..EXE_PATH + PATH_MAX])
        .ok_or_else(|| "exe_path is not NUL-terminated".to_string())?;
    let cwd = cstr_field(&p[CWD..CWD + PATH_MAX])
        .ok_or_else(|| "cwd is not NUL-terminated".to_string())?;
    let nr_threads = u32_at(p, NR_THREADS);
    if nr_threads == 0 {
        return Err("nr_threads is 0".into());
    }
    // The order prctl(PR_SET_MM_MAP) enforces (kernel/sys.c,
    // validate_prctl_map_addr): an image violating it cannot be restored.
    let pairs = [
        ("start_code", mm(0), "end_code", mm(1), true),
        ("start_data", mm(2), "end_data", mm(3), false),
        ("start_brk", mm(4), "brk", mm(5), false),
        ("arg_start", mm(7), "arg_end", mm(8), false),
        ("env_start", mm(9), "env_end", mm(10), false),
    ];
    for (na, a, nb, b, strict) in pairs {
        if a > b || (strict && a == b) {
            return Err(format!("mm field {na} {a:#x} is not {} {nb} {b:#x}", if strict { "below" } else { "at or below" }));
        }
    }
    Ok(Process {
        pid: u32_at(p, PID),
        umask: u32_at(p, UMASK),
        personality: u32_at(p, PERSONALITY),
        nr_threads,
        start_code: mm(0),
        end_code: mm(1),
        start_data: mm(2),
        end_data: mm(3),
        start_brk: mm(4),
        brk: mm(5),
        start_stack: mm(6),
        arg_start: mm(7),
        arg_end: mm(8),
        env_start: mm(9),
        env_end: mm(10),
        auxv,
        rlimits,
        restore_area_addr: u64_at(p, RESTORE_AREA_ADDR),
        comm: lossy(comm),
        exe_path: lossy(exe),
        exe_replaced: flags & PROC_EXE_REPLACED != 0,
        cwd: lossy(cwd),
    })
}

/* ---- VMAS ------------------------------------------------------------- */

pub const VMA_SIZE: usize = 40;
pub const VMA_F_TRACKED: u32 = 1 << 0;
pub const VMA_F_GROWSDOWN: u32 = 1 << 1;
const PROT_MASK: u32 = 0x7; // PROT_READ | PROT_WRITE | PROT_EXEC

/// `enum rrc_vma_kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VmaKind {
    Anon,
    FilePrivate,
    FileSharedRo,
    Heap,
    Stack,
    Vdso,
    Vvar,
    Vsyscall,
}

impl VmaKind {
    pub fn from_raw(k: u32) -> Option<VmaKind> {
        Some(match k {
            1 => VmaKind::Anon,
            2 => VmaKind::FilePrivate,
            3 => VmaKind::FileSharedRo,
            4 => VmaKind::Heap,
            5 => VmaKind::Stack,
            6 => VmaKind::Vdso,
            7 => VmaKind::Vvar,
            8 => VmaKind::Vsyscall,
            _ => return None,
        })
    }
    pub fn is_file(self) -> bool {
        matches!(self, VmaKind::FilePrivate | VmaKind::FileSharedRo)
    }
    /// Kinds whose pages are never carried in an image.
    pub fn has_no_data(self) -> bool {
        matches!(self, VmaKind::Vdso | VmaKind::Vvar | VmaKind::Vsyscall)
    }
}

/// `struct rrc_vma` + its path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Vma {
    pub start: u64,
    pub end: u64,
    pub pgoff: u64,
    pub prot: u32,
    pub kind: VmaKind,
    pub flags: u32,
    pub path: String,
}

pub fn parse_vmas(p: &[u8]) -> Result<Vec<Vma>, String> {
    let mut out: Vec<Vma> = Vec::new();
    let mut off = 0usize;
    while off < p.len() {
        let i = out.len();
        if p.len() - off < VMA_SIZE {
            return Err(format!("vma #{i} at payload offset {off}: record cut short"));
        }
        let r = &p[off..off + VMA_SIZE];
        let (start, end, pgoff) = (u64_at(r, 0), u64_at(r, 8), u64_at(r, 16));
        let (prot, kind_raw, flags, path_len) =
            (u32_at(r, 24), u32_at(r, 28), u32_at(r, 32), u32_at(r, 36) as usize);
        let rec_len = pad8((VMA_SIZE + path_len) as u64) as usize;
        if rec_len > p.len() - off {
            return Err(format!("vma #{i}: path of {path_len} bytes runs past the payload"));
        }
        let path = &p[off + VMA_SIZE..off + VMA_SIZE + path_len];
        let ctx = |m: String| format!("vma #{i} [{start:#x}, {end:#x}): {m}");
        let kind = VmaKind::from_raw(kind_raw).ok_or_else(|| ctx(format!("unknown kind {kind_raw}")))?;
        if start >= end || start % PAGE_SIZE != 0 || end % PAGE_SIZE != 0 {
            return Err(ctx("not a non-empty page-aligned range".into()));
        }
        if prot & !PROT_MASK != 0 {
            return Err(ctx(format!("unknown prot bits {prot:#x}")));
        }
        if flags & !(VMA_F_TRACKED | VMA_F_GROWSDOWN) != 0 {
            return Err(ctx(format!("unknown flags {flags:#x}")));
        }
        if kind.is_file() && path_len == 0 {
            return Err(ctx("file mapping without a path".into()));
        }
        if path.contains(&0) {
            return Err(ctx("path contains a NUL byte".into()));
        }
        if let Some(prev) = out.last() {
            if start < prev.end {
                return Err(ctx(format!(
                    "overlaps or is out of order with the previous vma ending at {:#x}",
                    prev.end
                )));
            }
        }
        out.push(Vma { start, end, pgoff, prot, kind, flags, path: lossy(path) });
        off += rec_len;
    }
    Ok(out)
}

/* ---- PAGEMAP ---------------------------------------------------------- */

pub const PAGEMAP_ENTRY_SIZE: usize = 16;
pub const PME_IN_IMAGE: u32 = 1 << 0;

/// `struct rrc_pagemap_entry`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PagemapEntry {
    pub vaddr: u64,
    pub nr_pages: u32,
    pub flags: u32,
}

impl PagemapEntry {
    pub fn in_image(&self) -> bool {
        self.flags & PME_IN_IMAGE != 0
    }
    pub fn end(&self) -> u64 {
        self.vaddr + u64::from(self.nr_pages) * PAGE_SIZE
    }
}

/// Decodes the entries and checks them against the VMA list: page
/// aligned, non-empty, in address order, not overlapping, inside VMAs
/// that carry data.
pub fn parse_pagemap(p: &[u8], vmas: &[Vma]) -> Result<Vec<PagemapEntry>, String> {
    if p.len() % PAGEMAP_ENTRY_SIZE != 0 {
        return Err(format!("payload of {} bytes is not a whole number of {PAGEMAP_ENTRY_SIZE}-byte entries", p.len()));
    }
    let mut out: Vec<PagemapEntry> = Vec::with_capacity(p.len() / PAGEMAP_ENTRY_SIZE);
    let mut v = 0usize; // index into vmas (both lists are in address order)
    for (i, r) in p.chunks_exact(PAGEMAP_ENTRY_SIZE).enumerate() {
        let e = PagemapEntry { vaddr: u64_at(r, 0), nr_pages: u32_at(r, 8), flags: u32_at(r, 12) };
        let ctx = |m: &str| format!("pagemap entry #{i} ({:#x}, {} pages): {m}", e.vaddr, e.nr_pages);
        if e.vaddr % PAGE_SIZE != 0 || e.nr_pages == 0 {
            return Err(ctx("not a non-empty page-aligned range"));
        }
        if e.flags & !PME_IN_IMAGE != 0 {
            return Err(ctx("unknown flags"));
        }
        let end = e
            .vaddr
            .checked_add(u64::from(e.nr_pages) * PAGE_SIZE)
            .ok_or_else(|| ctx("range overflows"))?;
        if let Some(prev) = out.last() {
            if e.vaddr < prev.end() {
                return Err(ctx("overlaps or is out of order with the previous entry"));
            }
        }
        // The range must be covered by (possibly adjacent) data-carrying VMAs.
        let mut at = e.vaddr;
        while v < vmas.len() && vmas[v].end <= at {
            v += 1;
        }
        let mut w = v;
        while at < end {
            match vmas.get(w) {
                Some(vma) if vma.start <= at && at < vma.end => {
                    if vma.kind.has_no_data() {
                        return Err(ctx(&format!("covers page {at:#x} of a {:?} vma, which carries no data", vma.kind)));
                    }
                    at = vma.end;
                    w += 1;
                }
                _ => return Err(ctx(&format!("page {at:#x} is in no vma"))),
            }
        }
        out.push(e);
    }
    Ok(out)
}

/* ---- THREADS ---------------------------------------------------------- */

pub const THREAD_SIZE: usize = 328;
pub const THR_F_CONTROL: u32 = 1 << 0;
pub const THR_F_MAIN: u32 = 1 << 1;

/// `struct rrc_resume_ctx`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ResumeCtx {
    pub rbx: u64,
    pub rbp: u64,
    pub r12: u64,
    pub r13: u64,
    pub r14: u64,
    pub r15: u64,
    pub rsp: u64,
    pub rip: u64,
}

/// `struct rrc_thread`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Thread {
    pub tid: u32,
    pub flags: u32,
    pub fs_base: u64,
    pub gs_base: u64,
    pub robust_list: u64,
    pub robust_list_len: u64,
    pub clear_child_tid: u64,
    pub rseq_addr: u64,
    pub rseq_len: u32,
    pub rseq_sig: u32,
    pub resume: ResumeCtx,
    pub ucontext_addr: u64,
    pub gregs: Vec<u64>,
    pub sigmask: u64,
}

impl Thread {
    pub fn is_main(&self) -> bool {
        self.flags & THR_F_MAIN != 0
    }
    pub fn is_control(&self) -> bool {
        self.flags & THR_F_CONTROL != 0
    }
}

pub fn parse_threads(p: &[u8]) -> Result<Vec<Thread>, String> {
    if p.len() % THREAD_SIZE != 0 {
        return Err(format!("payload of {} bytes is not a whole number of {THREAD_SIZE}-byte threads", p.len()));
    }
    let mut out: Vec<Thread> = Vec::with_capacity(p.len() / THREAD_SIZE);
    let mut tids = HashSet::with_capacity(p.len() / THREAD_SIZE);
    for (i, r) in p.chunks_exact(THREAD_SIZE).enumerate() {
        let c = |k: usize| u64_at(r, 64 + 8 * k);
        let t = Thread {
            tid: u32_at(r, 0),
            flags: u32_at(r, 4),
            fs_base: u64_at(r, 8),
            gs_base: u64_at(r, 16),
            robust_list: u64_at(r, 24),
            robust_list_len: u64_at(r, 32),
            clear_child_tid: u64_at(r, 40),
            rseq_addr: u64_at(r, 48),
            rseq_len: u32_at(r, 56),
            rseq_sig: u32_at(r, 60),
            resume: ResumeCtx { rbx: c(0), rbp: c(1), r12: c(2), r13: c(3), r14: c(4), r15: c(5), rsp: c(6), rip: c(7) },
            ucontext_addr: u64_at(r, 128),
            gregs: (0..23).map(|k| u64_at(r, 136 + 8 * k)).collect(),
            sigmask: u64_at(r, 320),
        };
        if t.tid == 0 {
            return Err(format!("thread #{i}: tid 0"));
        }
        if t.flags & !(THR_F_CONTROL | THR_F_MAIN) != 0 {
            return Err(format!("thread #{i} (tid {}): unknown flags {:#x}", t.tid, t.flags));
        }
        if !tids.insert(t.tid) {
            return Err(format!("thread #{i}: tid {} appears twice", t.tid));
        }
        out.push(t);
    }
    if out.iter().filter(|t| t.is_main()).count() > 1 {
        return Err("more than one thread is flagged MAIN".into());
    }
    if out.iter().filter(|t| t.is_control()).count() > 1 {
        return Err("more than one thread is flagged CONTROL".into());
    }
    Ok(out)
}

/* ---- FDS -------------------------------------------------------------- */

pub const FD_SIZE: usize = 320;
pub const SOCKADDR_SIZE: usize = 120;
/// `RRC_SOCK_FILE_MODE`: a socket record's file_mode is valid.
pub const SOCK_FILE_MODE: u32 = 0x8000_0000;
pub const EPOLL_ENTRY_SIZE: usize = 16;
/// `RRC_FD_F_FOWN` in `fd_flags`: the record's data ends with a `struct rrc_fown`.
pub const FD_F_FOWN: u32 = 0x8000_0000;
/// sizeof(struct rrc_fown).
pub const FOWN_SIZE: usize = 16;

/// `struct rrc_fown`: signal-driven I/O (O_ASYNC), whom the open file
/// description signals and with what.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Fown {
    /// "tid", "pid" or "pgrp" (F_OWNER_TID, F_OWNER_PID, F_OWNER_PGRP).
    pub owner_type: &'static str,
    /// The tid, pid or process group (0: no owner).
    pub owner: i32,
    /// F_SETSIG's signal (0: SIGIO, without siginfo).
    pub signal: u32,
}

impl Fown {
    fn parse(b: &[u8]) -> Result<Fown, String> {
        let owner_type = match u32_at(b, 0) {
            0 => "tid",
            1 => "pid",
            2 => "pgrp",
            t => return Err(format!("signal-driven I/O with an owner of unknown type {t}")),
        };
        let (owner, signal, reserved) = (i32_at(b, 4), u32_at(b, 8), u32_at(b, 12));
        if owner < 0 || signal > 64 || reserved != 0 {
            return Err(format!("signal-driven I/O for {owner_type} {owner}, signal {signal}, reserved {reserved}"));
        }
        Ok(Fown { owner_type, owner, signal })
    }
}

/// `enum rrc_fd_kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FdKind {
    Reg,
    Dir,
    Chr,
    Pipe,
    Eventfd,
    Epoll,
    Timerfd,
    InetListen,
    InetDgram,
    InetConn,
    UnixListen,
    UnixOther,
    /// The same open file description as an earlier fd (`FdDetail::Dup`).
    Dup,
    Signalfd,
    /// A file deleted while open, or a memfd: its contents in the record.
    Ghost,
    /// An inotify instance: its watches in the record.
    Inotify,
    /// A named pipe opened by its path (`FdDetail::Pipe`).
    Fifo,
    /// A POSIX message queue: its limits, and with the first fd of each
    /// queue its messages (`FdDetail::Mqueue`).
    Mqueue,
    LibControl,
    LibInternal,
}

impl FdKind {
    pub fn from_raw(k: u32) -> Option<FdKind> {
        Some(match k {
            1 => FdKind::Reg,
            2 => FdKind::Dir,
            3 => FdKind::Chr,
            4 => FdKind::Pipe,
            5 => FdKind::Eventfd,
            6 => FdKind::Epoll,
            7 => FdKind::Timerfd,
            8 => FdKind::InetListen,
            9 => FdKind::InetDgram,
            10 => FdKind::InetConn,
            11 => FdKind::UnixListen,
            12 => FdKind::UnixOther,
            13 => FdKind::Dup,
            14 => FdKind::Signalfd,
            15 => FdKind::Ghost,
            16 => FdKind::Inotify,
            17 => FdKind::Fifo,
            18 => FdKind::Mqueue,
            100 => FdKind::LibControl,
            101 => FdKind::LibInternal,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            FdKind::Reg => "reg",
            FdKind::Dir => "dir",
            FdKind::Chr => "chr",
            FdKind::Pipe => "pipe",
            FdKind::Eventfd => "eventfd",
            FdKind::Epoll => "epoll",
            FdKind::Timerfd => "timerfd",
            FdKind::InetListen => "inet_listen",
            FdKind::InetDgram => "inet_dgram",
            FdKind::InetConn => "inet_conn",
            FdKind::UnixListen => "unix_listen",
            FdKind::UnixOther => "unix_other",
            FdKind::Dup => "dup",
            FdKind::Signalfd => "signalfd",
            FdKind::Ghost => "ghost",
            FdKind::Inotify => "inotify",
            FdKind::Fifo => "fifo",
            FdKind::Mqueue => "mqueue",
            FdKind::LibControl => "lib_control",
            FdKind::LibInternal => "lib_internal",
        }
    }
    fn is_socket(self) -> bool {
        matches!(
            self,
            FdKind::InetListen | FdKind::InetDgram | FdKind::InetConn | FdKind::UnixListen | FdKind::UnixOther | FdKind::LibControl
        )
    }
}

/// `struct rrc_sockaddr`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SockAddr {
    pub family: u16,
    /// The `len` valid bytes of addr[].
    pub addr: Vec<u8>,
}

fn parse_sockaddr(b: &[u8]) -> Result<SockAddr, String> {
    let len = u16_at(b, 2) as usize;
    if len > 112 {
        return Err(format!("sockaddr len {len} > 112"));
    }
    Ok(SockAddr { family: u16_at(b, 0), addr: b[8..8 + len].to_vec() })
}

/// `struct rrc_epoll_entry`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct EpollEntry {
    pub fd: i32,
    pub events: u32,
    pub data: u64,
}

/// sizeof(struct rrc_sockopts) as this reader knows it.
pub const SOCKOPTS_SIZE: usize = 96;

/// `struct rrc_sockopts`: a socket's options, the data of its record. A
/// field whose bit (`SockOpts::*` constants) is not in `valid` was not read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SockOpts {
    pub valid: u32,
    pub nodelay: i32,
    pub cork: i32,
    pub keepalive: i32,
    pub keepidle: i32,
    pub keepintvl: i32,
    pub keepcnt: i32,
    pub linger_onoff: i32,
    pub linger_secs: i32,
    pub priority: i32,
    pub rcvbuf: i32,
    pub sndbuf: i32,
    pub buf_lock: i32,
    pub broadcast: i32,
    pub freebind: i32,
    pub transparent: i32,
    pub bindtodevice: String,
    /// A classic BPF socket filter's length in instructions (0: none); its
    /// program ends the options (`SOCK_FILTER_SIZE` bytes each).
    pub filter_len: u16,
    /// SO_LOCK_FILTER
    pub filter_lock: bool,
    /// `RRC_SK_RDHUP`: a TCP socket without a peer whose reads were at
    /// their end at the capture (a connection that ended; restored ended).
    pub ended: bool,
}

/// sizeof(struct sock_filter).
pub const SOCK_FILTER_SIZE: usize = 8;
/// `RRC_SOCK_FILTER_MAX` (BPF_MAXINSNS).
pub const SOCK_FILTER_MAX: u16 = 4096;

impl SockOpts {
    /// `RRC_SO_FILTER`: filter_len and filter_lock were read.
    pub const FILTER: u32 = 1 << 11;

    /// A socket record's data: none, or a `struct rrc_sockopts` of this
    /// version or a later one (larger: its known prefix is read).
    fn parse(data: &[u8]) -> Result<Option<SockOpts>, String> {
        if data.is_empty() {
            return Ok(None);
        }
        check_versioned(data, SOCKOPTS_SIZE, "socket options")?;
        let i = |o| i32_at(data, o);
        let dev = &data[72..88];
        let dev = &dev[..dev.iter().position(|&b| b == 0).unwrap_or(dev.len())];
        let valid = u32_at(data, 4);
        let (filter_len, filter_lock) =
            if valid & Self::FILTER != 0 { (u16::from_le_bytes([data[88], data[89]]), data[90] != 0) } else { (0, false) };
        let size = u32_at(data, 0) as usize;
        if filter_len > SOCK_FILTER_MAX || SOCKOPTS_SIZE + filter_len as usize * SOCK_FILTER_SIZE > size {
            return Err(format!("socket options of {size} bytes with a socket filter of {filter_len} instructions"));
        }
        Ok(Some(SockOpts {
            valid,
            nodelay: i(8),
            cork: i(12),
            keepalive: i(16),
            keepidle: i(20),
            keepintvl: i(24),
            keepcnt: i(28),
            linger_onoff: i(32),
            linger_secs: i(36),
            priority: i(40),
            rcvbuf: i(44),
            sndbuf: i(48),
            buf_lock: i(52),
            broadcast: i(56),
            freebind: i(60),
            transparent: i(64),
            bindtodevice: lossy(dev),
            filter_len,
            filter_lock,
            ended: u32::from_le_bytes([data[92], data[93], data[94], data[95]]) & 1 != 0,
        }))
    }
}

/// `struct rrc_unix_peer`: after a UNIX_OTHER record's options.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnixPeer {
    /// The peer socket's inode (0: none).
    pub peer_ino: u64,
    /// 1: receive side shut, 2: send side.
    pub shutdown: u32,
    /// Bytes queued for reading (they follow in the record).
    pub queued: u32,
}

/// The `struct rrc_unix_peer` after the options of a connected unix
/// socket's data, if there is one.
fn parse_unix_peer(data: &[u8]) -> Result<Option<UnixPeer>, String> {
    if data.len() < 4 {
        return Ok(None);
    }
    let size = u32_at(data, 0) as usize;
    if data.len() < size + 16 {
        return Ok(None);
    }
    let p = &data[size..];
    let peer = UnixPeer { peer_ino: u64_at(p, 0), shutdown: u32_at(p, 8), queued: u32_at(p, 12) };
    if peer.shutdown > 3 || peer.queued as usize > p.len() - 16 {
        return Err(format!("unix peer: shutdown {} and {} queued bytes in {} bytes", peer.shutdown, peer.queued, p.len() - 16));
    }
    Ok(Some(peer))
}

/// The kind-specific part of `struct rrc_fd` (its union), decoded by kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FdDetail {
    None,
    Pipe { pipe_size: u32, has_data: u32 },
    Eventfd { count: u64, semaphore: u32 },
    /// The signals it reads (bit n-1: signal n).
    Signalfd { sigmask: u64 },
    Timerfd { clockid: i32, flags: u32, ticks: u64, value_sec: i64, value_nsec: i64, interval_sec: i64, interval_nsec: i64 },
    Socket {
        family: i32,
        sock_type: i32,
        protocol: i32,
        backlog: i32,
        reuseaddr: u32,
        reuseport: u32,
        v6only: u32,
        /// A unix listener bound to a path: its file's permission bits.
        file_mode: Option<u32>,
        local: SockAddr,
        peer: SockAddr,
        /// The record's data (None: an image written before options were
        /// carried, or the library's control socket).
        options: Option<SockOpts>,
        /// A connected unix socket's peer, shutdown and queued bytes
        /// (after the options; None: another kind, or an older image).
        unix_peer: Option<UnixPeer>,
    },
    Epoll { entries: Vec<EpollEntry> },
    /// Restored by dup3 of fd `of` (kind `Dup`).
    Dup { of: i32 },
    /// A file or directory holding locks (its record's data).
    Locks { locks: Vec<FileLock> },
    /// A ghost file: `size` bytes of contents in the record's data (none
    /// when it is open write-only: `contents` false, restored as a hole of
    /// `size` bytes); a memfd's seals (F_GET_SEALS).
    Ghost { size: u64, seals: u32, memfd: bool, contents: bool },
    /// An inotify instance's watches.
    Inotify { watches: Vec<InotifyWatch> },
    /// A POSIX message queue: its limits; the first fd of each queue
    /// holds its messages (priority and length each), in receive order.
    Mqueue { maxmsg: i64, msgsize: i64, first: bool, messages: Vec<(u32, u32)> },
}

/// The messages of a POSIX message queue's record: `struct rrc_mq_msg`
/// (8 bytes) and its bytes, padded to 8, `n` of them and nothing after.
fn parse_mq_messages(data: &[u8], n: u32, msgsize: i64) -> Result<Vec<(u32, u32)>, String> {
    let mut out = Vec::new();
    let mut off = 0usize;
    for i in 0..n {
        if data.len() - off < 8 {
            return Err(format!("message {i} of the queue runs past the record"));
        }
        let (prio, len) = (u32_at(data, off), u32_at(data, off + 4));
        let padded = (8 + len as usize + 7) & !7;
        if data.len() - off < padded || i64::from(len) > msgsize {
            return Err(format!("message {i} of the queue ({len} bytes) runs past the record or the queue's message size {msgsize}"));
        }
        out.push((prio, len));
        off += padded;
    }
    if off != data.len() {
        return Err(format!("{} bytes after the queue's {n} messages", data.len() - off));
    }
    Ok(out)
}

/// sizeof(struct rrc_inotify_watch).
pub const INOTIFY_WATCH_SIZE: usize = 24;
/// `RRC_INOTIFY_PATH_MAX`.
pub const INOTIFY_PATH_MAX: usize = 256;

/// `struct rrc_inotify_watch` and the path after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InotifyWatch {
    pub wd: i32,
    pub mask: u32,
    pub ino: u64,
    pub sdev: u32,
    pub path: String,
}

/// An inotify record's data: `n` watches, each a `struct rrc_inotify_watch`
/// and its NUL-terminated path padded to 8.
fn parse_inotify(data: &[u8], n: u32) -> Result<Vec<InotifyWatch>, String> {
    let mut out = Vec::new();
    let mut off = 0usize;
    for i in 0..n {
        if data.len().saturating_sub(off) < INOTIFY_WATCH_SIZE {
            return Err(format!("inotify watch {i} of {n} is cut"));
        }
        let w = &data[off..];
        let plen = u32_at(w, 20) as usize;
        off += INOTIFY_WATCH_SIZE;
        if plen == 0 || plen > INOTIFY_PATH_MAX || plen > data.len() - off || data[off + plen - 1] != 0 {
            return Err(format!("inotify watch {i}: a path of {plen} bytes"));
        }
        out.push(InotifyWatch {
            wd: i32_at(w, 0),
            mask: u32_at(w, 4),
            ino: u64_at(w, 8),
            sdev: u32_at(w, 16),
            path: lossy(&data[off..off + plen - 1]),
        });
        off += (plen + 7) & !7;
    }
    Ok(out)
}

/// `RRC_GHOST_MAX`.
pub const GHOST_MAX: u64 = 1 << 20;
/// A record's file_flags: the access mode, and write-only in it.
const O_ACCMODE: u32 = 0o3;
const O_WRONLY: u32 = 0o1;

/// sizeof(struct rrc_file_lock).
pub const FILE_LOCK_SIZE: usize = 24;
/// `RRC_LOCKS_PER_FD`.
pub const LOCKS_PER_FD: usize = 64;

/// `struct rrc_file_lock`: a lock a file or directory record holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FileLock {
    /// "flock", "posix", "ofd" or "lease"
    pub kind: &'static str,
    pub write: bool,
    /// POSIX and OFD: the first byte and the length (0: to the end of the file).
    pub start: i64,
    pub len: i64,
}

fn parse_locks(data: &[u8]) -> Result<Vec<FileLock>, String> {
    if data.len() % FILE_LOCK_SIZE != 0 || data.len() / FILE_LOCK_SIZE > LOCKS_PER_FD {
        return Err(format!("{} bytes of file locks: not a whole number of at most {LOCKS_PER_FD} records", data.len()));
    }
    data.chunks_exact(FILE_LOCK_SIZE)
        .map(|l| {
            let kind = match u32_at(l, 0) {
                1 => "flock",
                2 => "posix",
                3 => "ofd",
                4 => "lease",
                k => return Err(format!("file lock of unknown kind {k}")),
            };
            let write = match u32_at(l, 4) {
                0 => false,
                1 => true,
                t => return Err(format!("file lock of type {t}, not read 0 or write 1")),
            };
            let (start, len) = (i64_at(l, 8), i64_at(l, 16));
            if start < 0 || len < 0 {
                return Err(format!("file lock at {start} of length {len}"));
            }
            Ok(FileLock { kind, write, start, len })
        })
        .collect()
}

/// `struct rrc_fd` + path + data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fd {
    pub fd: i32,
    pub kind: FdKind,
    pub fd_flags: u32,
    pub file_flags: u32,
    pub pos: u64,
    pub ino: u64,
    pub mode: u32,
    pub rdev: u32,
    pub detail: FdDetail,
    pub path: String,
    /// Signal-driven I/O (O_ASYNC): its owner and signal (None: none, or
    /// an image written before they were carried; a `Dup`'s is its object's).
    pub fown: Option<Fown>,
    /// Raw data bytes of the kind (pipe contents in flight, epoll
    /// entries, ...; the `struct rrc_fown` after them excluded).
    #[serde(skip)]
    pub data: Vec<u8>,
}

pub fn parse_fds(p: &[u8]) -> Result<Vec<Fd>, String> {
    let mut out: Vec<Fd> = Vec::new();
    let mut fdnos = HashSet::new();
    let mut off = 0usize;
    while off < p.len() {
        let i = out.len();
        if p.len() - off < FD_SIZE {
            return Err(format!("fd record #{i} at payload offset {off}: record cut short"));
        }
        let r = &p[off..off + FD_SIZE];
        let fdno = i32_at(r, 0);
        let kind_raw = u32_at(r, 4);
        let ctx = |m: String| format!("fd record #{i} (fd {fdno}): {m}");
        let kind = FdKind::from_raw(kind_raw).ok_or_else(|| ctx(format!("unknown kind {kind_raw}")))?;
        let path_len = u32_at(r, 312) as u64;
        let data_len = u32_at(r, 316) as u64;
        let rec_len = pad8(FD_SIZE as u64 + path_len + data_len);
        if rec_len > (p.len() - off) as u64 {
            return Err(ctx(format!("path ({path_len} bytes) and data ({data_len} bytes) run past the payload")));
        }
        let (path_len, data_len) = (path_len as usize, data_len as usize);
        let path = &p[off + FD_SIZE..off + FD_SIZE + path_len];
        let data = &p[off + FD_SIZE + path_len..off + FD_SIZE + path_len + data_len];
        let fd_flags = u32_at(r, 8);
        // signal-driven I/O: the data's last bytes, the kind's before them
        let (data, fown) = if fd_flags & FD_F_FOWN != 0 {
            if data_len < FOWN_SIZE || kind == FdKind::Dup {
                return Err(ctx(format!("signal-driven I/O in {data_len} bytes of data of a {} record", kind.name())));
            }
            let (d, f) = data.split_at(data_len - FOWN_SIZE);
            (d, Some(Fown::parse(f).map_err(ctx)?))
        } else {
            (data, None)
        };
        let data_len = data.len();
        if fdno < 0 {
            return Err(ctx("negative fd number".into()));
        }
        if !fdnos.insert(fdno) {
            return Err(ctx("fd number appears twice".into()));
        }
        if path.contains(&0) {
            return Err(ctx("path contains a NUL byte".into()));
        }
        let u = 40usize;
        let detail = match kind {
            FdKind::Pipe | FdKind::Fifo => FdDetail::Pipe { pipe_size: u32_at(r, u), has_data: u32_at(r, u + 4) },
            FdKind::Eventfd => FdDetail::Eventfd { count: u64_at(r, u), semaphore: u32_at(r, u + 8) },
            FdKind::Signalfd => FdDetail::Signalfd { sigmask: u64_at(r, u) },
            FdKind::Timerfd => FdDetail::Timerfd {
                clockid: i32_at(r, u),
                flags: u32_at(r, u + 4),
                ticks: u64_at(r, u + 8),
                value_sec: i64_at(r, u + 16),
                value_nsec: i64_at(r, u + 24),
                interval_sec: i64_at(r, u + 32),
                interval_nsec: i64_at(r, u + 40),
            },
            k if k.is_socket() => FdDetail::Socket {
                family: i32_at(r, u),
                sock_type: i32_at(r, u + 4),
                protocol: i32_at(r, u + 8),
                backlog: i32_at(r, u + 12),
                reuseaddr: u32_at(r, u + 16),
                reuseport: u32_at(r, u + 20),
                v6only: u32_at(r, u + 24),
                file_mode: Some(u32_at(r, u + 28)).filter(|m| m & SOCK_FILE_MODE != 0).map(|m| m & 0o7777),
                local: parse_sockaddr(&r[u + 32..u + 32 + SOCKADDR_SIZE]).map_err(|m| ctx(format!("local address: {m}")))?,
                peer: parse_sockaddr(&r[u + 32 + SOCKADDR_SIZE..u + 32 + 2 * SOCKADDR_SIZE]).map_err(|m| ctx(format!("peer address: {m}")))?,
                options: SockOpts::parse(data).map_err(ctx)?,
                unix_peer: if kind == FdKind::UnixOther { parse_unix_peer(data).map_err(ctx)? } else { None },
            },
            FdKind::Epoll => {
                if data_len % EPOLL_ENTRY_SIZE != 0 {
                    return Err(ctx(format!("epoll data of {data_len} bytes is not a whole number of entries")));
                }
                FdDetail::Epoll {
                    entries: data
                        .chunks_exact(EPOLL_ENTRY_SIZE)
                        .map(|e| EpollEntry { fd: i32_at(e, 0), events: u32_at(e, 4), data: u64_at(e, 8) })
                        .collect(),
                }
            }
            FdKind::Dup => FdDetail::Dup { of: i32_at(r, u) },
            FdKind::Reg | FdKind::Dir if data_len > 0 => FdDetail::Locks { locks: parse_locks(data).map_err(ctx)? },
            FdKind::Inotify => FdDetail::Inotify { watches: parse_inotify(data, u32_at(r, u)).map_err(ctx)? },
            FdKind::Mqueue => {
                let (maxmsg, msgsize) = (u64_at(r, u) as i64, u64_at(r, u + 8) as i64);
                let (n, first) = (u32_at(r, u + 16), u32_at(r, u + 20));
                if maxmsg <= 0 || msgsize <= 0 || first > 1 || (first == 0 && n != 0) {
                    return Err(ctx(format!("a message queue of {maxmsg} messages of {msgsize} bytes, first {first}, {n} messages")));
                }
                FdDetail::Mqueue { maxmsg, msgsize, first: first == 1, messages: parse_mq_messages(data, n, msgsize).map_err(ctx)? }
            }
            FdKind::Ghost => {
                let size = u64_at(r, u);
                // write-only: the size, no contents (files-ghost.c)
                let contents = u32_at(r, 12) & O_ACCMODE != O_WRONLY;
                if contents && (size > GHOST_MAX || size > data_len as u64) {
                    return Err(ctx(format!("a ghost file of {size} bytes, {data_len} in the record (at most {GHOST_MAX})")));
                }
                if !contents && data_len != 0 {
                    return Err(ctx(format!("a write-only ghost file with {data_len} bytes of contents (none are carried)")));
                }
                FdDetail::Ghost { size, seals: u32_at(r, u + 8), memfd: u32_at(r, u + 12) != 0, contents }
            }
            _ => FdDetail::None,
        };
        if let FdDetail::Pipe { has_data, .. } = detail {
            if has_data == 0 && data_len != 0 {
                return Err(ctx("pipe end without has_data carries data".into()));
            }
        }
        out.push(Fd {
            fd: fdno,
            kind,
            fd_flags,
            file_flags: u32_at(r, 12),
            pos: u64_at(r, 16),
            ino: u64_at(r, 24),
            mode: u32_at(r, 32),
            rdev: u32_at(r, 36),
            detail,
            path: lossy(path),
            fown,
            data: data.to_vec(),
        });
        off += rec_len as usize;
    }
    check_dups(&out)?;
    Ok(out)
}

/// Every `Dup` names an fd of the table that the restorer makes as an
/// object of its own (not another `Dup`, not the library's).
fn check_dups(fds: &[Fd]) -> Result<(), String> {
    let kinds: std::collections::HashMap<i32, FdKind> = fds.iter().map(|f| (f.fd, f.kind)).collect();
    for f in fds {
        let FdDetail::Dup { of } = f.detail else { continue };
        match kinds.get(&of) {
            None => return Err(format!("fd {}: a duplicate of fd {of}, which the table does not have", f.fd)),
            Some(k @ (FdKind::Dup | FdKind::LibControl | FdKind::LibInternal)) => {
                return Err(format!("fd {}: a duplicate of fd {of}, which is {} (not an object of its own)", f.fd, k.name()))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/* ---- SIGNALS ---------------------------------------------------------- */

pub const SIGACTION_SIZE: usize = 32;
pub const NSIG: usize = 64;

/// `struct rrc_sigaction` (the kernel's layout); index n-1 is signal n.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SigAction {
    pub handler: u64,
    pub flags: u64,
    pub restorer: u64,
    pub mask: u64,
}

pub fn parse_signals(p: &[u8]) -> Result<Vec<SigAction>, String> {
    if p.len() != NSIG * SIGACTION_SIZE {
        return Err(format!("payload is {} bytes, {NSIG} sigactions are {}", p.len(), NSIG * SIGACTION_SIZE));
    }
    Ok(p.chunks_exact(SIGACTION_SIZE)
        .map(|r| SigAction { handler: u64_at(r, 0), flags: u64_at(r, 8), restorer: u64_at(r, 16), mask: u64_at(r, 24) })
        .collect())
}

/* ---- TCP -------------------------------------------------------------- */

pub const TCP_TABLE_SIZE: usize = 8;
/// sizeof(struct rrc_tcp_stream)
pub const TCP_STREAM_SIZE: usize = 112;
pub const TCP_F_INFO: u16 = 1 << 0;
pub const TCP_F_SEQ: u16 = 1 << 1;
pub const TCP_F_ACTIVE: u16 = 1 << 2;
const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;

/// `struct rrc_tcp_stream`: one TCP socket of the process's network
/// namespace at the snapshot (image.h explains every field).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TcpStream {
    pub family: u16,
    /// Kernel TCP state number (1 ESTABLISHED .. 11 CLOSING).
    pub state: u8,
    pub state_name: &'static str,
    pub options: u8,
    pub snd_wscale: u8,
    pub rcv_wscale: u8,
    pub flags: u16,
    pub local: std::net::SocketAddr,
    pub remote: std::net::SocketAddr,
    pub snd_mss: u32,
    pub inode: u64,
    pub cookie: u64,
    pub rqueue: u32,
    pub wqueue: u32,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    /// None unless `TCP_F_SEQ` (a synchronized connection).
    pub write_seq_rel: Option<u64>,
    pub read_seq_rel: Option<u64>,
    pub ifindex: u32,
}

impl TcpStream {
    pub fn has_seq(&self) -> bool {
        self.flags & TCP_F_SEQ != 0
    }
    pub fn is_active_open(&self) -> bool {
        self.flags & TCP_F_ACTIVE != 0
    }
}

/// The kernel's TCP state names (include/net/tcp_states.h).
pub fn tcp_state_name(s: u8) -> Option<&'static str> {
    Some(match s {
        1 => "ESTABLISHED",
        2 => "SYN_SENT",
        3 => "SYN_RECV",
        4 => "FIN_WAIT1",
        5 => "FIN_WAIT2",
        6 => "TIME_WAIT",
        7 => "CLOSE",
        8 => "CLOSE_WAIT",
        9 => "LAST_ACK",
        10 => "LISTEN",
        11 => "CLOSING",
        _ => return None,
    })
}

fn tcp_addr(family: u16, a: &[u8], port: u16) -> std::net::SocketAddr {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
    let ip = if family == AF_INET {
        IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))
    } else {
        let mut b = [0u8; 16];
        b.copy_from_slice(&a[..16]);
        IpAddr::V6(Ipv6Addr::from(b))
    };
    SocketAddr::new(ip, port)
}

/// Decodes `rrc_tcp_table` + records: the record size must be this
/// version's, the count must match the payload exactly, and every record
/// must be sound (known family, state and flags, sequence values only with
/// `TCP_F_SEQ` and then consistent with the counters they derive from).
pub fn parse_tcp(p: &[u8]) -> Result<Vec<TcpStream>, String> {
    if p.len() < TCP_TABLE_SIZE {
        return Err(format!("payload of {} bytes is shorter than the {TCP_TABLE_SIZE}-byte struct rrc_tcp_table", p.len()));
    }
    let count = u32_at(p, 0) as usize;
    let record_size = u32_at(p, 4) as usize;
    if record_size != TCP_STREAM_SIZE {
        return Err(format!("record_size {record_size}, struct rrc_tcp_stream is {TCP_STREAM_SIZE} bytes in version 1"));
    }
    let body = p.len() - TCP_TABLE_SIZE;
    if count.checked_mul(TCP_STREAM_SIZE) != Some(body) {
        return Err(format!("count {count} records of {TCP_STREAM_SIZE} bytes, but {body} bytes follow the table header"));
    }
    let mut out: Vec<TcpStream> = Vec::with_capacity(count);
    let mut cookies = HashSet::with_capacity(count);
    for (i, r) in p[TCP_TABLE_SIZE..].chunks_exact(TCP_STREAM_SIZE).enumerate() {
        let family = u16_at(r, 0);
        let state = r[2];
        let flags = u16_at(r, 6);
        let ctx = |m: String| format!("tcp stream #{i}: {m}");
        if family != AF_INET && family != AF_INET6 {
            return Err(ctx(format!("unknown family {family}")));
        }
        let state_name = tcp_state_name(state).ok_or_else(|| ctx(format!("unknown TCP state {state}")))?;
        if flags & !(TCP_F_INFO | TCP_F_SEQ | TCP_F_ACTIVE) != 0 {
            return Err(ctx(format!("unknown flags {flags:#x}")));
        }
        if u32_at(r, 108) != 0 {
            return Err(ctx("reserved field is not zero".into()));
        }
        if family == AF_INET && (r[20..32].iter().any(|&b| b != 0) || r[36..48].iter().any(|&b| b != 0)) {
            return Err(ctx("AF_INET address with bytes beyond the first 4".into()));
        }
        let (rqueue, wqueue) = (u32_at(r, 64), u32_at(r, 68));
        let (bytes_acked, bytes_received) = (u64_at(r, 72), u64_at(r, 80));
        let (wsr, rsr) = (u64_at(r, 88), u64_at(r, 96));
        let seq = flags & TCP_F_SEQ != 0;
        if seq {
            if flags & TCP_F_INFO == 0 {
                return Err(ctx("sequence values without tcp_info".into()));
            }
            let syn = u64::from(flags & TCP_F_ACTIVE != 0);
            if bytes_acked.checked_add(u64::from(wqueue)).and_then(|v| v.checked_sub(syn)) != Some(wsr) {
                return Err(ctx(format!("write_seq_rel {wsr} is not bytes_acked {bytes_acked} + wqueue {wqueue} - {syn}")));
            }
            if bytes_received.checked_sub(u64::from(rqueue)) != Some(rsr) {
                return Err(ctx(format!("read_seq_rel {rsr} is not bytes_received {bytes_received} - rqueue {rqueue}")));
            }
        } else if wsr != 0 || rsr != 0 || flags & TCP_F_ACTIVE != 0 {
            return Err(ctx("sequence values or ACTIVE without the SEQ flag".into()));
        }
        let cookie = u64_at(r, 56);
        if !cookies.insert(cookie) {
            return Err(ctx(format!("socket cookie {cookie:#x} appears twice")));
        }
        out.push(TcpStream {
            family,
            state,
            state_name,
            options: r[3],
            snd_wscale: r[4],
            rcv_wscale: r[5],
            flags,
            local: tcp_addr(family, &r[16..32], u16_at(r, 8)),
            remote: tcp_addr(family, &r[32..48], u16_at(r, 10)),
            snd_mss: u32_at(r, 12),
            inode: u64_at(r, 48),
            cookie,
            rqueue,
            wqueue,
            bytes_acked,
            bytes_received,
            write_seq_rel: seq.then_some(wsr),
            read_seq_rel: seq.then_some(rsr),
            ifindex: u32_at(r, 104),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {

    #[test]
    fn socket_options_are_read_of_this_size_or_a_later_one() {
        assert_eq!(SockOpts::parse(&[]).unwrap(), None, "no data: an image from before options");
        let mut d = vec![0u8; SOCKOPTS_SIZE];
        d[0..4].copy_from_slice(&(SOCKOPTS_SIZE as u32).to_le_bytes());
        d[4..8].copy_from_slice(&1u32.to_le_bytes());
        d[8..12].copy_from_slice(&1i32.to_le_bytes());
        d[72..74].copy_from_slice(b"lo");
        let o = SockOpts::parse(&d).unwrap().unwrap();
        assert_eq!((o.valid, o.nodelay, o.bindtodevice.as_str()), (1, 1, "lo"));
        // a later, larger version: its known prefix
        let mut later = d.clone();
        later.extend([0u8; 16]);
        later[0..4].copy_from_slice(&((SOCKOPTS_SIZE + 16) as u32).to_le_bytes());
        assert_eq!(SockOpts::parse(&later).unwrap().unwrap(), o);
        // truncated, smaller than known, larger than the data: refused by name
        assert!(SockOpts::parse(&d[..4]).unwrap_err().contains("truncated"));
        let mut small = d.clone();
        small[0..4].copy_from_slice(&64u32.to_le_bytes());
        assert!(SockOpts::parse(&small).unwrap_err().contains("this reader knows 96"));
        let mut over = d.clone();
        over[0..4].copy_from_slice(&200u32.to_le_bytes());
        assert!(SockOpts::parse(&over).is_err());
        // a socket filter: its program ends the options; one longer than them is refused
        let mut filtered = d;
        filtered[4..8].copy_from_slice(&(1u32 | SockOpts::FILTER).to_le_bytes());
        filtered[88..90].copy_from_slice(&2u16.to_le_bytes());
        filtered[90] = 1;
        assert!(SockOpts::parse(&filtered).unwrap_err().contains("socket filter of 2 instructions"));
        filtered.extend([0u8; 2 * SOCK_FILTER_SIZE]);
        filtered[0..4].copy_from_slice(&((SOCKOPTS_SIZE + 2 * SOCK_FILTER_SIZE) as u32).to_le_bytes());
        let f = SockOpts::parse(&filtered).unwrap().unwrap();
        assert_eq!((f.filter_len, f.filter_lock), (2, true));
    }

    use super::*;

    #[test]
    fn inotify_watches_are_read_with_their_paths_and_refused_when_cut() {
        let mut d = Vec::new();
        for (wd, path) in [(1i32, "/srv/conf.d\0"), (3, "/etc/app.conf\0")] {
            d.extend(wd.to_le_bytes());
            d.extend(2u32.to_le_bytes());
            d.extend(77u64.to_le_bytes());
            d.extend(0x0080_0001u32.to_le_bytes());
            d.extend((path.len() as u32).to_le_bytes());
            d.extend(path.as_bytes());
            d.resize(d.len().div_ceil(8) * 8, 0);
        }
        let w = parse_inotify(&d, 2).unwrap();
        assert_eq!((w[0].wd, w[0].path.as_str(), w[1].wd, w[1].path.as_str()), (1, "/srv/conf.d", 3, "/etc/app.conf"));
        assert!(parse_inotify(&d, 3).unwrap_err().contains("watch 2 of 3 is cut"));
        assert!(parse_inotify(&d[..30], 1).unwrap_err().contains("a path of 12 bytes"));
    }

    /// Duplicate fd numbers and tids are found in linear time: a payload
    /// may be 256 MiB (~800k records), and comparing each record with every
    /// earlier one took hours at that size (here 150k records: seconds
    /// when quadratic, milliseconds now).
    #[test]
    fn duplicate_checks_are_linear() {
        const N: usize = 150_000;
        let mut fds = vec![0u8; N * FD_SIZE];
        let mut threads = vec![0u8; N * THREAD_SIZE];
        for i in 0..N {
            fds[i * FD_SIZE..][..4].copy_from_slice(&(i as i32).to_le_bytes());
            fds[i * FD_SIZE + 4..][..4].copy_from_slice(&1u32.to_le_bytes()); // REG
            threads[i * THREAD_SIZE..][..4].copy_from_slice(&(i as u32 + 1).to_le_bytes());
        }
        let t = std::time::Instant::now();
        assert_eq!(parse_fds(&fds).expect("fds parse").len(), N);
        assert_eq!(parse_threads(&threads).expect("threads parse").len(), N);
        assert!(t.elapsed() < std::time::Duration::from_secs(3), "took {:?}", t.elapsed());
        // and duplicates are still refused
        fds[FD_SIZE..][..4].copy_from_slice(&0i32.to_le_bytes());
        assert!(parse_fds(&fds).unwrap_err().contains("fd number appears twice"));
        threads[THREAD_SIZE..][..4].copy_from_slice(&1u32.to_le_bytes());
        assert!(parse_threads(&threads).unwrap_err().contains("tid 1 appears twice"));
    }

    #[test]
    fn process_attributes_are_read_of_this_size_or_a_later_one() {
        let mut p = vec![0u8; PROCATTR_SIZE];
        p[0..4].copy_from_slice(&(PROCATTR_SIZE as u32).to_le_bytes());
        p[4..8].copy_from_slice(&(PA_OOM_SCORE_ADJ | PA_ITIMERS).to_le_bytes());
        p[8..12].copy_from_slice(&(-500i32).to_le_bytes());
        p[20..24].copy_from_slice(&1u32.to_le_bytes());
        p[56..64].copy_from_slice(&3i64.to_le_bytes()); // ITIMER_REAL's value_sec
        let a = parse_procattr(&p).unwrap();
        assert_eq!((a.oom_score_adj, a.thp_disable, a.no_new_privs), (Some(-500), true, false));
        assert_eq!(a.itimers.unwrap()[0].value_sec, 3);
        let mut later = p.clone();
        later.extend([0u8; 8]);
        later[0..4].copy_from_slice(&((PROCATTR_SIZE + 8) as u32).to_le_bytes());
        assert_eq!(parse_procattr(&later).unwrap(), a);
        assert!(parse_procattr(&p[..4]).unwrap_err().contains("truncated"));
        let mut small = p.clone();
        small[0..4].copy_from_slice(&40u32.to_le_bytes());
        assert!(parse_procattr(&small).unwrap_err().contains("this reader knows 136"));
        // the UTS names, in an image that has them
        let mut uts = p.clone();
        uts.resize(PROCATTR_UTS_SIZE, 0);
        uts[0..4].copy_from_slice(&(PROCATTR_UTS_SIZE as u32).to_le_bytes());
        uts[4..8].copy_from_slice(&(PA_OOM_SCORE_ADJ | PA_ITIMERS | PA_UTS).to_le_bytes());
        uts[PROCATTR_SIZE..PROCATTR_SIZE + 4].copy_from_slice(b"web1");
        uts[PROCATTR_SIZE + 65..PROCATTR_SIZE + 69].copy_from_slice(b"corp");
        let u = parse_procattr(&uts).unwrap();
        assert_eq!((u.nodename.as_deref(), u.domainname.as_deref()), (Some("web1"), Some("corp")));
        assert_eq!(a.nodename, None, "an image of before the names has none");
        p[12..16].copy_from_slice(&2u32.to_le_bytes());
        assert!(parse_procattr(&p).unwrap_err().contains("no_new_privs is 2"));
    }

    #[test]
    fn a_file_record_carries_its_locks() {
        let lock = |kind: u32, ty: u32, start: i64, len: i64| {
            let mut l = vec![0u8; FILE_LOCK_SIZE];
            l[0..4].copy_from_slice(&kind.to_le_bytes());
            l[4..8].copy_from_slice(&ty.to_le_bytes());
            l[8..16].copy_from_slice(&start.to_le_bytes());
            l[16..24].copy_from_slice(&len.to_le_bytes());
            l
        };
        let data = [lock(2, 1, 0, 100), lock(3, 1, 100, 50), lock(1, 0, 0, 0)].concat();
        let locks = parse_locks(&data).unwrap();
        assert_eq!(locks[0], FileLock { kind: "posix", write: true, start: 0, len: 100 });
        assert_eq!((locks[1].kind, locks[2].kind, locks[2].write), ("ofd", "flock", false));
        assert!(parse_locks(&data[..30]).unwrap_err().contains("not a whole number"));
        assert_eq!(parse_locks(&lock(4, 1, 0, 0)).unwrap()[0].kind, "lease");
        assert!(parse_locks(&lock(5, 0, 0, 0)).unwrap_err().contains("unknown kind 5"));
        assert!(parse_locks(&lock(2, 2, 0, 0)).unwrap_err().contains("type 2"));
        assert!(parse_locks(&lock(2, 0, -1, 0)).unwrap_err().contains("at -1"));
        assert!(parse_locks(&lock(1, 0, 0, 0).repeat(LOCKS_PER_FD + 1)).unwrap_err().contains("at most 64"));
    }

    #[test]
    fn credentials_are_read_at_their_offsets_and_checked() {
        let mut p = vec![0u8; CREDS_SIZE];
        let put32 = |p: &mut Vec<u8>, o: usize, v: u32| p[o..o + 4].copy_from_slice(&v.to_le_bytes());
        for (i, v) in [2001, 2002, 2003, 2002, 1001, 1002, 1003, 1002].into_iter().enumerate() {
            put32(&mut p, 4 * i, v);
        }
        let caps = [0x400u64, 0x422, 0x402, 0x1fffeffffff, 0x400]; // inh prm eff bnd amb
        for (i, v) in caps.into_iter().enumerate() {
            p[32 + 8 * i..40 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        put32(&mut p, 72, 0x10);
        put32(&mut p, 80, 3);
        for (i, g) in [3, 7, 11].into_iter().enumerate() {
            put32(&mut p, 88 + 4 * i, g);
        }
        let c = parse_creds(&p).unwrap();
        assert_eq!((c.uids, c.gids, c.groups.clone()), ([2001, 2002, 2003, 2002], [1001, 1002, 1003, 1002], vec![3, 7, 11]));
        assert_eq!((c.cap_inheritable, c.cap_permitted, c.cap_effective, c.cap_ambient, c.securebits, c.dumpable), (0x400, 0x422, 0x402, 0x400, 0x10, false));
        assert!(parse_creds(&p[..CREDS_SIZE - 8]).unwrap_err().contains("struct rrc_creds is 344"));
        let mut bad = p.clone();
        put32(&mut bad, 76, 2);
        assert!(parse_creds(&bad).unwrap_err().contains("dumpable is 2"));
        let mut bad = p.clone();
        put32(&mut bad, 80, 65);
        assert!(parse_creds(&bad).unwrap_err().contains("65 supplementary groups"));
        let mut bad = p.clone();
        bad[48..56].copy_from_slice(&0x1000u64.to_le_bytes()); // effective outside permitted
        assert!(parse_creds(&bad).unwrap_err().contains("not within the permitted"));
    }

    /// A record of kind 13 names the fd whose open file description it
    /// shares; it must be in the table and be an object of its own.
    #[test]
    fn a_duplicate_names_an_fd_made_on_its_own() {
        let rec = |fd: i32, kind: u32, of: i32| {
            let mut r = vec![0u8; FD_SIZE];
            r[..4].copy_from_slice(&fd.to_le_bytes());
            r[4..8].copy_from_slice(&kind.to_le_bytes());
            r[40..44].copy_from_slice(&of.to_le_bytes());
            r
        };
        let table = [rec(3, 5, 0), rec(4, 13, 3)].concat();
        let fds = parse_fds(&table).unwrap();
        assert_eq!((fds[1].kind, &fds[1].detail), (FdKind::Dup, &FdDetail::Dup { of: 3 }));
        assert!(parse_fds(&[rec(3, 5, 0), rec(4, 13, 7)].concat()).unwrap_err().contains("which the table does not have"));
        assert!(parse_fds(&[rec(3, 5, 0), rec(4, 13, 3), rec(5, 13, 4)].concat()).unwrap_err().contains("which is dup"));
        assert!(parse_fds(&[rec(3, 101, 0), rec(4, 13, 3)].concat()).unwrap_err().contains("which is lib_internal"));
    }

    #[test]
    fn signal_driven_io_ends_the_data() {
        // fd, kind, the kind's data, and a struct rrc_fown after it (owner type, owner, signal)
        let rec = |fd: i32, kind: u32, data: &[u8], fown: Option<(u32, i32, u32)>| {
            let mut r = vec![0u8; FD_SIZE];
            r[..4].copy_from_slice(&fd.to_le_bytes());
            r[4..8].copy_from_slice(&kind.to_le_bytes());
            r[44] = u8::from(kind == 4 && !data.is_empty()); // a pipe's has_data
            let mut d = data.to_vec();
            if let Some((t, o, s)) = fown {
                r[8..12].copy_from_slice(&(FD_F_FOWN | 1).to_le_bytes());
                for v in [t, o as u32, s, 0] {
                    d.extend_from_slice(&v.to_le_bytes());
                }
            }
            r[316..320].copy_from_slice(&(d.len() as u32).to_le_bytes());
            r.extend_from_slice(&d);
            r.resize(r.len().next_multiple_of(8), 0);
            r
        };
        let lock = [2u32.to_le_bytes(), 1u32.to_le_bytes()].concat().into_iter().chain([0u8; 16]).collect::<Vec<u8>>();
        let table = [rec(3, 1, &lock, Some((0, 7, 35))), rec(4, 4, b"abc", Some((2, 1, 0))), rec(5, 4, b"", None)];
        let fds = parse_fds(&table.concat()).unwrap();
        assert_eq!(fds[0].fown, Some(Fown { owner_type: "tid", owner: 7, signal: 35 }));
        assert_eq!(fds[0].detail, FdDetail::Locks { locks: vec![FileLock { kind: "posix", write: true, start: 0, len: 0 }] });
        assert_eq!((fds[1].fown.unwrap().owner_type, fds[1].data.as_slice()), ("pgrp", &b"abc"[..]));
        assert_eq!(fds[2].fown, None);
        let err = |r: Vec<u8>| parse_fds(&r).unwrap_err();
        assert!(err(rec(3, 4, b"", Some((3, 1, 0)))).contains("unknown type 3"));
        assert!(err(rec(3, 4, b"", Some((1, 1, 65)))).contains("signal 65"));
        let mut short = rec(3, 4, b"", None);
        short[8..12].copy_from_slice(&FD_F_FOWN.to_le_bytes());
        assert!(err(short).contains("in 0 bytes of data"));
        let mut dup = [rec(3, 5, b"", None), rec(4, 13, b"", Some((1, 1, 0)))].concat();
        dup[FD_SIZE + 40..FD_SIZE + 44].copy_from_slice(&3i32.to_le_bytes());
        assert!(err(dup).contains("of a dup record"));
    }
}
