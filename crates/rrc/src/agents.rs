//! Finding and talking to agents from the CLI.
//!
//! Which agent a verb talks to: `--agent SOCKET` if given, else
//! $RRC_AGENT, else, when a lab is up with agents, the lab's agents
//! (/run/rrc-lab/HOST/agent.sock), else the machine's own agent at
//! /run/rrc/agent.sock.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rrc_wire::msg::{Request, Response};
use rrc_wire::{read_frame, write_frame, Frame, FrameKind};

pub const DEFAULT_SOCKET: &str = "/run/rrc/agent.sock";
/// A `run` waits for the backup to get ready and the service to start.
const TIMEOUT: Duration = Duration::from_secs(60);

/// One agent: a name for messages and its socket.
#[derive(Debug, Clone)]
pub struct AgentRef {
    pub host: String,
    pub socket: PathBuf,
}

/// The lab's agents, when a lab with agents is up.
pub fn lab_agents() -> Option<Vec<AgentRef>> {
    if !Path::new(rrc_lab::LAB_JSON).exists() {
        return None;
    }
    let lab = rrc_lab::load().ok()?;
    if !lab.agents {
        return None;
    }
    Some(
        lab.hosts
            .iter()
            .filter(|h| rrc_lab::topology::runs_agent(&h.role))
            .map(|h| AgentRef { host: h.name.clone(), socket: rrc_lab::agent_socket(&h.name) })
            .collect(),
    )
}

/// The agents a verb addresses: the explicit one, or all the lab's, or the
/// local one.
pub fn resolve(explicit: Option<&Path>) -> Vec<AgentRef> {
    if let Some(p) = explicit {
        return vec![AgentRef { host: p.display().to_string(), socket: p.to_path_buf() }];
    }
    if let Some(p) = std::env::var_os("RRC_AGENT") {
        let p = PathBuf::from(p);
        return vec![AgentRef { host: p.display().to_string(), socket: p }];
    }
    if let Some(v) = lab_agents() {
        return v;
    }
    vec![AgentRef { host: "local".into(), socket: DEFAULT_SOCKET.into() }]
}

/// The agent of a named host (lab), or the explicit/local one.
pub fn for_host(explicit: Option<&Path>, host: &str) -> AgentRef {
    if explicit.is_none() && std::env::var_os("RRC_AGENT").is_none() {
        if let Some(v) = lab_agents() {
            if let Some(a) = v.into_iter().find(|a| a.host == host) {
                return a;
            }
        }
    }
    resolve(explicit).remove(0)
}

/// Sends one request and returns the data of a successful response, as
/// the reply type of that request (rrc_wire::reply).
pub fn request<T: serde::de::DeserializeOwned>(a: &AgentRef, req: &Request) -> Result<T> {
    request_within(a, req, TIMEOUT)
}

/// [`request`], waiting at most `timeout` for the answer: for questions
/// every agent is asked at once (`rrc status`), where one stopped agent
/// (SIGSTOP, a frozen cgroup) must not hold up the answer about the others.
pub fn request_within<T: serde::de::DeserializeOwned>(a: &AgentRef, req: &Request, timeout: Duration) -> Result<T> {
    let mut c = UnixStream::connect(&a.socket).with_context(|| {
        format!("connecting to the agent of {} at {} (is `rrc agent` running there? in the lab: `rrc lab up`)", a.host, a.socket.display())
    })?;
    c.set_read_timeout(Some(timeout))?;
    // An agent that refuses this client (not root) answers at once and
    // closes: the request may then meet a closed socket, but the answer,
    // which names the cause, is still there to read.
    let sent = write_frame(&mut c, FrameKind::Request, &Frame::json(FrameKind::Request, req).payload);
    let f = match (sent, read_frame(&mut c)) {
        (_, Ok(f)) => f,
        (Err(e), Err(_)) => return Err(anyhow::Error::new(e).context("sending the request")),
        (Ok(()), Err(rrc_wire::WireError::TimedOut)) => {
            bail!("the agent of {} did not answer within {} s (stopped, frozen, or overloaded)", a.host, timeout.as_secs_f64())
        }
        (Ok(()), Err(e)) => return Err(anyhow::Error::new(e).context(format!("reading the answer of the agent of {}", a.host))),
    };
    let r: Response<T> = f.expect(FrameKind::Response)?.parse().with_context(|| format!("the answer of the agent of {}", a.host))?;
    if !r.ok {
        bail!("agent of {}: {}", a.host, r.error.unwrap_or_else(|| "failed without a reason".into()));
    }
    r.data.with_context(|| format!("the agent of {} answered without data", a.host))
}
