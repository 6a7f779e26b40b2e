//! The shared vectors of tests/vectors/ (written by runtime/tests/vectors/
//! mkvectors.c from image.h): every valid image must decode to exactly the
//! values in vectors.json, every broken one must fail with its error kind.

use std::path::PathBuf;

use rrc_image::sections::{FdDetail, Fown};
use rrc_image::{read_header, Chain, Image, ImageError, VerifyPages, IMAGE_FILE_NAME, PAGE_SIZE};
use serde_json::Value;

fn vectors() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors")
}

fn expected() -> Value {
    let text = std::fs::read_to_string(vectors().join("vectors.json")).expect("tests/vectors/vectors.json");
    serde_json::from_str(&text).expect("vectors.json parses")
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a u64: {v}"))
}

fn check_image(name: &str, img: &Image, e: &Value) {
    let h = &img.header;
    assert_eq!(h.image_id.hex(), e["image_id"].as_str().unwrap(), "{name} image_id");
    match e["parent_id"].as_str() {
        Some(p) => assert_eq!(h.parent_id.hex(), p, "{name} parent_id"),
        None => assert!(h.parent_id.is_zero(), "{name} parent_id"),
    }
    assert_eq!(h.sequence, u(&e["sequence"]), "{name} sequence");
    assert_eq!(h.is_full(), e["full"].as_bool().unwrap(), "{name} full");
    assert_eq!(h.created_ns, u(&e["created_ns"]), "{name} created_ns");
    assert_eq!(img.file_bytes, u(&e["file_bytes"]), "{name} file_bytes");
    assert_eq!(img.pages_in_image(), u(&e["pages_in_image"]), "{name} pages");

    let p = &img.process;
    let ep = &e["process"];
    assert_eq!(u64::from(p.pid), u(&ep["pid"]));
    assert_eq!(u64::from(p.umask), u(&ep["umask"]));
    assert_eq!(u64::from(p.nr_threads), u(&ep["nr_threads"]));
    assert_eq!(p.brk, u(&ep["brk"]));
    assert_eq!(p.start_stack, u(&ep["start_stack"]));
    let auxv: Vec<u64> = ep["auxv"].as_array().unwrap().iter().map(u).collect();
    assert_eq!(p.auxv, auxv);
    assert_eq!(p.restore_area_addr, u(&ep["restore_area_addr"]));
    assert_eq!(p.comm, ep["comm"].as_str().unwrap());
    assert_eq!(p.exe_path, ep["exe_path"].as_str().unwrap());
    assert_eq!(p.cwd, ep["cwd"].as_str().unwrap());
    assert_eq!(p.rlimits[0].cur, u(&ep["rlimit0"][0]));
    assert_eq!(p.rlimits[0].max, u(&ep["rlimit0"][1]));

    let ev = e["vmas"].as_array().unwrap();
    assert_eq!(img.vmas.len(), ev.len(), "{name} vmas");
    for (v, x) in img.vmas.iter().zip(ev) {
        assert_eq!(v.start, u(&x["start"]));
        assert_eq!(v.end, u(&x["end"]));
        assert_eq!(v.pgoff, u(&x["pgoff"]));
        assert_eq!(u64::from(v.prot), u(&x["prot"]));
        assert_eq!(serde_json::to_value(v.kind).unwrap(), x["kind"]);
        assert_eq!(u64::from(v.flags), u(&x["flags"]));
        assert_eq!(v.path, x["path"].as_str().unwrap());
    }
    let em = e["pagemap"].as_array().unwrap();
    assert_eq!(img.pagemap.len(), em.len(), "{name} pagemap");
    for (m, x) in img.pagemap.iter().zip(em) {
        assert_eq!(m.vaddr, u(&x["vaddr"]));
        assert_eq!(u64::from(m.nr_pages), u(&x["nr_pages"]));
        assert_eq!(u64::from(m.flags), u(&x["flags"]));
    }
    let et = e["threads"].as_array().unwrap();
    assert_eq!(img.threads.len(), et.len(), "{name} threads");
    for (t, x) in img.threads.iter().zip(et) {
        assert_eq!(u64::from(t.tid), u(&x["tid"]));
        assert_eq!(u64::from(t.flags), u(&x["flags"]));
        assert_eq!(t.fs_base, u(&x["fs_base"]));
        assert_eq!(u64::from(t.rseq_sig), u(&x["rseq_sig"]));
        assert_eq!(t.resume.rsp, u(&x["rsp"]));
        assert_eq!(t.resume.rip, u(&x["rip"]));
        assert_eq!(t.gregs[0], u(&x["gregs0"]));
        assert_eq!(t.sigmask, u(&x["sigmask"]));
    }
    let ef = e["fds"].as_array().unwrap();
    assert_eq!(img.fds.len(), ef.len(), "{name} fds");
    for (f, x) in img.fds.iter().zip(ef) {
        assert_eq!(i64::from(f.fd), x["fd"].as_i64().unwrap());
        assert_eq!(rrc_image::sections::FdKind::from_raw(u(&x["kind"]) as u32), Some(f.kind));
        assert_eq!(u64::from(f.fd_flags), u(&x["fd_flags"]));
        assert_eq!(u64::from(f.file_flags), u(&x["file_flags"]));
        assert_eq!(f.pos, u(&x["pos"]));
        assert_eq!(f.ino, u(&x["ino"]));
        assert_eq!(u64::from(f.mode), u(&x["mode"]));
        assert_eq!(f.path, x["path"].as_str().unwrap());
        assert_eq!(f.data.len() as u64, u(&x["data_len"]));
        match (&f.fown, x["fown"].as_object()) {
            (None, None) => {}
            (Some(o), Some(e)) => {
                let types = ["tid", "pid", "pgrp"];
                assert_eq!(o.owner_type, types[u(&e["owner_type"]) as usize], "{name} fd {} fown", f.fd);
                assert_eq!(i64::from(o.owner), e["owner"].as_i64().unwrap(), "{name} fd {} fown", f.fd);
                assert_eq!(u64::from(o.signal), u(&e["signal"]), "{name} fd {} fown", f.fd);
            }
            (got, want) => panic!("{name} fd {}: signal-driven I/O {got:?}, expected {want:?}", f.fd),
        }
    }
    for (sig, x) in e["signals"].as_object().unwrap() {
        let n: usize = sig.parse().unwrap();
        let s = &img.signals[n - 1];
        assert_eq!([s.handler, s.flags, s.restorer, s.mask], [u(&x[0]), u(&x[1]), u(&x[2]), u(&x[3])], "{name} signal {n}");
    }
    // Signals not listed are default (all zero).
    let listed: Vec<usize> = e["signals"].as_object().unwrap().keys().map(|k| k.parse().unwrap()).collect();
    for (i, s) in img.signals.iter().enumerate() {
        if !listed.contains(&(i + 1)) {
            assert_eq!([s.handler, s.flags, s.restorer, s.mask], [0; 4], "{name} signal {}", i + 1);
        }
    }
}

#[test]
fn valid_images_decode_to_the_json_values() {
    let exp = expected();
    for name in ["full", "incr"] {
        let img = Image::open(&vectors().join(name).join(IMAGE_FILE_NAME)).unwrap_or_else(|e| panic!("{name}: {e}"));
        check_image(name, &img, &exp["images"][name]);
    }
}

#[test]
fn fd_details_decode() {
    let img = Image::open(&vectors().join("full").join(IMAGE_FILE_NAME)).unwrap();
    let by_fd = |n: i32| img.fds.iter().find(|f| f.fd == n).unwrap();
    assert_eq!(by_fd(3).data, b"hello pipe");
    assert_eq!(by_fd(3).detail, FdDetail::Pipe { pipe_size: 65536, has_data: 1 });
    // the signal-driven I/O after the bytes in flight, the other end without
    assert_eq!(by_fd(3).fown, Some(Fown { owner_type: "pid", owner: 1, signal: 35 }));
    assert_eq!(by_fd(4).fown, None);
    assert_eq!(by_fd(5).detail, FdDetail::Eventfd { count: 7, semaphore: 1 });
    match &by_fd(6).detail {
        FdDetail::Epoll { entries } => {
            assert_eq!(entries.len(), 2);
            assert_eq!((entries[0].fd, entries[0].events, entries[0].data), (3, 1, 0x1122334455667788));
        }
        d => panic!("epoll detail {d:?}"),
    }
    assert_eq!(
        by_fd(7).detail,
        FdDetail::Timerfd { clockid: 1, flags: 0, ticks: 3, value_sec: 0, value_nsec: 250000000, interval_sec: 1, interval_nsec: 500000000 }
    );
    match &by_fd(8).detail {
        FdDetail::Socket { family: 2, sock_type: 1, protocol: 6, backlog: 128, local, .. } => {
            assert_eq!(local.addr, [2, 0, 0x1f, 0x90, 127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
        }
        d => panic!("listen detail {d:?}"),
    }
    match &by_fd(10).detail {
        FdDetail::Socket { family: 1, local, .. } => assert!(local.addr.starts_with(&[1, 0, b'/', b'r', b'u', b'n'])),
        d => panic!("control detail {d:?}"),
    }
}

#[test]
fn page_data_matches_the_pattern_and_crc() {
    let exp = expected();
    for (name, tag) in [("full", 1u64), ("incr", 2u64)] {
        let img = Image::open(&vectors().join(name).join(IMAGE_FILE_NAME)).unwrap();
        let bytes = std::fs::read(&img.path).unwrap();
        let data = &bytes[img.pages_offset as usize..(img.pages_offset + img.pages_bytes) as usize];
        assert_eq!(u64::from(crc32c::crc32c(data)), u(&exp["images"][name]["pages_crc"]));
        for (k, page) in data.chunks(PAGE_SIZE as usize).enumerate() {
            for (j, b) in page.iter().enumerate() {
                assert_eq!(u64::from(*b), (tag * 7 + k as u64 * 31 + j as u64) % 251, "{name} page {k} byte {j}");
            }
        }
    }
}

#[test]
fn chains_load_oldest_first() {
    let exp = expected();
    for (name, members) in exp["chains"].as_object().unwrap() {
        let chain = Chain::load(&vectors().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let ids: Vec<String> = chain.images.iter().map(|i| i.header.image_id.hex()).collect();
        let want: Vec<String> =
            members.as_array().unwrap().iter().map(|m| exp["images"][m.as_str().unwrap()]["image_id"].as_str().unwrap().to_string()).collect();
        assert_eq!(ids, want, "chain {name}");
        let s = chain.summary();
        assert_eq!(s.images.len(), want.len());
    }
    let s = Chain::load(&vectors().join("incr")).unwrap().summary();
    assert_eq!(s.images[1].pages_in_image, 4);
    assert_eq!(s.images[1].pages_defined, 9);
    assert_eq!(s.images[1].fds_by_kind.get("pipe"), Some(&2));
}

#[test]
fn broken_images_fail_with_their_error_kind() {
    let exp = expected();
    for (dir, kind) in exp["errors"].as_object().unwrap() {
        let err = Chain::load(&vectors().join(dir)).expect_err(dir);
        assert_eq!(err.kind(), kind.as_str().unwrap(), "{dir}: got {err}");
        let msg = err.to_string();
        assert!(msg.contains(dir.as_str()), "{dir}: message does not name the file: {msg}");
    }
}

#[test]
fn error_details_are_precise() {
    let v = vectors();
    match Chain::load(&v.join("version2")).unwrap_err() {
        ImageError::VersionMismatch { found: 2, expected: 1, .. } => {}
        e => panic!("{e}"),
    }
    match Chain::load(&v.join("missing-parent")).unwrap_err() {
        ImageError::MissingParent { dir, .. } => assert!(dir.ends_with("missing-parent/parent"), "{}", dir.display()),
        e => panic!("{e}"),
    }
    let e = Chain::load(&v.join("bad-payload-crc")).unwrap_err();
    assert!(e.to_string().contains("section PAGES"), "{e}");
    let e = Chain::load(&v.join("bad-section-crc")).unwrap_err();
    assert!(e.to_string().contains("section VMAS"), "{e}");
    // Page data is only read when asked for.
    assert!(Image::open_with(&v.join("bad-payload-crc").join(IMAGE_FILE_NAME), VerifyPages::No).is_ok());
    // The header alone of a good incremental image.
    let h = read_header(&v.join("incr").join(IMAGE_FILE_NAME)).unwrap();
    assert_eq!(h.sequence, 1);
    assert!(read_header(&v.join("bad-header-crc").join(IMAGE_FILE_NAME)).is_err());
}

/// Every single-byte truncation of a valid image fails (and never panics).
#[test]
fn every_truncation_fails() {
    let bytes = std::fs::read(vectors().join("incr").join(IMAGE_FILE_NAME)).unwrap();
    let dir = std::env::temp_dir().join(format!("rrc-image-trunc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(IMAGE_FILE_NAME);
    for cut in (0..bytes.len()).step_by(7) {
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let err = Image::open(&path).expect_err("truncated image accepted");
        assert_eq!(err.kind(), "truncated", "cut at {cut}: {err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Flipping any bit of a valid image is detected.
#[test]
fn every_bit_flip_in_metadata_is_detected() {
    let bytes = std::fs::read(vectors().join("full").join(IMAGE_FILE_NAME)).unwrap();
    let dir = std::env::temp_dir().join(format!("rrc-image-flip-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(IMAGE_FILE_NAME);
    for pos in (0..bytes.len()).step_by(13) {
        let mut b = bytes.clone();
        b[pos] ^= 1 << (pos % 8);
        std::fs::write(&path, &b).unwrap();
        if let Ok(_img) = Image::open(&path) {
            // Only section padding is outside every CRC.
            let img = Image::open(&vectors().join("full").join(IMAGE_FILE_NAME)).unwrap();
            let in_padding = img.sections.iter().any(|s| {
                let pe = s.offset + 24 + s.length;
                (pos as u64) >= pe && (pos as u64) < ((pe + 7) & !7)
            }) || (68..72).contains(&pos);
            assert!(in_padding, "flip at byte {pos} not detected");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The TCP stream table of each valid image decodes to vectors.json's
/// records, field for field (addresses as "ip:port").
#[test]
fn tcp_tables_decode() {
    let exp = expected();
    for name in ["full", "incr"] {
        let img = Image::open(&vectors().join(name).join(IMAGE_FILE_NAME)).unwrap();
        let et = exp["tcp"][name].as_array().unwrap();
        assert_eq!(img.tcp.len(), et.len(), "{name} tcp records");
        for (t, x) in img.tcp.iter().zip(et) {
            assert_eq!(u64::from(t.family), u(&x["family"]));
            assert_eq!(u64::from(t.state), u(&x["state"]));
            assert_eq!(u64::from(t.flags), u(&x["flags"]));
            assert_eq!(t.local.to_string(), x["local"].as_str().unwrap());
            assert_eq!(t.remote.to_string(), x["remote"].as_str().unwrap());
            assert_eq!(t.inode, u(&x["inode"]));
            assert_eq!(t.cookie, u(&x["cookie"]));
            assert_eq!(u64::from(t.rqueue), u(&x["rqueue"]));
            assert_eq!(u64::from(t.wqueue), u(&x["wqueue"]));
            assert_eq!(t.bytes_acked, u(&x["bytes_acked"]));
            assert_eq!(t.bytes_received, u(&x["bytes_received"]));
            assert_eq!(u64::from(t.snd_mss), u(&x["snd_mss"]));
            if t.has_seq() {
                assert_eq!(t.write_seq_rel, Some(u(&x["write_seq_rel"])), "{name} {}", t.local);
                assert_eq!(t.read_seq_rel, Some(u(&x["read_seq_rel"])), "{name} {}", t.local);
            } else {
                assert_eq!((t.write_seq_rel, t.read_seq_rel), (None, None));
            }
        }
    }
    let full = Image::open(&vectors().join("full").join(IMAGE_FILE_NAME)).unwrap();
    assert!(full.tcp.iter().any(|t| t.is_active_open() && t.write_seq_rel == Some(77)));
    assert_eq!(full.tcp.iter().find(|t| t.state_name == "TIME_WAIT").map(|t| t.has_seq()), Some(false));
    // A record size that is not this version's is refused, naming it.
    let e = Chain::load(&vectors().join("bad-tcp-record-size")).unwrap_err();
    assert!(e.to_string().contains("section TCP") && e.to_string().contains("record_size 120"), "{e}");
}
