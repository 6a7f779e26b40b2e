//! The store against the shared vectors of tests/vectors/ (written by
//! runtime/tests/vectors/mkvectors.c): merging, rejection without change,
//! writing a full image that rrc-image reads back, and byte equality with
//! the C-written bytes.

use std::path::{Path, PathBuf};

use rrc_image::sections::{parse_pagemap, PagemapEntry, SectionKind, PME_IN_IMAGE};
use rrc_image::{Image, ImageHeader, ImageId, ImageWriter, VerifyPages, IMAGE_FILE_NAME, IMAGE_HEADER_SIZE, PAGE_SIZE, SECTION_HEADER_SIZE};
use rrc_store::{Store, StoreError};

fn vector(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors").join(name).join(IMAGE_FILE_NAME)
}

fn bytes(name: &str) -> Vec<u8> {
    std::fs::read(vector(name)).unwrap()
}

/// vectors.json "page_pattern": byte j of page k (PAGES order) of the image
/// with tag t is (t*7 + k*31 + j) % 251; full has t=1, incr t=2.
fn pattern(tag: u64, k: u64) -> Vec<u8> {
    (0..PAGE_SIZE).map(|j| ((tag * 7 + k * 31 + j) % 251) as u8).collect()
}

/// Everything the store holds, as bytes: its state as one full image with
/// a fixed header, plus the committed header and the summary.
fn fingerprint(s: &Store) -> (Vec<u8>, Option<ImageHeader>, String) {
    let img = if s.committed().is_some() { s.encode_full(Vec::new(), ImageId([7; 16]), 1).unwrap().0 } else { Vec::new() };
    (img, s.committed().copied(), serde_json::to_string(&s.summary()).unwrap())
}

fn full_then_incr() -> Store {
    let mut s = Store::new();
    let r = s.apply_file(&vector("full")).unwrap();
    assert!(r.full && r.pages_replaced == 7 && r.pages_held == 7);
    let r = s.apply_file(&vector("incr")).unwrap();
    assert_eq!((r.sequence, r.pages_replaced, r.pages_dropped, r.pages_held), (1, 4, 0, 9));
    s
}

#[test]
fn merges_full_and_incremental() {
    let s = full_then_incr();
    // Where each page's data must come from: (address, tag, k).
    let expect = [
        (0x401000u64, 1u64, 0u64),
        (0x600000, 2, 0),
        (0x601000, 1, 2),
        (0x602000, 2, 1),
        (0x7f0000000000, 1, 3),
        (0x7f0000001000, 1, 4),
        (0x7f0000002000, 1, 5),
        (0x7f0000010000, 2, 2),
        (0x7ffd00001000, 2, 3),
    ];
    assert_eq!(s.pages().map(|(a, _)| a).collect::<Vec<_>>(), expect.iter().map(|e| e.0).collect::<Vec<_>>());
    for (a, t, k) in expect {
        assert_eq!(&s.page(a).unwrap()[..], &pattern(t, k)[..], "page {a:#x}");
    }
    let h = s.committed().unwrap();
    assert_eq!(h.image_id, ImageId(std::array::from_fn(|i| 0xb0 + i as u8)));
    assert_eq!(h.sequence, 1);
    let incr = Image::open(&vector("incr")).unwrap();
    let img = s.image().unwrap();
    assert_eq!((&img.vmas, &img.threads, &img.fds, &img.process), (&incr.vmas, &incr.threads, &incr.fds, &incr.process));
    let sum = s.summary();
    assert_eq!(sum.pages, 9);
    assert_eq!(sum.page_bytes, 9 * PAGE_SIZE);
    assert!(sum.bytes_held > sum.page_bytes + sum.metadata_bytes);
    assert_eq!(s.bytes_held(), sum.bytes_held);
}

fn assert_rejected_unchanged(s: &mut Store, name: &str, img: &[u8], check: impl Fn(&StoreError) -> bool) {
    let before = fingerprint(s);
    let e = s.apply(Path::new(name), img).expect_err(name);
    assert!(check(&e), "{name}: unexpected error {e}");
    assert!(e.to_string().contains(name), "{name}: error does not name the image: {e}");
    assert!(fingerprint(s) == before, "{name}: store changed by a rejected image");
}

/// The incremental vector with another sequence number (header CRC redone).
fn incr_with_sequence(seq: u64) -> Vec<u8> {
    let mut b = bytes("incr");
    let mut h = Image::from_bytes(Path::new("incr"), &b, VerifyPages::Yes).unwrap().header;
    h.sequence = seq;
    b[..IMAGE_HEADER_SIZE].copy_from_slice(&h.encode());
    b
}

#[test]
fn rejected_images_leave_the_store_unchanged() {
    for base in [&["full"][..], &["full", "incr"][..]] {
        let mut s = Store::new();
        for v in base {
            s.apply_file(&vector(v)).unwrap();
        }
        // corrupt: one bit of page data, the header CRC, a section header CRC
        for v in ["bad-payload-crc", "bad-header-crc", "bad-section-crc", "truncated", "truncated-mid", "version2"] {
            assert_rejected_unchanged(&mut s, v, &bytes(v), |e| matches!(e, StoreError::Image(_)));
        }
        // a corrupt byte in every section of the incremental image
        let incr = bytes("incr");
        let img = Image::open(&vector("incr")).unwrap();
        for sec in &img.sections {
            let mut b = incr.clone();
            b[(sec.offset as usize) + SECTION_HEADER_SIZE + (sec.length as usize) / 2] ^= 0x10;
            assert_rejected_unchanged(&mut s, &format!("incr-corrupt-{}", sec.kind), &b, |e| matches!(e, StoreError::Image(_)));
        }
        // truncated anywhere
        for cut in [10usize, 100, incr.len() / 2, incr.len() - 1] {
            assert_rejected_unchanged(&mut s, &format!("incr-cut-{cut}"), &incr[..cut], |e| matches!(e, StoreError::Image(_)));
        }
        // skipped sequence
        let committed = s.committed().unwrap().sequence;
        assert_rejected_unchanged(&mut s, "incr-seq-skip", &incr_with_sequence(committed + 2), |e| {
            matches!(e, StoreError::OutOfOrder { .. } | StoreError::WrongParent { .. })
        });
    }
    // wrong parent: incr on top of incr (its parent is full, committed is incr)
    let mut s = full_then_incr();
    assert_rejected_unchanged(&mut s, "incr-again", &bytes("incr"), |e| matches!(e, StoreError::WrongParent { .. }));
    // out of order with the right parent: sequence 5 on top of full
    let mut s = Store::new();
    s.apply_file(&vector("full")).unwrap();
    assert_rejected_unchanged(&mut s, "incr-seq5", &incr_with_sequence(5), |e| {
        matches!(e, StoreError::OutOfOrder { sequence: 5, expected: 1, .. })
    });
    // an incremental first
    let mut s = Store::new();
    assert_rejected_unchanged(&mut s, "incr-first", &bytes("incr"), |e| matches!(e, StoreError::NoBase { .. }));
}

/// An incremental child of `incr` built with the writer: `pagemap` as
/// given (no page data unless `pages`), metadata of `incr`.
fn child_of_incr(pagemap: &[PagemapEntry], pages: &[&[u8]]) -> Vec<u8> {
    let b = bytes("incr");
    let img = Image::from_bytes(Path::new("incr"), &b, VerifyPages::Yes).unwrap();
    let payload = |k: SectionKind| {
        let s = img.sections.iter().find(|s| s.kind == k).unwrap();
        let o = s.offset as usize + SECTION_HEADER_SIZE;
        b[o..o + s.length as usize].to_vec()
    };
    let h = ImageHeader { flags: 0, parent_id: img.header.image_id, image_id: ImageId([0xc0; 16]), sequence: 2, ..img.header };
    let mut w = ImageWriter::new(Vec::new(), &h).unwrap();
    w.section(SectionKind::Process, &payload(SectionKind::Process)).unwrap();
    w.section(SectionKind::Vmas, &payload(SectionKind::Vmas)).unwrap();
    w.section(SectionKind::Pagemap, &rrc_image::encode_pagemap(pagemap)).unwrap();
    w.section(SectionKind::Threads, &payload(SectionKind::Threads)).unwrap();
    w.section(SectionKind::Fds, &payload(SectionKind::Fds)).unwrap();
    w.section(SectionKind::Signals, &payload(SectionKind::Signals)).unwrap();
    w.section(SectionKind::Tcp, &payload(SectionKind::Tcp)).unwrap();
    w.section_chunks(SectionKind::Pages, pages).unwrap();
    w.finish().unwrap().0
}

#[test]
fn pages_no_longer_defined_are_dropped() {
    let mut s = full_then_incr();
    // MADV_DONTNEED of 0x7f0000001000..0x7f0000003000 and a rewrite of 0x600000.
    let page = vec![0xabu8; PAGE_SIZE as usize];
    let pm = [
        PagemapEntry { vaddr: 0x401000, nr_pages: 1, flags: 0 },
        PagemapEntry { vaddr: 0x600000, nr_pages: 1, flags: PME_IN_IMAGE },
        PagemapEntry { vaddr: 0x601000, nr_pages: 2, flags: 0 },
        PagemapEntry { vaddr: 0x7f0000000000, nr_pages: 1, flags: 0 },
        PagemapEntry { vaddr: 0x7f0000010000, nr_pages: 1, flags: 0 },
        PagemapEntry { vaddr: 0x7ffd00001000, nr_pages: 1, flags: 0 },
    ];
    let img = child_of_incr(&pm, &[&page]);
    let r = s.apply(Path::new("child"), &img).unwrap();
    assert_eq!((r.sequence, r.pages_replaced, r.pages_dropped, r.pages_held), (2, 1, 2, 7));
    assert!(s.page(0x7f0000001000).is_none() && s.page(0x7f0000002000).is_none());
    assert_eq!(&s.page(0x600000).unwrap()[..], &page[..]);
    assert_eq!(&s.page(0x7f0000000000).unwrap()[..], &pattern(1, 3)[..]);

    // A page left to ancestors that the store does not hold: rejected.
    let mut s2 = full_then_incr();
    let mut bad = pm.to_vec();
    bad[3].nr_pages = 4; // 0x7f0000003000 was never defined
    assert_rejected_unchanged(&mut s2, "child-missing", &child_of_incr(&bad, &[&page]), |e| {
        matches!(e, StoreError::PageMissing { vaddr: 0x7f0000003000, .. })
    });
}

#[test]
fn full_image_restarts_the_store() {
    let mut s = full_then_incr();
    let r = s.apply_file(&vector("full")).unwrap();
    assert_eq!((r.pages_replaced, r.pages_dropped, r.pages_held), (7, 2, 7));
    let mut fresh = Store::new();
    fresh.apply_file(&vector("full")).unwrap();
    assert!(fingerprint(&s).0 == fingerprint(&fresh).0);
}

#[test]
fn written_image_round_trips() {
    let s = full_then_incr();
    let dir = std::env::temp_dir().join(format!("rrc-store-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(IMAGE_FILE_NAME);
    let id = s.write_image(&path).unwrap();
    let img = Image::open(&path).unwrap();
    assert!(img.header.is_full() && img.header.sequence == 0 && img.header.parent_id.is_zero());
    assert_eq!(img.header.image_id, id);
    assert_ne!(id, s.committed().unwrap().image_id, "a written image gets a fresh id");
    assert_eq!(img.header.created_ns, s.committed().unwrap().created_ns);
    let order: Vec<SectionKind> = img.sections.iter().map(|x| x.kind).collect();
    assert_eq!(order, [SectionKind::REQUIRED.to_vec(), vec![SectionKind::End]].concat(), "snapshot.c's section order");
    // Page data, in pagemap order, equals the store's pages.
    let raw = std::fs::read(&path).unwrap();
    let mut off = img.pages_offset as usize;
    let mut n = 0;
    for e in &img.pagemap {
        assert!(e.in_image());
        for k in 0..u64::from(e.nr_pages) {
            let a = e.vaddr + k * PAGE_SIZE;
            assert_eq!(&raw[off..off + PAGE_SIZE as usize], &s.page(a).unwrap()[..], "page {a:#x}");
            off += PAGE_SIZE as usize;
            n += 1;
        }
    }
    assert_eq!(n, 9);
    // Merged adjacent runs: 0x600000..0x603000 is one entry.
    assert!(img.pagemap.iter().any(|e| e.vaddr == 0x600000 && e.nr_pages == 3));
    let incr = Image::open(&vector("incr")).unwrap();
    assert_eq!((&img.vmas, &img.threads, &img.fds, &img.signals, &img.process), (&incr.vmas, &incr.threads, &incr.fds, &incr.signals, &incr.process));
    // Applying the written image to a new store gives the same state.
    let mut t = Store::new();
    t.apply_file(&path).unwrap();
    assert!(fingerprint(&t).0 == fingerprint(&s).0);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The sections of an image as (kind, header + payload + padding bytes).
fn section_bytes(b: &[u8]) -> Vec<(SectionKind, Vec<u8>)> {
    let img = Image::from_bytes(Path::new("x"), b, VerifyPages::Yes).unwrap();
    img.sections
        .iter()
        .map(|s| {
            let end = s.offset as usize + SECTION_HEADER_SIZE + ((s.length as usize + 7) & !7);
            (s.kind, b[s.offset as usize..end].to_vec())
        })
        .collect()
}

#[test]
fn reencoded_full_vector_equals_the_c_bytes() {
    let c = bytes("full");
    let mut s = Store::new();
    s.apply(Path::new("full"), &c).unwrap();
    let h = *s.committed().unwrap();
    let (ours, n) = s.encode_full(Vec::new(), h.image_id, h.created_ns).unwrap();
    assert_eq!(n as usize, ours.len());
    assert_eq!(ours.len(), c.len());
    assert_eq!(ours[..IMAGE_HEADER_SIZE], c[..IMAGE_HEADER_SIZE], "image header");
    // mkvectors.c puts PAGES right after PAGEMAP, snapshot.c (and the
    // writer) after SIGNALS; every section is the same bytes, END too
    // (its offset is the same since all sections are the same size).
    let mut a = section_bytes(&ours);
    let mut b = section_bytes(&c);
    assert_eq!(a.last().unwrap(), b.last().unwrap(), "END");
    a.sort_by_key(|x| x.0);
    b.sort_by_key(|x| x.0);
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.0, y.0);
        assert!(x.1 == y.1, "section {} differs from the C-written bytes", x.0);
    }
    // The pagemap the writer built from pages equals the C one.
    let img = Image::open(&vector("full")).unwrap();
    let ours_img = Image::from_bytes(Path::new("ours"), &ours, VerifyPages::Yes).unwrap();
    assert_eq!(ours_img.pagemap, img.pagemap);
    assert!(parse_pagemap(&rrc_image::encode_pagemap(&img.pagemap), &img.vmas).unwrap() == img.pagemap);
}

#[test]
fn writer_enforces_section_order() {
    let h = ImageHeader { version: 1, flags: rrc_image::IMG_F_FULL, image_id: ImageId([1; 16]), parent_id: ImageId::default(), sequence: 0, created_ns: 0 };
    let mut w = ImageWriter::new(Vec::new(), &h).unwrap();
    assert!(w.section(SectionKind::Vmas, &[]).is_err());
    w.section(SectionKind::Process, &[0; 8]).unwrap();
    assert!(w.finish().is_err(), "END before the other sections");
    let bad = ImageHeader { sequence: 3, ..h };
    assert!(ImageWriter::new(Vec::new(), &bad).is_err());
}

/// The TCP stream table is not merged: the store holds the newest image's,
/// and the full image it writes carries exactly that table.
#[test]
fn store_keeps_the_latest_tcp_table() {
    let mut s = Store::new();
    s.apply_file(&vector("full")).unwrap();
    let full = Image::open(&vector("full")).unwrap();
    assert_eq!(s.tcp_streams(), &full.tcp[..]);
    assert_eq!(s.tcp_streams().len(), 5);
    s.apply_file(&vector("incr")).unwrap();
    let incr = Image::open(&vector("incr")).unwrap();
    assert_eq!(s.tcp_streams(), &incr.tcp[..]);
    assert_eq!(s.summary().tcp_streams, 2);
    let dir = std::env::temp_dir().join(format!("rrc-store-tcp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(IMAGE_FILE_NAME);
    s.write_image(&path).unwrap();
    let merged = Image::open(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(merged.tcp, incr.tcp);
    assert_eq!(merged.tcp[1].write_seq_rel, Some(1300));
}
