//! rrc: run a process protected (checkpointable) in a container, checkpoint
//! it, restore it, inspect images.
//!
//! Logs go to stderr, filtered by $RRC_LOG (tracing EnvFilter syntax, e.g.
//! RRC_LOG=debug or RRC_LOG=rrc_container=debug; default: warn). Results go
//! to stdout; `--json` makes them machine-readable.

mod agents;
mod cmd_agent;
mod cmd_dump;
mod cmd_exec;
mod cmd_inspect;
mod cmd_lab;
mod cmd_ps;
mod cmd_restore;
mod cmd_service;
mod cmd_view;
mod locate;
mod record_scan;
mod replay;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "rrc",
    version,
    about = "Run processes checkpointable, checkpoint and restore them",
    long_about = "rrc runs a process as pid 1 of its own container with librrc.so preloaded, \
takes full or incremental checkpoints of it without stopping it for more than the \
snapshot, and restores a checkpoint chain into a new container.\n\n\
Environment: RRC_LOG sets the log filter (stderr; default warn), RRC_LIBDIR the \
directory holding librrc.so and rrc-restore.",
    after_help = "Examples:\n  rrc exec --log /tmp/app.log -- ./server --port 8080\n  \
rrc dump --pid 1234 --images /var/lib/rrc/ck0 --leave-running\n  \
rrc dump --pid 1234 --images /var/lib/rrc/ck1 --parent /var/lib/rrc/ck0\n  \
rrc restore --images /var/lib/rrc/ck1 --log /tmp/app.log\n  \
rrc inspect --images /var/lib/rrc/ck1 --json"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run CMD protected: pid 1 of a new container, librrc.so preloaded.
    ///
    /// Returns once the library inside answers PING on its control socket
    /// (10 s at most) and prints the process's pid (as seen from here) as
    /// the last line of stdout.
    Exec(cmd_exec::ExecArgs),
    /// Checkpoint a process started by `rrc exec` or `rrc restore`.
    ///
    /// Writes DIR/checkpoint.rrc (full, or with --parent incremental
    /// against the parent's image), verifies it completely, links
    /// DIR/parent to the parent directory, and kills the container unless
    /// --leave-running.
    Dump(cmd_dump::DumpArgs),
    /// Restore a checkpoint chain (or one image piped in) into a new container.
    ///
    /// Verifies the whole chain first (every checksum, page data
    /// included; with --stdin, rrc-restore checks the image as it reads it,
    /// before the process runs), starts rrc-restore as pid 1 of a new
    /// container, waits
    /// for its status and for the restored library to answer PING, and
    /// prints the new pid as the last line of stdout.
    Restore(cmd_restore::RestoreArgs),
    /// Verify a checkpoint chain and summarize it.
    ///
    /// Exits 1 with the precise error when an image is corrupt, truncated,
    /// of another format version, or its parent is missing or wrong.
    Inspect(cmd_inspect::InspectArgs),
    /// List the containers started by rrc (registry + liveness).
    Ps(cmd_ps::PsArgs),
    /// Remove containers: kill every process in the cgroup, remove the
    /// cgroup and the registry entry.
    Kill(cmd_ps::KillArgs),
    /// The lab: hosts client, a, b, c (and e1, e2, e3 for etcd) on this machine as network namespaces.
    ///
    /// `up`, `down`, `exec HOST -- CMD`, `kill HOST`, `status`. `up` starts
    /// an agent on a, b and c, sharing a key it makes. See docs/lab.md.
    Lab(cmd_lab::LabArgs),
    /// Run the agent of this host (one per host; the lab starts its own).
    ///
    /// Serves the CLI on --socket and its peers on --listen; runs services
    /// as primary, keeps backups (store + packet gate). Stops on SIGTERM,
    /// ending every service part it holds.
    Agent(cmd_agent::AgentArgs),
    /// Make a key for a deployment's agents (`rrc agent --key-file FILE`).
    ///
    /// 32 random bytes from the kernel, written as hexadecimal into FILE,
    /// mode 0600, never over an existing file; prints the key's
    /// fingerprint (also shown by `rrc status`), not the key.
    Keygen(cmd_agent::KeygenArgs),
    /// Run CMD as a replicated service: primary on --primary, backup on
    /// --backup.
    ///
    /// Clients reach it at its service IP through the backup host; every
    /// reply is held there until the checkpoint of the epoch that produced
    /// it is committed at the backup. Returns once the service runs.
    Run(cmd_service::RunArgs),
    /// Show services: hosts and roles, mode, epoch, checkpoints committed,
    /// last pause and size, replication lag, protection, gate counters.
    Status(cmd_service::StatusArgs),
    /// Stop a service on every host.
    Stop(cmd_service::StopArgs),
    /// Inject a fault into a service's replication (tests, demos).
    Fault(cmd_service::FaultArgs),
    /// Write a service's committed state at the backup as an image that
    /// `rrc restore` accepts.
    Export(cmd_service::ExportArgs),
    /// Show or remove the services' views in etcd (agents run with --etcd).
    ///
    /// `list` and `show NAME` print each view with its etcd revision;
    /// `remove NAME --revision R` removes a view left behind by a service
    /// whose `rrc stop` could not reach etcd (the next `rrc run` of that
    /// name is refused while it is there).
    View(cmd_view::ViewArgs),
}

fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("RRC_LOG").unwrap_or_else(|_| EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_target(true).init();
}

/// Common output flag.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct JsonFlag {
    /// Print the result as one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn abs(p: &std::path::Path) -> anyhow::Result<PathBuf> {
    if p.is_absolute() {
        Ok(p.to_path_buf())
    } else {
        Ok(std::env::current_dir()?.join(p))
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let r = match cli.cmd {
        Cmd::Exec(a) => cmd_exec::run(a),
        Cmd::Dump(a) => cmd_dump::run(a),
        Cmd::Restore(a) => cmd_restore::run(a),
        Cmd::Inspect(a) => cmd_inspect::run(a),
        Cmd::Ps(a) => cmd_ps::run_ps(a),
        Cmd::Kill(a) => cmd_ps::run_kill(a),
        Cmd::Lab(a) => cmd_lab::run(a),
        Cmd::Agent(a) => cmd_agent::run(a),
        Cmd::Keygen(a) => cmd_agent::keygen(a),
        Cmd::Run(a) => cmd_service::run(a),
        Cmd::Status(a) => cmd_service::status(a),
        Cmd::Stop(a) => cmd_service::stop(a),
        Cmd::Fault(a) => cmd_service::fault(a),
        Cmd::Export(a) => cmd_service::export(a),
        Cmd::View(a) => cmd_view::run(a),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rrc: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
