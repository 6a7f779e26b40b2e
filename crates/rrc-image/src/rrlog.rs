//! The record log (`runtime/include/rrc/rrlog.h`, docs/log-format.md):
//! decoding, verification, encoding and the summary `rrc inspect` prints.
//!
//! A log is read as a stream ([`LogReader`] over any `Read`): the agent of
//! the next issue receives it from the network, so every size is checked
//! against the format's limits before anything is allocated, and every
//! batch is verified (both CRCs, stream order, each thread's event
//! numbering, each event's shape) before it is handed out.

use std::collections::BTreeMap;
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddrV4};

use serde::Serialize;

use crate::le::*;
use crate::ImageId;

pub const LOG_MAGIC: [u8; 8] = *b"RRCLOG\0\0";
pub const LOG_VERSION: u32 = 6;
pub const LOG_HEADER_SIZE: usize = 48;
/// Header flag: the recording began in a process that had run before (it
/// went live at the end of a failover's replay and was recorded again
/// for its new backup): a thread's first batch may begin at any event,
/// the ones before it were never sent (rrc/rrlog.h RRC_LOG_F_CONTINUES).
pub const LOG_F_CONTINUES: u32 = 1;
pub const BATCH_HEADER_SIZE: usize = 40;
pub const EVENT_HEADER_SIZE: usize = 48;
/// `RRC_LOG_BATCH_MAGIC`
pub const BATCH_MAGIC: u32 = 0x424c_5252;
/// `RRC_LOG_MAX_PAYLOAD`
pub const MAX_PAYLOAD: u32 = 4 << 20;
/// `RRC_LOG_MAX_DATA`
pub const MAX_DATA: u32 = 64 << 10;
/// `RRC_EVF_FILE`: a READ of a regular file, its data the bytes' CRC32C
pub const EVF_FILE: u16 = 1 << 3;
/// `RRC_EVF_FIN`: an OUTPUT that is the program's end of sending on its
/// connection (shutdown SHUT_WR/SHUT_RDWR, close): no bytes, the server's
/// FIN at its offset
pub const EVF_FIN: u16 = 1 << 4;
/// `RRC_RELEASED_FIN`: a released connection's FIN went out too, after
/// its `released` bytes
pub const RELEASED_FIN: u32 = 1;
const CUT_SIZE: usize = 32;
const CUT_THREAD_SIZE: usize = 16;
const OUTPUT_SIZE: usize = 48;
const MARK_SIZE: usize = 16;
const RELEASED_SIZE: usize = 8;
const RELEASED_CONN_SIZE: usize = 24;
/// `RRC_OUT_INET`: an output's connection is an IPv4 TCP one.
pub const OUT_INET: u16 = 2;

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("{source_name}: {what}: {error}")]
    Io { source_name: String, what: &'static str, error: std::io::Error },
    #[error("{source_name}: not an rrc record log (bad magic {found:02x?})")]
    BadMagic { source_name: String, found: [u8; 8] },
    #[error("{source_name}: log header CRC mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    HeaderCrc { source_name: String, stored: u32, computed: u32 },
    #[error("{source_name}: record log format version {found}, this rrc reads version {expected}")]
    VersionMismatch { source_name: String, found: u32, expected: u32 },
    #[error("{source_name}: log header flags {flags:#x}: none are defined in version 1")]
    HeaderFlags { source_name: String, flags: u32 },
    #[error("{source_name}: truncated at offset {offset}: {what}")]
    Truncated { source_name: String, offset: u64, what: String },
    #[error("{source_name}: batch at offset {offset}: bad magic {found:#010x}")]
    BatchMagic { source_name: String, offset: u64, found: u32 },
    #[error("{source_name}: batch at offset {offset}: header CRC mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    BatchHeaderCrc { source_name: String, offset: u64, stored: u32, computed: u32 },
    #[error("{source_name}: batch at offset {offset}: payload of {len} bytes, more than the format's {limit} (refused before reading it)")]
    PayloadTooLarge { source_name: String, offset: u64, len: u32, limit: u32 },
    #[error("{source_name}: batch at offset {offset}: payload CRC mismatch (stored {stored:#010x}, computed {computed:#010x}, {len} bytes)")]
    PayloadCrc { source_name: String, offset: u64, len: u32, stored: u32, computed: u32 },
    #[error("{source_name}: batch at offset {offset}: number {found} where {expected} was due (a batch missing, repeated or out of order)")]
    BatchOrder { source_name: String, offset: u64, expected: u64, found: u64 },
    #[error("{source_name}: batch at offset {offset}: thread {tid} resumes at event {found}, its previous batch ended at {expected}")]
    EventGap { source_name: String, offset: u64, tid: u32, expected: u64, found: u64 },
    #[error("{source_name}: batch at offset {offset}: {why}")]
    BadBatch { source_name: String, offset: u64, why: String },
    #[error("{source_name}: event at offset {offset} (thread {tid}, event {index}): {why}")]
    BadEvent { source_name: String, offset: u64, tid: u32, index: u64, why: String },
}

/// `enum rrc_log_kind`
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u16)]
pub enum EventKind {
    ThreadStart = 1,
    ThreadCreate = 2,
    ThreadExit = 3,
    ThreadJoin = 4,
    MutexLock = 10,
    CondWait = 12,
    CondSignal = 13,
    CondBroadcast = 14,
    RwlockRd = 15,
    RwlockWr = 16,
    RwlockUnlock = 17,
    SpinLock = 18,
    SemWait = 20,
    SemPost = 21,
    Once = 22,
    Barrier = 23,
    Read = 40,
    Accept = 41,
    EpollWait = 42,
    Poll = 43,
    Select = 44,
    Clock = 45,
    Random = 46,
    Sleep = 47,
    Sockname = 48,
    Ioctl = 49,
    Sockopt = 50,
    EpollCtl = 51,
    Fd = 60,
    Output = 70,
    Cut = 90,
    Mark = 91,
    Released = 92,
}

impl EventKind {
    pub const ALL: [EventKind; 33] = [
        EventKind::ThreadStart,
        EventKind::ThreadCreate,
        EventKind::ThreadExit,
        EventKind::ThreadJoin,
        EventKind::MutexLock,
        EventKind::CondWait,
        EventKind::CondSignal,
        EventKind::CondBroadcast,
        EventKind::RwlockRd,
        EventKind::RwlockWr,
        EventKind::RwlockUnlock,
        EventKind::SpinLock,
        EventKind::SemWait,
        EventKind::SemPost,
        EventKind::Once,
        EventKind::Barrier,
        EventKind::Read,
        EventKind::Accept,
        EventKind::EpollWait,
        EventKind::Poll,
        EventKind::Select,
        EventKind::Clock,
        EventKind::Random,
        EventKind::Sleep,
        EventKind::Sockname,
        EventKind::Ioctl,
        EventKind::Sockopt,
        EventKind::EpollCtl,
        EventKind::Fd,
        EventKind::Output,
        EventKind::Cut,
        EventKind::Mark,
        EventKind::Released,
    ];

    pub fn from_raw(v: u16) -> Option<EventKind> {
        Self::ALL.iter().copied().find(|k| *k as u16 == v)
    }

    /// The name `rrc inspect` and docs/log-format.md use.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::ThreadStart => "thread_start",
            EventKind::ThreadCreate => "thread_create",
            EventKind::ThreadExit => "thread_exit",
            EventKind::ThreadJoin => "thread_join",
            EventKind::MutexLock => "mutex_lock",
            EventKind::CondWait => "cond_wait",
            EventKind::CondSignal => "cond_signal",
            EventKind::CondBroadcast => "cond_broadcast",
            EventKind::RwlockRd => "rwlock_rd",
            EventKind::RwlockWr => "rwlock_wr",
            EventKind::RwlockUnlock => "rwlock_unlock",
            EventKind::SpinLock => "spin_lock",
            EventKind::SemWait => "sem_wait",
            EventKind::SemPost => "sem_post",
            EventKind::Once => "once",
            EventKind::Barrier => "barrier",
            EventKind::Read => "read",
            EventKind::Accept => "accept",
            EventKind::EpollWait => "epoll_wait",
            EventKind::Poll => "poll",
            EventKind::Select => "select",
            EventKind::Clock => "clock",
            EventKind::Random => "random",
            EventKind::Sleep => "sleep",
            EventKind::Sockname => "sockname",
            EventKind::Ioctl => "ioctl",
            EventKind::Sockopt => "sockopt",
            EventKind::EpollCtl => "epoll_ctl",
            EventKind::Fd => "fd",
            EventKind::Output => "output",
            EventKind::Cut => "cut",
            EventKind::Mark => "mark",
            EventKind::Released => "released",
        }
    }

    /// System calls carry their place in the process-wide order of
    /// returns and its time (`RRC_EV_IS_CALL`; RRC §4.7).
    pub fn is_call(self) -> bool {
        (EventKind::Read as u16..=EventKind::Output as u16).contains(&(self as u16))
    }

    /// Acquisitions that carry where the previous holder released the
    /// object (`RRC_EV_CARRIES_RELEASE`: a mutex's or spinlock's release
    /// is no event of its own since version 4).
    pub fn carries_release(self) -> bool {
        matches!(self, EventKind::MutexLock | EventKind::SpinLock | EventKind::CondWait)
    }

    /// The acquisitions that take a place in the process-wide order of
    /// returns (their `ord`, in the `ret_ns` field; version 6).
    pub fn ordered_sync(self) -> bool {
        matches!(self, EventKind::MutexLock | EventKind::SpinLock | EventKind::CondWait | EventKind::RwlockRd | EventKind::RwlockWr)
    }

    /// Process-wide records travel in tid-0 batches, everything else in
    /// a thread's own.
    pub fn process_wide(self) -> bool {
        matches!(self, EventKind::Cut | EventKind::Mark | EventKind::Released)
    }
}

/// `struct rrc_log_header`, decoded and checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LogHeader {
    pub log_id: ImageId,
    pub created_ns: u64,
    pub pid: u32,
    /// [`LOG_F_CONTINUES`].
    pub continues: bool,
}

impl LogHeader {
    pub fn encode(&self) -> [u8; LOG_HEADER_SIZE] {
        let mut b = [0u8; LOG_HEADER_SIZE];
        b[0..8].copy_from_slice(&LOG_MAGIC);
        b[8..12].copy_from_slice(&LOG_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(if self.continues { LOG_F_CONTINUES } else { 0 }).to_le_bytes());
        b[16..32].copy_from_slice(&self.log_id.0);
        b[32..40].copy_from_slice(&self.created_ns.to_le_bytes());
        b[40..44].copy_from_slice(&self.pid.to_le_bytes());
        let crc = crc32c::crc32c(&b[..44]);
        b[44..48].copy_from_slice(&crc.to_le_bytes());
        b
    }
}

/// One event: `struct rrc_log_event` and its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    pub flags: u16,
    pub obj: u64,
    pub seq: u64,
    pub result: i64,
    /// a system call's place in the order of returns (1, 2, ...); for an
    /// acquisition that [carries a release](EventKind::carries_release),
    /// `released_at` (see [`Event::released_at`]); 0 for other kinds
    pub ret: u64,
    /// a system call's CLOCK_MONOTONIC at its return; for an
    /// [ordered acquisition](EventKind::ordered_sync), its place in the
    /// process-wide order of returns (`ord`, 0: none); 0 for other kinds
    pub ret_ns: u64,
    pub data: Vec<u8>,
}

impl Event {
    pub fn new(kind: EventKind, obj: u64, seq: u64, result: i64, data: Vec<u8>) -> Event {
        Event { kind, flags: 0, obj, seq, result, ret: 0, ret_ns: 0, data }
    }

    /// The same event, stamped as the `ret`-th return at `ret_ns`.
    pub fn returned(self, ret: u64, ret_ns: u64) -> Event {
        Event { ret, ret_ns, ..self }
    }

    /// The same acquisition, at place `ord` in the order of returns.
    pub fn ordered(self, ord: u64) -> Event {
        Event { ret_ns: ord, ..self }
    }

    /// An [ordered acquisition](EventKind::ordered_sync)'s place in the
    /// order of returns (0: none, or not such an acquisition).
    pub fn ord(&self) -> u64 {
        if self.kind.ordered_sync() {
            self.ret_ns
        } else {
            0
        }
    }

    /// The same acquisition, its previous holder having released the
    /// object after its event `at - 1`.
    pub fn released(self, at: u64) -> Event {
        Event { ret: at, ..self }
    }

    /// Where the previous holder released the object this acquisition
    /// took: its count of events then (`released_at`), if one did.
    pub fn released_at(&self) -> Option<u64> {
        (self.kind.carries_release() && self.ret != 0).then_some(self.ret)
    }

    fn encoded_len(&self) -> usize {
        EVENT_HEADER_SIZE + pad8(self.data.len() as u64) as usize
    }

    fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.kind as u16).to_le_bytes());
        out.extend_from_slice(&self.flags.to_le_bytes());
        out.extend_from_slice(&(self.data.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.obj.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&self.result.to_le_bytes());
        out.extend_from_slice(&self.ret.to_le_bytes());
        out.extend_from_slice(&self.ret_ns.to_le_bytes());
        out.extend_from_slice(&self.data);
        out.resize(out.len() + (pad8(self.data.len() as u64) as usize - self.data.len()), 0);
    }
}

/// A verified batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub tid: u32,
    pub batch_seq: u64,
    pub first_event: u64,
    pub events: Vec<Event>,
}

impl Batch {
    /// The bytes of this batch (header and events), CRCs filled in.
    pub fn encode(&self) -> Vec<u8> {
        let mut payload = Vec::with_capacity(self.events.iter().map(Event::encoded_len).sum());
        for e in &self.events {
            e.encode_into(&mut payload);
        }
        let mut b = Vec::with_capacity(BATCH_HEADER_SIZE + payload.len());
        b.extend_from_slice(&BATCH_MAGIC.to_le_bytes());
        b.extend_from_slice(&self.tid.to_le_bytes());
        b.extend_from_slice(&self.batch_seq.to_le_bytes());
        b.extend_from_slice(&self.first_event.to_le_bytes());
        b.extend_from_slice(&(self.events.len() as u32).to_le_bytes());
        b.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        b.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
        let crc = crc32c::crc32c(&b[..36]);
        b.extend_from_slice(&crc.to_le_bytes());
        b.extend_from_slice(&payload);
        b
    }
}

/// A cut: where each thread's log stood when an image was taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cut {
    pub image_id: ImageId,
    pub sequence: u64,
    /// (tid, the first event after the cut), ascending by tid
    pub threads: Vec<(u32, u64)>,
}

impl Cut {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(CUT_SIZE + CUT_THREAD_SIZE * self.threads.len());
        b.extend_from_slice(&self.image_id.0);
        b.extend_from_slice(&self.sequence.to_le_bytes());
        b.extend_from_slice(&(self.threads.len() as u32).to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        put_thread_positions(&mut b, &self.threads);
        b
    }

    pub fn decode(d: &[u8]) -> Result<Cut, String> {
        if d.len() < CUT_SIZE {
            return Err(format!("a cut of {} bytes, shorter than its {CUT_SIZE}-byte head", d.len()));
        }
        let n = u32_at(d, 24) as usize;
        if d.len() != CUT_SIZE + n * CUT_THREAD_SIZE {
            return Err(format!("a cut of {} threads in {} bytes", n, d.len()));
        }
        if u32_at(d, 28) != 0 {
            return Err("a cut's reserved field is not zero".into());
        }
        let threads = thread_positions(d, CUT_SIZE, n, "cut")?;
        Ok(Cut { image_id: ImageId(id_at(d, 0)), sequence: u64_at(d, 16), threads })
    }
}

/// The connection an output went to (`struct rrc_log_output`'s family,
/// addresses and `made`): what the backup's gate knows it by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct OutputConn {
    pub local: SocketAddrV4,
    pub peer: SocketAddrV4,
}

/// `struct rrc_log_output`
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Output {
    /// Bytes the fd had sent before.
    pub offset: u64,
    pub length: u64,
    pub crc: u32,
    /// `None`: not an IPv4 TCP connection, or not known.
    pub conn: Option<OutputConn>,
    /// The fd-table number of the call that made the fd (0: unknown).
    pub made: u64,
}

impl OutputConn {
    /// The 12 bytes both records give a connection: local and peer
    /// address, then local and peer port (network byte order).
    fn put(&self, b: &mut Vec<u8>) {
        b.extend_from_slice(&self.local.ip().octets());
        b.extend_from_slice(&self.peer.ip().octets());
        b.extend_from_slice(&self.local.port().to_be_bytes());
        b.extend_from_slice(&self.peer.port().to_be_bytes());
    }
}

fn addr_at(d: &[u8], addr: usize, port: usize) -> SocketAddrV4 {
    let a: [u8; 4] = d[addr..addr + 4].try_into().expect("4 bytes");
    SocketAddrV4::new(Ipv4Addr::from(a), u16::from_be_bytes([d[port], d[port + 1]]))
}

impl Output {
    /// Checks its shape: reserved fields zero, a known family.
    pub fn decode(d: &[u8]) -> Result<Output, String> {
        if d.len() != OUTPUT_SIZE {
            return Err(format!("an output record of {} bytes (want {OUTPUT_SIZE})", d.len()));
        }
        if u16_at(d, 22) != 0 || u32_at(d, 36) != 0 {
            return Err("an output record whose reserved fields are not zero".into());
        }
        let conn = match u16_at(d, 20) {
            0 if d[24..36].iter().all(|&b| b == 0) => None,
            0 => return Err("an output with addresses but no family".into()),
            OUT_INET => Some(OutputConn { local: addr_at(d, 24, 32), peer: addr_at(d, 28, 34) }),
            f => return Err(format!("an output to a connection of family {f} (want 0 or {OUT_INET})")),
        };
        Ok(Output { offset: u64_at(d, 0), length: u64_at(d, 8), crc: u32_at(d, 16), conn, made: u64_at(d, 40) })
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(OUTPUT_SIZE);
        b.extend_from_slice(&self.offset.to_le_bytes());
        b.extend_from_slice(&self.length.to_le_bytes());
        b.extend_from_slice(&self.crc.to_le_bytes());
        let (family, c) = match self.conn {
            Some(c) => (OUT_INET, c),
            None => (0, OutputConn { local: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0), peer: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0) }),
        };
        b.extend_from_slice(&family.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        c.put(&mut b);
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&self.made.to_le_bytes());
        b
    }
}

/// A release mark (`struct rrc_log_mark`; RRC §4.5's BBSN): for each
/// listed thread, everything that happened before its events below the
/// position is in the stream before the mark, so its outputs there may
/// be released.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mark {
    pub number: u64,
    /// (tid, events covered), ascending by tid
    pub threads: Vec<(u32, u64)>,
}

impl Mark {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(MARK_SIZE + CUT_THREAD_SIZE * self.threads.len());
        b.extend_from_slice(&self.number.to_le_bytes());
        b.extend_from_slice(&(self.threads.len() as u32).to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        put_thread_positions(&mut b, &self.threads);
        b
    }

    pub fn decode(d: &[u8]) -> Result<Mark, String> {
        if d.len() < MARK_SIZE {
            return Err(format!("a release mark of {} bytes, shorter than its {MARK_SIZE}-byte head", d.len()));
        }
        let n = u32_at(d, 8) as usize;
        if d.len() != MARK_SIZE + n * CUT_THREAD_SIZE || u32_at(d, 12) != 0 {
            return Err(format!("a release mark of {n} threads in {} bytes (or its reserved field not zero)", d.len()));
        }
        let threads = thread_positions(d, MARK_SIZE, n, "release mark")?;
        Ok(Mark { number: u64_at(d, 0), threads })
    }
}

/// What the clients were sent (`struct rrc_log_released`, kind 92): the
/// record a failover's agent appends to the log it hands the replay. For
/// each connection, the stream offset up to which the gate released the
/// server's bytes: the replay reproduces that much and no more, and sends
/// nothing below it again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Released {
    pub conns: Vec<ReleasedConn>,
}

/// One connection of a [`Released`] record (`struct rrc_log_released_conn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ReleasedConn {
    pub conn: OutputConn,
    /// The stream offset the server's bytes were released up to.
    pub released: u64,
    /// The server's FIN, after those bytes, was released too: the replay
    /// reproduces the program's shutdown or close that sent it.
    pub fin: bool,
}

impl Released {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(RELEASED_SIZE + RELEASED_CONN_SIZE * self.conns.len());
        b.extend_from_slice(&(self.conns.len() as u32).to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        for c in &self.conns {
            c.conn.put(&mut b);
            b.extend_from_slice(&(if c.fin { RELEASED_FIN } else { 0 }).to_le_bytes());
            b.extend_from_slice(&c.released.to_le_bytes());
        }
        b
    }

    pub fn decode(d: &[u8]) -> Result<Released, String> {
        if d.len() < RELEASED_SIZE {
            return Err(format!("a released record of {} bytes, shorter than its {RELEASED_SIZE}-byte head", d.len()));
        }
        let n = u32_at(d, 0) as usize;
        if d.len() != RELEASED_SIZE + n * RELEASED_CONN_SIZE || u32_at(d, 4) != 0 {
            return Err(format!("a released record of {n} connections in {} bytes (or its reserved field not zero)", d.len()));
        }
        let mut conns: Vec<ReleasedConn> = Vec::with_capacity(n);
        for k in 0..n {
            let at = RELEASED_SIZE + k * RELEASED_CONN_SIZE;
            let flags = u32_at(d, at + 12);
            if flags & !RELEASED_FIN != 0 {
                return Err(format!("connection {k} of a released record: unknown flags {flags:#x}"));
            }
            let conn = OutputConn { local: addr_at(d, at, at + 8), peer: addr_at(d, at + 4, at + 10) };
            if conns.iter().any(|c| c.conn == conn) {
                return Err(format!("a released record names {} -> {} twice", conn.local, conn.peer));
            }
            conns.push(ReleasedConn { conn, released: u64_at(d, at + 16), fin: flags & RELEASED_FIN != 0 });
        }
        Ok(Released { conns })
    }
}

/// `rrc_log_cut_thread[]` of (tid, position) pairs, appended to `b`.
fn put_thread_positions(b: &mut Vec<u8>, threads: &[(u32, u64)]) {
    for (tid, next) in threads {
        b.extend_from_slice(&tid.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&next.to_le_bytes());
    }
}

/// `rrc_log_cut_thread[n]` at `at`: tids ascending, reserved zero.
fn thread_positions(d: &[u8], at: usize, n: usize, what: &str) -> Result<Vec<(u32, u64)>, String> {
    let mut threads: Vec<(u32, u64)> = Vec::with_capacity(n);
    for i in 0..n {
        let o = at + i * CUT_THREAD_SIZE;
        let tid = u32_at(d, o);
        if u32_at(d, o + 4) != 0 {
            return Err(format!("{what} thread {i}: reserved field not zero"));
        }
        if tid == 0 || threads.last().is_some_and(|(t, _)| *t >= tid) {
            return Err(format!("{what} thread {i}: tid {tid} not above the one before"));
        }
        threads.push((tid, u64_at(d, o + 8)));
    }
    Ok(threads)
}

/// Reads and verifies a log, one batch at a time.
pub struct LogReader<R: Read> {
    r: R,
    source_name: String,
    header: LogHeader,
    offset: u64,
    next_batch: u64,
    next_event: BTreeMap<u32, u64>,
    /// per thread: the last place in the order of returns it took
    last_return: BTreeMap<u32, u64>,
    /// the last release mark's number
    last_mark: u64,
}

impl<R: Read> LogReader<R> {
    /// Reads and checks the log header. `source_name` names the log in
    /// errors (a path, or "the log from <peer>").
    pub fn open(mut r: R, source_name: &str) -> Result<LogReader<R>, LogError> {
        let src = source_name.to_string();
        let mut b = [0u8; LOG_HEADER_SIZE];
        let got = read_full(&mut r, &mut b).map_err(|error| LogError::Io { source_name: src.clone(), what: "reading the log header", error })?;
        if got >= 8 && b[..8] != LOG_MAGIC {
            return Err(LogError::BadMagic { source_name: src, found: b[..8].try_into().expect("8 bytes") });
        }
        if got < LOG_HEADER_SIZE {
            return Err(LogError::Truncated { source_name: src, offset: got as u64, what: format!("the {LOG_HEADER_SIZE}-byte log header") });
        }
        let version = u32_at(&b, 8);
        let (stored, computed) = (u32_at(&b, 44), crc32c::crc32c(&b[..44]));
        if stored != computed {
            // a newer version may have another header: say the version when it is not ours
            if version != LOG_VERSION {
                return Err(LogError::VersionMismatch { source_name: src, found: version, expected: LOG_VERSION });
            }
            return Err(LogError::HeaderCrc { source_name: src, stored, computed });
        }
        if version != LOG_VERSION {
            return Err(LogError::VersionMismatch { source_name: src, found: version, expected: LOG_VERSION });
        }
        let flags = u32_at(&b, 12);
        if flags & !LOG_F_CONTINUES != 0 {
            return Err(LogError::HeaderFlags { source_name: src, flags });
        }
        let header = LogHeader { log_id: ImageId(id_at(&b, 16)), created_ns: u64_at(&b, 32), pid: u32_at(&b, 40), continues: flags & LOG_F_CONTINUES != 0 };
        Ok(LogReader { r, source_name: src, header, offset: LOG_HEADER_SIZE as u64, next_batch: 0, next_event: BTreeMap::new(), last_return: BTreeMap::new(), last_mark: 0 })
    }

    pub fn header(&self) -> &LogHeader {
        &self.header
    }

    /// Bytes read so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Each thread's next event index (what the batches so far held).
    pub fn thread_positions(&self) -> &BTreeMap<u32, u64> {
        &self.next_event
    }

    /// The next batch, verified; `None` at a clean end of the stream.
    pub fn next_batch(&mut self) -> Result<Option<Batch>, LogError> {
        let at = self.offset;
        let name = self.source_name.clone();
        let src = || name.clone();
        let mut h = [0u8; BATCH_HEADER_SIZE];
        let got = read_full(&mut self.r, &mut h).map_err(|error| LogError::Io { source_name: src(), what: "reading a batch header", error })?;
        if got == 0 {
            return Ok(None);
        }
        if got < BATCH_HEADER_SIZE {
            return Err(LogError::Truncated { source_name: src(), offset: at + got as u64, what: format!("a batch header cut after {got} of {BATCH_HEADER_SIZE} bytes") });
        }
        let magic = u32_at(&h, 0);
        if magic != BATCH_MAGIC {
            return Err(LogError::BatchMagic { source_name: src(), offset: at, found: magic });
        }
        let (stored, computed) = (u32_at(&h, 36), crc32c::crc32c(&h[..36]));
        if stored != computed {
            return Err(LogError::BatchHeaderCrc { source_name: src(), offset: at, stored, computed });
        }
        let (tid, batch_seq, first_event) = (u32_at(&h, 4), u64_at(&h, 8), u64_at(&h, 16));
        let (nr_events, payload_len, payload_crc) = (u32_at(&h, 24), u32_at(&h, 28), u32_at(&h, 32));
        if payload_len > MAX_PAYLOAD {
            return Err(LogError::PayloadTooLarge { source_name: src(), offset: at, len: payload_len, limit: MAX_PAYLOAD });
        }
        if payload_len % 8 != 0 || (nr_events as u64) * (EVENT_HEADER_SIZE as u64) > payload_len as u64 {
            return Err(LogError::BadBatch { source_name: src(), offset: at, why: format!("{nr_events} events cannot fill {payload_len} bytes") });
        }
        if batch_seq != self.next_batch {
            return Err(LogError::BatchOrder { source_name: src(), offset: at, expected: self.next_batch, found: batch_seq });
        }
        // a tid the kernel gave to a new thread starts again at 0 (with
        // its THREAD_START, checked below)
        // a log that continues a process: a thread's first batch where its
        // events were first sent
        let expected_first = self.next_event.get(&tid).copied().unwrap_or(if self.header.continues { first_event } else { 0 });
        if first_event != expected_first && first_event != 0 {
            return Err(LogError::EventGap { source_name: src(), offset: at, tid, expected: expected_first, found: first_event });
        }
        let mut payload = vec![0u8; payload_len as usize];
        let got = read_full(&mut self.r, &mut payload).map_err(|error| LogError::Io { source_name: src(), what: "reading a batch", error })?;
        if got < payload.len() {
            return Err(LogError::Truncated {
                source_name: src(),
                offset: at + (BATCH_HEADER_SIZE + got) as u64,
                what: format!("batch {batch_seq} of thread {tid} cut after {got} of {payload_len} bytes"),
            });
        }
        let computed = crc32c::crc32c(&payload);
        if computed != payload_crc {
            return Err(LogError::PayloadCrc { source_name: src(), offset: at, len: payload_len, stored: payload_crc, computed });
        }
        let events = self.decode_events(at, tid, first_event, nr_events, &payload)?;
        if tid != 0 && first_event == 0 && events.first().map(|e| e.kind) != Some(EventKind::ThreadStart) {
            return Err(LogError::EventGap { source_name: src(), offset: at, tid, expected: expected_first, found: first_event });
        }
        // one thread's calls return one after the other: their places in
        // the process-wide order of returns only grow (across the
        // incarnations of a tid too: the order is the process's)
        let mut last = self.last_return.get(&tid).copied().unwrap_or(0);
        for (i, e) in events.iter().enumerate().filter(|(_, e)| e.kind.is_call()) {
            if e.ret <= last {
                return Err(LogError::BadEvent {
                    source_name: src(),
                    offset: at,
                    tid,
                    index: first_event + i as u64,
                    why: format!("{} returned {}th, not after the thread's previous call ({}th)", e.kind.name(), e.ret, last),
                });
            }
            last = e.ret;
        }
        self.last_return.insert(tid, last);
        self.offset = at + (BATCH_HEADER_SIZE + payload.len()) as u64;
        self.next_batch += 1;
        for e in events.iter().filter(|e| e.kind == EventKind::Mark) {
            self.last_mark = Mark::decode(&e.data).expect("verified above").number;
        }
        if tid != 0 {
            self.next_event.insert(tid, first_event + nr_events as u64);
        }
        Ok(Some(Batch { tid, batch_seq, first_event, events }))
    }

    /// A mark follows the one before it and names only events the
    /// stream has delivered (a mark ahead of its events would release an
    /// output whose log is not there).
    fn check_mark(&self, m: &Mark, last: u64) -> Result<(), String> {
        if m.number != last + 1 {
            return Err(format!("release mark {} after mark {last}", m.number));
        }
        for &(tid, next) in &m.threads {
            let have = self.next_event.get(&tid).copied().unwrap_or(0);
            if next > have {
                return Err(format!("release mark {} covers thread {tid}'s events up to {next}, but the log holds {have}", m.number));
            }
        }
        Ok(())
    }

    fn decode_events(&self, at: u64, tid: u32, first: u64, n: u32, p: &[u8]) -> Result<Vec<Event>, LogError> {
        let mut events = Vec::with_capacity(n as usize);
        let mut o = 0usize;
        let mut last_mark = self.last_mark;
        for i in 0..n as u64 {
            let eo = at + (BATCH_HEADER_SIZE + o) as u64;
            let bad = |why: String| LogError::BadEvent { source_name: self.source_name.clone(), offset: eo, tid, index: first + i, why };
            if p.len() - o < EVENT_HEADER_SIZE {
                return Err(bad("the batch ends inside the event's header".into()));
            }
            let e = &p[o..o + EVENT_HEADER_SIZE];
            let (kind_raw, flags, data_len) = (u16_at(e, 0), u16_at(e, 2), u32_at(e, 4));
            let kind = EventKind::from_raw(kind_raw).ok_or_else(|| bad(format!("unknown event kind {kind_raw}")))?;
            if data_len > MAX_DATA {
                return Err(bad(format!("{} with {data_len} bytes of data, more than the format's {MAX_DATA}", kind.name())));
            }
            let padded = pad8(data_len as u64) as usize;
            if p.len() - o - EVENT_HEADER_SIZE < padded {
                return Err(bad(format!("{} with {data_len} bytes of data past the batch's end", kind.name())));
            }
            if kind.process_wide() != (tid == 0) {
                return Err(bad(format!("{} in a batch of {}", kind.name(), if tid == 0 { "process-wide records" } else { "a thread" })));
            }
            let data = p[o + EVENT_HEADER_SIZE..o + EVENT_HEADER_SIZE + data_len as usize].to_vec();
            // padding is zero: a log has one encoding, so that what is
            // verified is exactly what is replayed or forwarded
            if p[o + EVENT_HEADER_SIZE + data_len as usize..o + EVENT_HEADER_SIZE + padded].iter().any(|&x| x != 0) {
                return Err(bad(format!("{} with padding that is not zero", kind.name())));
            }
            match kind {
                EventKind::Cut => {
                    Cut::decode(&data).map_err(bad)?;
                }
                EventKind::Read if flags & EVF_FILE != 0 && data.len() != 4 => {
                    return Err(bad(format!("a read of a regular file with {data_len} bytes of data, not its 4-byte CRC32C")));
                }
                EventKind::Sockname if data.len() > 128 || u64_at(e, 16) > 1 => {
                    return Err(bad(format!("a socket address of {data_len} bytes, seq {} (want at most 128 bytes, seq 0 or 1)", u64_at(e, 16))));
                }
                EventKind::Ioctl if !(data.is_empty() || data.len() == 4) => {
                    return Err(bad(format!("an ioctl's value of {data_len} bytes (want 4, or none when it failed)")));
                }
                EventKind::Sockopt if !(1..=4).contains(&u64_at(e, 16)) || data.len() > 132 => {
                    return Err(bad(format!("a socket call {} with {data_len} bytes of data (want 1..=4, at most 132 bytes)", u64_at(e, 16))));
                }
                EventKind::EpollCtl if data.len() != 16 || data[12..16] != [0; 4] => {
                    return Err(bad(format!("an epoll_ctl record of {data_len} bytes (want 16, reserved zero)")));
                }
                EventKind::Clock if !data.is_empty() => {
                    return Err(bad(format!("a clock reading with {data_len} bytes of data (version 4 keeps the time in seq and result)")));
                }
                EventKind::Output => {
                    let o = Output::decode(&data).map_err(&bad)?;
                    if flags & EVF_FIN != 0 && (o.length != 0 || u64_at(e, 24) != 0) {
                        return Err(bad(format!("a FIN output of {} bytes, result {} (want none, 0)", o.length, u64_at(e, 24) as i64)));
                    }
                }
                EventKind::Released => {
                    Released::decode(&data).map_err(bad)?;
                }
                EventKind::Mark => {
                    let m = Mark::decode(&data).map_err(&bad)?;
                    self.check_mark(&m, last_mark).map_err(bad)?;
                    last_mark = m.number;
                }
                _ => {}
            }
            let (ret, ret_ns) = (u64_at(e, 32), u64_at(e, 40));
            if kind.is_call() && ret == 0 {
                return Err(bad(format!("{}, a system call, without its place in the order of returns", kind.name())));
            }
            if !kind.is_call() && !kind.ordered_sync() && ret_ns != 0 || !kind.is_call() && !kind.carries_release() && ret != 0 {
                return Err(bad(format!("{}, not a system call, with a place in the order of returns", kind.name())));
            }
            // a condition wait that timed out took its mutex again: numbered, and released before
            if kind.carries_release() && kind != EventKind::CondWait && ret != 0 && i64_at(e, 24) != 0 {
                return Err(bad(format!("{} that failed, with where a release came before it", kind.name())));
            }
            events.push(Event { kind, flags, obj: u64_at(e, 8), seq: u64_at(e, 16), result: i64_at(e, 24), ret, ret_ns, data });
            o += EVENT_HEADER_SIZE + padded;
        }
        if o != p.len() {
            return Err(LogError::BadBatch {
                source_name: self.source_name.clone(),
                offset: at,
                why: format!("{} bytes after the batch's {n} events", p.len() - o),
            });
        }
        Ok(events)
    }
}

/// Reads until `buf` is full or the stream ends; returns the bytes read.
fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// What `rrc inspect LOG` prints.
#[derive(Debug, Clone, Serialize)]
pub struct LogSummary {
    pub header: LogHeader,
    pub bytes: u64,
    pub batches: u64,
    pub events: u64,
    /// bytes of event data (what calls returned, outputs' records...)
    pub data_bytes: u64,
    pub by_kind: BTreeMap<&'static str, u64>,
    pub threads: BTreeMap<u32, ThreadSummary>,
    pub cuts: Vec<Cut>,
    /// release marks, and the outputs the log holds (of which to an IPv4
    /// TCP connection it names)
    pub marks: u64,
    pub outputs: u64,
    pub outputs_to_connections: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ThreadSummary {
    pub events: u64,
    pub data_bytes: u64,
    pub by_kind: BTreeMap<&'static str, u64>,
}

impl LogSummary {
    /// Reads and verifies the whole log.
    pub fn read<R: Read>(r: R, source_name: &str) -> Result<LogSummary, LogError> {
        let mut rd = LogReader::open(r, source_name)?;
        let mut s = LogSummary {
            header: *rd.header(),
            bytes: 0,
            batches: 0,
            events: 0,
            data_bytes: 0,
            by_kind: BTreeMap::new(),
            threads: BTreeMap::new(),
            cuts: Vec::new(),
            marks: 0,
            outputs: 0,
            outputs_to_connections: 0,
        };
        while let Some(b) = rd.next_batch()? {
            s.batches += 1;
            for e in &b.events {
                s.events += 1;
                s.data_bytes += e.data.len() as u64;
                *s.by_kind.entry(e.kind.name()).or_default() += 1;
                match e.kind {
                    EventKind::Cut => {
                        s.cuts.push(Cut::decode(&e.data).expect("verified by the reader"));
                        continue;
                    }
                    EventKind::Mark => {
                        s.marks += 1;
                        continue;
                    }
                    EventKind::Released => continue,
                    EventKind::Output => {
                        s.outputs += 1;
                        s.outputs_to_connections += u64::from(Output::decode(&e.data).is_ok_and(|o| o.conn.is_some()));
                    }
                    _ => {}
                }
                let t = s.threads.entry(b.tid).or_default();
                t.events += 1;
                t.data_bytes += e.data.len() as u64;
                *t.by_kind.entry(e.kind.name()).or_default() += 1;
            }
        }
        s.bytes = rd.offset();
        Ok(s)
    }
}

impl std::fmt::Display for LogSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "record log {} (format version {LOG_VERSION}), process {}", self.header.log_id, self.header.pid)?;
        writeln!(f, "  {} bytes, {} batches, {} events, {} bytes of data", self.bytes, self.batches, self.events, self.data_bytes)?;
        let kinds = |m: &BTreeMap<&'static str, u64>| m.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ");
        writeln!(f, "  by kind: {}", kinds(&self.by_kind))?;
        for (tid, t) in &self.threads {
            writeln!(f, "  thread {tid}: {} events, {} bytes of data: {}", t.events, t.data_bytes, kinds(&t.by_kind))?;
        }
        writeln!(
            f,
            "  {} outputs ({} to IPv4 TCP connections), {} release marks",
            self.outputs, self.outputs_to_connections, self.marks
        )?;
        if self.cuts.is_empty() {
            writeln!(f, "  no cuts (no checkpoint was taken while recording)")?;
        }
        for c in &self.cuts {
            let pos = c.threads.iter().map(|(t, n)| format!("{t}@{n}")).collect::<Vec<_>>().join(" ");
            writeln!(f, "  cut for image {} (sequence {}): {pos}", c.image_id, c.sequence)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
