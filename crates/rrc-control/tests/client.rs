//! The client against a real unix socket peer (a thread playing the
//! library's side): SCM_RIGHTS delivery, reply sequencing, ERROR surfaced
//! verbatim, timeouts, a peer that hangs up.

use std::io::{Read, Write};
use std::os::fd::{AsFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::time::Duration;

use rrc_control::*;

fn sock_path(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("rrc-ctl-{tag}-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

/// recvmsg of one frame header + the SCM_RIGHTS fd.
fn recv_with_fd(s: &UnixStream, buf: &mut [u8]) -> (usize, Option<OwnedFd>) {
    use std::os::fd::AsRawFd;
    let mut cbuf = [0u64; 8];
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr() as *mut _, iov_len: buf.len() };
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr() as *mut _;
    msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
    let n = unsafe { libc::recvmsg(s.as_raw_fd(), &mut msg, libc::MSG_WAITALL) };
    assert!(n > 0, "recvmsg: {}", std::io::Error::last_os_error());
    let cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    let fd = if cmsg.is_null() {
        None
    } else {
        let mut fd: RawFd = -1;
        unsafe {
            assert_eq!((*cmsg).cmsg_type, libc::SCM_RIGHTS);
            std::ptr::copy_nonoverlapping(libc::CMSG_DATA(cmsg), &mut fd as *mut RawFd as *mut u8, 4);
            Some(OwnedFd::from_raw_fd(fd))
        }
    };
    (n as usize, fd)
}

#[test]
fn ping_pong() {
    let path = sock_path("ping");
    let l = UnixListener::bind(&path).unwrap();
    let t = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut b = [0u8; HEADER_SIZE];
        s.read_exact(&mut b).unwrap();
        assert_eq!(decode(&b).unwrap(), Message::Ping);
        let pong = Pong { pid: 1, nr_threads: 4, restored: 1, checkpoints: 9, last_image_id: [7; 16] };
        s.write_all(&Message::Pong(pong).encode()).unwrap();
    });
    let p = ping(&path, Duration::from_secs(5)).unwrap();
    assert_eq!((p.pid, p.nr_threads, p.restored, p.checkpoints, p.last_image_id), (1, 4, 1, 9, [7; 16]));
    t.join().unwrap();
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn dump_sends_the_fd_and_reads_both_replies() {
    let path = sock_path("dump");
    let l = UnixListener::bind(&path).unwrap();
    let t = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut b = [0u8; HEADER_SIZE + DUMP_SIZE];
        let (n, fd) = recv_with_fd(&s, &mut b);
        assert_eq!(n, b.len());
        let req = match decode(&b).unwrap() {
            Message::Dump(r) => r,
            m => panic!("{m:?}"),
        };
        assert_eq!(req.flags, DUMP_F_INCREMENTAL | DUMP_F_COPY);
        // Write through the received fd, as the snapshot child does.
        let mut f = std::fs::File::from(fd.expect("no fd received"));
        f.write_all(b"image bytes").unwrap();
        let paused = DumpPaused {
            pause_ns: 1,
            quiesce_ns: 2,
            scan_ns: 3,
            capture_ns: 4,
            fork_ns: 0,
            threads: 6,
            untracked_vmas: 7,
            written_pages: 8,
            copy_ns: 9,
            copied_pages: 10,
            precopy_ns: 11,
            precopy_pages: 12,
            precopy_passes: 13,
            snapshot: SNAPSHOT_COPY,
        };
        s.write_all(&Message::DumpPaused(paused).encode()).unwrap();
        s.write_all(&Message::DumpDone(DumpDone { pages: 8, bytes: 11, write_ns: 9 }).encode()).unwrap();
    });
    let img = std::env::temp_dir().join(format!("rrc-ctl-img-{}", std::process::id()));
    let file = std::fs::File::create(&img).unwrap();
    let req = DumpRequest { flags: DUMP_F_INCREMENTAL | DUMP_F_COPY, image_id: [1; 16], parent_id: [2; 16] };
    let mut s = dump(&path, &req, file.as_fd(), Duration::from_secs(5)).unwrap();
    let p = s.wait_paused(Duration::from_secs(5)).unwrap();
    assert_eq!((p.pause_ns, p.written_pages), (1, 8));
    assert_eq!((p.copy_ns, p.precopy_passes, p.snapshot), (9, 13, SNAPSHOT_COPY));
    let d = s.wait_done(Duration::from_secs(5)).unwrap();
    assert_eq!((d.pages, d.bytes), (8, 11));
    assert_eq!(std::fs::read(&img).unwrap(), b"image bytes");
    t.join().unwrap();
    std::fs::remove_file(&img).unwrap();
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn error_reply_is_surfaced_verbatim() {
    let path = sock_path("err");
    let l = UnixListener::bind(&path).unwrap();
    let t = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut b = [0u8; HEADER_SIZE + DUMP_SIZE];
        let _ = recv_with_fd(&s, &mut b);
        let reply = ErrorReply { code: ErrorCode::CHILDREN, sys_errno: 0, message: "pid 7 is a child of the service".into() };
        s.write_all(&Message::Error(reply).encode()).unwrap();
    });
    let file = std::fs::File::open("/dev/null").unwrap();
    let req = DumpRequest { flags: 0, image_id: [1; 16], parent_id: [0; 16] };
    let mut s = dump(&path, &req, file.as_fd(), Duration::from_secs(5)).unwrap();
    let err = s.wait_paused(Duration::from_secs(5)).unwrap_err();
    match &err {
        ControlError::Remote { reply, .. } => {
            assert_eq!(reply.code, ErrorCode::CHILDREN);
            assert_eq!(reply.message, "pid 7 is a child of the service");
        }
        e => panic!("{e}"),
    }
    assert_eq!(err.to_string(), "librrc refused the dump: CHILDREN: pid 7 is a child of the service");
    t.join().unwrap();
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn silent_peer_times_out_and_hangup_is_reported() {
    let path = sock_path("silent");
    let l = UnixListener::bind(&path).unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let t = std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        rx.recv().unwrap(); // hold the connection open, say nothing
        drop(s);
        let (s, _) = l.accept().unwrap();
        drop(s); // hang up at once
    });
    let err = ping(&path, Duration::from_millis(200)).unwrap_err();
    assert!(matches!(err, ControlError::Timeout { .. }), "{err}");
    tx.send(()).unwrap();
    let err = ping(&path, Duration::from_secs(5)).unwrap_err();
    assert!(matches!(err, ControlError::Closed { .. } | ControlError::Io { .. }), "{err}");
    t.join().unwrap();
    std::fs::remove_file(&path).unwrap();
    let err = ping(&path, Duration::from_secs(1)).unwrap_err();
    assert!(matches!(err, ControlError::Connect { .. }), "{err}");
}
