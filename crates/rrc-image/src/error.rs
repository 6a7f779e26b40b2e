//! Errors of image parsing and chain loading. Every variant names the file
//! (and the section and byte offset where it applies) and the cause.

use std::fmt;
use std::path::PathBuf;

use crate::sections::SectionKind;

/// A section as named in error messages: its kind (or raw type number when
/// unknown) and the file offset of its section header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SectionAt {
    pub type_raw: u32,
    pub offset: u64,
}

impl fmt::Display for SectionAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match SectionKind::from_raw(self.type_raw) {
            Some(k) => write!(f, "section {} at offset {}", k, self.offset),
            None => write!(f, "section of type {} at offset {}", self.type_raw, self.offset),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("{path}: {what}: {source}")]
    Io {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },

    #[error("{path}: not an rrc checkpoint image (bad magic {found:02x?})")]
    BadMagic { path: PathBuf, found: [u8; 8] },

    #[error("{path}: image header CRC mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    HeaderCrc {
        path: PathBuf,
        stored: u32,
        computed: u32,
    },

    #[error("{path}: image format version {found}, this rrc reads version {expected}")]
    VersionMismatch {
        path: PathBuf,
        found: u32,
        expected: u32,
    },

    #[error("{path}: truncated at offset {offset} ({what}); the image has no END section")]
    Truncated {
        path: PathBuf,
        offset: u64,
        what: String,
    },

    #[error("{path}: {section}: section header CRC mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    SectionHeaderCrc {
        path: PathBuf,
        section: SectionAt,
        stored: u32,
        computed: u32,
    },

    #[error("{path}: {section}: payload CRC mismatch (stored {stored:#010x}, computed {computed:#010x}, {length} bytes)")]
    PayloadCrc {
        path: PathBuf,
        section: SectionAt,
        length: u64,
        stored: u32,
        computed: u32,
    },

    #[error("{path}: {section}: unknown section type {}", section.type_raw)]
    UnknownSection { path: PathBuf, section: SectionAt },

    #[error("{path}: {section}: {kind} appears twice")]
    DuplicateSection {
        path: PathBuf,
        section: SectionAt,
        kind: SectionKind,
    },

    #[error("{path}: required section {kind} is missing")]
    MissingSection { path: PathBuf, kind: SectionKind },

    #[error("{path}: {trailing} bytes after the END section")]
    TrailingData { path: PathBuf, trailing: u64 },

    /// The content of the header or of a section violates image.h.
    #[error("{path}: {where_}: {reason}")]
    Malformed {
        path: PathBuf,
        where_: String,
        reason: String,
    },

    /// An incremental image whose parent directory (DIR/parent) is missing
    /// or holds no checkpoint.
    #[error("{child}: incremental image (parent id {parent_id}) but its parent is missing: {dir} does not exist or holds no checkpoint.rrc")]
    MissingParent {
        dir: PathBuf,
        child: PathBuf,
        parent_id: String,
    },

    /// The parent found through DIR/parent is not the image this one was
    /// taken against.
    #[error("{child}: chain broken: {reason} (parent {dir})")]
    ChainBroken {
        dir: PathBuf,
        child: PathBuf,
        reason: String,
    },

    /// A page the image says lives in an ancestor is in none of them.
    #[error("{child}: chain broken: page {vaddr:#x} is not in this image and in no ancestor")]
    PageNotInChain { child: PathBuf, vaddr: u64 },
}

impl ImageError {
    /// Short stable name of the error kind (used by `rrc inspect --json`
    /// and by the shared test vectors).
    pub fn kind(&self) -> &'static str {
        match self {
            ImageError::Io { .. } => "io",
            ImageError::BadMagic { .. } => "bad_magic",
            ImageError::HeaderCrc { .. } => "header_crc",
            ImageError::VersionMismatch { .. } => "version_mismatch",
            ImageError::Truncated { .. } => "truncated",
            ImageError::SectionHeaderCrc { .. } => "section_header_crc",
            ImageError::PayloadCrc { .. } => "payload_crc",
            ImageError::UnknownSection { .. } => "unknown_section",
            ImageError::DuplicateSection { .. } => "duplicate_section",
            ImageError::MissingSection { .. } => "missing_section",
            ImageError::TrailingData { .. } => "trailing_data",
            ImageError::Malformed { .. } => "malformed",
            ImageError::MissingParent { .. } => "missing_parent",
            ImageError::ChainBroken { .. } => "chain_broken",
            ImageError::PageNotInChain { .. } => "page_not_in_chain",
        }
    }
}
