//! Reading one checkpoint file: every CRC, every structural rule of image.h.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{ImageError, SectionAt};
use crate::header::*;
use crate::le::pad8;
use crate::sections::*;
use crate::PAGE_SIZE;

/// Largest metadata section payload accepted (everything but PAGES). A
/// header whose length passes its CRC but is absurd must not make the
/// reader allocate gigabytes.
const MAX_META_PAYLOAD: u64 = 256 << 20;
/// FILEOPS: librrc's journal holds at most 256 MiB of records, plus the
/// section's own header.
const MAX_FILEOPS_PAYLOAD: u64 = (256 << 20) + 4096;

/// Whether [`Image::open_with`] reads the page data to check its CRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyPages {
    Yes,
    /// Check the PAGES section header only (its CRC covers the length);
    /// for callers that verified the data already.
    No,
}

/// Where one section is in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SectionInfo {
    pub kind: SectionKind,
    /// File offset of the section header.
    pub offset: u64,
    /// Payload bytes (excluding padding).
    pub length: u64,
}

/// One verified checkpoint image.
#[derive(Debug, Clone)]
pub struct Image {
    pub path: PathBuf,
    pub file_bytes: u64,
    pub header: ImageHeader,
    pub process: Process,
    pub vmas: Vec<Vma>,
    pub pagemap: Vec<PagemapEntry>,
    pub threads: Vec<Thread>,
    pub fds: Vec<Fd>,
    pub signals: Vec<SigAction>,
    /// FILEOPS: the data directory's changes since the parent (None: the
    /// process had no data directory).
    pub fileops: Option<crate::fileops::FileOps>,
    /// PROCATTR (None: an image from before it).
    pub procattr: Option<crate::sections::ProcAttr>,
    /// CREDS (None: an image from before it).
    pub creds: Option<crate::sections::Creds>,
    /// SYSVIPC (None: nothing in the IPC namespace to carry, or an image
    /// from before it).
    pub sysvipc: Option<crate::sysvipc::SysvIpc>,
    /// FILEIDS (None: an image from before it).
    pub file_ids: Option<Vec<crate::sections::FileId>>,
    /// The TCP stream table at this snapshot (not merged with a parent's).
    pub tcp: Vec<TcpStream>,
    /// File offset of the PAGES payload; page data of the IN_IMAGE entries
    /// follows consecutively in entry order.
    pub pages_offset: u64,
    pub pages_bytes: u64,
    pub end: End,
    pub sections: Vec<SectionInfo>,
}

/// Where the reader's bytes come from: a file, or an image already in
/// memory ([`Image::from_bytes`]); both go through the same checks.
enum Source<'a> {
    File(File),
    Mem(std::io::Cursor<&'a [u8]>),
}

impl Read for Source<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Source::File(f) => f.read(buf),
            Source::Mem(c) => c.read(buf),
        }
    }
}

impl Seek for Source<'_> {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        match self {
            Source::File(f) => f.seek(pos),
            Source::Mem(c) => c.seek(pos),
        }
    }
}

struct Reader<'a> {
    path: &'a Path,
    file: Source<'a>,
    len: u64,
}

impl Reader<'_> {
    fn io(&self, what: &'static str, source: std::io::Error) -> ImageError {
        ImageError::Io { path: self.path.to_path_buf(), what, source }
    }

    fn read_exact_at(&mut self, off: u64, buf: &mut [u8], what: &'static str) -> Result<(), ImageError> {
        self.file.seek(SeekFrom::Start(off)).map_err(|e| self.io(what, e))?;
        self.file.read_exact(buf).map_err(|e| self.io(what, e))
    }

    fn truncated(&self, offset: u64, what: String) -> ImageError {
        ImageError::Truncated { path: self.path.to_path_buf(), offset, what }
    }

    /// CRC of `len` bytes at `off`, streamed.
    fn crc_of_range(&mut self, off: u64, len: u64) -> Result<u32, ImageError> {
        self.file.seek(SeekFrom::Start(off)).map_err(|e| self.io("reading page data", e))?;
        let mut buf = vec![0u8; len.min(1 << 20) as usize];
        let mut crc = 0u32;
        let mut left = len;
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            self.file.read_exact(&mut buf[..n]).map_err(|e| self.io("reading page data", e))?;
            crc = crc32c::crc32c_append(crc, &buf[..n]);
            left -= n as u64;
        }
        Ok(crc)
    }
}

/// A section's payload CRC as stored against the one computed over it.
fn check_payload_crc(path: &Path, at: SectionAt, sh: &RawSectionHeader, computed: u32) -> Result<(), ImageError> {
    if computed == sh.payload_crc {
        return Ok(());
    }
    Err(ImageError::PayloadCrc { path: path.to_path_buf(), section: at, length: sh.length, stored: sh.payload_crc, computed })
}

fn malformed(path: &Path, where_: impl Into<String>, reason: impl Into<String>) -> ImageError {
    ImageError::Malformed { path: path.to_path_buf(), where_: where_.into(), reason: reason.into() }
}

/// Reads and checks only the image header (magic, version, CRC, flag
/// consistency). Used to learn a parent's id before an incremental dump.
pub fn read_header(path: &Path) -> Result<ImageHeader, ImageError> {
    let file = File::open(path).map_err(|e| ImageError::Io { path: path.to_path_buf(), what: "opening image", source: e })?;
    let len = file
        .metadata()
        .map_err(|e| ImageError::Io { path: path.to_path_buf(), what: "stat of image", source: e })?
        .len();
    let mut r = Reader { path, file: Source::File(file), len };
    check_header(&mut r)
}

fn check_header(r: &mut Reader<'_>) -> Result<ImageHeader, ImageError> {
    let path = r.path;
    if r.len < IMAGE_HEADER_SIZE as u64 {
        return Err(r.truncated(0, format!("file of {} bytes is shorter than the {IMAGE_HEADER_SIZE}-byte image header", r.len)));
    }
    let mut hb = [0u8; IMAGE_HEADER_SIZE];
    r.read_exact_at(0, &mut hb, "reading image header")?;
    let raw = decode_image_header(&hb);
    if raw.magic != MAGIC {
        return Err(ImageError::BadMagic { path: path.to_path_buf(), found: raw.magic });
    }
    // Version before CRC: another version may lay its header out differently.
    if raw.header.version != VERSION {
        return Err(ImageError::VersionMismatch { path: path.to_path_buf(), found: raw.header.version, expected: VERSION });
    }
    let computed = crc32c::crc32c(&hb[..64]);
    if computed != raw.header_crc {
        return Err(ImageError::HeaderCrc { path: path.to_path_buf(), stored: raw.header_crc, computed });
    }
    let h = raw.header;
    if raw.reserved != 0 {
        return Err(malformed(path, "image header", "reserved field is not zero"));
    }
    if h.flags & !IMG_F_FULL != 0 {
        return Err(malformed(path, "image header", format!("unknown flags {:#x}", h.flags)));
    }
    if h.image_id.is_zero() {
        return Err(malformed(path, "image header", "image_id is zero"));
    }
    if h.is_full() != h.parent_id.is_zero() {
        return Err(malformed(
            path,
            "image header",
            if h.is_full() { "FULL image with a parent_id" } else { "incremental image (no FULL flag) with a zero parent_id" },
        ));
    }
    if h.is_full() != (h.sequence == 0) {
        return Err(malformed(path, "image header", format!("sequence {} does not match the FULL flag ({})", h.sequence, h.is_full())));
    }
    Ok(h)
}

impl Image {
    /// Opens and fully verifies one image, page data included.
    pub fn open(path: &Path) -> Result<Image, ImageError> {
        Image::open_with(path, VerifyPages::Yes)
    }

    pub fn open_with(path: &Path, verify_pages: VerifyPages) -> Result<Image, ImageError> {
        let file = File::open(path).map_err(|e| ImageError::Io { path: path.to_path_buf(), what: "opening image", source: e })?;
        let len = file
            .metadata()
            .map_err(|e| ImageError::Io { path: path.to_path_buf(), what: "stat of image", source: e })?
            .len();
        Image::verify(Reader { path, file: Source::File(file), len }, verify_pages)
    }

    /// Verifies an image held in memory, with exactly the checks of
    /// [`Image::open`]; `path` only names it in errors and in `Image::path`.
    /// Offsets in the result (`pages_offset`, `sections`) index `bytes`.
    pub fn from_bytes(path: &Path, bytes: &[u8], verify_pages: VerifyPages) -> Result<Image, ImageError> {
        let len = bytes.len() as u64;
        Image::verify(Reader { path, file: Source::Mem(std::io::Cursor::new(bytes)), len }, verify_pages)
    }

    fn verify(mut r: Reader<'_>, verify_pages: VerifyPages) -> Result<Image, ImageError> {
        let path = r.path;
        let header = check_header(&mut r)?;

        let mut payloads: BTreeMap<SectionKind, Vec<u8>> = BTreeMap::new();
        let mut sections: Vec<SectionInfo> = Vec::new();
        let mut pages: Option<(u64, u64)> = None;
        let mut off = IMAGE_HEADER_SIZE as u64;
        let end = loop {
            if off == r.len {
                return Err(r.truncated(off, "file ends after a complete section".into()));
            }
            if r.len - off < SECTION_HEADER_SIZE as u64 {
                return Err(r.truncated(off, format!("section header cut short ({} of {SECTION_HEADER_SIZE} bytes)", r.len - off)));
            }
            let mut sb = [0u8; SECTION_HEADER_SIZE];
            r.read_exact_at(off, &mut sb, "reading section header")?;
            let sh = decode_section_header(&sb);
            let at = SectionAt { type_raw: sh.type_raw, offset: off };
            let computed = crc32c::crc32c(&sb[..20]);
            if computed != sh.header_crc {
                return Err(ImageError::SectionHeaderCrc { path: path.to_path_buf(), section: at, stored: sh.header_crc, computed });
            }
            let kind = SectionKind::from_raw(sh.type_raw)
                .ok_or_else(|| ImageError::UnknownSection { path: path.to_path_buf(), section: at })?;
            if sh.flags != 0 {
                return Err(malformed(path, at.to_string(), format!("flags {:#x}, must be zero in version 1", sh.flags)));
            }
            let payload_off = off + SECTION_HEADER_SIZE as u64;
            let avail = r.len - payload_off;
            if sh.length > avail {
                return Err(r.truncated(payload_off, format!("{at}: payload of {} bytes, only {avail} present", sh.length)));
            }
            let padded = pad8(sh.length);
            if padded > avail {
                return Err(r.truncated(payload_off + sh.length, format!("{at}: padding cut short")));
            }
            if kind != SectionKind::End && (payloads.contains_key(&kind) || (kind == SectionKind::Pages && pages.is_some())) {
                return Err(ImageError::DuplicateSection { path: path.to_path_buf(), section: at, kind });
            }
            sections.push(SectionInfo { kind, offset: off, length: sh.length });

            if kind == SectionKind::Pages {
                if verify_pages == VerifyPages::Yes {
                    let computed = r.crc_of_range(payload_off, sh.length)?;
                    check_payload_crc(path, at, &sh, computed)?;
                }
                pages = Some((payload_off, sh.length));
            } else {
                let limit = if kind == SectionKind::Fileops { MAX_FILEOPS_PAYLOAD } else { MAX_META_PAYLOAD };
                if sh.length > limit {
                    return Err(malformed(path, at.to_string(), format!("payload of {} bytes exceeds the {limit}-byte limit for metadata", sh.length)));
                }
                let mut p = vec![0u8; sh.length as usize];
                r.read_exact_at(payload_off, &mut p, "reading section payload")?;
                check_payload_crc(path, at, &sh, crc32c::crc32c(&p))?;
                if kind == SectionKind::End {
                    let e = parse_end(&p).map_err(|m| malformed(path, at.to_string(), m))?;
                    let before = (sections.len() - 1) as u32;
                    if e.sections != before {
                        return Err(malformed(path, at.to_string(), format!("says {} sections precede it, found {before}", e.sections)));
                    }
                    if e.image_bytes != off {
                        return Err(malformed(path, at.to_string(), format!("image_bytes {} is not END's offset {off}", e.image_bytes)));
                    }
                    let file_end = payload_off + padded;
                    if r.len > file_end {
                        return Err(ImageError::TrailingData { path: path.to_path_buf(), trailing: r.len - file_end });
                    }
                    break e;
                }
                payloads.insert(kind, p);
            }
            off = payload_off + padded;
        };

        for kind in SectionKind::REQUIRED {
            let present = if kind == SectionKind::Pages { pages.is_some() } else { payloads.contains_key(&kind) };
            if !present {
                return Err(ImageError::MissingSection { path: path.to_path_buf(), kind });
            }
        }
        let (pages_offset, pages_bytes) = pages.unwrap_or((0, 0));
        let sec = |k: SectionKind| {
            let s = sections.iter().find(|s| s.kind == k).map(|s| s.offset).unwrap_or(0);
            SectionAt { type_raw: k.raw(), offset: s }.to_string()
        };
        let take = |k: SectionKind| payloads.get(&k).map(Vec::as_slice).unwrap_or(&[]);

        let process = parse_process(take(SectionKind::Process)).map_err(|m| malformed(path, sec(SectionKind::Process), m))?;
        let vmas = parse_vmas(take(SectionKind::Vmas)).map_err(|m| malformed(path, sec(SectionKind::Vmas), m))?;
        let pagemap = parse_pagemap(take(SectionKind::Pagemap), &vmas).map_err(|m| malformed(path, sec(SectionKind::Pagemap), m))?;
        let threads = parse_threads(take(SectionKind::Threads)).map_err(|m| malformed(path, sec(SectionKind::Threads), m))?;
        let fds = parse_fds(take(SectionKind::Fds)).map_err(|m| malformed(path, sec(SectionKind::Fds), m))?;
        let signals = parse_signals(take(SectionKind::Signals)).map_err(|m| malformed(path, sec(SectionKind::Signals), m))?;
        let fileops = match payloads.get(&SectionKind::Fileops) {
            Some(p) => Some(crate::fileops::parse_fileops(p).map_err(|m| malformed(path, sec(SectionKind::Fileops), m))?),
            None => None,
        };
        let tcp = parse_tcp(take(SectionKind::Tcp)).map_err(|m| malformed(path, sec(SectionKind::Tcp), m))?;
        let procattr = match payloads.get(&SectionKind::ProcAttr) {
            Some(p) => Some(crate::sections::parse_procattr(p).map_err(|m| malformed(path, sec(SectionKind::ProcAttr), m))?),
            None => None,
        };

        let creds = match payloads.get(&SectionKind::Creds) {
            Some(p) => Some(crate::sections::parse_creds(p).map_err(|m| malformed(path, sec(SectionKind::Creds), m))?),
            None => None,
        };
        let file_ids = match payloads.get(&SectionKind::FileIds) {
            Some(p) => Some(crate::sections::parse_file_ids(p).map_err(|m| malformed(path, sec(SectionKind::FileIds), m))?),
            None => None,
        };
        let sysvipc = match payloads.get(&SectionKind::SysvIpc) {
            Some(p) => Some(crate::sysvipc::parse_sysvipc(p).map_err(|m| malformed(path, sec(SectionKind::SysvIpc), m))?),
            None => None,
        };

        if process.nr_threads as usize != threads.len() {
            return Err(malformed(
                path,
                sec(SectionKind::Threads),
                format!("{} threads, PROCESS says nr_threads {}", threads.len(), process.nr_threads),
            ));
        }
        let in_image: u64 = pagemap.iter().filter(|e| e.in_image()).map(|e| u64::from(e.nr_pages)).sum();
        if in_image * PAGE_SIZE != pages_bytes {
            return Err(malformed(
                path,
                sec(SectionKind::Pages),
                format!("{pages_bytes} bytes of page data, the pagemap marks {in_image} pages ({} bytes) as in this image", in_image * PAGE_SIZE),
            ));
        }
        if header.is_full() {
            if let Some(e) = pagemap.iter().find(|e| !e.in_image()) {
                return Err(malformed(path, sec(SectionKind::Pagemap), format!("full image, but the entry at {:#x} is not IN_IMAGE", e.vaddr)));
            }
        }

        Ok(Image {
            path: path.to_path_buf(),
            file_bytes: r.len,
            header,
            process,
            vmas,
            pagemap,
            threads,
            fds,
            signals,
            fileops,
            procattr,
            creds,
            sysvipc,
            file_ids,
            tcp,
            pages_offset,
            pages_bytes,
            end,
            sections,
        })
    }

    /// Pages with their data in this image.
    pub fn pages_in_image(&self) -> u64 {
        self.pages_bytes / PAGE_SIZE
    }

    /// Defined pages (covered by the pagemap), here or in an ancestor.
    pub fn pages_defined(&self) -> u64 {
        self.pagemap.iter().map(|e| u64::from(e.nr_pages)).sum()
    }
}
