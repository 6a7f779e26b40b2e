//! `struct rrc_image_header` and `struct rrc_section_header`.

use serde::Serialize;

use crate::le::*;

pub const MAGIC: [u8; 8] = *b"RRCIMG\0\0";
pub const VERSION: u32 = 1;
pub const IMAGE_HEADER_SIZE: usize = 72;
pub const SECTION_HEADER_SIZE: usize = 24;
/// rrc_image_header.flags: no parent, every defined page is in this image.
pub const IMG_F_FULL: u32 = 1 << 0;

/// A 16-byte image id, shown as 32 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ImageId(pub [u8; 16]);

impl ImageId {
    /// A fresh id: random, never all zero (zero means "no image"). The
    /// one place ids are made (checkpoints, dumps, restored images).
    pub fn random() -> std::io::Result<ImageId> {
        use std::io::Read;
        let mut f = std::fs::File::open("/dev/urandom")?;
        loop {
            let mut id = [0u8; 16];
            f.read_exact(&mut id)?;
            if id != [0u8; 16] {
                return Ok(ImageId(id));
            }
        }
    }
    pub fn is_zero(&self) -> bool {
        self.0 == [0u8; 16]
    }
    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
    pub fn from_hex(s: &str) -> Option<ImageId> {
        if s.len() != 32 || !s.is_ascii() {
            return None;
        }
        let mut id = [0u8; 16];
        for (i, b) in id.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(ImageId(id))
    }
}

impl std::fmt::Display for ImageId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.hex())
    }
}

impl std::fmt::Debug for ImageId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ImageId({})", self.hex())
    }
}

impl Serialize for ImageId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.hex())
    }
}

/// `struct rrc_image_header`, decoded (magic, CRC and version checked by
/// the reader).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ImageHeader {
    pub version: u32,
    pub flags: u32,
    pub image_id: ImageId,
    pub parent_id: ImageId,
    pub sequence: u64,
    pub created_ns: u64,
}

impl ImageHeader {
    pub fn is_full(&self) -> bool {
        self.flags & IMG_F_FULL != 0
    }

    /// The 72 bytes of this header, CRC filled in (used by tests to build
    /// images and by tools that rewrite headers).
    pub fn encode(&self) -> [u8; IMAGE_HEADER_SIZE] {
        let mut b = [0u8; IMAGE_HEADER_SIZE];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&self.version.to_le_bytes());
        b[12..16].copy_from_slice(&self.flags.to_le_bytes());
        b[16..32].copy_from_slice(&self.image_id.0);
        b[32..48].copy_from_slice(&self.parent_id.0);
        b[48..56].copy_from_slice(&self.sequence.to_le_bytes());
        b[56..64].copy_from_slice(&self.created_ns.to_le_bytes());
        let crc = crc32c::crc32c(&b[..64]);
        b[64..68].copy_from_slice(&crc.to_le_bytes());
        b
    }
}

/// Raw decode of the 72 header bytes, without any check.
pub(crate) struct RawImageHeader {
    pub magic: [u8; 8],
    pub header: ImageHeader,
    pub header_crc: u32,
    pub reserved: u32,
}

pub(crate) fn decode_image_header(b: &[u8; IMAGE_HEADER_SIZE]) -> RawImageHeader {
    let mut magic = [0u8; 8];
    magic.copy_from_slice(&b[0..8]);
    RawImageHeader {
        magic,
        header: ImageHeader {
            version: u32_at(b, 8),
            flags: u32_at(b, 12),
            image_id: ImageId(id_at(b, 16)),
            parent_id: ImageId(id_at(b, 32)),
            sequence: u64_at(b, 48),
            created_ns: u64_at(b, 56),
        },
        header_crc: u32_at(b, 64),
        reserved: u32_at(b, 68),
    }
}

/// `struct rrc_section_header`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RawSectionHeader {
    pub type_raw: u32,
    pub flags: u32,
    pub length: u64,
    pub payload_crc: u32,
    pub header_crc: u32,
}

pub(crate) fn decode_section_header(b: &[u8; SECTION_HEADER_SIZE]) -> RawSectionHeader {
    RawSectionHeader {
        type_raw: u32_at(b, 0),
        flags: u32_at(b, 4),
        length: u64_at(b, 8),
        payload_crc: u32_at(b, 16),
        header_crc: u32_at(b, 20),
    }
}

/// A section header + payload + padding as bytes (for building images in
/// tests and tools).
pub fn encode_section(type_raw: u32, payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(SECTION_HEADER_SIZE + payload.len() + 8);
    b.extend_from_slice(&type_raw.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    b.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    let hcrc = crc32c::crc32c(&b[..20]);
    b.extend_from_slice(&hcrc.to_le_bytes());
    b.extend_from_slice(payload);
    b.resize(SECTION_HEADER_SIZE + pad8(payload.len() as u64) as usize, 0);
    b
}
