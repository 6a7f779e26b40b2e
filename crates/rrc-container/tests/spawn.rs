//! Real containers (needs root, cgroup v2 at /sys/fs/cgroup/unified): the
//! namespaces, mounts, cgroup, stdio, fd hygiene and cleanup of spawn/kill,
//! and every error path leaving nothing behind.

use std::ffi::OsString;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rrc_container::*;

/// A Config with a private registry directory, removed when dropped.
struct TestCfg(Config);

impl std::ops::Deref for TestCfg {
    type Target = Config;
    fn deref(&self) -> &Config {
        &self.0
    }
}

impl Drop for TestCfg {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.0.registry.dir());
    }
}

fn cfg(tag: &str) -> TestCfg {
    assert_eq!(unsafe { libc::geteuid() }, 0, "these tests need root (namespaces, cgroups, mounts)");
    let reg = std::env::temp_dir().join(format!("rrc-container-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&reg);
    TestCfg(Config { cgroup_root: DEFAULT_CGROUP_ROOT.into(), registry: Registry::new(reg) })
}

fn spec(argv: &[&str]) -> Spec {
    Spec {
        argv: argv.iter().map(OsString::from).collect(),
        env: vec![("PATH".into(), "/usr/bin:/bin:/usr/sbin:/sbin".into())],
        netns: None,
        log: None,
        pass_fds: Vec::new(),
        restored_from: None,
        binds: Vec::new(),
    }
}

fn wait_exit(pid: i32) -> Liveness {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let l = liveness(pid);
        if l != Liveness::Running || Instant::now() > deadline {
            return l;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn tmpfile(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("rrc-container-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

fn assert_gone(cfg: &Config, rec: &Record) {
    assert!(!rec.cgroup.exists(), "cgroup {} left behind", rec.cgroup.display());
    assert!(cfg.registry.list().unwrap().iter().all(|r| r.id != rec.id), "registry entry left behind");
    assert_ne!(liveness(rec.pid), Liveness::Running, "pid {} still running", rec.pid);
}

#[test]
fn namespaces_mounts_cgroup_and_kill() {
    let cfg = cfg("ns");
    let c = spawn(&cfg, spec(&["sleep", "1000"])).unwrap();
    let pid = c.pid();
    assert_eq!(cfg.registry.find_pid(pid).unwrap().unwrap().id, c.record.id);
    assert!(is_running(&c.record));

    // pid 1 of a new pid namespace: NSpid is "<outer> 1".
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let nspid = status.lines().find(|l| l.starts_with("NSpid:")).unwrap();
    let ids: Vec<&str> = nspid.split_whitespace().skip(1).collect();
    assert_eq!(ids, [pid.to_string().as_str(), "1"], "{nspid}");
    // New mount, uts, ipc, pid namespaces; same network namespace.
    for ns in ["mnt", "uts", "ipc", "pid"] {
        let mine = std::fs::read_link(format!("/proc/self/ns/{ns}")).unwrap();
        let theirs = std::fs::read_link(format!("/proc/{pid}/ns/{ns}")).unwrap();
        assert_ne!(mine, theirs, "{ns} namespace not new");
    }
    assert_eq!(std::fs::read_link("/proc/self/ns/net").unwrap(), std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap());
    // In the cgroup, and alone there.
    let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    assert!(cg.lines().any(|l| l == format!("0::/rrc/{}", c.record.id)), "{cg}");
    assert_eq!(std::fs::read_to_string(c.record.cgroup.join("cgroup.procs")).unwrap().trim(), pid.to_string());
    // Its mounts: fresh proc and the tmpfs; not visible on the host.
    let mi = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    assert!(mi.lines().any(|l| l.contains(" /run/rrc-container ") && l.contains(" - tmpfs ")), "{mi}");
    assert!(mi.lines().any(|l| l.contains(" /proc ") && l.contains(" - proc ")), "{mi}");
    let host = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!host.lines().any(|l| l.contains(" /run/rrc-container ")), "container mount leaked to the host");
    // The control socket path reaches the container's tmpfs.
    assert!(Path::new(&format!("/proc/{pid}/root/run/rrc-container")).is_dir());
    assert_eq!(c.control_socket(), PathBuf::from(format!("/proc/{pid}/root/run/rrc-container/control.sock")));

    kill(&cfg, &c.record).unwrap();
    assert_gone(&cfg, &c.record);
    // Killing again is harmless.
    kill(&cfg, &c.record).unwrap();
}

#[test]
fn stdio_env_pid1_and_no_leaked_fds() {
    let cfg = cfg("stdio");
    let log = tmpfile("log");
    std::fs::write(&log, "previous line\n").unwrap();
    // An fd without O_CLOEXEC in the caller must not reach the container.
    let f = std::fs::File::open("/dev/null").unwrap();
    let leaked = unsafe { libc::dup(f.as_raw_fd()) };
    assert!(leaked > 2);
    let script = format!(
        "echo out pid=$$; echo err >&2; echo x=$RRC_X; test -e /proc/self/fd/{leaked} && echo fd-leaked || echo fd-clean; cat /proc/self/cgroup"
    );
    let mut s = spec(&["sh", "-c", &script]);
    s.env.push(("RRC_X".into(), "42".into()));
    s.log = Some(log.clone());
    let c = spawn(&cfg, s).unwrap();
    assert_eq!(wait_exit(c.pid()), Liveness::Exited(0));
    unsafe { libc::close(leaked) };
    let out = std::fs::read_to_string(&log).unwrap();
    assert!(out.starts_with("previous line\n"), "log not opened O_APPEND: {out}");
    for want in ["out pid=1\n", "err\n", "x=42\n", "fd-clean\n"] {
        assert!(out.contains(want), "missing {want:?} in {out:?}");
    }
    assert_eq!(c.record.log, log);
    kill(&cfg, &c.record).unwrap();
    assert_gone(&cfg, &c.record);
    std::fs::remove_file(&log).unwrap();
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

#[test]
fn passed_fds_land_at_their_numbers() {
    let cfg = cfg("passfd");
    let (r3, w3) = pipe();
    let (r4, w4) = pipe();
    let mut s = spec(&["sh", "-c", "echo status-record >&3; echo second >&4"]);
    s.pass_fds = vec![(w3, 3), (w4, 4)];
    let c = spawn(&cfg, s).unwrap();
    for (r, want) in [(r3, "status-record\n"), (r4, "second\n")] {
        let mut got = String::new();
        std::fs::File::from(r).read_to_string(&mut got).unwrap(); // EOF once the container closed it
        assert_eq!(got, want);
    }
    kill(&cfg, &c.record).unwrap();
    assert_gone(&cfg, &c.record);

    // Two fds at one number: refused before anything starts.
    let (_r, w) = pipe();
    let (_r2, w2) = pipe();
    let mut s = spec(&["true"]);
    s.pass_fds = vec![(w, 5), (w2, 5)];
    let err = spawn(&cfg, s).unwrap_err();
    assert!(err.to_string().contains("passing an fd at 5"), "{err}");
}

fn rrc_cgroups() -> Vec<String> {
    std::fs::read_dir(DEFAULT_CGROUP_ROOT)
        .map(|rd| rd.filter_map(|e| e.ok()).filter(|e| e.path().is_dir()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

#[test]
fn failures_are_precise_and_leave_nothing() {
    let cfg = cfg("fail");
    let err = spawn(&cfg, spec(&["no-such-command-rrc"])).unwrap_err();
    assert!(matches!(err, ContainerError::CommandNotFound { .. }), "{err}");
    assert!(err.to_string().contains("no-such-command-rrc"), "{err}");

    // Executable bit but not an executable: execve fails with ENOEXEC in pid 1.
    let bogus = tmpfile("bogus");
    std::fs::write(&bogus, b"\x7fELF not really").unwrap();
    std::fs::set_permissions(&bogus, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let before = rrc_cgroups();
    let err = spawn(&cfg, spec(&[bogus.to_str().unwrap()])).unwrap_err();
    match &err {
        ContainerError::Start { stage: Stage::Exec, errno, .. } => assert_eq!(*errno, libc::ENOEXEC),
        e => panic!("{e}"),
    }
    assert!(err.to_string().contains("execve"), "{err}");
    std::fs::remove_file(&bogus).unwrap();
    // Our cgroup is gone (others' tests may create theirs concurrently,
    // so compare by what is new and still ours: nothing must be).
    let after = rrc_cgroups();
    let new: Vec<_> = after.iter().filter(|c| !before.contains(c)).collect();
    for c in &new {
        // Any new one must belong to a live process of another test.
        let procs = std::fs::read_to_string(Path::new(DEFAULT_CGROUP_ROOT).join(c).join("cgroup.procs")).unwrap_or_default();
        assert!(!procs.trim().is_empty(), "empty cgroup {c} left behind");
    }
    assert!(cfg.registry.list().unwrap().is_empty());

    let mut s = spec(&["sleep", "1"]);
    s.netns = Some("rrc-no-such-netns".into());
    let err = spawn(&cfg, s).unwrap_err();
    assert!(matches!(err, ContainerError::NetnsNotFound { .. }), "{err}");

    // A "netns" that is a plain file: setns fails in the intermediate
    // process, before pid 1 exists.
    std::fs::create_dir_all("/run/netns").unwrap();
    let fake = format!("rrc-test-notns-{}", std::process::id());
    std::fs::write(format!("/run/netns/{fake}"), b"").unwrap();
    let mut s = spec(&["sleep", "1"]);
    s.netns = Some(fake.clone());
    let err = spawn(&cfg, s).unwrap_err();
    std::fs::remove_file(format!("/run/netns/{fake}")).unwrap();
    match &err {
        ContainerError::Start { stage: Stage::Setns, errno, .. } => assert_eq!(*errno, libc::EINVAL),
        e => panic!("{e}"),
    }
    assert!(cfg.registry.list().unwrap().is_empty());

    let mut s = spec(&["sleep", "1"]);
    s.log = Some("/nonexistent-dir/log".into());
    let err = spawn(&cfg, s).unwrap_err();
    assert!(err.to_string().contains("/nonexistent-dir/log"), "{err}");
}

#[test]
fn joins_a_named_netns() {
    let cfg = cfg("netns");
    let name = format!("rrc-test-{}", std::process::id());
    let st = std::process::Command::new("ip").args(["netns", "add", &name]).status().unwrap();
    assert!(st.success(), "ip netns add failed");
    let mut s = spec(&["sleep", "1000"]);
    s.netns = Some(name.clone());
    let res = spawn(&cfg, s);
    let check = res.as_ref().map(|c| {
        let want = std::fs::metadata(format!("/run/netns/{name}")).map(|m| std::os::unix::fs::MetadataExt::ino(&m)).unwrap();
        let got = std::fs::metadata(format!("/proc/{}/ns/net", c.pid())).map(|m| std::os::unix::fs::MetadataExt::ino(&m)).unwrap();
        (want, got)
    });
    if let Ok(c) = &res {
        kill(&cfg, &c.record).unwrap();
        assert_gone(&cfg, &c.record);
    }
    let _ = std::process::Command::new("ip").args(["netns", "del", &name]).status();
    let (want, got) = check.unwrap();
    assert_eq!(want, got, "not in the named network namespace");
}

/// A process that dies on its own is reported and still cleaned up.
#[test]
fn exited_container_is_cleaned_up() {
    let cfg = cfg("exited");
    let c = spawn(&cfg, spec(&["sh", "-c", "exit 3"])).unwrap();
    assert_eq!(wait_exit(c.pid()), Liveness::Exited(3));
    assert!(!is_running(&c.record));
    kill(&cfg, &c.record).unwrap();
    assert_gone(&cfg, &c.record);
}

/// The in-container control socket path is reachable from outside through
/// /proc/PID/root (a real listener bound at $RRC_CONTROL answering PING
/// with the protocol's PONG; it stands for the path plumbing only).
#[test]
fn control_socket_is_reachable_through_proc_root() {
    let cfg = cfg("ctl");
    let py = r#"
import os, socket, struct, sys
def crc32c(data, crc=0):
    crc ^= 0xffffffff
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82f63b78 if crc & 1 else 0)
    return crc ^ 0xffffffff
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(os.environ["RRC_CONTROL"]); s.listen(1)
c, _ = s.accept()
hdr = c.recv(24)
payload = struct.pack("<4I16s", os.getpid(), 1, 0, 0, b"\0" * 16)
h = struct.pack("<IHHII", 0x43435252, CTL_VERSION, 2, len(payload), crc32c(payload))
c.sendall(h + struct.pack("<II", crc32c(h), 0) + payload)
"#
    .replace("CTL_VERSION", &rrc_control::VERSION.to_string());
    let mut s = spec(&["python3", "-c", &py]);
    s.env.push(("RRC_CONTROL".into(), "/run/rrc-container/control.sock".into()));
    s.env = s.env.into_iter().map(|(k, v)| if k == "PATH" { (k, std::env::var_os("PATH").unwrap()) } else { (k, v) }).collect();
    let c = spawn(&cfg, s).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let pong = loop {
        match rrc_control::ping(&c.control_socket(), Duration::from_secs(2)) {
            Ok(p) => break p,
            Err(e) if Instant::now() > deadline => panic!("{e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    assert_eq!(pong.pid, 1, "the listener is pid 1 of its namespace");
    kill(&cfg, &c.record).unwrap();
    assert_gone(&cfg, &c.record);
}
