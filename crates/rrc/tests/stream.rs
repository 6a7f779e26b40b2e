//! The library writes the image as a forward stream (runtime/lib/snapshot.c):
//! DUMP accepts a regular file or a pipe read while it is written (the
//! epochs' path, issue 3), the two carry the same image of the same
//! process state, and a reader that goes away ends the snapshot child with
//! a clear error while the process runs on. Needs root and the C runtime
//! (`make runtime`), like tests/cli.rs.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rrc_control::{DumpDone, DumpRequest};
use rrc_image::sections::{FdKind, VmaKind};
use rrc_image::Image;

mod common;
use common::{exec_pid, require_runtime, rrc, Container};

const T: Duration = Duration::from_secs(30);

fn tmp(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("rrc-stream-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

fn exec_sleep(dir: &Path) -> Container {
    let log = dir.join("log");
    let out = rrc().args(["exec", "--log"]).arg(&log).args(["--", "sleep", "1000"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let pid = exec_pid(&out);
    // `rrc exec` returns once the library answers, before main() ran:
    // wait until sleep is in its sleep (its setlocale() maps files first,
    // which a dump taken meanwhile would miss and the next one not)
    let asleep = || {
        std::fs::read_to_string(format!("/proc/{pid}/syscall"))
            .map(|s| matches!(s.split_whitespace().next(), Some("35") | Some("230")))
            .unwrap_or(false)
    };
    let t0 = std::time::Instant::now();
    while !asleep() {
        assert!(t0.elapsed() < Duration::from_secs(10), "sleep {pid} never reached nanosleep");
        std::thread::sleep(Duration::from_millis(5));
    }
    Container { pid, dir: dir.to_path_buf() }
}

fn pipe() -> (File, OwnedFd) {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 fills the array on success.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both fds are new and owned here only.
    unsafe { (File::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

fn full_request(tag: u8) -> DumpRequest {
    DumpRequest { flags: 0, image_id: [tag; 16], parent_id: [0; 16] }
}

/// DUMP into a regular file, as `rrc dump` did before it streamed.
fn dump_to_file(pid: i32, req: &DumpRequest, path: &Path) -> DumpDone {
    let f = std::fs::OpenOptions::new().read(true).write(true).create_new(true).mode(0o644).open(path).unwrap();
    let mut s = rrc_control::dump(&rrc_container::control_socket_of(pid), req, f.as_fd(), T).unwrap();
    s.wait_paused(T).unwrap();
    s.wait_done(T).unwrap()
}

/// DUMP into a pipe; the bytes are read while the snapshot child writes
/// them (a 64 KiB pipe: the child blocks unless they are).
fn dump_to_pipe(pid: i32, req: &DumpRequest) -> (DumpDone, Vec<u8>) {
    let (mut r, w) = pipe();
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        r.read_to_end(&mut v).map(|_| v)
    });
    let mut s = rrc_control::dump(&rrc_container::control_socket_of(pid), req, w.as_fd(), T).unwrap();
    drop(w);
    s.wait_paused(T).unwrap();
    let done = s.wait_done(T).unwrap();
    (done, reader.join().unwrap().unwrap())
}

/// Page data of the VMAs that belong to the application (sleep's own
/// mappings and its heap), by address. librrc's memory and the stacks
/// change between two dumps (counters, last image id; the park handler's
/// signal frame on the main stack); sleep's data does not: it is blocked
/// in nanosleep.
fn app_pages(img: &Image) -> Vec<(u64, Vec<u8>)> {
    let exe = &img.process.exe_path;
    let app = |a: u64| {
        img.vmas.iter().any(|v| {
            v.start <= a && a < v.end && (v.kind == VmaKind::Heap || (v.kind == VmaKind::FilePrivate && &v.path == exe))
        })
    };
    let mut f = File::open(&img.path).unwrap();
    let mut off = img.pages_offset;
    let mut out = Vec::new();
    for e in img.pagemap.iter().filter(|e| e.in_image()) {
        for k in 0..u64::from(e.nr_pages) {
            let a = e.vaddr + k * 4096;
            if app(a) {
                let mut page = vec![0u8; 4096];
                f.seek(SeekFrom::Start(off)).unwrap();
                f.read_exact(&mut page).unwrap();
                out.push((a, page));
            }
            off += 4096;
        }
    }
    out
}

#[test]
fn file_and_pipe_carry_the_same_image() {
    require_runtime();
    let dir = tmp("same");
    let c = exec_sleep(&dir);

    let file_path = dir.join("file.rrc");
    let d_file = dump_to_file(c.pid, &full_request(1), &file_path);
    let (d_pipe, bytes) = dump_to_pipe(c.pid, &full_request(2));
    assert_eq!(d_pipe.bytes, bytes.len() as u64, "DUMP_DONE bytes vs bytes read from the pipe");
    let pipe_path = dir.join("pipe.rrc");
    std::fs::write(&pipe_path, &bytes).unwrap();

    // Both verify completely (every CRC, END's image_bytes, structure).
    let a = Image::open(&file_path).unwrap();
    let b = Image::open(&pipe_path).unwrap();
    assert_eq!(a.file_bytes, d_file.bytes);
    assert_eq!(a.header.image_id.0, [1; 16]);
    assert_eq!(b.header.image_id.0, [2; 16]);
    assert!(a.header.is_full() && b.header.is_full());
    // The same process state: same sections, memory map, pages, threads, fds.
    assert_eq!(a.sections.iter().map(|s| s.kind).collect::<Vec<_>>(), b.sections.iter().map(|s| s.kind).collect::<Vec<_>>());
    assert_eq!(a.vmas, b.vmas);
    assert_eq!(a.pagemap, b.pagemap);
    assert_eq!(a.pages_bytes, b.pages_bytes);
    assert_eq!(a.threads.len(), b.threads.len());
    // The application's fds are the same; librrc's internal ones differ
    // (the image fd itself is a file in one dump, a pipe in the other).
    let app_fds = |i: &Image| {
        i.fds.iter().filter(|f| f.kind != FdKind::LibInternal).map(|f| (f.fd, f.kind, f.path.clone(), f.ino)).collect::<Vec<_>>()
    };
    assert_eq!(app_fds(&a), app_fds(&b));
    assert_eq!(a.signals, b.signals);
    let (pa, pb) = (app_pages(&a), app_pages(&b));
    assert!(!pa.is_empty(), "no application pages found in the image");
    assert_eq!(pa.len(), pb.len());
    for ((x, p), (y, q)) in pa.iter().zip(pb.iter()) {
        assert_eq!(x, y);
        assert!(p == q, "application page {x:#x} differs between the file and the pipe image");
    }
}

#[test]
fn reader_gone_ends_the_snapshot_child_with_epipe() {
    require_runtime();
    let dir = tmp("epipe");
    let c = exec_sleep(&dir);
    let sock = rrc_container::control_socket_of(c.pid);

    let (r, w) = pipe();
    drop(r); // no reader: the first write of the snapshot child fails
    let mut s = rrc_control::dump(&sock, &full_request(3), w.as_fd(), T).unwrap();
    drop(w);
    s.wait_paused(T).expect("the pause itself succeeds");
    let err = s.wait_done(T).expect_err("a dump into a closed pipe cannot succeed").to_string();
    assert!(err.contains("EPIPE") && err.contains("reader went away"), "{err}");

    // The process ran on, and the next dump (full: the failed one is not
    // a parent) works.
    let pong = rrc_control::ping(&sock, T).unwrap();
    assert_eq!(pong.last_image_id, [0; 16]);
    let (done, bytes) = dump_to_pipe(c.pid, &full_request(4));
    assert_eq!(done.bytes, bytes.len() as u64);
    let p = dir.join("after.rrc");
    std::fs::write(&p, &bytes).unwrap();
    Image::open(&p).unwrap();
}
