//! Encoding and decoding of control messages, byte for byte as control.h.

use serde::Serialize;

pub const MAGIC: u32 = 0x4343_5252; // "RRCC"
pub const VERSION: u16 = 2;
pub const HEADER_SIZE: usize = 24;
pub const MAX_PAYLOAD: u32 = 65536;
pub const DEFAULT_PATH: &str = "/run/rrc-container/control.sock";
/// rrc_ctl_dump.flags: parent_id must equal the library's last_image_id.
pub const DUMP_F_INCREMENTAL: u32 = 1 << 0;
/// rrc_ctl_dump.flags: snapshot by copying the written pages (before and
/// during the pause) instead of fork().
pub const DUMP_F_COPY: u32 = 1 << 1;
/// rrc_ctl_dump.flags: capture the TCP stream table (the image's TCP
/// section), which the replication gate and the failover need.
pub const DUMP_F_TCP_TABLE: u32 = 1 << 2;
/// rrc_ctl_dump_paused.snapshot: `RRC_SNAPSHOT_FORK`, `RRC_SNAPSHOT_COPY`.
pub const SNAPSHOT_FORK: u32 = 0;
pub const SNAPSHOT_COPY: u32 = 1;

pub const PONG_SIZE: usize = 32;
pub const DUMP_SIZE: usize = 40;
pub const DUMP_PAUSED_SIZE: usize = 96;
pub const DUMP_DONE_SIZE: usize = 24;
pub const ERROR_MIN_SIZE: usize = 8;
pub const HOLD_SIZE: usize = 8;
pub const HELD_SIZE: usize = 32;
pub const RESUMED_SIZE: usize = 16;
/// `RRC_HOLD_MAX_MS`: the longest a HOLD keeps the threads parked.
pub const HOLD_MAX_MS: u32 = 10_000;

/// `enum rrc_ctl_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MsgType {
    Ping = 1,
    Pong = 2,
    Dump = 3,
    DumpPaused = 4,
    DumpDone = 5,
    Error = 6,
    Hold = 7,
    Held = 8,
    Resume = 9,
    Resumed = 10,
    ReplayStatus = 11,
    ReplayState = 12,
    Record = 13,
    Recording = 14,
}

impl MsgType {
    pub fn from_raw(t: u16) -> Option<MsgType> {
        Some(match t {
            1 => MsgType::Ping,
            2 => MsgType::Pong,
            3 => MsgType::Dump,
            4 => MsgType::DumpPaused,
            5 => MsgType::DumpDone,
            6 => MsgType::Error,
            7 => MsgType::Hold,
            8 => MsgType::Held,
            9 => MsgType::Resume,
            10 => MsgType::Resumed,
            11 => MsgType::ReplayStatus,
            12 => MsgType::ReplayState,
            13 => MsgType::Record,
            14 => MsgType::Recording,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            MsgType::Ping => "PING",
            MsgType::Pong => "PONG",
            MsgType::Dump => "DUMP",
            MsgType::DumpPaused => "DUMP_PAUSED",
            MsgType::DumpDone => "DUMP_DONE",
            MsgType::Error => "ERROR",
            MsgType::Hold => "HOLD",
            MsgType::Held => "HELD",
            MsgType::Resume => "RESUME",
            MsgType::Resumed => "RESUMED",
            MsgType::ReplayStatus => "REPLAY_STATUS",
            MsgType::ReplayState => "REPLAY_STATE",
            MsgType::Record => "RECORD",
            MsgType::Recording => "RECORDING",
        }
    }
}

/// `struct rrc_ctl_pong`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Pong {
    pub pid: u32,
    pub nr_threads: u32,
    pub restored: u32,
    pub checkpoints: u32,
    #[serde(serialize_with = "ser_id")]
    pub last_image_id: [u8; 16],
}

/// `struct rrc_ctl_dump`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DumpRequest {
    pub flags: u32,
    pub image_id: [u8; 16],
    pub parent_id: [u8; 16],
}

/// `struct rrc_ctl_dump_paused`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DumpPaused {
    pub pause_ns: u64,
    pub quiesce_ns: u64,
    pub scan_ns: u64,
    pub capture_ns: u64,
    pub fork_ns: u64,
    pub threads: u32,
    pub untracked_vmas: u32,
    pub written_pages: u64,
    /// Snapshot by copy ([`DUMP_F_COPY`]); zero for a fork snapshot: pages
    /// copied in the pause, and the time it took.
    pub copy_ns: u64,
    pub copied_pages: u64,
    /// Copy passes before the pause (the process was running).
    pub precopy_ns: u64,
    pub precopy_pages: u64,
    pub precopy_passes: u32,
    /// [`SNAPSHOT_FORK`] or [`SNAPSHOT_COPY`].
    pub snapshot: u32,
}

/// `struct rrc_ctl_dump_done`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DumpDone {
    pub pages: u64,
    pub bytes: u64,
    pub write_ns: u64,
}

/// `struct rrc_ctl_hold`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldRequest {
    /// 1..=[`HOLD_MAX_MS`]; 0 = [`HOLD_MAX_MS`].
    pub timeout_ms: u32,
}

/// `struct rrc_ctl_held`: every application thread is parked and the data
/// directory's journal was emptied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Held {
    pub quiesce_ns: u64,
    pub discarded_ops: u64,
    pub discarded_bytes: u64,
    pub threads: u32,
    pub timeout_ms: u32,
}

/// `struct rrc_ctl_resumed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Resumed {
    /// First park signal to the release: the pause the application saw.
    pub held_ns: u64,
    pub threads: u32,
}

/// `struct rrc_ctl_replay`'s size; the divergence report follows it.
pub const REPLAY_STATE_SIZE: usize = 144;

/// `rrc_ctl_replay.state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplayPhase {
    /// The process replays nothing.
    None,
    Running,
    /// Every thread went live together.
    Live,
    /// Stopped for good; the report says where and why.
    Diverged,
}

/// `struct rrc_ctl_replay` + the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReplayState {
    pub phase: ReplayPhase,
    pub threads: u32,
    pub events_total: u64,
    pub events_done: u64,
    /// Events after the log's consistent part (a crash's tail).
    pub events_dropped: u64,
    pub outputs: u64,
    pub output_bytes: u64,
    pub load_ns: u64,
    pub replay_ns: u64,
    /// Bytes/counts reads took in the log that pipes/eventfds did not hold at go-live.
    pub debts_left: u64,
    /// System calls that returned in their recorded order (RRC §4.7).
    pub returns_ordered: u64,
    /// Time returns waited to keep their recorded gaps.
    pub paced_ns: u64,
    /// A failover's replay (`--replay-connections`): the client
    /// connections it read or wrote, the bytes taken off and sent on them,
    /// and the bytes that were not there, differed or could not be sent.
    pub connections: u64,
    pub conn_read_bytes: u64,
    pub conn_sent_bytes: u64,
    pub conn_faults: u64,
    /// Replayed output bytes their clients had already (the gate had
    /// released them): not sent again.
    pub conn_skipped_bytes: u64,
    /// Connections the replay left short of what their client was sent,
    /// and connections reset at go-live (out of step, or behind).
    pub conn_behind: u64,
    pub conn_reset: u64,
    pub report: String,
}

/// `enum rrc_ctl_error_code`, with unknown codes kept as numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorCode(pub u32);

impl ErrorCode {
    pub const PROTOCOL: ErrorCode = ErrorCode(1);
    pub const BAD_PARENT: ErrorCode = ErrorCode(2);
    pub const CHILDREN: ErrorCode = ErrorCode(3);
    pub const SHARED_WRITE: ErrorCode = ErrorCode(4);
    pub const IO_URING: ErrorCode = ErrorCode(5);
    pub const UNSUPPORTED_FD: ErrorCode = ErrorCode(6);
    pub const QUIESCE: ErrorCode = ErrorCode(7);
    pub const SNAPSHOT: ErrorCode = ErrorCode(8);
    pub const UNSUPPORTED_MAPPING: ErrorCode = ErrorCode(9);
    pub const TIMERS: ErrorCode = ErrorCode(10);
    pub const PENDING_SIGNAL: ErrorCode = ErrorCode(11);
    pub const TCP_TABLE: ErrorCode = ErrorCode(12);
    pub const FILE_JOURNAL: ErrorCode = ErrorCode(13);
    pub const HELD: ErrorCode = ErrorCode(14);
    pub const HOLD_EXPIRED: ErrorCode = ErrorCode(15);
    pub const NOT_HELD: ErrorCode = ErrorCode(16);
    pub const REPLAYING: ErrorCode = ErrorCode(17);
    pub const NO_RECORDING: ErrorCode = ErrorCode(18);
    pub const PROCESS_STATE: ErrorCode = ErrorCode(19);

    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            1 => "PROTOCOL",
            2 => "BAD_PARENT",
            3 => "CHILDREN",
            4 => "SHARED_WRITE",
            5 => "IO_URING",
            6 => "UNSUPPORTED_FD",
            7 => "QUIESCE",
            8 => "SNAPSHOT",
            9 => "UNSUPPORTED_MAPPING",
            10 => "TIMERS",
            11 => "PENDING_SIGNAL",
            12 => "TCP_TABLE",
            13 => "FILE_JOURNAL",
            14 => "HELD",
            15 => "HOLD_EXPIRED",
            16 => "NOT_HELD",
            17 => "REPLAYING",
            18 => "NO_RECORDING",
            19 => "PROCESS_STATE",
            _ => return None,
        })
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "code {}", self.0),
        }
    }
}

/// `struct rrc_ctl_error` + message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorReply {
    pub code: ErrorCode,
    pub sys_errno: i32,
    /// The library's message, verbatim (invalid UTF-8 replaced).
    pub message: String,
}

impl std::fmt::Display for ErrorReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)?;
        if self.sys_errno != 0 {
            write!(f, " ({})", std::io::Error::from_raw_os_error(self.sys_errno))?;
        }
        Ok(())
    }
}

/// A decoded message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Ping,
    Pong(Pong),
    Dump(DumpRequest),
    DumpPaused(DumpPaused),
    DumpDone(DumpDone),
    Error(ErrorReply),
    Hold(HoldRequest),
    Held(Held),
    Resume,
    Resumed(Resumed),
    ReplayStatus,
    ReplayState(ReplayState),
    Record(RecordRequest),
    Recording,
}

/// `struct rrc_ctl_record`: where a process that went live at the end of a
/// failover's replay sends its record log from now on (the sink's fd
/// travels by SCM_RIGHTS): a log session to its new backup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRequest {
    /// The number of the first sealed frame (the frames the agent sent
    /// on the connection before).
    pub first_frame: u64,
    /// rrc-wire frames (a log session) rather than the bare stream.
    pub framed: bool,
    /// The session's key: each frame sealed with it.
    pub key: Option<[u8; 32]>,
}

pub const RECORD_SIZE: usize = 48;
const RECORD_F_FRAMED: u32 = 1;
const RECORD_F_SEALED: u32 = 2;

/// A malformed message (the reason names what is wrong).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DecodeError(pub String);

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}
fn id_at(b: &[u8], o: usize) -> [u8; 16] {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[o..o + 16]);
    a
}

fn ser_id<S: serde::Serializer>(id: &[u8; 16], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&id.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

impl Message {
    pub fn msg_type(&self) -> MsgType {
        match self {
            Message::Ping => MsgType::Ping,
            Message::Pong(_) => MsgType::Pong,
            Message::Dump(_) => MsgType::Dump,
            Message::DumpPaused(_) => MsgType::DumpPaused,
            Message::DumpDone(_) => MsgType::DumpDone,
            Message::Error(_) => MsgType::Error,
            Message::Hold(_) => MsgType::Hold,
            Message::Held(_) => MsgType::Held,
            Message::Resume => MsgType::Resume,
            Message::Resumed(_) => MsgType::Resumed,
            Message::ReplayStatus => MsgType::ReplayStatus,
            Message::ReplayState(_) => MsgType::ReplayState,
            Message::Record(_) => MsgType::Record,
            Message::Recording => MsgType::Recording,
        }
    }

    fn payload(&self) -> Vec<u8> {
        let mut p = Vec::new();
        match self {
            Message::Ping => {}
            Message::Pong(m) => {
                for v in [m.pid, m.nr_threads, m.restored, m.checkpoints] {
                    p.extend_from_slice(&v.to_le_bytes());
                }
                p.extend_from_slice(&m.last_image_id);
            }
            Message::Dump(m) => {
                p.extend_from_slice(&m.flags.to_le_bytes());
                p.extend_from_slice(&0u32.to_le_bytes());
                p.extend_from_slice(&m.image_id);
                p.extend_from_slice(&m.parent_id);
            }
            Message::DumpPaused(m) => {
                for v in [m.pause_ns, m.quiesce_ns, m.scan_ns, m.capture_ns, m.fork_ns] {
                    p.extend_from_slice(&v.to_le_bytes());
                }
                p.extend_from_slice(&m.threads.to_le_bytes());
                p.extend_from_slice(&m.untracked_vmas.to_le_bytes());
                p.extend_from_slice(&m.written_pages.to_le_bytes());
                for v in [m.copy_ns, m.copied_pages, m.precopy_ns, m.precopy_pages] {
                    p.extend_from_slice(&v.to_le_bytes());
                }
                p.extend_from_slice(&m.precopy_passes.to_le_bytes());
                p.extend_from_slice(&m.snapshot.to_le_bytes());
            }
            Message::DumpDone(m) => {
                for v in [m.pages, m.bytes, m.write_ns] {
                    p.extend_from_slice(&v.to_le_bytes());
                }
            }
            Message::Error(m) => {
                p.extend_from_slice(&m.code.0.to_le_bytes());
                p.extend_from_slice(&m.sys_errno.to_le_bytes());
                p.extend_from_slice(m.message.as_bytes());
            }
            Message::Hold(m) => {
                p.extend_from_slice(&m.timeout_ms.to_le_bytes());
                p.extend_from_slice(&0u32.to_le_bytes());
            }
            Message::Held(m) => {
                for v in [m.quiesce_ns, m.discarded_ops, m.discarded_bytes] {
                    p.extend_from_slice(&v.to_le_bytes());
                }
                p.extend_from_slice(&m.threads.to_le_bytes());
                p.extend_from_slice(&m.timeout_ms.to_le_bytes());
            }
            Message::Resume => {}
            Message::Resumed(m) => {
                p.extend_from_slice(&m.held_ns.to_le_bytes());
                p.extend_from_slice(&m.threads.to_le_bytes());
                p.extend_from_slice(&0u32.to_le_bytes());
            }
            Message::ReplayStatus => {}
            Message::Recording => {}
            Message::Record(m) => {
                let flags = if m.framed || m.key.is_some() { RECORD_F_FRAMED } else { 0 } | if m.key.is_some() { RECORD_F_SEALED } else { 0 };
                p.extend_from_slice(&m.first_frame.to_le_bytes());
                p.extend_from_slice(&flags.to_le_bytes());
                p.extend_from_slice(&0u32.to_le_bytes());
                p.extend_from_slice(&m.key.unwrap_or([0; 32]));
            }
            Message::ReplayState(m) => {
                let phase: u32 = match m.phase {
                    ReplayPhase::None => 0,
                    ReplayPhase::Running => 1,
                    ReplayPhase::Live => 2,
                    ReplayPhase::Diverged => 3,
                };
                p.extend_from_slice(&phase.to_le_bytes());
                p.extend_from_slice(&m.threads.to_le_bytes());
                for v in [
                    m.events_total,
                    m.events_done,
                    m.events_dropped,
                    m.outputs,
                    m.output_bytes,
                    m.load_ns,
                    m.replay_ns,
                    m.debts_left,
                    m.returns_ordered,
                    m.paced_ns,
                    m.connections,
                    m.conn_read_bytes,
                    m.conn_sent_bytes,
                    m.conn_faults,
                    m.conn_skipped_bytes,
                    m.conn_behind,
                    m.conn_reset,
                ] {
                    p.extend_from_slice(&v.to_le_bytes());
                }
                p.extend_from_slice(m.report.as_bytes());
            }
        }
        p
    }

    /// The complete frame: header (both CRCs) + payload.
    pub fn encode(&self) -> Vec<u8> {
        let payload = self.payload();
        let mut b = Vec::with_capacity(HEADER_SIZE + payload.len());
        b.extend_from_slice(&MAGIC.to_le_bytes());
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&(self.msg_type() as u16).to_le_bytes());
        b.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        b.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
        let hcrc = crc32c::crc32c(&b[..16]);
        b.extend_from_slice(&hcrc.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&payload);
        b
    }
}

/// A checked frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub msg_type: MsgType,
    pub length: u32,
    pub payload_crc: u32,
}

/// Checks magic, version, header CRC, type, and payload bound.
pub fn decode_header(b: &[u8; HEADER_SIZE]) -> Result<Header, DecodeError> {
    let magic = u32_at(b, 0);
    if magic != MAGIC {
        return Err(DecodeError(format!("bad magic {magic:#010x} (expected {MAGIC:#010x}): not an rrc control message")));
    }
    let version = u16_at(b, 4);
    if version != VERSION {
        return Err(DecodeError(format!("protocol version {version}, this rrc speaks version {VERSION}")));
    }
    let stored = u32_at(b, 16);
    let computed = crc32c::crc32c(&b[..16]);
    if stored != computed {
        return Err(DecodeError(format!("header CRC mismatch (stored {stored:#010x}, computed {computed:#010x})")));
    }
    let t = u16_at(b, 6);
    let msg_type = MsgType::from_raw(t).ok_or_else(|| DecodeError(format!("unknown message type {t}")))?;
    let length = u32_at(b, 8);
    if length > MAX_PAYLOAD {
        return Err(DecodeError(format!("{} payload of {length} bytes exceeds {MAX_PAYLOAD}", msg_type.name())));
    }
    if u32_at(b, 20) != 0 {
        return Err(DecodeError("reserved header field is not zero".into()));
    }
    Ok(Header { msg_type, length, payload_crc: u32_at(b, 12) })
}

/// Checks the payload CRC and decodes the payload of a checked header.
pub fn decode_payload(h: &Header, p: &[u8]) -> Result<Message, DecodeError> {
    let computed = crc32c::crc32c(p);
    if computed != h.payload_crc {
        return Err(DecodeError(format!(
            "{} payload CRC mismatch (stored {:#010x}, computed {computed:#010x})",
            h.msg_type.name(),
            h.payload_crc
        )));
    }
    let need = |n: usize| -> Result<(), DecodeError> {
        if p.len() != n {
            Err(DecodeError(format!("{} payload is {} bytes, expected {n}", h.msg_type.name(), p.len())))
        } else {
            Ok(())
        }
    };
    Ok(match h.msg_type {
        MsgType::Ping => {
            need(0)?;
            Message::Ping
        }
        MsgType::Pong => {
            need(PONG_SIZE)?;
            Message::Pong(Pong { pid: u32_at(p, 0), nr_threads: u32_at(p, 4), restored: u32_at(p, 8), checkpoints: u32_at(p, 12), last_image_id: id_at(p, 16) })
        }
        MsgType::Dump => {
            need(DUMP_SIZE)?;
            Message::Dump(DumpRequest { flags: u32_at(p, 0), image_id: id_at(p, 8), parent_id: id_at(p, 24) })
        }
        MsgType::DumpPaused => {
            need(DUMP_PAUSED_SIZE)?;
            Message::DumpPaused(DumpPaused {
                pause_ns: u64_at(p, 0),
                quiesce_ns: u64_at(p, 8),
                scan_ns: u64_at(p, 16),
                capture_ns: u64_at(p, 24),
                fork_ns: u64_at(p, 32),
                threads: u32_at(p, 40),
                untracked_vmas: u32_at(p, 44),
                written_pages: u64_at(p, 48),
                copy_ns: u64_at(p, 56),
                copied_pages: u64_at(p, 64),
                precopy_ns: u64_at(p, 72),
                precopy_pages: u64_at(p, 80),
                precopy_passes: u32_at(p, 88),
                snapshot: u32_at(p, 92),
            })
        }
        MsgType::DumpDone => {
            need(DUMP_DONE_SIZE)?;
            Message::DumpDone(DumpDone { pages: u64_at(p, 0), bytes: u64_at(p, 8), write_ns: u64_at(p, 16) })
        }
        MsgType::Error => {
            if p.len() < ERROR_MIN_SIZE {
                return Err(DecodeError(format!("ERROR payload is {} bytes, at least {ERROR_MIN_SIZE} expected", p.len())));
            }
            Message::Error(ErrorReply {
                code: ErrorCode(u32_at(p, 0)),
                sys_errno: u32_at(p, 4) as i32,
                message: String::from_utf8_lossy(&p[8..]).into_owned(),
            })
        }
        MsgType::Hold => {
            need(HOLD_SIZE)?;
            if u32_at(p, 4) != 0 {
                return Err(DecodeError("HOLD: reserved field is not zero".into()));
            }
            Message::Hold(HoldRequest { timeout_ms: u32_at(p, 0) })
        }
        MsgType::Held => {
            need(HELD_SIZE)?;
            Message::Held(Held {
                quiesce_ns: u64_at(p, 0),
                discarded_ops: u64_at(p, 8),
                discarded_bytes: u64_at(p, 16),
                threads: u32_at(p, 24),
                timeout_ms: u32_at(p, 28),
            })
        }
        MsgType::Resume => {
            need(0)?;
            Message::Resume
        }
        MsgType::Resumed => {
            need(RESUMED_SIZE)?;
            if u32_at(p, 12) != 0 {
                return Err(DecodeError("RESUMED: reserved field is not zero".into()));
            }
            Message::Resumed(Resumed { held_ns: u64_at(p, 0), threads: u32_at(p, 8) })
        }
        MsgType::ReplayStatus => {
            need(0)?;
            Message::ReplayStatus
        }
        MsgType::Recording => {
            need(0)?;
            Message::Recording
        }
        MsgType::Record => {
            need(RECORD_SIZE)?;
            let flags = u32_at(p, 8);
            if flags & !(RECORD_F_FRAMED | RECORD_F_SEALED) != 0 || u32_at(p, 12) != 0 {
                return Err(DecodeError("RECORD: unknown flags or a reserved field not zero".into()));
            }
            let key: [u8; 32] = p[16..48].try_into().expect("32 bytes");
            Message::Record(RecordRequest {
                first_frame: u64_at(p, 0),
                framed: flags & RECORD_F_FRAMED != 0,
                key: (flags & RECORD_F_SEALED != 0).then_some(key),
            })
        }
        MsgType::ReplayState => {
            if p.len() < REPLAY_STATE_SIZE {
                return Err(DecodeError(format!("REPLAY_STATE payload is {} bytes, at least {REPLAY_STATE_SIZE} expected", p.len())));
            }
            let phase = match u32_at(p, 0) {
                0 => ReplayPhase::None,
                1 => ReplayPhase::Running,
                2 => ReplayPhase::Live,
                3 => ReplayPhase::Diverged,
                n => return Err(DecodeError(format!("REPLAY_STATE: unknown state {n}"))),
            };
            Message::ReplayState(ReplayState {
                phase,
                threads: u32_at(p, 4),
                events_total: u64_at(p, 8),
                events_done: u64_at(p, 16),
                events_dropped: u64_at(p, 24),
                outputs: u64_at(p, 32),
                output_bytes: u64_at(p, 40),
                load_ns: u64_at(p, 48),
                replay_ns: u64_at(p, 56),
                debts_left: u64_at(p, 64),
                returns_ordered: u64_at(p, 72),
                paced_ns: u64_at(p, 80),
                connections: u64_at(p, 88),
                conn_read_bytes: u64_at(p, 96),
                conn_sent_bytes: u64_at(p, 104),
                conn_faults: u64_at(p, 112),
                conn_skipped_bytes: u64_at(p, 120),
                conn_behind: u64_at(p, 128),
                conn_reset: u64_at(p, 136),
                report: String::from_utf8_lossy(&p[REPLAY_STATE_SIZE..]).into_owned(),
            })
        }
    })
}

/// Decodes one complete frame (header + exactly its payload).
pub fn decode(frame: &[u8]) -> Result<Message, DecodeError> {
    if frame.len() < HEADER_SIZE {
        return Err(DecodeError(format!("frame of {} bytes is shorter than the header", frame.len())));
    }
    let mut hb = [0u8; HEADER_SIZE];
    hb.copy_from_slice(&frame[..HEADER_SIZE]);
    let h = decode_header(&hb)?;
    let rest = &frame[HEADER_SIZE..];
    if rest.len() != h.length as usize {
        return Err(DecodeError(format!("frame carries {} payload bytes, header says {}", rest.len(), h.length)));
    }
    decode_payload(&h, rest)
}
