//! Writing checkpoint images: the encoding half of image.h.
//!
//! [`ImageWriter`] produces the same bytes as librrc's snapshot writer
//! (runtime/lib/snapshot.c) for the same content: the 72-byte header, the
//! sections in the order PROCESS, VMAS, PAGEMAP, THREADS, FDS, SIGNALS,
//! TCP, PAGES, each as a 24-byte header + payload + zero padding to 8, then END
//! (whose `image_bytes` is END's own offset). The order is enforced, so the
//! writer cannot produce an image the reader would reject for its layout.
//!
//! Metadata payloads (PROCESS, VMAS, THREADS, FDS, SIGNALS, TCP) are taken as
//! bytes: a component that re-emits an image it verified (the backup's
//! store) passes the payloads on unchanged, which keeps every byte the C
//! side wrote, reserved fields and unions included. The page map is built
//! with [`PagemapBuilder`], which merges runs exactly as snapshot.c's
//! `add_pme` does.

use std::io::{self, Write};

use crate::header::{encode_section, ImageHeader, IMAGE_HEADER_SIZE, SECTION_HEADER_SIZE, VERSION};
use crate::le::pad8;
use crate::sections::{PagemapEntry, SectionKind, END_SIZE, PAGEMAP_ENTRY_SIZE, PME_IN_IMAGE};
use crate::PAGE_SIZE;

fn invalid(m: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, m)
}

/// Streams one image into `W`, section by section, in image.h's order.
pub struct ImageWriter<W: Write> {
    w: W,
    off: u64,
    sections: u32,
    /// Index into `SectionKind::REQUIRED` of the next section allowed.
    next: usize,
    /// How many of `OPTIONAL` were passed (they go between SIGNALS and
    /// TCP, in that order, as snapshot.c places them).
    optional: usize,
}

/// The optional sections the writer takes, in their order.
const OPTIONAL: [SectionKind; 4] = [SectionKind::ProcAttr, SectionKind::Creds, SectionKind::SysvIpc, SectionKind::FileIds];

impl<W: Write> ImageWriter<W> {
    /// Writes the image header (its CRC computed here).
    pub fn new(mut w: W, header: &ImageHeader) -> io::Result<ImageWriter<W>> {
        if header.version != VERSION {
            return Err(invalid(format!("image version {} (this writer writes {VERSION})", header.version)));
        }
        if header.image_id.is_zero() {
            return Err(invalid("image_id is zero".into()));
        }
        if header.is_full() != header.parent_id.is_zero() || header.is_full() != (header.sequence == 0) {
            return Err(invalid("FULL flag, parent_id and sequence disagree (FULL <=> parent 0 <=> sequence 0)".into()));
        }
        w.write_all(&header.encode())?;
        Ok(ImageWriter { w, off: IMAGE_HEADER_SIZE as u64, sections: 0, next: 0, optional: 0 })
    }

    fn admit(&mut self, kind: SectionKind) -> io::Result<()> {
        let tcp_at = SectionKind::REQUIRED.iter().position(|&k| k == SectionKind::Tcp);
        if let Some(i) = OPTIONAL.iter().position(|&k| k == kind) {
            if Some(self.next) == tcp_at && i >= self.optional {
                self.optional = i + 1;
                return Ok(());
            }
            return Err(invalid(format!("section {kind} out of order: it goes once, between SIGNALS and TCP, PROCATTR, CREDS, SYSVIPC, FILEIDS in that order")));
        }
        match SectionKind::REQUIRED.iter().position(|&k| k == kind) {
            Some(i) if i == self.next => {
                self.next += 1;
                Ok(())
            }
            _ => Err(invalid(format!(
                "section {kind} out of order: expected {}",
                SectionKind::REQUIRED.get(self.next).map(|k| k.to_string()).unwrap_or_else(|| "END".into())
            ))),
        }
    }

    /// One section whose payload is in one piece.
    pub fn section(&mut self, kind: SectionKind, payload: &[u8]) -> io::Result<()> {
        self.admit(kind)?;
        let b = encode_section(kind.raw(), payload);
        self.w.write_all(&b)?;
        self.off += b.len() as u64;
        self.sections += 1;
        Ok(())
    }

    /// One section whose payload is the concatenation of `chunks` (PAGES
    /// from pages scattered in memory: no copy into one buffer). The CRC
    /// is computed in a first pass, since the header precedes the payload.
    pub fn section_chunks(&mut self, kind: SectionKind, chunks: &[&[u8]]) -> io::Result<()> {
        self.admit(kind)?;
        let len: u64 = chunks.iter().map(|c| c.len() as u64).sum();
        let crc = chunks.iter().fold(0u32, |c, b| crc32c::crc32c_append(c, b));
        let mut h = [0u8; SECTION_HEADER_SIZE];
        h[0..4].copy_from_slice(&kind.raw().to_le_bytes());
        h[8..16].copy_from_slice(&len.to_le_bytes());
        h[16..20].copy_from_slice(&crc.to_le_bytes());
        let hcrc = crc32c::crc32c(&h[..20]);
        h[20..24].copy_from_slice(&hcrc.to_le_bytes());
        self.w.write_all(&h)?;
        for c in chunks {
            self.w.write_all(c)?;
        }
        let pad = (pad8(len) - len) as usize;
        self.w.write_all(&[0u8; 8][..pad])?;
        self.off += SECTION_HEADER_SIZE as u64 + pad8(len);
        self.sections += 1;
        Ok(())
    }

    /// Writes END and returns the sink and the image's size in bytes.
    /// Fails if a required section was not written.
    pub fn finish(mut self) -> io::Result<(W, u64)> {
        if self.next != SectionKind::REQUIRED.len() {
            return Err(invalid(format!("END before section {}", SectionKind::REQUIRED[self.next])));
        }
        let mut e = [0u8; END_SIZE];
        e[0..4].copy_from_slice(&self.sections.to_le_bytes());
        e[8..16].copy_from_slice(&self.off.to_le_bytes());
        let b = encode_section(SectionKind::End.raw(), &e);
        self.w.write_all(&b)?;
        self.off += b.len() as u64;
        self.w.flush()?;
        Ok((self.w, self.off))
    }
}

/// Builds a PAGEMAP the way snapshot.c's `add_pme` does: a run is appended
/// to the previous entry when it continues it with the same flags (also
/// across VMA boundaries) and the sum stays below 0xffffffff pages; a run
/// is added in pieces of at most 2^31 pages.
#[derive(Debug, Default, Clone)]
pub struct PagemapBuilder {
    entries: Vec<PagemapEntry>,
    in_image: u64,
}

impl PagemapBuilder {
    pub fn new() -> PagemapBuilder {
        PagemapBuilder::default()
    }

    /// Adds the pages [a, b) (page aligned) with `flags`.
    pub fn add(&mut self, mut a: u64, b: u64, flags: u32) {
        debug_assert!(a % PAGE_SIZE == 0 && b % PAGE_SIZE == 0);
        while a < b {
            let n = ((b - a) / PAGE_SIZE).min(0x8000_0000);
            match self.entries.last_mut() {
                Some(l) if l.flags == flags && l.end() == a && u64::from(l.nr_pages) + n < 0xffff_ffff => {
                    l.nr_pages += n as u32;
                }
                _ => self.entries.push(PagemapEntry { vaddr: a, nr_pages: n as u32, flags }),
            }
            if flags & PME_IN_IMAGE != 0 {
                self.in_image += n;
            }
            a += n * PAGE_SIZE;
        }
    }

    /// Pages added with `RRC_PME_IN_IMAGE`.
    pub fn pages_in_image(&self) -> u64 {
        self.in_image
    }

    pub fn entries(&self) -> &[PagemapEntry] {
        &self.entries
    }
}

/// The PAGEMAP payload for `entries`.
pub fn encode_pagemap(entries: &[PagemapEntry]) -> Vec<u8> {
    let mut b = Vec::with_capacity(entries.len() * PAGEMAP_ENTRY_SIZE);
    for e in entries {
        b.extend_from_slice(&e.vaddr.to_le_bytes());
        b.extend_from_slice(&e.nr_pages.to_le_bytes());
        b.extend_from_slice(&e.flags.to_le_bytes());
    }
    b
}
