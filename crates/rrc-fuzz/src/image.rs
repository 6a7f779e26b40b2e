//! Checkpoint images as a backup receives them: `Image::from_bytes` and
//! `Store::apply`.
//!
//! Random mutations break a CRC almost always, and the reader rejects the
//! image before anything else is looked at. So each input is tried twice:
//! as it is (every CRC check exercised) and with its CRCs and END fields
//! made right by [`fix_up`] (every structural rule behind them exercised).

use std::path::Path;

use rrc_image::sections::SectionKind;
use rrc_image::{Image, ImageHeader, ImageId, ImageWriter, VerifyPages, IMAGE_HEADER_SIZE, MAGIC, SECTION_HEADER_SIZE};
use rrc_store::Store;

fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// `bytes` with the image header CRC, every complete section's header and
/// payload CRC, and END's section count and offset set to what a reader
/// computes: the image a writer would have produced from this content.
pub fn fix_up(bytes: &[u8]) -> Vec<u8> {
    let mut b = bytes.to_vec();
    if b.len() < IMAGE_HEADER_SIZE {
        return b;
    }
    let crc = crc32c::crc32c(&b[..64]);
    b[64..68].copy_from_slice(&crc.to_le_bytes());
    let mut off = IMAGE_HEADER_SIZE;
    let mut sections = 0u32;
    while b.len() - off >= SECTION_HEADER_SIZE {
        let payload = off + SECTION_HEADER_SIZE;
        let len = le_u64(&b, off + 8);
        let complete = len <= (b.len() - payload) as u64;
        if complete {
            let len = len as usize;
            if b[off..off + 4] == SectionKind::End.raw().to_le_bytes() && len == 16 {
                b[payload..payload + 4].copy_from_slice(&sections.to_le_bytes());
                b[payload + 8..payload + 16].copy_from_slice(&(off as u64).to_le_bytes());
            }
            let crc = crc32c::crc32c(&b[payload..payload + len]);
            b[off + 16..off + 20].copy_from_slice(&crc.to_le_bytes());
        }
        let crc = crc32c::crc32c(&b[off..off + 20]);
        b[off + 20..off + 24].copy_from_slice(&crc.to_le_bytes());
        sections += 1;
        // next section: after the payload padded to 8 (if it is there)
        match len.checked_add(7).map(|l| l & !7) {
            Some(l) if complete && l <= (b.len() - payload) as u64 => off = payload + l as usize,
            _ => break,
        }
    }
    b
}

/// The payload of `kind` in `bytes` (a verified image's own offsets).
fn payload<'b>(img: &Image, bytes: &'b [u8], kind: SectionKind) -> &'b [u8] {
    let s = img.sections.iter().find(|s| s.kind == kind).expect("a verified image has every required section");
    let at = s.offset as usize + SECTION_HEADER_SIZE;
    &bytes[at..at + s.length as usize]
}

/// A verified image re-encoded in image.h's section order (FILEOPS, which
/// `ImageWriter` does not write, left out) must verify again and decode to
/// the same content.
fn check_reencodes(img: &Image, bytes: &[u8]) {
    let mut w = ImageWriter::new(Vec::new(), &img.header).expect("a verified header is writable");
    for kind in SectionKind::REQUIRED {
        w.section(kind, payload(img, bytes, kind)).expect("writing to a Vec");
    }
    let (out, n) = w.finish().expect("every required section was written");
    assert_eq!(n as usize, out.len());
    let again = match Image::from_bytes(Path::new("re-encoded"), &out, VerifyPages::Yes) {
        Ok(i) => i,
        Err(e) => panic!("a verified image re-encodes to one that fails: {e}"),
    };
    assert_eq!(again.header, img.header);
    assert_eq!(again.process, img.process);
    assert_eq!(again.vmas, img.vmas);
    assert_eq!(again.pagemap, img.pagemap);
    assert_eq!(again.threads, img.threads);
    assert_eq!(again.fds, img.fds);
    assert_eq!(again.signals, img.signals);
    assert_eq!(again.tcp, img.tcp);
    assert_eq!(again.pages_bytes, img.pages_bytes);
}

fn check_image(bytes: &[u8], verify: VerifyPages) {
    let Ok(img) = Image::from_bytes(Path::new("fuzz"), bytes, verify) else { return };
    let s = img.summary();
    serde_json::to_string(&s).expect("an image summary serializes");
    assert_eq!(s.pages_in_image * rrc_image::PAGE_SIZE, img.pages_bytes);
    assert!(img.pages_offset + img.pages_bytes <= bytes.len() as u64);
    if let Some(f) = &img.fileops {
        serde_json::to_string(&f.summary()).expect("a FILEOPS summary serializes");
    }
    check_reencodes(&img, bytes);
}

/// `Image::from_bytes` on the input as received, then with its CRCs fixed.
pub fn image(data: &[u8]) {
    check_image(data, VerifyPages::Yes);
    let fixed = fix_up(data);
    check_image(&fixed, VerifyPages::Yes);
    check_image(&fixed, VerifyPages::No);
}

/// What must not change when the store rejects an image.
fn fingerprint(s: &Store) -> (Option<ImageHeader>, u64, u64) {
    let h = s.pages().fold(0u64, |h, (a, p)| h.rotate_left(5) ^ a ^ u64::from(crc32c::crc32c(p)));
    (s.committed().copied(), s.summary().pages, h)
}

/// The inputs as a backup receives them in sequence: the input cut before
/// each image magic, each piece's CRCs fixed.
fn pieces(data: &[u8]) -> Vec<Vec<u8>> {
    let mut starts: Vec<usize> = data.windows(MAGIC.len()).enumerate().filter(|(_, w)| *w == MAGIC).map(|(i, _)| i).collect();
    if starts.first() != Some(&0) {
        starts.insert(0, 0);
    }
    starts.push(data.len());
    starts.windows(2).map(|w| fix_up(&data[w[0]..w[1]])).collect()
}

/// `Store::apply` fed every image of the input in order, as a backup
/// applies what its primary sends: a rejected image leaves the store as it
/// was; after an accepted one, the committed state written as one full
/// image verifies and holds exactly the store's pages.
pub fn store(data: &[u8]) {
    let mut s = Store::new();
    for img in pieces(data) {
        let before = fingerprint(&s);
        if s.apply(Path::new("fuzz"), &img).is_err() {
            assert_eq!(fingerprint(&s), before, "a rejected image changed the store");
            continue;
        }
        serde_json::to_string(&s.summary()).expect("a store summary serializes");
        let (full, n) = s.encode_full(Vec::new(), ImageId([0x5a; 16]), 1).expect("a committed store encodes");
        assert_eq!(n as usize, full.len());
        let back = match Image::from_bytes(Path::new("merged"), &full, VerifyPages::Yes) {
            Ok(i) => i,
            Err(e) => panic!("the store's merged image fails to verify: {e}"),
        };
        assert_eq!(back.pages_in_image(), s.summary().pages);
        let mut fresh = Store::new();
        fresh.apply(Path::new("merged"), &full).expect("the merged image applies to a fresh store");
        let (f, m) = (fingerprint(&fresh), fingerprint(&s));
        assert_eq!((f.1, f.2), (m.1, m.2), "the merged image holds other pages than the store");
    }
}
