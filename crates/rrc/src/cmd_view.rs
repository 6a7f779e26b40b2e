//! `rrc view list|show|remove`: the services' views as etcd holds them
//! (issue 15, docs/failover.md "Views and fencing"), read and removed
//! through an agent's etcd client (its endpoints and TLS identity).

use std::process::ExitCode;

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use rrc_wire::msg::Request;
use rrc_wire::reply::{StoredView, StoredViews};

use crate::agents::{request, resolve, AgentRef};
use crate::cmd_service::{parts, AgentFlag};
use crate::JsonFlag;

#[derive(Args, Debug)]
pub struct ViewArgs {
    #[command(subcommand)]
    pub cmd: ViewCmd,
}

#[derive(Subcommand, Debug)]
pub enum ViewCmd {
    /// Every service's view in etcd, with its revision.
    List {
        #[command(flatten)]
        agent: AgentFlag,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// One service's view in etcd, with its revision.
    Show {
        name: String,
        #[command(flatten)]
        agent: AgentFlag,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Remove a view left behind (its service gone while etcd could not be
    /// reached, so that `rrc run` of the name is refused): only at the
    /// revision `rrc view show` gave, and only when no agent that answers
    /// has a part in the service.
    Remove {
        name: String,
        /// The view's revision, as `rrc view show NAME` printed it.
        #[arg(long)]
        revision: i64,
        #[command(flatten)]
        agent: AgentFlag,
        #[command(flatten)]
        json: JsonFlag,
    },
}

pub fn run(a: ViewArgs) -> Result<ExitCode> {
    match a.cmd {
        ViewCmd::List { agent, json } => show(&resolve(agent.agent.as_deref()), None, json.json),
        ViewCmd::Show { name, agent, json } => show(&resolve(agent.agent.as_deref()), Some(name), json.json),
        ViewCmd::Remove { name, revision, agent, json } => remove(&resolve(agent.agent.as_deref()), name, revision, json.json),
    }
}

/// Asks the agents in turn; the first answer is taken (every agent of a
/// deployment names the same etcd).
fn first_answer<T: serde::de::DeserializeOwned>(agents: &[AgentRef], req: &Request) -> Result<T> {
    let mut errors = Vec::new();
    for a in agents {
        match request::<T>(a, req) {
            Ok(v) => return Ok(v),
            Err(e) => errors.push(format!("{}: {e:#}", a.host)),
        }
    }
    bail!("no agent answered: {}", errors.join("; "))
}

fn line(v: &StoredView) -> String {
    format!(
        "{}: view {} (primary {}, backup {}, spares {}), lease {} ms, revision {}",
        v.service,
        v.number,
        v.primary,
        v.backup.as_deref().unwrap_or("none"),
        if v.spares.is_empty() { "none".to_string() } else { v.spares.join(",") },
        v.lease_ms,
        v.revision
    )
}

fn show(agents: &[AgentRef], name: Option<String>, json: bool) -> Result<ExitCode> {
    let found: StoredViews = first_answer(agents, &Request::Views { name: name.clone() })?;
    if json {
        println!("{}", serde_json::to_string(&found)?);
    } else {
        if found.views.is_empty() {
            match &name {
                Some(n) => println!("service {n} has no view in etcd ({})", found.etcd.join(",")),
                None => println!("no views in etcd ({})", found.etcd.join(",")),
            }
        }
        for v in &found.views {
            println!("{}", line(v));
        }
        for (key, why) in &found.unreadable {
            println!("{key}: UNREADABLE: {why}");
        }
    }
    // `show` of a service without a view says so and fails, as `rrc
    // status` of an unknown service does
    Ok(match (&name, found.views.is_empty()) {
        (Some(_), true) => ExitCode::FAILURE,
        _ => ExitCode::SUCCESS,
    })
}

fn remove(agents: &[AgentRef], name: String, revision: i64, json: bool) -> Result<ExitCode> {
    let running = parts(agents, &name);
    if !running.is_empty() {
        let hosts: Vec<String> = running.iter().map(|(a, r)| format!("{} ({})", a.host, r.as_str())).collect();
        bail!("service {name} still runs on {}: `rrc stop {name}` ends it and removes its view", hosts.join(", "));
    }
    let v: StoredView = first_answer(agents, &Request::RemoveView { name, revision })?;
    if json {
        println!("{}", serde_json::to_string(&v)?);
    } else {
        println!("removed {}", line(&v));
    }
    Ok(ExitCode::SUCCESS)
}
