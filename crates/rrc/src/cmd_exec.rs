//! `rrc exec`: start a command protected.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use rrc_container::{spawn, Bind, Config, Container, Spec, CONTAINER_RUN_DIR, CONTROL_SOCKET_NAME};

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
    #[command(flatten)]
    pub json: JsonFlag,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub cmd: Vec<OsString>,
}

/// The caller's environment without the variables rrc sets itself.
pub fn base_env() -> Vec<(OsString, OsString)> {
    std::env::vars_os().filter(|(k, _)| k != "LD_PRELOAD" && k != "RRC_CONTROL" && k != DATA_DIR_ENV).collect()
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
    let cfg = Config::default();
    let binds: Vec<Bind> = a.data_dir.into_iter().collect();
    let spec = Spec { argv: a.cmd, env, netns: a.netns, log: a.log, pass_fds: Vec::new(), restored_from: None, binds };
    let c = spawn(&cfg, spec).context("rrc exec")?;
    match rrc_launch::wait_for_pong(&c, false) {
        Ok(pong) => {
            tracing::info!(pid = c.pid(), id = %c.record.id, threads = pong.nr_threads, "library answered PING");
            print_started(&c, a.json.json, serde_json::json!({ "library": lib, "threads": pong.nr_threads }))?;
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
