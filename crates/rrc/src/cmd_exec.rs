//! `rrc exec`: start a command protected.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use rrc_container::{spawn, Bind, Config, Container, Spec, CONTAINER_RUN_DIR, CONTROL_SOCKET_NAME};

use rrc_launch::{RECORD_ENV, RECORD_FD, RECORD_FD_ENV, RECORD_FRAMED_ENV, RECORD_KEY_FD, RECORD_KEY_FD_ENV, RECORD_SEQ_ENV};

use crate::{locate, JsonFlag};

#[derive(Args, Debug)]
pub struct ExecArgs {
    /// Join the network namespace /run/netns/NAME.
    #[arg(long, value_name = "NAME")]
    pub netns: Option<String>,
    /// Append the command's stdout and stderr to FILE (default /dev/null).
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// The service's data directory: HOSTDIR is bind-mounted at PATH in the
    /// container, and the library journals every change the service makes
    /// under PATH into each checkpoint (FILEOPS section).
    #[arg(long, value_name = "HOSTDIR:PATH")]
    pub data_dir: Option<Bind>,
    /// Record the command's nondeterministic events into the record log
    /// FILE (docs/log-format.md; `rrc inspect --log FILE` summarizes it).
    /// Recorded: every synchronization primitive's acquisitions in order,
    /// threads, clocks, randomness, reads and receives (at most 64 KiB per
    /// call while recording), accept, epoll/poll/select results, sleeps,
    /// the fd table's order, outputs to sockets. Not replayed yet.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// With --record: the log is written as sealed rrc-wire frames (the
    /// form in which a protected service's log goes to its backup), each
    /// with an HMAC-SHA256 under a key derived from the agents' key file
    /// KEY (`rrc agent --key-file`); `rrc inspect --log FILE --key-file KEY`
    /// reads it, and refuses a frame added, dropped, moved or changed.
    #[arg(long, value_name = "KEY", requires = "record")]
    pub record_key_file: Option<PathBuf>,
    #[command(flatten)]
    pub json: JsonFlag,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub cmd: Vec<OsString>,
}

/// The caller's environment without the variables rrc sets itself.
pub fn base_env() -> Vec<(OsString, OsString)> {
    std::env::vars_os()
        .filter(|(k, _)| {
            k != "LD_PRELOAD"
                && k != "RRC_CONTROL"
                && k != DATA_DIR_ENV
                && ![RECORD_ENV, RECORD_FD_ENV, RECORD_KEY_FD_ENV, RECORD_SEQ_ENV, RECORD_FRAMED_ENV].iter().any(|r| k == r)
        })
        .collect()
}

/// Tells librrc.so which directory's changes to journal.
pub const DATA_DIR_ENV: &str = "RRC_DATA_DIR";

pub fn control_env() -> (OsString, OsString) {
    ("RRC_CONTROL".into(), format!("{CONTAINER_RUN_DIR}/{CONTROL_SOCKET_NAME}").into())
}

/// Prints the started container: its pid as the last stdout line, or one
/// JSON object.
pub fn print_started(c: &Container, json: bool, extra: serde_json::Value) -> Result<()> {
    if json {
        let mut v = serde_json::to_value(&c.record)?;
        if let (Some(o), serde_json::Value::Object(e)) = (v.as_object_mut(), extra) {
            o.extend(e);
        }
        println!("{}", serde_json::to_string(&v)?);
    } else {
        println!("{}", c.pid());
    }
    Ok(())
}

pub fn run(a: ExecArgs) -> Result<ExitCode> {
    let lib = locate::find(locate::LIBRRC)?;
    let mut env = base_env();
    let preload = match std::env::var_os("LD_PRELOAD") {
        Some(old) if !old.is_empty() => {
            let mut s = lib.clone().into_os_string();
            s.push(":");
            s.push(old);
            s
        }
        _ => lib.clone().into_os_string(),
    };
    env.push(("LD_PRELOAD".into(), preload));
    env.push(control_env());
    if let Some(b) = &a.data_dir {
        env.push((DATA_DIR_ENV.into(), b.target.clone().into_os_string()));
    }
    // what the recorder cannot see in this binary, named before it runs
    let record_warnings = match &a.record {
        Some(_) => {
            let w = crate::record_scan::warnings(std::path::Path::new(&a.cmd[0]))?;
            for line in &w {
                eprintln!("rrc: exec --record: warning: {line}");
            }
            w
        }
        None => Vec::new(),
    };
    let mut pass_fds = Vec::new();
    let record = match &a.record {
        Some(f) => {
            // created here, so that a path the container cannot write is
            // an error now rather than a line in the service's log
            let file = std::fs::File::create(f).with_context(|| format!("creating the record log {}", f.display()))?;
            let abs = std::fs::canonicalize(f).with_context(|| format!("the record log {}", f.display()))?;
            match &a.record_key_file {
                None => env.push((RECORD_ENV.into(), abs.clone().into_os_string())),
                Some(k) => {
                    let key = rrc_wire::Key::load(k).with_context(|| format!("the record log's key file {}", k.display()))?;
                    pass_fds.push((std::os::fd::OwnedFd::from(file), RECORD_FD));
                    pass_fds.push((rrc_launch::pipe_holding(&key.record_log_key()).context("the record log's key")?, RECORD_KEY_FD));
                    env.push((RECORD_FD_ENV.into(), RECORD_FD.to_string().into()));
                    env.push((RECORD_KEY_FD_ENV.into(), RECORD_KEY_FD.to_string().into()));
                }
            }
            Some(abs)
        }
        None => None,
    };
    let cfg = Config::default();
    let binds: Vec<Bind> = a.data_dir.into_iter().collect();
    let spec = Spec { argv: a.cmd, env, netns: a.netns, log: a.log, pass_fds, restored_from: None, binds };
    let c = spawn(&cfg, spec).context("rrc exec")?;
    match rrc_launch::wait_for_pong(&c, false) {
        Ok(pong) => {
            tracing::info!(pid = c.pid(), id = %c.record.id, threads = pong.nr_threads, "library answered PING");
            if let Some(f) = &record {
                // the library writes the log's header in its constructor,
                // just after it started the control thread that answered
                // (which must exist before recording begins: it is no
                // recorded thread): give it a moment
                let header = rrc_image::rrlog::LOG_HEADER_SIZE as u64
                    + if a.record_key_file.is_some() { (rrc_wire::HEADER_SIZE + rrc_wire::frame::MAC_LEN) as u64 } else { 0 };
                let len = || std::fs::metadata(f).map(|m| m.len()).unwrap_or(0);
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
                while len() < header && std::time::Instant::now() < deadline {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                if len() < header {
                    let _ = rrc_container::kill(&cfg, &c.record);
                    anyhow::bail!(
                        "rrc exec --record: the library did not start recording into {} (its reason is in the command's --log); container {} removed",
                        f.display(),
                        c.record.id
                    );
                }
            }
            let mut extra = serde_json::json!({ "library": lib, "threads": pong.nr_threads });
            if let Some(f) = &record {
                extra["record"] = serde_json::json!({ "log": f, "warnings": record_warnings });
            }
            print_started(&c, a.json.json, extra)?;
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            if let Err(k) = rrc_container::kill(&cfg, &c.record) {
                tracing::error!("removing the failed container: {k}");
            }
            Err(e.context(format!("rrc exec (container {} removed)", c.record.id)))
        }
    }
}
