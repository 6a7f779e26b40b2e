//! Frames: the unit of every rrc connection.
//!
//! Version 2 (issue 12) gave the header's former reserved field to flags:
//! bit 0 says a 32-byte MAC follows the payload (an authenticated peer
//! connection, [`crate::auth`]). This module only frames; which frames
//! must carry a MAC, and checking it, is the session's business
//! ([`crate::session`]).

use std::io::{Read, Write};

pub const MAGIC: [u8; 4] = *b"RRCW";
pub const VERSION: u16 = 2;
pub const HEADER_SIZE: usize = 24;
/// The largest payload any frame may carry (checkpoint data is cut into
/// frames of 1 MiB; a data-directory frame is at most this).
pub const MAX_PAYLOAD: u32 = 16 << 20;
/// Flag: a MAC of [`MAC_LEN`] bytes follows the payload.
pub const FLAG_MAC: u32 = 1;
const KNOWN_FLAGS: u32 = FLAG_MAC;
/// The MAC trailer's length (HMAC-SHA256).
pub const MAC_LEN: usize = 32;
/// A payload is read in steps of at most this much, so that memory grows
/// with the bytes that actually arrived, never with what a header claims.
const READ_STEP: usize = 256 << 10;

/// What a frame carries. Numbers are part of the format: never reuse one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum FrameKind {
    /// CLI -> agent, on the agent's Unix socket only: a JSON
    /// [`crate::msg::Request`]. Refused on the peer port.
    Request = 1,
    /// The JSON [`crate::msg::Response`] to a Request; also an agent's
    /// refusal of a peer connection.
    Response = 2,
    /// Primary -> backup, first frame of a replication session: JSON
    /// [`crate::msg::Replicate`].
    Replicate = 3,
    /// Backup -> primary: JSON [`crate::msg::ReplicateReady`] or an error.
    ReplicateReady = 4,
    /// Primary -> backup: JSON [`crate::msg::CheckpointBegin`].
    CheckpointBegin = 10,
    /// Primary -> backup: raw image bytes, in order.
    CheckpointData = 11,
    /// Primary -> backup: JSON [`crate::msg::CheckpointEnd`].
    CheckpointEnd = 12,
    /// Backup -> primary: JSON [`crate::msg::Ack`] (committed or rejected).
    Ack = 13,
    /// Either way: JSON [`crate::msg::Heartbeat`].
    Heartbeat = 14,
    /// Primary -> backup: raw data-directory content (an encoded FILEOPS
    /// payload, image.h) shipped before the service starts.
    DataDirInit = 15,
    /// Primary -> backup: JSON [`crate::msg::Stop`]; the service ends.
    Stop = 16,
    /// Peer handshake, each side's first frame: JSON [`crate::auth::Hello`].
    Hello = 20,
    /// Peer handshake: a side's proof that it holds the key (32 raw bytes).
    Auth = 21,
    /// A recorded process's library -> the backup (issue 14 §2): the
    /// record log's header (rrc/rrlog.h), the first frame of a sealed log.
    /// Written in C by runtime/lib/rr-sink.c.
    LogHeader = 30,
    /// The same: one batch of the log (its rrc_log_batch and events).
    LogBatch = 31,
    /// Primary agent -> backup, first frame of a log session: JSON
    /// [`crate::msg::LogStream`]; the recorded process's library writes
    /// the rest.
    LogStream = 32,
}

impl FrameKind {
    pub fn from_raw(v: u16) -> Option<FrameKind> {
        use FrameKind::*;
        Some(match v {
            1 => Request,
            2 => Response,
            3 => Replicate,
            4 => ReplicateReady,
            10 => CheckpointBegin,
            11 => CheckpointData,
            12 => CheckpointEnd,
            13 => Ack,
            14 => Heartbeat,
            15 => DataDirInit,
            16 => Stop,
            20 => Hello,
            21 => Auth,
            30 => LogHeader,
            31 => LogBatch,
            32 => LogStream,
            _ => return None,
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("connection closed")]
    Closed,
    #[error("connection closed in the middle of a frame (truncated)")]
    Truncated,
    #[error("no frame within the time allowed")]
    TimedOut,
    #[error("i/o: {0}")]
    Io(#[source] std::io::Error),
    #[error("bad frame magic {0:02x?} (not an rrc peer?)")]
    Magic([u8; 4]),
    #[error("frame header checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    HeaderCrc { stored: u32, computed: u32 },
    #[error("wire format version {0}, this rrc speaks {VERSION}")]
    Version(u16),
    #[error("unknown frame kind {0}")]
    Kind(u16),
    #[error("frame payload of {len} bytes exceeds the limit of {limit} here")]
    TooLarge { len: u32, limit: u32 },
    #[error("frame payload checksum mismatch (kind {kind:?}, stored {stored:#010x}, computed {computed:#010x})")]
    PayloadCrc { kind: FrameKind, stored: u32, computed: u32 },
    #[error("unknown frame flags {0:#x}")]
    Flags(u32),
    #[error("a {0:?} frame without a MAC on an authenticated connection (injected or from a peer without the key)")]
    MacMissing(FrameKind),
    #[error("a {0:?} frame with a MAC on a connection that agreed on none")]
    MacUnexpected(FrameKind),
    #[error("the MAC of {kind:?} frame number {seq} does not match: the frame is forged, replayed, reordered or damaged")]
    BadMac { kind: FrameKind, seq: u64 },
    #[error("expected a {expected:?} frame, got {got:?}")]
    Unexpected { expected: FrameKind, got: FrameKind },
    #[error("malformed {kind:?} payload: {source}")]
    Json { kind: FrameKind, source: serde_json::Error },
}

impl From<std::io::Error> for WireError {
    fn from(e: std::io::Error) -> WireError {
        use std::io::ErrorKind::*;
        match e.kind() {
            UnexpectedEof => WireError::Truncated,
            WouldBlock | TimedOut => WireError::TimedOut,
            _ => WireError::Io(e),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub kind: FrameKind,
    pub payload: Vec<u8>,
}

impl Frame {
    pub fn json<T: serde::Serialize>(kind: FrameKind, v: &T) -> Frame {
        // Serializing our own message structs cannot fail (no maps with
        // non-string keys, no failing Serialize impls).
        let payload = serde_json::to_vec(v).unwrap_or_else(|e| format!("{{\"serialize_error\":\"{e}\"}}").into_bytes());
        Frame { kind, payload }
    }

    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T, WireError> {
        serde_json::from_slice(&self.payload).map_err(|source| WireError::Json { kind: self.kind, source })
    }

    pub fn expect(self, kind: FrameKind) -> Result<Frame, WireError> {
        if self.kind != kind {
            return Err(WireError::Unexpected { expected: kind, got: self.kind });
        }
        Ok(self)
    }

    /// The header for a payload (24 bytes).
    pub fn header(kind: FrameKind, payload: &[u8], flags: u32) -> [u8; HEADER_SIZE] {
        let mut h = [0u8; HEADER_SIZE];
        h[0..4].copy_from_slice(&MAGIC);
        h[4..6].copy_from_slice(&VERSION.to_le_bytes());
        h[6..8].copy_from_slice(&(kind as u16).to_le_bytes());
        h[8..12].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        h[12..16].copy_from_slice(&crc32c::crc32c(payload).to_le_bytes());
        h[16..20].copy_from_slice(&flags.to_le_bytes());
        let hc = crc32c::crc32c(&h[0..20]);
        h[20..24].copy_from_slice(&hc.to_le_bytes());
        h
    }

    /// The frame's bytes without a MAC (the Unix socket, a handshake).
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(HEADER_SIZE + self.payload.len());
        v.extend_from_slice(&Frame::header(self.kind, &self.payload, 0));
        v.extend_from_slice(&self.payload);
        v
    }
}

fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// A checked header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: FrameKind,
    pub len: u32,
    pub crc: u32,
    pub flags: u32,
}

impl Header {
    pub fn has_mac(&self) -> bool {
        self.flags & FLAG_MAC != 0
    }
}

/// Checks a header against the format and a payload limit (which the
/// caller sets by what it expects: a handshake frame is small).
pub fn decode_header(h: &[u8; HEADER_SIZE], limit: u32) -> Result<Header, WireError> {
    let magic = [h[0], h[1], h[2], h[3]];
    if magic != MAGIC {
        return Err(WireError::Magic(magic));
    }
    let stored = le32(&h[20..24]);
    let computed = crc32c::crc32c(&h[0..20]);
    if stored != computed {
        return Err(WireError::HeaderCrc { stored, computed });
    }
    let version = u16::from_le_bytes([h[4], h[5]]);
    if version != VERSION {
        return Err(WireError::Version(version));
    }
    let raw_kind = u16::from_le_bytes([h[6], h[7]]);
    let kind = FrameKind::from_raw(raw_kind).ok_or(WireError::Kind(raw_kind))?;
    let len = le32(&h[8..12]);
    if len > limit.min(MAX_PAYLOAD) {
        return Err(WireError::TooLarge { len, limit: limit.min(MAX_PAYLOAD) });
    }
    let flags = le32(&h[16..20]);
    if flags & !KNOWN_FLAGS != 0 {
        return Err(WireError::Flags(flags));
    }
    Ok(Header { kind, len, crc: le32(&h[12..16]), flags })
}

/// Refuses a payload the format cannot carry.
pub(crate) fn check_len(payload: &[u8]) -> Result<(), WireError> {
    if payload.len() > MAX_PAYLOAD as usize {
        return Err(WireError::TooLarge { len: payload.len().min(u32::MAX as usize) as u32, limit: MAX_PAYLOAD });
    }
    Ok(())
}

/// Writes a header, its payload and an optional MAC trailer (one write
/// when small, so that a frame is one segment).
pub(crate) fn write_parts<W: Write>(w: &mut W, h: &[u8; HEADER_SIZE], payload: &[u8], mac: Option<&[u8; MAC_LEN]>) -> Result<(), WireError> {
    check_len(payload)?;
    if payload.len() <= 64 << 10 {
        let mut v = Vec::with_capacity(HEADER_SIZE + payload.len() + MAC_LEN);
        v.extend_from_slice(h);
        v.extend_from_slice(payload);
        if let Some(m) = mac {
            v.extend_from_slice(m);
        }
        w.write_all(&v)?;
    } else {
        w.write_all(h)?;
        w.write_all(payload)?;
        if let Some(m) = mac {
            w.write_all(m)?;
        }
    }
    Ok(())
}

/// Writes one frame without a MAC (the CLI's Unix socket, a handshake).
pub fn write_frame<W: Write>(w: &mut W, kind: FrameKind, payload: &[u8]) -> Result<(), WireError> {
    check_len(payload)?;
    write_parts(w, &Frame::header(kind, payload, 0), payload, None)
}

/// A frame as read: its header (for a MAC's input), its payload, and the
/// MAC trailer when the header announced one.
#[derive(Debug)]
pub struct RawFrame {
    pub header: [u8; HEADER_SIZE],
    pub decoded: Header,
    pub payload: Vec<u8>,
    pub mac: Option<[u8; MAC_LEN]>,
}

impl RawFrame {
    pub fn into_frame(self) -> Frame {
        Frame { kind: self.decoded.kind, payload: self.payload }
    }
}

/// Reads and checks one header; `Closed` on a clean end of stream before
/// it, `Truncated` inside it.
pub fn read_header<R: Read>(r: &mut R, limit: u32) -> Result<([u8; HEADER_SIZE], Header), WireError> {
    let mut h = [0u8; HEADER_SIZE];
    let mut got = 0;
    while got < HEADER_SIZE {
        match r.read(&mut h[got..]) {
            Ok(0) if got == 0 => return Err(WireError::Closed),
            Ok(0) => return Err(WireError::Truncated),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let decoded = decode_header(&h, limit)?;
    Ok((h, decoded))
}

/// Reads the payload (and MAC trailer) a checked header announced. Memory
/// grows with the bytes received, never ahead of them.
pub fn read_body<R: Read>(r: &mut R, header: [u8; HEADER_SIZE], decoded: Header) -> Result<RawFrame, WireError> {
    let len = decoded.len as usize;
    let mut payload = Vec::with_capacity(len.min(READ_STEP));
    while payload.len() < len {
        let have = payload.len();
        let step = (len - have).min(READ_STEP);
        payload.resize(have + step, 0);
        r.read_exact(&mut payload[have..])?;
    }
    let computed = crc32c::crc32c(&payload);
    if computed != decoded.crc {
        return Err(WireError::PayloadCrc { kind: decoded.kind, stored: decoded.crc, computed });
    }
    let mac = if decoded.has_mac() {
        let mut m = [0u8; MAC_LEN];
        r.read_exact(&mut m)?;
        Some(m)
    } else {
        None
    };
    Ok(RawFrame { header, decoded, payload, mac })
}

/// Reads one frame of at most `limit` payload bytes, trailer included.
pub fn read_raw<R: Read>(r: &mut R, limit: u32) -> Result<RawFrame, WireError> {
    let (h, decoded) = read_header(r, limit)?;
    read_body(r, h, decoded)
}

/// Reads one frame that carries no MAC (the CLI's Unix socket).
pub fn read_frame<R: Read>(r: &mut R) -> Result<Frame, WireError> {
    let raw = read_raw(r, MAX_PAYLOAD)?;
    if raw.mac.is_some() {
        return Err(WireError::MacUnexpected(raw.decoded.kind));
    }
    Ok(raw.into_frame())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reheader(mut h: [u8; HEADER_SIZE]) -> [u8; HEADER_SIZE] {
        let hc = crc32c::crc32c(&h[0..20]);
        h[20..24].copy_from_slice(&hc.to_le_bytes());
        h
    }

    #[test]
    fn round_trip() {
        let f = Frame { kind: FrameKind::CheckpointData, payload: b"hello".to_vec() };
        let b = f.encode();
        let back = read_frame(&mut &b[..]).unwrap();
        assert_eq!(back, f);
    }

    #[test]
    fn every_corruption_is_refused_by_name() {
        let b = Frame { kind: FrameKind::Ack, payload: b"{\"epoch\":1}".to_vec() }.encode();
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x40;
            let e = read_frame(&mut &c[..]).unwrap_err();
            let s = e.to_string();
            assert!(s.contains("magic") || s.contains("checksum") || s.contains("version"), "byte {i}: {s}");
        }
    }

    #[test]
    fn truncation_and_clean_close() {
        let b = Frame { kind: FrameKind::Heartbeat, payload: vec![1; 100] }.encode();
        assert!(matches!(read_frame(&mut &b[..0]), Err(WireError::Closed)));
        assert!(matches!(read_frame(&mut &b[..10]), Err(WireError::Truncated)));
        assert!(matches!(read_frame(&mut &b[..50]), Err(WireError::Truncated)));
    }

    #[test]
    fn version_kind_and_flags_are_checked() {
        let mut h = Frame::header(FrameKind::Ack, b"", 0);
        h[4] = 1;
        assert!(matches!(decode_header(&reheader(h), MAX_PAYLOAD), Err(WireError::Version(1))));
        let mut h = Frame::header(FrameKind::Ack, b"", 0);
        h[6] = 99;
        assert!(matches!(decode_header(&reheader(h), MAX_PAYLOAD), Err(WireError::Kind(99))));
        let h = Frame::header(FrameKind::Ack, b"", 6);
        assert!(matches!(decode_header(&h, MAX_PAYLOAD), Err(WireError::Flags(6))));
    }

    /// A header announcing more than the limit is refused before anything
    /// is allocated for it, and the limit can be tightened (a handshake).
    #[test]
    fn sizes_are_bounded_by_the_caller_and_the_format() {
        let mut h = Frame::header(FrameKind::CheckpointData, b"", 0);
        h[8..12].copy_from_slice(&(MAX_PAYLOAD + 1).to_le_bytes());
        assert!(matches!(decode_header(&reheader(h), u32::MAX), Err(WireError::TooLarge { len, limit: MAX_PAYLOAD }) if len == MAX_PAYLOAD + 1));
        let b = Frame { kind: FrameKind::Hello, payload: vec![b'x'; 5000] }.encode();
        assert!(matches!(read_raw(&mut &b[..], 4096), Err(WireError::TooLarge { len: 5000, limit: 4096 })));
        // A header that claims 16 MiB followed by 10 bytes: truncated, and
        // what was allocated follows what arrived, not the claim.
        let mut h = Frame::header(FrameKind::CheckpointData, b"", 0);
        h[8..12].copy_from_slice(&MAX_PAYLOAD.to_le_bytes());
        let mut v = reheader(h).to_vec();
        v.extend_from_slice(&[0; 10]);
        assert!(matches!(read_raw(&mut &v[..], MAX_PAYLOAD), Err(WireError::Truncated)));
    }

    #[test]
    fn a_frame_with_a_mac_is_not_taken_for_a_plain_one() {
        let mut v = Vec::new();
        write_parts(&mut v, &Frame::header(FrameKind::Ack, b"{}", FLAG_MAC), b"{}", Some(&[7; MAC_LEN])).unwrap();
        assert!(matches!(read_frame(&mut &v[..]), Err(WireError::MacUnexpected(FrameKind::Ack))));
        let raw = read_raw(&mut &v[..], MAX_PAYLOAD).unwrap();
        assert_eq!(raw.mac, Some([7; MAC_LEN]));
        assert_eq!(raw.payload, b"{}");
    }

    /// The shared vector: a future C speaker (the library's log shipping)
    /// must produce exactly these bytes.
    #[test]
    fn matches_the_shared_vector() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/vectors/wire-heartbeat.bin");
        let want = std::fs::read(path).expect("tests/vectors/wire-heartbeat.bin");
        let f = Frame { kind: FrameKind::Heartbeat, payload: br#"{"seq":7,"arrival":42}"#.to_vec() };
        assert_eq!(f.encode(), want, "the encoder no longer produces the shared vector");
        assert_eq!(read_frame(&mut &want[..]).unwrap(), f);
    }
}
