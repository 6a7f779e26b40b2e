//! `rrc restore`: verify a chain, start rrc-restore as pid 1 of a new
//! container, wait for its status and for the restored library.

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use rrc_container::{liveness, spawn, Bind, Config, Container, Liveness, Spec};
use rrc_image::Chain;

use crate::cmd_exec::{base_env, control_env, print_started};
use crate::restore_status::{self, RestoreStatus};
use crate::{locate, wait, JsonFlag};

/// rrc-restore maps and fills the whole chain before it reports.
const STATUS_TIMEOUT: Duration = Duration::from_secs(120);
/// The fd number rrc-restore finds its status pipe at.
const STATUS_FD: i32 = 3;

#[derive(Args, Debug)]
pub struct RestoreArgs {
    /// The image directory of the newest checkpoint of the chain.
    #[arg(long, value_name = "DIR")]
    pub images: PathBuf,
    /// Join the network namespace /run/netns/NAME.
    #[arg(long, value_name = "NAME")]
    pub netns: Option<String>,
    /// Append the restorer's and the restored process's output to FILE
    /// (default /dev/null).
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// The data directory to give the restored service: HOSTDIR (holding
    /// the committed file state, e.g. the backup's copy with the chain's
    /// FILEOPS applied) is bind-mounted at PATH before the restorer reopens
    /// files. PATH must be the one given to `rrc exec --data-dir`.
    #[arg(long, value_name = "HOSTDIR:PATH")]
    pub data_dir: Option<Bind>,
    #[command(flatten)]
    pub json: JsonFlag,
}

/// Reads the one status record; EOF first means the restorer died.
fn read_status(r: OwnedFd, c: &Container) -> Result<RestoreStatus> {
    let mut f = std::fs::File::from(r);
    let mut buf = [0u8; restore_status::SIZE];
    let mut got = 0;
    let deadline = Instant::now() + STATUS_TIMEOUT;
    while got < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            bail!("rrc-restore (pid {}) sent no status within {STATUS_TIMEOUT:?}; {}", c.pid(), wait::log_tail(&c.record.log));
        }
        let mut pfd = libc::pollfd { fd: f.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one pollfd on the stack.
        let n = unsafe { libc::poll(&mut pfd, 1, left.as_millis().min(1000) as i32) };
        if n <= 0 {
            continue;
        }
        match f.read(&mut buf[got..]) {
            Ok(0) => {
                // Give the exit status a moment to be collectable.
                let mut l = liveness(c.pid());
                let t = Instant::now();
                while l == Liveness::Running && t.elapsed() < Duration::from_secs(2) {
                    std::thread::sleep(Duration::from_millis(10));
                    l = liveness(c.pid());
                }
                bail!(
                    "rrc-restore (pid {}) closed its status fd without reporting ({}); {}",
                    c.pid(),
                    match l {
                        Liveness::Exited(s) => format!("exited with status {s}"),
                        Liveness::Signaled(s) => format!("killed by signal {s}"),
                        Liveness::Running => "still running".into(),
                        Liveness::Gone => "gone".into(),
                    },
                    wait::log_tail(&c.record.log)
                );
            }
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(anyhow!(e).context("reading rrc-restore's status")),
        }
    }
    restore_status::parse(&buf).map_err(|m| anyhow!("rrc-restore: {m}"))
}

pub fn run(a: RestoreArgs) -> Result<ExitCode> {
    let dir = std::fs::canonicalize(&a.images).with_context(|| format!("image directory {}", a.images.display()))?;
    // Nothing is touched before the whole chain is verified.
    let chain = Chain::load(&dir).context("verifying the checkpoint chain")?;
    let restorer = locate::find(locate::RESTORER)?;
    tracing::info!(images = chain.images.len(), dir = %dir.display(), "chain verified");

    let mut fds = [0; 2];
    // SAFETY: plain syscall writing two fds.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(anyhow!(std::io::Error::last_os_error()).context("creating the status pipe"));
    }
    // SAFETY: fresh fds we own.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };

    let mut argv: Vec<std::ffi::OsString> = vec![restorer.clone().into(), "--status-fd".into(), STATUS_FD.to_string().into()];
    argv.extend(chain.images.iter().map(|i| i.path.clone().into_os_string()));
    let mut env = base_env();
    env.push(control_env());
    let cfg = Config::default();
    let binds: Vec<Bind> = a.data_dir.into_iter().collect();
    let spec = Spec { argv, env, netns: a.netns, log: a.log, pass_fd: Some((w, STATUS_FD)), restored_from: Some(dir.clone()), binds };
    let c = spawn(&cfg, spec).context("starting rrc-restore")?;

    let res = read_status(r, &c).and_then(|st| {
        if st.code != 0 {
            bail!("rrc-restore failed: {st}");
        }
        wait::wait_for_pong(&c, true).context("the restored process")
    });
    match res {
        Ok(pong) => {
            print_started(&c, a.json.json, serde_json::json!({ "threads": pong.nr_threads, "images": chain.images.len() }))?;
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            if let Err(k) = rrc_container::kill(&cfg, &c.record) {
                tracing::error!("removing the failed container: {k}");
            }
            Err(e.context(format!("rrc restore {} (container {} removed)", dir.display(), c.record.id)))
        }
    }
}
