//! HOLD / RESUME (runtime/include/rrc/control.h): the library parks every
//! application thread, empties the data directory's journal, and keeps the
//! process parked until RESUME on the same connection, its timeout, or the
//! connection's close; misuse is refused with a named error. And the point
//! of it: a copy of the data directory taken during a hold, plus the next
//! image's FILEOPS, is the directory at that image, byte for byte.
//! Needs root and the C runtime (`make runtime`), like tests/stream.rs.

use std::collections::BTreeMap;
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rrc_control::{Client, ControlError, DumpRequest, ErrorCode, HoldRequest, Message};
use rrc_image::Image;

mod common;
use common::{exec_pid, require_runtime, rrc, Container as Writer};

const T: Duration = Duration::from_secs(30);
const CPATH: &str = "/rrc-data";

/// Two threads change files in the data directory continuously: one
/// rewrites `counter` (open O_TRUNC, write, close), one appends to `log`.
/// SIGUSR1 stops them; the program then creates `stopped` and idles. The
/// mkdir at the start cannot be replayed onto a directory that has `sub`
/// already: a hold that kept the journal's records would fail the replay.
const WRITER: &str = r#"
import os, signal, threading, time
d = "/rrc-data"
os.mkdir(d + "/sub")
with open(d + "/sub/made", "w") as f:
    f.write("before the hold")
stop = threading.Event()
signal.signal(signal.SIGUSR1, lambda *a: stop.set())
def counter():
    i = 0
    while not stop.is_set():
        i += 1
        with open(d + "/counter", "w") as f:
            f.write(str(i))
        time.sleep(0.001)
def log():
    fd = os.open(d + "/log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    i = 0
    while not stop.is_set():
        i += 1
        os.write(fd, b"line %d\n" % i)
        time.sleep(0.001)
    os.close(fd)
ts = [threading.Thread(target=counter), threading.Thread(target=log)]
for t in ts: t.start()
for t in ts: t.join()
open(d + "/stopped", "w").close()
while True: time.sleep(1)
"#;

/// The interpreter itself, not a wrapper that forks it (pyenv's shim):
/// a protected process may not fork.
fn python() -> PathBuf {
    let out = Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output().unwrap();
    assert!(out.status.success(), "python3 is needed: {}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

impl Writer {
    fn start(tag: &str) -> Writer {
        require_runtime();
        let dir = std::env::temp_dir().join(format!("rrc-hold-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let out = rrc()
            .args(["exec", "--log"])
            .arg(dir.join("log"))
            .arg("--data-dir")
            .arg(format!("{}:{CPATH}", dir.join("data").display()))
            .arg("--")
            .arg(python())
            .args(["-c", WRITER])
            .output()
            .unwrap();
        if !out.status.success() {
            let _ = std::fs::remove_dir_all(&dir);
            panic!("rrc exec: {}", String::from_utf8_lossy(&out.stderr));
        }
        let w = Writer { pid: exec_pid(&out), dir };
        w.wait_for(|w| w.counter() > 10, "the writer running");
        w
    }
    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }
    fn sock(&self) -> PathBuf {
        rrc_container::control_socket_of(self.pid)
    }
    fn counter(&self) -> u64 {
        std::fs::read_to_string(self.data().join("counter")).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0)
    }
    fn log_len(&self) -> u64 {
        std::fs::metadata(self.data().join("log")).map(|m| m.len()).unwrap_or(0)
    }
    fn wait_for(&self, pred: impl Fn(&Writer) -> bool, what: &str) {
        let deadline = Instant::now() + T;
        while !pred(self) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}; log: {}", std::fs::read_to_string(self.dir.join("log")).unwrap_or_default());
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    /// The data directory does not change while `d` passes.
    fn still_for(&self, d: Duration) -> bool {
        let before = (self.counter(), self.log_len());
        std::thread::sleep(d);
        before == (self.counter(), self.log_len())
    }
}

fn request(c: &mut Client, m: &Message) -> Message {
    c.send(m, None, T).unwrap();
    c.recv(T, "a reply").unwrap()
}

fn error_code(m: &Message) -> ErrorCode {
    match m {
        Message::Error(e) => e.code,
        other => panic!("expected ERROR, got {other:?}"),
    }
}

#[test]
fn hold_parks_until_resume_and_refuses_misuse() {
    let w = Writer::start("misuse");
    let sock = w.sock();

    // RESUME with nothing held
    let mut c = Client::connect(&sock).unwrap();
    assert_eq!(error_code(&request(&mut c, &Message::Resume)), ErrorCode::NOT_HELD);
    // a timeout above the maximum
    let mut c = Client::connect(&sock).unwrap();
    assert_eq!(error_code(&request(&mut c, &Message::Hold(HoldRequest { timeout_ms: 60_000 }))), ErrorCode::PROTOCOL);

    let mut holder = Client::connect(&sock).unwrap();
    let held = match request(&mut holder, &Message::Hold(HoldRequest { timeout_ms: 5000 })) {
        Message::Held(h) => h,
        m => panic!("expected HELD, got {m:?}"),
    };
    // the main thread and the two writers (the control thread is not counted)
    assert!(held.threads >= 3, "{held:?}");
    assert!(held.discarded_ops > 0, "the writers' journal was not emptied: {held:?}");
    assert_eq!(held.timeout_ms, 5000);
    assert!(w.still_for(Duration::from_millis(300)), "the data directory changed during the hold");

    // a second HOLD on the same connection: refused, still held
    assert_eq!(error_code(&request(&mut holder, &Message::Hold(HoldRequest { timeout_ms: 0 }))), ErrorCode::HELD);
    // other connections: HOLD, PING, DUMP and RESUME refused while held
    for m in [Message::Hold(HoldRequest { timeout_ms: 0 }), Message::Ping, Message::Resume] {
        let mut c = Client::connect(&sock).unwrap();
        assert_eq!(error_code(&request(&mut c, &m)), ErrorCode::HELD, "{m:?}");
    }
    let img = std::fs::OpenOptions::new().read(true).write(true).create_new(true).mode(0o600).open(w.dir.join("refused.img")).unwrap();
    let mut d = rrc_control::dump(&sock, &DumpRequest { flags: 0, image_id: [1; 16], parent_id: [0; 16] }, img.as_fd(), T).unwrap();
    match d.wait_paused(T) {
        Err(ControlError::Remote { reply, .. }) => assert_eq!(reply.code, ErrorCode::HELD, "{reply}"),
        other => panic!("DUMP during a hold: {other:?}"),
    }
    assert!(w.still_for(Duration::from_millis(100)), "the data directory changed during the hold");

    let resumed = match request(&mut holder, &Message::Resume) {
        Message::Resumed(r) => r,
        m => panic!("expected RESUMED, got {m:?}"),
    };
    assert!(resumed.held_ns >= 400_000_000 && resumed.held_ns < 5_000_000_000, "{resumed:?}");
    assert_eq!(resumed.threads, held.threads);
    let c0 = w.counter();
    w.wait_for(|w| w.counter() > c0 + 5, "the writers running again");
    // the connection is done: the control thread serves others again
    rrc_control::ping(&sock, T).unwrap();

    // the library's own timeout: the threads run again, RESUME says so
    let h = rrc_control::hold(&sock, 200, T).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let c0 = w.counter();
    w.wait_for(|w| w.counter() > c0 + 5, "the writers running after the hold expired");
    match h.resume(T) {
        Err(ControlError::Remote { reply, .. }) => assert_eq!(reply.code, ErrorCode::HOLD_EXPIRED, "{reply}"),
        other => panic!("RESUME after the timeout: {other:?}"),
    }

    // the caller goes away: released at once
    let h = rrc_control::hold(&sock, 0, T).unwrap();
    drop(h);
    let c0 = w.counter();
    w.wait_for(|w| w.counter() > c0 + 5, "the writers running after the holder closed");
    rrc_control::ping(&sock, T).unwrap();
}

/// relative path -> (mode, content) of every file and directory below root.
fn tree(root: &Path) -> BTreeMap<String, (u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let md = p.symlink_metadata().unwrap();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            if md.is_dir() {
                todo.push(p.clone());
                out.insert(rel, (md.mode() & 0o7777, Vec::new()));
            } else {
                out.insert(rel, (md.mode() & 0o7777, std::fs::read(&p).unwrap()));
            }
        }
    }
    out
}

/// What the agent does after a backup failure (primary.rs,
/// data_dir::copy_held): copy during a hold, then the next image's FILEOPS
/// bring the copy exactly to the process's directory at that image.
#[test]
fn a_copy_taken_during_a_hold_plus_the_next_fileops_is_the_directory() {
    let w = Writer::start("replay");
    let sock = w.sock();
    // the journal holds changes from before the hold: they must not be
    // replayed on the copy (they are in it already)
    std::thread::sleep(Duration::from_millis(200));
    let h = rrc_control::hold(&sock, 0, T).unwrap();
    let copy = w.dir.join("copy");
    let cp = Command::new("cp").arg("-a").arg("--reflink=auto").arg(w.data()).arg(&copy).output().unwrap();
    h.resume(T).unwrap();
    assert!(cp.status.success(), "{}", String::from_utf8_lossy(&cp.stderr));
    std::thread::sleep(Duration::from_millis(300));
    // stop the writers: the directory is then quiet and final
    // SAFETY: kill(2) on the writer's pid.
    assert_eq!(unsafe { libc::kill(w.pid, libc::SIGUSR1) }, 0);
    w.wait_for(|w| w.data().join("stopped").exists(), "the writers stopped");

    let img_path = w.dir.join("after-hold.img");
    let img = std::fs::OpenOptions::new().read(true).write(true).create_new(true).mode(0o600).open(&img_path).unwrap();
    let mut d = rrc_control::dump(&sock, &DumpRequest { flags: 0, image_id: [7; 16], parent_id: [0; 16] }, img.as_fd(), T).unwrap();
    d.wait_paused(T).unwrap();
    d.wait_done(T).unwrap();
    let image = Image::open(&img_path).unwrap();
    let ops = image.fileops.expect("the image has no FILEOPS section").ops;
    assert!(!ops.is_empty());
    rrc_store::datadir::apply_ops(&copy, &ops).unwrap();
    let (want, got) = (tree(&w.data()), tree(&copy));
    assert_eq!(want.keys().collect::<Vec<_>>(), got.keys().collect::<Vec<_>>());
    for (k, v) in &want {
        assert!(got[k] == *v, "{k} differs after the replay ({} vs {} bytes)", v.1.len(), got[k].1.len());
    }
    assert!(String::from_utf8_lossy(&want["log"].1).lines().count() > 100);
}
