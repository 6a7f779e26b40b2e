//! `rrc lab`: hosts on this machine as network namespaces (crate rrc-lab).

use std::ffi::OsString;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

use crate::JsonFlag;

#[derive(Args, Debug)]
pub struct LabArgs {
    #[command(subcommand)]
    pub cmd: LabCmd,
}

#[derive(Subcommand, Debug)]
pub enum LabCmd {
    /// Build the lab: namespaces rrc-lab-{client,a,b,c,e1,e2,e3} and rrc-lab-switch,
    /// the front (198.18.0.0/24) and repl (198.19.0.0/24) networks, a state
    /// directory and a cgroup per host; record it in /run/rrc-lab/lab.json.
    ///
    /// Refuses if any part of a lab exists ("a lab is already up; `rrc lab
    /// down` first"). On failure it removes what it made. Starts one `rrc
    /// agent` on each of a, b and c (CLI socket /run/rrc-lab/HOST/agent.sock,
    /// log /var/lib/rrc-lab/HOST/agent.log), sharing a key made for the lab
    /// (/run/rrc-lab/agent.key).
    Up(LabUpArgs),
    /// Remove every namespace, link, cgroup, state directory and process of
    /// the lab, found by name (works after a crash; no lab: nothing to do,
    /// exit 0).
    Down(JsonFlag),
    /// Run CMD on HOST: in its network namespace and cgroup, with this
    /// terminal's stdio, RRC_LAB_HOST=HOST and RRC_STATE_DIR=/var/lib/rrc-lab/HOST.
    ///
    /// The exit status is CMD's. rrc's own failures exit 125 (no lab, unknown
    /// or killed host), 126 (CMD cannot be run) or 127 (CMD not found).
    Exec(LabExecArgs),
    /// Fail-stop HOST as if its power went off: its links are cut (its
    /// veths deleted in the switch), then every process of it is killed
    /// (cgroup.kill; also anything else in its network namespace).
    Kill(LabKillArgs),
    /// Cut HOST from FROM: another host (the two no longer hear each
    /// other, each still hears the rest), `all` (HOST hears no one, and
    /// keeps running) or `etcd` (HOST reaches no etcd member but its own,
    /// which has no quorum). Undone by `rrc lab heal`.
    Cut(LabCutArgs),
    /// Remove every cut on every host.
    Heal(JsonFlag),
    /// Stop every process of HOST (its agent, etcd member and services)
    /// with the cgroup freezer, as SIGSTOP to all of them would.
    Freeze(LabHostArg),
    /// Resume the processes of a frozen HOST.
    Thaw(LabHostArg),
    /// Show hosts, addresses, link state, alive/killed, process counts.
    Status(JsonFlag),
}

#[derive(Args, Debug)]
pub struct LabCutArgs {
    /// client, a, b or c.
    pub host: String,
    /// Another host, `all` or `etcd`.
    pub from: String,
    #[command(flatten)]
    pub json: JsonFlag,
}

#[derive(Args, Debug)]
pub struct LabHostArg {
    /// client, a, b or c.
    pub host: String,
}

#[derive(Args, Debug)]
pub struct LabUpArgs {
    /// Start the agents without peer authentication (to try that mode:
    /// `rrc status` then says the agents are unauthenticated).
    #[arg(long)]
    pub insecure_no_auth: bool,
    /// Start no etcd cluster: the agents then keep no views and nothing
    /// fences a host that another believes failed (`rrc status` says so).
    #[arg(long)]
    pub no_etcd: bool,
    #[command(flatten)]
    pub json: JsonFlag,
}

#[derive(Args, Debug)]
pub struct LabExecArgs {
    /// client, a, b or c.
    pub host: String,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub cmd: Vec<OsString>,
}

#[derive(Args, Debug)]
pub struct LabKillArgs {
    /// client, a, b or c.
    pub host: String,
    #[command(flatten)]
    pub json: JsonFlag,
}

pub fn run(a: LabArgs) -> Result<ExitCode> {
    match a.cmd {
        LabCmd::Up(u) => up(u.json.json, !u.insecure_no_auth, !u.no_etcd),
        LabCmd::Down(j) => down(j.json),
        LabCmd::Exec(e) => Ok(exec(e)),
        LabCmd::Kill(k) => kill(k),
        LabCmd::Cut(c) => {
            let rep = rrc_lab::partition::cut(&c.host, &rrc_lab::partition::Target::parse(&c.from))?;
            if c.json.json {
                println!("{}", serde_json::to_string(&rep)?);
            } else {
                println!("host {} cut from {}: {}", rep.host, rep.from, rep.rules.join("; "));
            }
            Ok(ExitCode::SUCCESS)
        }
        LabCmd::Heal(j) => {
            let healed = rrc_lab::partition::heal()?;
            if j.json {
                println!("{}", serde_json::json!({ "healed": healed }));
            } else {
                println!("cuts removed on: {}", if healed.is_empty() { "no host had any".into() } else { healed.join(", ") });
            }
            Ok(ExitCode::SUCCESS)
        }
        LabCmd::Freeze(h) => {
            rrc_lab::partition::freeze(&h.host, true)?;
            println!("host {} frozen", h.host);
            Ok(ExitCode::SUCCESS)
        }
        LabCmd::Thaw(h) => {
            rrc_lab::partition::freeze(&h.host, false)?;
            println!("host {} thawed", h.host);
            Ok(ExitCode::SUCCESS)
        }
        LabCmd::Status(j) => status(j.json),
    }
}

fn up(json: bool, authenticated: bool, etcd: bool) -> Result<ExitCode> {
    let exe = std::env::current_exe().context("locating the rrc binary for the agents")?;
    let lab = rrc_lab::up(&exe, authenticated, etcd)?;
    if json {
        println!("{}", serde_json::to_string(&lab)?);
    } else {
        println!("lab up (switch {}; agents on a, b, c: {})", lab.switch_netns, rrc_lab::agent_socket("HOST").display());
        match &lab.key_file {
            Some(k) => println!("agents authenticate each other with the key {k}"),
            None => println!("agents run WITHOUT peer authentication (--insecure-no-auth)"),
        }
        if lab.etcd {
            println!("etcd: a member on each of e1, e2, e3 ({}); the agents keep their services' views there", rrc_lab::etcd::client_urls(0).join(","));
        } else {
            println!("no etcd (--no-etcd): the agents keep no views, and nothing fences a host another believes failed");
        }
        for h in &lab.hosts {
            let addrs: Vec<String> = h.links.iter().map(|l| format!("{} {}", l.network, l.address)).collect();
            println!("  {:<6}  {:<14}  {}", h.name, h.netns, addrs.join(", "));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn down(json: bool) -> Result<ExitCode> {
    let rep = rrc_lab::down()?;
    if json {
        println!("{}", serde_json::to_string(&rep)?);
    } else if rep.removed.is_empty() {
        println!("no lab: nothing to remove");
    } else {
        for r in &rep.removed {
            println!("removed {r}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn exec(e: LabExecArgs) -> ExitCode {
    let lab = match rrc_lab::load() {
        Ok(l) => l,
        Err(err) => {
            eprintln!("rrc: error: lab exec: {err}");
            return ExitCode::from(125);
        }
    };
    let (err, kind) = rrc_lab::exec(&lab, &e.host, &e.cmd);
    eprintln!("rrc: error: lab exec: {err}");
    ExitCode::from(match kind {
        None => 125,
        Some(std::io::ErrorKind::NotFound) => 127,
        Some(_) => 126,
    })
}

fn kill(k: LabKillArgs) -> Result<ExitCode> {
    let rep = rrc_lab::kill(&k.host)?;
    if k.json.json {
        println!("{}", serde_json::to_string(&rep)?);
    } else if rep.already_killed {
        println!("host {} was already killed at {}", rep.host, rep.killed_at);
    } else {
        println!(
            "host {} killed: links cut ({}), {} process(es) killed",
            rep.host,
            rep.links_cut.join(", "),
            rep.processes_killed
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn status(json: bool) -> Result<ExitCode> {
    let st = match rrc_lab::status() {
        Ok(s) => s,
        Err(rrc_lab::LabError::NoLab { .. }) => {
            if json {
                println!("{}", serde_json::json!({ "up": false }));
            } else {
                println!("no lab is up");
            }
            return Ok(ExitCode::SUCCESS);
        }
        Err(e) => return Err(e.into()),
    };
    if json {
        println!("{}", serde_json::to_string(&st)?);
        return Ok(ExitCode::SUCCESS);
    }
    let agents = match (st.agents, &st.key_file) {
        (false, _) => "none".to_string(),
        (true, Some(k)) => format!("started, sharing the key {k}"),
        (true, None) => "started WITHOUT peer authentication".to_string(),
    };
    println!("lab up since {} (switch {}; agents: {agents})", st.created_at, st.switch_netns);
    println!("{:<6}  {:<7}  {:<6}  {:>5}  LINKS", "HOST", "ROLE", "STATE", "PROCS");
    for h in &st.hosts {
        let links: Vec<String> = h
            .links
            .iter()
            .map(|l| format!("{} {} [{}{}]", l.network, l.address, l.host_end, if l.on_bridge { "" } else { ", cut" }))
            .collect();
        println!("{:<6}  {:<7}  {:<6}  {:>5}  {}", h.name, h.role, h.state, h.processes, links.join("  "));
    }
    Ok(ExitCode::SUCCESS)
}
