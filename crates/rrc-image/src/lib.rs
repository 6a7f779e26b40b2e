//! Parsing and verification of rrc checkpoint images.
//!
//! Mirrors `runtime/include/rrc/image.h` field for field, decoding every
//! struct at explicit little-endian offsets (never by transmuting untrusted
//! bytes). A reader verifies everything before anything is used: the image
//! header CRC, both CRCs of every section, the END section (its absence
//! means the image is truncated), the version, and the structural rules of
//! each section. [`Chain`] follows `DIR/parent` links and checks that each
//! link is the image its child was taken against.
//!
//! docs/image-format.md describes the format in prose.

mod chain;
mod error;
pub mod fileops;
mod header;
mod image;
mod le;
pub mod rrlog;
pub mod sections;
pub mod sysvipc;
mod summary;
mod write;

pub use chain::Chain;
pub use error::{ImageError, SectionAt};
pub use fileops::{FileOp, FileOps, RelPath};
pub use header::{encode_section, ImageHeader, ImageId, IMAGE_HEADER_SIZE, IMG_F_FULL, MAGIC, SECTION_HEADER_SIZE, VERSION};
pub use image::{read_header, Image, SectionInfo, VerifyPages};
pub use sections::SectionKind;
pub use summary::{ChainSummary, ImageSummary};
pub use write::{encode_pagemap, ImageWriter, PagemapBuilder};

/// `RRC_PAGE_SIZE`
pub const PAGE_SIZE: u64 = 4096;
/// `RRC_IMAGE_FILE_NAME`
pub const IMAGE_FILE_NAME: &str = "checkpoint.rrc";
/// `RRC_IMAGE_PARENT_LINK`
pub const PARENT_LINK: &str = "parent";
