//! `rrc ps` and `rrc kill`.

use std::process::ExitCode;

use anyhow::{bail, Result};
use clap::Args;
use rrc_container::{is_running, Config};
use serde::Serialize;

use crate::JsonFlag;

#[derive(Args, Debug)]
pub struct PsArgs {
    #[command(flatten)]
    pub json: JsonFlag,
}

#[derive(Args, Debug)]
#[group(required = true, multiple = false)]
pub struct KillArgs {
    /// The pid of the container's process (as printed by exec/restore).
    #[arg(long)]
    pub pid: Option<i32>,
    /// Every container in the registry.
    #[arg(long)]
    pub all: bool,
}

#[derive(Serialize)]
struct PsEntry {
    #[serde(flatten)]
    record: rrc_container::Record,
    running: bool,
}

pub fn run_ps(a: PsArgs) -> Result<ExitCode> {
    let cfg = Config::default();
    let entries: Vec<PsEntry> =
        cfg.registry.list()?.into_iter().map(|r| PsEntry { running: is_running(&r), record: r }).collect();
    if a.json.json {
        println!("{}", serde_json::to_string(&entries)?);
    } else {
        println!("{:<12}  {:>7}  {:<7}  {:<27}  COMMAND", "ID", "PID", "STATE", "STARTED");
        for e in &entries {
            let r = &e.record;
            let cmd = r.command.join(" ");
            let from = r.restored_from.as_ref().map(|p| format!("  [restored from {}]", p.display())).unwrap_or_default();
            println!(
                "{:<12}  {:>7}  {:<7}  {:<27}  {cmd}{from}",
                r.id,
                r.pid,
                if e.running { "running" } else { "exited" },
                r.started_at
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn run_kill(a: KillArgs) -> Result<ExitCode> {
    let cfg = Config::default();
    let records = if a.all {
        cfg.registry.list()?
    } else {
        let pid = a.pid.unwrap_or_default();
        match cfg.registry.find_pid(pid)? {
            Some(r) => vec![r],
            None => bail!("no container with pid {pid} in {} (see `rrc ps`)", cfg.registry.dir().display()),
        }
    };
    let mut failed = 0;
    for r in &records {
        match rrc_container::kill(&cfg, r) {
            Ok(()) => println!("removed container {} (pid {})", r.id, r.pid),
            Err(e) => {
                eprintln!("rrc: error: {e}");
                failed += 1;
            }
        }
    }
    if failed > 0 {
        bail!("{failed} of {} container(s) could not be removed", records.len());
    }
    Ok(ExitCode::SUCCESS)
}
