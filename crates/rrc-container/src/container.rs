//! Starting a command as pid 1 of fresh pid, mount, uts and ipc namespaces
//! in its own cgroup, and removing such a container again.
//!
//! fork -> intermediate: setsid, unshare(NEWPID|NEWNS|NEWUTS|NEWIPC),
//! optional setns(netns), fork -> pid 1: private mounts, fresh /proc, tmpfs
//! on /run/rrc-container, join the cgroup, stdio to the log, exec. The
//! intermediate reports pid 1's pid (as seen here) on a close-on-exec pipe
//! and exits; a failing child reports its stage and errno on the same pipe;
//! a successful exec closes it. Every error path removes what was made.

use std::ffi::{CString, OsStr, OsString};
use std::fs::OpenOptions;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{setup, ContainerError};
use crate::init::{self, InitPlan, Stage, RECORD_SIZE, TAG_FAIL, TAG_PID};
use crate::registry::{now_rfc3339, Record, Registry, DEFAULT_REGISTRY_DIR};

pub const DEFAULT_CGROUP_ROOT: &str = "/sys/fs/cgroup/unified/rrc";
/// The tmpfs every container gets; the library's control socket lives here.
pub const CONTAINER_RUN_DIR: &str = "/run/rrc-container";
pub const CONTROL_SOCKET_NAME: &str = "control.sock";
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// How long the start-up (fork .. exec) may take before it is declared lost.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `kill` waits for the cgroup to empty.
const KILL_TIMEOUT: Duration = Duration::from_secs(10);

/// Where containers' cgroups and registry entries live.
#[derive(Debug, Clone)]
pub struct Config {
    pub cgroup_root: PathBuf,
    pub registry: Registry,
}

impl Default for Config {
    fn default() -> Config {
        Config { cgroup_root: DEFAULT_CGROUP_ROOT.into(), registry: Registry::new(DEFAULT_REGISTRY_DIR) }
    }
}

/// What to run.
#[derive(Debug)]
pub struct Spec {
    /// argv; argv[0] is looked up in the PATH of `env` unless it has a '/'.
    pub argv: Vec<OsString>,
    /// The complete environment of the command.
    pub env: Vec<(OsString, OsString)>,
    /// Join /run/netns/NAME.
    pub netns: Option<String>,
    /// Stdout and stderr (O_APPEND|O_CREAT); None = /dev/null.
    pub log: Option<PathBuf>,
    /// Fds to install at fixed numbers in the container (e.g. the
    /// restorer's status pipe at 3 and its repaired-socket channel at 4).
    /// Each target must be in 3..=9, no target twice.
    pub pass_fds: Vec<(OwnedFd, RawFd)>,
    pub restored_from: Option<PathBuf>,
    /// Host directories bind-mounted into the container's mount namespace
    /// before exec (e.g. the service's data directory, `--data-dir`).
    pub binds: Vec<Bind>,
}

/// A host directory made visible at `target` inside the container. The
/// target (and its parents) is created if missing, on the host's file
/// system since the container shares it; the mount itself is private to
/// the container's mount namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    pub host: PathBuf,
    pub target: PathBuf,
}

impl std::str::FromStr for Bind {
    type Err = String;
    /// `HOSTDIR:PATH`, both absolute or HOSTDIR relative to the current directory.
    fn from_str(s: &str) -> Result<Bind, String> {
        let (h, t) = s.rsplit_once(':').ok_or_else(|| format!("{s:?}: expected HOSTDIR:PATH"))?;
        if h.is_empty() || t.is_empty() {
            return Err(format!("{s:?}: expected HOSTDIR:PATH"));
        }
        if !t.starts_with('/') {
            return Err(format!("{s:?}: the path inside the container must be absolute"));
        }
        Ok(Bind { host: h.into(), target: t.into() })
    }
}

/// A running container started by [`spawn`].
#[derive(Debug)]
pub struct Container {
    pub record: Record,
}

impl Container {
    pub fn pid(&self) -> i32 {
        self.record.pid
    }

    /// The library's control socket as reachable from outside.
    pub fn control_socket(&self) -> PathBuf {
        control_socket_of(self.record.pid)
    }
}

pub fn control_socket_of(pid: i32) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/root{CONTAINER_RUN_DIR}/{CONTROL_SOCKET_NAME}"))
}

/// How a container's pid 1 is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    Running,
    /// Reaped by us: exit code or signal.
    Exited(i32),
    Signaled(i32),
    /// Gone, status unknown (not our child, or a zombie of someone else).
    Gone,
}

/// Non-blocking check of a pid that we may be the (sub)reaper of.
pub fn liveness(pid: i32) -> Liveness {
    let mut status = 0;
    // SAFETY: plain syscall.
    let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    if r == pid {
        if libc::WIFEXITED(status) {
            return Liveness::Exited(libc::WEXITSTATUS(status));
        }
        return Liveness::Signaled(libc::WTERMSIG(status));
    }
    if r == 0 {
        return Liveness::Running;
    }
    // Not our child: look at /proc.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => match s.rfind(')').and_then(|i| s[i + 1..].split_whitespace().next()) {
            Some("Z") | Some("X") | None => Liveness::Gone,
            Some(_) => Liveness::Running,
        },
        Err(_) => Liveness::Gone,
    }
}

fn random_hex(bytes: usize) -> Result<String, ContainerError> {
    let mut b = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b)).map_err(setup("reading /dev/urandom"))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

fn cstring(s: &OsStr, what: &str) -> Result<CString, ContainerError> {
    CString::new(s.as_bytes()).map_err(|_| ContainerError::Setup {
        what: format!("{what} {s:?}"),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "contains a NUL byte"),
    })
}

fn resolve_program(argv0: &OsStr, env: &[(OsString, OsString)]) -> Result<PathBuf, ContainerError> {
    if argv0.as_bytes().contains(&b'/') {
        return Ok(PathBuf::from(argv0));
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.to_string_lossy().into_owned())
        .unwrap_or_else(|| DEFAULT_PATH.to_string());
    for dir in path.split(':').filter(|d| !d.is_empty()) {
        let cand = Path::new(dir).join(argv0);
        if let Ok(md) = std::fs::metadata(&cand) {
            if md.is_file() && md.permissions().mode() & 0o111 != 0 {
                return Ok(cand);
            }
        }
    }
    Err(ContainerError::CommandNotFound { command: argv0.to_string_lossy().into_owned(), path })
}

/// Absolute form of `p` (relative to the current directory), so that the
/// registry and a restorer can reopen it from anywhere.
fn absolute(p: &Path) -> Result<PathBuf, ContainerError> {
    if p.is_absolute() {
        return Ok(p.to_path_buf());
    }
    Ok(std::env::current_dir().map_err(setup("getting the current directory"))?.join(p))
}

/// Removes a half-made container: kills whatever is in its cgroup and
/// removes the cgroup. Used on every error path of [`spawn`].
struct CgroupGuard {
    dir: Option<PathBuf>,
    id: String,
}

impl CgroupGuard {
    fn disarm(&mut self) {
        self.dir = None;
    }
}

impl Drop for CgroupGuard {
    fn drop(&mut self) {
        if let Some(dir) = self.dir.take() {
            if let Err(e) = kill_cgroup(&self.id, &dir, None) {
                tracing::error!("cleanup after a failed start: {e}");
            }
        }
    }
}

/// Starts `spec` in a new container. Returns once the command was exec'd
/// (nothing is known yet about the command's own start-up).
///
/// Makes the calling process a child subreaper (PR_SET_CHILD_SUBREAPER),
/// so that pid 1 of the container, orphaned when the intermediate process
/// exits, is reparented to the caller: [`liveness`] can then report its
/// exit status while the caller waits for it.
pub fn spawn(cfg: &Config, spec: Spec) -> Result<Container, ContainerError> {
    let command: Vec<String> = spec.argv.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let cmdline = command.join(" ");
    let argv0 = spec.argv.first().ok_or_else(|| ContainerError::Lost { command: String::new(), reason: "empty command".into() })?;
    let program = resolve_program(argv0, &spec.env)?;
    let id = random_hex(6)?;

    // Everything that can fail for ordinary reasons is done here, before
    // any process or cgroup exists.
    let log_path = absolute(spec.log.as_deref().unwrap_or(Path::new("/dev/null")))?;
    let log = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o644)
        .custom_flags(libc::O_CLOEXEC)
        .open(&log_path)
        .map_err(setup(format!("opening the log {}", log_path.display())))?;
    let stdin = std::fs::File::open("/dev/null").map_err(setup("opening /dev/null"))?;
    let netns = match &spec.netns {
        Some(name) => {
            let path = Path::new("/run/netns").join(name);
            Some(std::fs::File::open(&path).map_err(|source| ContainerError::NetnsNotFound { name: name.clone(), path, source })?)
        }
        None => None,
    };
    std::fs::create_dir_all(CONTAINER_RUN_DIR).map_err(setup(format!("creating the mount point {CONTAINER_RUN_DIR}")))?;
    let mut pass_fds: Vec<(OwnedFd, RawFd)> = Vec::with_capacity(spec.pass_fds.len());
    for (fd, target) in &spec.pass_fds {
        let invalid = |why: &str| ContainerError::Setup {
            what: format!("passing an fd at {target}"),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, why.to_string()),
        };
        if !(3..=9).contains(target) {
            return Err(invalid("target must be in 3..=9"));
        }
        if pass_fds.iter().any(|(_, t)| t == target) {
            return Err(invalid("another fd is passed at the same number"));
        }
        // Move it above the targets so no dup2 in the child can clobber it.
        // SAFETY: plain fcntl on an fd we own.
        let hi = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 10) };
        if hi < 0 {
            return Err(setup("duplicating the fd to pass")(std::io::Error::last_os_error()));
        }
        // SAFETY: hi is a fresh fd we own.
        pass_fds.push((unsafe { OwnedFd::from_raw_fd(hi) }, *target));
    }
    let pass_fd_pairs: Vec<(RawFd, RawFd)> = pass_fds.iter().map(|(fd, t)| (fd.as_raw_fd(), *t)).collect();

    // Binds: the host directory must exist; the target is created here
    // (not in the async-signal-safe child) with its parents.
    let mut c_binds: Vec<(CString, CString)> = Vec::new();
    for b in &spec.binds {
        let host = absolute(&b.host)?;
        let md = std::fs::metadata(&host).map_err(setup(format!("data directory {}", host.display())))?;
        if !md.is_dir() {
            return Err(ContainerError::Setup {
                what: format!("data directory {}", host.display()),
                source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a directory"),
            });
        }
        std::fs::create_dir_all(&b.target).map_err(setup(format!("creating the mount point {}", b.target.display())))?;
        c_binds.push((cstring(host.as_os_str(), "bind source")?, cstring(b.target.as_os_str(), "bind target")?));
    }
    let bind_ptrs: Vec<(*const libc::c_char, *const libc::c_char)> = c_binds.iter().map(|(h, t)| (h.as_ptr(), t.as_ptr())).collect();

    let c_program = cstring(program.as_os_str(), "program")?;
    let c_argv: Vec<CString> = spec.argv.iter().map(|a| cstring(a, "argument")).collect::<Result<_, _>>()?;
    let c_env: Vec<CString> = spec
        .env
        .iter()
        .map(|(k, v)| {
            let mut kv = k.clone().into_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            cstring(OsStr::from_bytes(&kv), "environment entry")
        })
        .collect::<Result<_, _>>()?;
    let mut argv_p: Vec<*const libc::c_char> = c_argv.iter().map(|c| c.as_ptr()).collect();
    argv_p.push(std::ptr::null());
    let mut envp_p: Vec<*const libc::c_char> = c_env.iter().map(|c| c.as_ptr()).collect();
    envp_p.push(std::ptr::null());

    // The cgroup. From here on the guard removes it on any error.
    std::fs::create_dir_all(&cfg.cgroup_root).map_err(setup(format!("creating the cgroup root {}", cfg.cgroup_root.display())))?;
    let cgroup = cfg.cgroup_root.join(&id);
    std::fs::create_dir(&cgroup).map_err(setup(format!("creating the cgroup {}", cgroup.display())))?;
    let mut guard = CgroupGuard { dir: Some(cgroup.clone()), id: id.clone() };
    let procs = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(cgroup.join("cgroup.procs"))
        .map_err(setup(format!("opening {}/cgroup.procs", cgroup.display())))?;

    let mut fds = [0 as RawFd; 2];
    // SAFETY: plain syscall writing two fds.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(setup("creating the status pipe")(std::io::Error::last_os_error()));
    }
    // SAFETY: fresh fds we own.
    let (status_r, status_w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };

    // SAFETY: plain prctl.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } < 0 {
        return Err(setup("becoming a child subreaper")(std::io::Error::last_os_error()));
    }

    let plan = InitPlan {
        status_w: status_w.as_raw_fd(),
        netns_fd: netns.as_ref().map(|f| f.as_raw_fd()),
        cgroup_procs_fd: procs.as_raw_fd(),
        stdin_fd: stdin.as_raw_fd(),
        log_fd: log.as_raw_fd(),
        pass_fds: &pass_fd_pairs,
        binds: &bind_ptrs,
        program: &c_program,
        argv: &argv_p,
        envp: &envp_p,
    };
    tracing::debug!(id = %id, command = %cmdline, cgroup = %cgroup.display(), "starting container");
    // SAFETY: the child runs only init.rs's async-signal-safe code.
    let mid = unsafe { libc::fork() };
    if mid < 0 {
        return Err(setup("fork")(std::io::Error::last_os_error()));
    }
    if mid == 0 {
        init::intermediate(&plan);
    }
    drop(status_w);

    let (pid, failure) = read_status(status_r, &cmdline);
    // The intermediate exits right after reporting; after a failure it may
    // be stuck, so end it first (it is unreaped: the pid is still ours).
    let mut st = 0;
    // SAFETY: plain syscalls on our own child.
    unsafe {
        if failure.is_some() {
            libc::kill(mid, libc::SIGKILL);
        }
        libc::waitpid(mid, &mut st, 0);
    }
    if let Some(err) = failure {
        if let Some(pid) = pid {
            // Not reaped yet, so the pid cannot have been reused.
            // SAFETY: plain kill of our own (sub)child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            reap_quietly(pid);
        }
        return Err(err);
    }
    let Some(pid) = pid else {
        return Err(ContainerError::Lost { command: cmdline, reason: "the intermediate process exited without reporting a pid".into() });
    };

    let record = Record {
        id: id.clone(),
        pid,
        cgroup: cgroup.clone(),
        command,
        log: log_path,
        netns: spec.netns.clone(),
        started_at: now_rfc3339(),
        restored_from: spec.restored_from.clone(),
    };
    if let Err(e) = cfg.registry.save(&record) {
        drop(guard); // kills pid 1 and removes the cgroup
        reap_quietly(pid);
        return Err(e);
    }
    guard.disarm();
    tracing::info!(id = %id, pid, command = %cmdline, "container started");
    Ok(Container { record })
}

/// Reads the status records until every writer is gone (the intermediate
/// exited and pid 1 exec'd or died). Returns pid 1's pid if reported and
/// the failure if any.
fn read_status(r: OwnedFd, cmdline: &str) -> (Option<i32>, Option<ContainerError>) {
    let mut f = std::fs::File::from(r);
    let deadline = Instant::now() + START_TIMEOUT;
    let mut pid = None;
    let mut failure = None;
    let mut buf = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut pfd = libc::pollfd { fd: f.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one pollfd on the stack.
        let n = unsafe { libc::poll(&mut pfd, 1, left.as_millis().min(i32::MAX as u128) as i32) };
        if n == 0 {
            failure.get_or_insert(ContainerError::Lost {
                command: cmdline.into(),
                reason: format!("no exec within {START_TIMEOUT:?}"),
            });
            break;
        }
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            failure.get_or_insert(ContainerError::Lost { command: cmdline.into(), reason: format!("poll: {}", std::io::Error::last_os_error()) });
            break;
        }
        let mut chunk = [0u8; 256];
        match f.read(&mut chunk) {
            Ok(0) => break,
            Ok(k) => buf.extend_from_slice(&chunk[..k]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                failure.get_or_insert(ContainerError::Lost { command: cmdline.into(), reason: format!("reading the status pipe: {e}") });
                break;
            }
        }
        while buf.len() >= RECORD_SIZE {
            let rec: Vec<u8> = buf.drain(..RECORD_SIZE).collect();
            let word = |o: usize| u32::from_ne_bytes([rec[o], rec[o + 1], rec[o + 2], rec[o + 3]]);
            let (tag, a, b) = (word(0), word(4) as i32, word(8) as i32);
            match tag {
                TAG_PID => pid = Some(a),
                TAG_FAIL => {
                    let err = match Stage::from_raw(a) {
                        Some(stage) => ContainerError::Start { command: cmdline.into(), stage, errno: b },
                        None => ContainerError::Lost { command: cmdline.into(), reason: format!("unknown failure stage {a} (errno {b})") },
                    };
                    failure.get_or_insert(err);
                }
                _ => {
                    failure.get_or_insert(ContainerError::Lost { command: cmdline.into(), reason: format!("garbled status record (tag {tag})") });
                }
            }
        }
    }
    (pid, failure)
}

/// Waits briefly for a pid we may be the reaper of, so no zombie is left.
fn reap_quietly(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        match liveness(pid) {
            Liveness::Running => std::thread::sleep(Duration::from_millis(5)),
            _ => return,
        }
    }
}

fn cgroup_procs(dir: &Path) -> std::io::Result<Vec<i32>> {
    let s = std::fs::read_to_string(dir.join("cgroup.procs"))?;
    Ok(s.split_whitespace().filter_map(|w| w.parse().ok()).collect())
}

/// Kills everything in the cgroup (cgroup.kill), waits until it is empty,
/// removes it. `pid`, when given, is reaped if it is our child.
fn kill_cgroup(id: &str, dir: &Path, pid: Option<i32>) -> Result<(), ContainerError> {
    if !dir.exists() {
        return Ok(());
    }
    let cleanup = |what: String| move |source| ContainerError::Cleanup { id: id.to_string(), what, source };
    std::fs::write(dir.join("cgroup.kill"), "1").map_err(cleanup(format!("writing 1 to {}/cgroup.kill", dir.display())))?;
    let deadline = Instant::now() + KILL_TIMEOUT;
    loop {
        if let Some(pid) = pid {
            let _ = liveness(pid); // reaps it if it is our child
        }
        let left = cgroup_procs(dir).map_err(cleanup(format!("reading {}/cgroup.procs", dir.display())))?;
        if left.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            return Err(ContainerError::CleanupStuck {
                id: id.to_string(),
                reason: format!("{} still lists {left:?} {KILL_TIMEOUT:?} after cgroup.kill", dir.join("cgroup.procs").display()),
            });
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // The cgroup can stay busy for a moment after its last task is gone.
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match std::fs::remove_dir(dir) {
            Ok(()) => break,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(cleanup(format!("removing the cgroup {}", dir.display()))(e)),
        }
    }
    if let Some(pid) = pid {
        reap_quietly(pid);
    }
    Ok(())
}

/// Removes a container: cgroup.kill, wait until empty, rmdir the cgroup,
/// remove the registry entry. Works whether the process is alive or not.
pub fn kill(cfg: &Config, record: &Record) -> Result<(), ContainerError> {
    kill_cgroup(&record.id, &record.cgroup, Some(record.pid))?;
    cfg.registry.remove(&record.id)?;
    tracing::info!(id = %record.id, pid = record.pid, "container removed");
    Ok(())
}

/// Whether the record's process is alive and still the one in its cgroup
/// (guards against pid reuse).
pub fn is_running(record: &Record) -> bool {
    if liveness(record.pid) != Liveness::Running {
        return false;
    }
    cgroup_procs(&record.cgroup).map(|p| p.contains(&record.pid)).unwrap_or(false)
}
