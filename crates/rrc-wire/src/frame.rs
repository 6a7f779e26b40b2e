//! Frames: the unit of every rrc connection.

use std::io::{Read, Write};

pub const MAGIC: [u8; 4] = *b"RRCW";
pub const VERSION: u16 = 1;
pub const HEADER_SIZE: usize = 24;
/// Checkpoint data is cut into frames of at most this size.
pub const MAX_PAYLOAD: u32 = 16 << 20;

/// What a frame carries. Numbers are part of the format: never reuse one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum FrameKind {
    /// CLI -> agent, agent -> agent: a JSON [`crate::msg::Request`].
    Request = 1,
    /// The JSON [`crate::msg::Response`] to a Request.
    Response = 2,
    /// Primary -> backup, first frame of a replication connection: JSON
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
            _ => return None,
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("connection closed")]
    Closed,
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("bad frame magic {0:02x?} (not an rrc peer?)")]
    Magic([u8; 4]),
    #[error("frame header checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    HeaderCrc { stored: u32, computed: u32 },
    #[error("wire format version {0}, this rrc speaks {VERSION}")]
    Version(u16),
    #[error("unknown frame kind {0}")]
    Kind(u16),
    #[error("frame payload of {0} bytes exceeds the limit of {MAX_PAYLOAD}")]
    TooLarge(u32),
    #[error("frame payload checksum mismatch (kind {kind:?}, stored {stored:#010x}, computed {computed:#010x})")]
    PayloadCrc { kind: FrameKind, stored: u32, computed: u32 },
    #[error("reserved header field is {0:#x}, expected 0")]
    Reserved(u32),
    #[error("expected a {expected:?} frame, got {got:?}")]
    Unexpected { expected: FrameKind, got: FrameKind },
    #[error("malformed {kind:?} payload: {source}")]
    Json { kind: FrameKind, source: serde_json::Error },
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
    pub fn header(kind: FrameKind, payload: &[u8]) -> [u8; HEADER_SIZE] {
        let mut h = [0u8; HEADER_SIZE];
        h[0..4].copy_from_slice(&MAGIC);
        h[4..6].copy_from_slice(&VERSION.to_le_bytes());
        h[6..8].copy_from_slice(&(kind as u16).to_le_bytes());
        h[8..12].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        h[12..16].copy_from_slice(&crc32c::crc32c(payload).to_le_bytes());
        let hc = crc32c::crc32c(&h[0..20]);
        h[20..24].copy_from_slice(&hc.to_le_bytes());
        h
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(HEADER_SIZE + self.payload.len());
        v.extend_from_slice(&Frame::header(self.kind, &self.payload));
        v.extend_from_slice(&self.payload);
        v
    }
}

fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// Checks a header; returns (kind, payload length, payload crc).
pub fn decode_header(h: &[u8; HEADER_SIZE]) -> Result<(FrameKind, u32, u32), WireError> {
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
    if len > MAX_PAYLOAD {
        return Err(WireError::TooLarge(len));
    }
    let reserved = le32(&h[16..20]);
    if reserved != 0 {
        return Err(WireError::Reserved(reserved));
    }
    Ok((kind, len, le32(&h[12..16])))
}

/// Writes one frame (header and payload in one write when small).
pub fn write_frame<W: Write>(w: &mut W, kind: FrameKind, payload: &[u8]) -> Result<(), WireError> {
    if payload.len() > MAX_PAYLOAD as usize {
        return Err(WireError::TooLarge(payload.len() as u32));
    }
    let h = Frame::header(kind, payload);
    if payload.len() <= 64 << 10 {
        let mut v = Vec::with_capacity(HEADER_SIZE + payload.len());
        v.extend_from_slice(&h);
        v.extend_from_slice(payload);
        w.write_all(&v)?;
    } else {
        w.write_all(&h)?;
        w.write_all(payload)?;
    }
    Ok(())
}

/// Reads one frame; `Closed` on a clean end of stream before a header.
pub fn read_frame<R: Read>(r: &mut R) -> Result<Frame, WireError> {
    let mut h = [0u8; HEADER_SIZE];
    let mut got = 0;
    while got < HEADER_SIZE {
        match r.read(&mut h[got..]) {
            Ok(0) if got == 0 => return Err(WireError::Closed),
            Ok(0) => return Err(WireError::Io(std::io::ErrorKind::UnexpectedEof.into())),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let (kind, len, crc) = decode_header(&h)?;
    let mut payload = vec![0u8; len as usize];
    r.read_exact(&mut payload)?;
    let computed = crc32c::crc32c(&payload);
    if computed != crc {
        return Err(WireError::PayloadCrc { kind, stored: crc, computed });
    }
    Ok(Frame { kind, payload })
}

#[cfg(test)]
mod tests {
    use super::*;

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
            assert!(
                s.contains("magic") || s.contains("checksum") || s.contains("version"),
                "byte {i}: {s}"
            );
        }
    }

    #[test]
    fn truncation_and_clean_close() {
        let b = Frame { kind: FrameKind::Heartbeat, payload: vec![1; 100] }.encode();
        assert!(matches!(read_frame(&mut &b[..0]), Err(WireError::Closed)));
        assert!(matches!(read_frame(&mut &b[..10]), Err(WireError::Io(_))));
        assert!(matches!(read_frame(&mut &b[..50]), Err(WireError::Io(_))));
    }

    #[test]
    fn version_and_kind_are_checked() {
        let mut h = Frame::header(FrameKind::Ack, b"");
        h[4] = 2;
        let hc = crc32c::crc32c(&h[0..20]);
        h[20..24].copy_from_slice(&hc.to_le_bytes());
        assert!(matches!(decode_header(&h), Err(WireError::Version(2))));
        let mut h = Frame::header(FrameKind::Ack, b"");
        h[6] = 99;
        let hc = crc32c::crc32c(&h[0..20]);
        h[20..24].copy_from_slice(&hc.to_le_bytes());
        assert!(matches!(decode_header(&h), Err(WireError::Kind(99))));
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
