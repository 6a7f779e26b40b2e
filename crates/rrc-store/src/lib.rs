//! The backup's committed state of one protected process (issue 3 point 4;
//! NiLiCon §V-A: the backup keeps the container's memory in an in-memory
//! page index and applies each received checkpoint to it, so that on
//! failover it restores from one merged state instead of a chain).
//!
//! A [`Store`] holds, for the newest committed image:
//! * every *defined* page (image.h: covered by the pagemap) with its data,
//!   indexed by page address in a `BTreeMap<u64, Box<Page>>`;
//! * the complete metadata (PROCESS, VMAS, THREADS, FDS, SIGNALS, TCP) as the
//!   verified payload bytes plus their decoded form, the pagemap, and the
//!   image header (image_id, sequence).
//!
//! Why one map entry per 4 KiB page and not runs: an incremental replaces
//! an arbitrary set of single pages (dirty tracking is per page) and a
//! `MADV_DONTNEED` drops arbitrary sub-ranges, so runs would be split and
//! re-merged on every apply; per page, an apply costs O(changed · log n)
//! for the replacements plus one ordered pass to drop pages that are no
//! longer defined, and the index overhead (key + pointer + B-tree node
//! share, a few dozen bytes) is under 1 % of the 4 KiB it indexes. The
//! B-tree keeps addresses ordered, which is the order a full image needs.
//!
//! [`Store::apply`] verifies everything (every CRC and structural rule via
//! rrc-image, then parent and sequence against the committed image, then
//! that every page the image leaves to its ancestors is held here) before
//! it changes anything; the change is staged in new buffers and committed
//! by infallible moves, so a rejected image leaves the store exactly as it
//! was. [`Store::write_image`] writes the committed state as one full
//! image that `rrc restore` accepts.

pub mod datadir;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use rrc_image::sections::{PagemapEntry, SectionKind, PME_IN_IMAGE};
use rrc_image::{Image, ImageError, ImageHeader, ImageId, ImageWriter, PagemapBuilder, VerifyPages, IMG_F_FULL, PAGE_SIZE, VERSION};
use serde::Serialize;

/// One page of memory.
pub type Page = [u8; PAGE_SIZE as usize];

/// Why an image was not applied. The store is unchanged in every case.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Reading the image failed, or it is truncated, corrupt (any CRC) or
    /// malformed: rrc-image's error, naming the file, section and offset.
    #[error(transparent)]
    Image(#[from] ImageError),
    #[error("{path}: reading image: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: incremental image {image_id} (sequence {sequence}) but the store holds no committed image; a full image must come first")]
    NoBase { path: PathBuf, image_id: ImageId, sequence: u64 },
    #[error("{path}: image {image_id} has parent {parent_id}, but the committed image is {committed}")]
    WrongParent { path: PathBuf, image_id: ImageId, parent_id: ImageId, committed: ImageId },
    #[error("{path}: image {image_id} has sequence {sequence}, expected {expected} (committed sequence + 1)")]
    OutOfOrder { path: PathBuf, image_id: ImageId, sequence: u64, expected: u64 },
    #[error("{path}: page {vaddr:#x} is defined but left to an ancestor, and the store does not hold it")]
    PageMissing { path: PathBuf, vaddr: u64 },
}

/// Errors of [`Store::write_image`].
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("the store holds no committed image")]
    Empty,
    #[error("{path}: {what}: {source}")]
    Io { path: PathBuf, what: &'static str, source: std::io::Error },
}

/// The committed metadata of the newest image.
#[derive(Debug, Clone)]
struct Meta {
    header: ImageHeader,
    /// Verified payloads, byte for byte as the image held them.
    process: Vec<u8>,
    vmas: Vec<u8>,
    threads: Vec<u8>,
    fds: Vec<u8>,
    signals: Vec<u8>,
    /// The newest image's TCP stream table (not merged: it describes
    /// that snapshot only, so the latest replaces the previous).
    tcp: Vec<u8>,
    /// The newest image's PROCATTR payload, if it has one.
    procattr: Option<Vec<u8>>,
    /// The newest image's CREDS payload, if it has one.
    creds: Option<Vec<u8>>,
    /// The newest image's SYSVIPC payload, if it has one (it describes
    /// that snapshot's IPC namespace whole).
    sysvipc: Option<Vec<u8>>,
    /// The newest image's FILEIDS payload, if it has one (its mappings').
    file_ids: Option<Vec<u8>>,
    /// The newest image's pagemap (its flags as received).
    pagemap: Vec<PagemapEntry>,
    /// The decoded image (for summaries); its page offsets refer to the
    /// received bytes, which the store does not keep.
    image: Image,
    /// The full image this state descends from.
    base_id: ImageId,
}

/// The committed state of one protected process.
#[derive(Debug, Default)]
pub struct Store {
    meta: Option<Meta>,
    pages: BTreeMap<u64, Box<Page>>,
    applied: u64,
}

/// What [`Store::apply`] changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ApplyReport {
    pub sequence: u64,
    pub full: bool,
    /// Pages whose data came with the image (IN_IMAGE).
    pub pages_replaced: u64,
    /// Pages held before and no longer defined (dropped).
    pub pages_dropped: u64,
    pub pages_held: u64,
}

/// [`Store::summary`].
#[derive(Debug, Clone, Serialize)]
pub struct StoreSummary {
    pub image_id: Option<String>,
    pub base_id: Option<String>,
    pub sequence: Option<u64>,
    pub created_ns: Option<u64>,
    /// Images applied since the store was created.
    pub images_applied: u64,
    pub vmas: usize,
    pub threads: usize,
    pub fds: usize,
    pub tcp_streams: usize,
    pub pagemap_entries: usize,
    pub pages: u64,
    /// Page data held (pages × 4096).
    pub page_bytes: u64,
    /// Metadata payloads and decoded pagemap held.
    pub metadata_bytes: u64,
    /// Estimate of the page index itself (B-tree entries: key + pointer,
    /// node overhead excluded).
    pub index_bytes: u64,
    pub bytes_held: u64,
}

fn new_page(data: &[u8]) -> Box<Page> {
    let mut p: Box<Page> = vec![0u8; PAGE_SIZE as usize].into_boxed_slice().try_into().expect("page size");
    p.copy_from_slice(data);
    p
}

impl Store {
    pub fn new() -> Store {
        Store::default()
    }

    /// Reads `path` into memory once and applies it (the bytes verified are
    /// the bytes applied).
    pub fn apply_file(&mut self, path: &Path) -> Result<ApplyReport, StoreError> {
        let bytes = std::fs::read(path).map_err(|source| StoreError::Io { path: path.to_path_buf(), source })?;
        self.apply(path, &bytes)
    }

    /// Verifies the image in `bytes` (`path` names it in errors) against the
    /// committed state and commits it, or changes nothing.
    pub fn apply(&mut self, path: &Path, bytes: &[u8]) -> Result<ApplyReport, StoreError> {
        // 1. Every CRC and structural rule of image.h.
        let image = Image::from_bytes(path, bytes, VerifyPages::Yes)?;
        let h = image.header;
        let p = || path.to_path_buf();

        // 2. Its place after the committed image. A full image starts a new
        // base (the primary restarted its chain) whatever came before.
        if !h.is_full() {
            let Some(m) = &self.meta else {
                return Err(StoreError::NoBase { path: p(), image_id: h.image_id, sequence: h.sequence });
            };
            if h.parent_id != m.header.image_id {
                return Err(StoreError::WrongParent { path: p(), image_id: h.image_id, parent_id: h.parent_id, committed: m.header.image_id });
            }
            if h.sequence != m.header.sequence + 1 {
                return Err(StoreError::OutOfOrder { path: p(), image_id: h.image_id, sequence: h.sequence, expected: m.header.sequence + 1 });
            }
            // 3. Every defined page it leaves to its ancestors is held here.
            for e in image.pagemap.iter().filter(|e| !e.in_image()) {
                for k in 0..u64::from(e.nr_pages) {
                    let a = e.vaddr + k * PAGE_SIZE;
                    if !self.pages.contains_key(&a) {
                        return Err(StoreError::PageMissing { path: p(), vaddr: a });
                    }
                }
            }
        }

        // 4. Stage: new page buffers and metadata, nothing committed yet.
        let payload = |k: SectionKind| -> Vec<u8> {
            let s = image.sections.iter().find(|s| s.kind == k).expect("verified image has every section");
            let off = (s.offset + rrc_image::SECTION_HEADER_SIZE as u64) as usize;
            bytes[off..off + s.length as usize].to_vec()
        };
        let mut staged: Vec<(u64, Box<Page>)> = Vec::with_capacity(image.pages_in_image() as usize);
        let mut off = image.pages_offset as usize;
        for e in image.pagemap.iter().filter(|e| e.in_image()) {
            for k in 0..u64::from(e.nr_pages) {
                staged.push((e.vaddr + k * PAGE_SIZE, new_page(&bytes[off..off + PAGE_SIZE as usize])));
                off += PAGE_SIZE as usize;
            }
        }
        let base_id = if h.is_full() { h.image_id } else { self.meta.as_ref().map(|m| m.base_id).unwrap_or(h.image_id) };
        let meta = Meta {
            header: h,
            process: payload(SectionKind::Process),
            vmas: payload(SectionKind::Vmas),
            threads: payload(SectionKind::Threads),
            fds: payload(SectionKind::Fds),
            signals: payload(SectionKind::Signals),
            tcp: payload(SectionKind::Tcp),
            procattr: image.sections.iter().any(|s| s.kind == SectionKind::ProcAttr).then(|| payload(SectionKind::ProcAttr)),
            creds: image.sections.iter().any(|s| s.kind == SectionKind::Creds).then(|| payload(SectionKind::Creds)),
            sysvipc: image.sections.iter().any(|s| s.kind == SectionKind::SysvIpc).then(|| payload(SectionKind::SysvIpc)),
            file_ids: image.sections.iter().any(|s| s.kind == SectionKind::FileIds).then(|| payload(SectionKind::FileIds)),
            pagemap: image.pagemap.clone(),
            image,
            base_id,
        };

        // 5. Commit: moves and removals only, nothing here can fail.
        let before = self.pages.len() as u64;
        let replaced = staged.len() as u64;
        let dropped;
        if h.is_full() {
            let fresh: BTreeMap<u64, Box<Page>> = staged.into_iter().collect();
            dropped = self.pages.keys().filter(|a| !fresh.contains_key(a)).count() as u64;
            self.pages = fresh;
        } else {
            let mut kept_new = 0u64;
            for (a, pg) in staged {
                if self.pages.insert(a, pg).is_none() {
                    kept_new += 1;
                }
            }
            // Pages no longer defined: zero (anonymous) or back to the file
            // (file-private), per image.h; the store forgets them.
            let pm = &meta.pagemap;
            self.pages.retain(|&a, _| {
                let i = pm.partition_point(|e| e.end() <= a);
                i < pm.len() && pm[i].vaddr <= a
            });
            dropped = before + kept_new - self.pages.len() as u64;
        }
        self.meta = Some(meta);
        self.applied += 1;
        Ok(ApplyReport { sequence: h.sequence, full: h.is_full(), pages_replaced: replaced, pages_dropped: dropped, pages_held: self.pages.len() as u64 })
    }

    /// The committed image's header (None before the first apply).
    pub fn committed(&self) -> Option<&ImageHeader> {
        self.meta.as_ref().map(|m| &m.header)
    }

    /// The committed image, decoded (VMAs, threads, fds, ...).
    pub fn image(&self) -> Option<&Image> {
        self.meta.as_ref().map(|m| &m.image)
    }

    /// The committed TCP stream table (the newest image's; empty before the
    /// first apply): what the gate and a failover's TCP_REPAIR work from.
    pub fn tcp_streams(&self) -> &[rrc_image::sections::TcpStream] {
        self.meta.as_ref().map_or(&[], |m| &m.image.tcp)
    }

    /// The data of the defined page at `addr` (page aligned).
    pub fn page(&self, addr: u64) -> Option<&Page> {
        self.pages.get(&addr).map(|b| &**b)
    }

    pub fn pages(&self) -> impl Iterator<Item = (u64, &Page)> {
        self.pages.iter().map(|(&a, p)| (a, &**p))
    }

    /// Bytes held: page data + metadata + page index estimate.
    pub fn bytes_held(&self) -> u64 {
        let s = self.summary();
        s.bytes_held
    }

    pub fn summary(&self) -> StoreSummary {
        let n = self.pages.len() as u64;
        let page_bytes = n * PAGE_SIZE;
        let index_bytes = n * (8 + std::mem::size_of::<Box<Page>>() as u64);
        let metadata_bytes = self.meta.as_ref().map_or(0, |m| {
            (m.process.len() + m.vmas.len() + m.threads.len() + m.fds.len() + m.signals.len() + m.tcp.len()) as u64
                + (m.pagemap.len() * std::mem::size_of::<PagemapEntry>()) as u64
        });
        let m = self.meta.as_ref();
        StoreSummary {
            image_id: m.map(|m| m.header.image_id.hex()),
            base_id: m.map(|m| m.base_id.hex()),
            sequence: m.map(|m| m.header.sequence),
            created_ns: m.map(|m| m.header.created_ns),
            images_applied: self.applied,
            vmas: m.map_or(0, |m| m.image.vmas.len()),
            threads: m.map_or(0, |m| m.image.threads.len()),
            fds: m.map_or(0, |m| m.image.fds.len()),
            tcp_streams: m.map_or(0, |m| m.image.tcp.len()),
            pagemap_entries: m.map_or(0, |m| m.pagemap.len()),
            pages: n,
            page_bytes,
            metadata_bytes,
            index_bytes,
            bytes_held: page_bytes + metadata_bytes + index_bytes,
        }
    }

    /// Encodes the committed state as one full image with the given
    /// header fields into `w`; returns the image size. Byte layout as
    /// snapshot.c writes it (see rrc_image::ImageWriter).
    pub fn encode_full<W: Write>(&self, w: W, image_id: ImageId, created_ns: u64) -> Result<(W, u64), std::io::Error> {
        let m = self.meta.as_ref().ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "the store holds no committed image"))?;
        let header = ImageHeader { version: VERSION, flags: IMG_F_FULL, image_id, parent_id: ImageId::default(), sequence: 0, created_ns };
        // The pagemap of a full image: every held page IN_IMAGE, runs merged
        // as snapshot.c merges them.
        let mut pm = PagemapBuilder::new();
        let mut chunks: Vec<&[u8]> = Vec::with_capacity(self.pages.len());
        for (&a, pg) in &self.pages {
            pm.add(a, a + PAGE_SIZE, PME_IN_IMAGE);
            chunks.push(&pg[..]);
        }
        let mut wr = ImageWriter::new(w, &header)?;
        wr.section(SectionKind::Process, &m.process)?;
        wr.section(SectionKind::Vmas, &m.vmas)?;
        wr.section(SectionKind::Pagemap, &rrc_image::encode_pagemap(pm.entries()))?;
        wr.section(SectionKind::Threads, &m.threads)?;
        wr.section(SectionKind::Fds, &m.fds)?;
        wr.section(SectionKind::Signals, &m.signals)?;
        if let Some(a) = &m.procattr {
            wr.section(SectionKind::ProcAttr, a)?;
        }
        if let Some(c) = &m.creds {
            wr.section(SectionKind::Creds, c)?;
        }
        if let Some(s) = &m.sysvipc {
            wr.section(SectionKind::SysvIpc, s)?;
        }
        if let Some(f) = &m.file_ids {
            wr.section(SectionKind::FileIds, f)?;
        }
        wr.section(SectionKind::Tcp, &m.tcp)?;
        wr.section_chunks(SectionKind::Pages, &chunks)?;
        wr.finish()
    }

    /// Writes the committed state as one full image at `path` (written to
    /// `path.tmp`, synced, renamed: a crash leaves no half image at `path`).
    ///
    /// The image gets a fresh random image_id and sequence 0 (image.h:
    /// FULL ⇔ no parent ⇔ sequence 0, and an id names one file); its
    /// created_ns is the committed image's (the state is that snapshot's).
    /// Returns the new image id.
    pub fn write_image(&self, path: &Path) -> Result<ImageId, WriteError> {
        let (id, created_ns) = self.new_image_header()?;
        self.write_image_as(path, id, created_ns)?;
        Ok(id)
    }

    /// Writes the committed state as one full image to `w` (a pipe to
    /// `rrc-restore --image-stream`: a failover restores without writing
    /// the image to a file first); header fields as [`Store::write_image`].
    /// Returns the image id and size.
    pub fn stream_image<W: Write>(&self, w: W) -> Result<(ImageId, u64), WriteError> {
        let (id, _) = self.new_image_header()?;
        Ok((id, self.stream_image_as(w, id)?))
    }

    /// [`Store::stream_image`] with an image id chosen before (a failover
    /// in rr mode names the restored image in the log it replays).
    pub fn stream_image_as<W: Write>(&self, w: W, id: ImageId) -> Result<u64, WriteError> {
        let (_, created_ns) = self.new_image_header()?;
        let (_, n) = self.encode_buffered(w, id, created_ns).map_err(|source| WriteError::Io { path: "<image stream>".into(), what: "writing", source })?;
        Ok(n)
    }

    /// A fresh image id and the committed image's creation time: the
    /// header of a full image of the committed state.
    fn new_image_header(&self) -> Result<(ImageId, u64), WriteError> {
        let m = self.meta.as_ref().ok_or(WriteError::Empty)?;
        let id = ImageId::random().map_err(|source| WriteError::Io { path: "/dev/urandom".into(), what: "reading a random image id", source })?;
        Ok((id, m.header.created_ns))
    }

    /// [`Store::encode_full`] through a 1 MiB buffer, flushed; returns the
    /// sink and the image size.
    fn encode_buffered<W: Write>(&self, w: W, image_id: ImageId, created_ns: u64) -> Result<(W, u64), std::io::Error> {
        let (w, n) = self.encode_full(BufWriter::with_capacity(1 << 20, w), image_id, created_ns)?;
        Ok((w.into_inner().map_err(|e| e.into_error())?, n))
    }

    /// [`Store::write_image`] with the header fields given (diagnostics:
    /// re-encoding a full image with its own id must give its bytes).
    pub fn write_image_as(&self, path: &Path, image_id: ImageId, created_ns: u64) -> Result<u64, WriteError> {
        if self.meta.is_none() {
            return Err(WriteError::Empty);
        }
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        fn io<'p>(what: &'static str, p: &'p Path) -> impl FnOnce(std::io::Error) -> WriteError + 'p {
            move |source| WriteError::Io { path: p.to_path_buf(), what, source }
        }
        let f = File::create(&tmp).map_err(io("creating", &tmp))?;
        let (f, n) = self.encode_buffered(f, image_id, created_ns).map_err(io("writing", &tmp))?;
        f.sync_all().map_err(io("syncing", &tmp))?;
        std::fs::rename(&tmp, path).map_err(io("renaming into place", path))?;
        Ok(n)
    }
}
