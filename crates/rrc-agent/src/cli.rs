//! Requests from the CLI (Unix socket) or from another agent (TCP): one
//! Request frame, one Response frame, repeated until the client closes.

use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Result};
use rrc_wire::msg::{Fault, Request, Response};
use rrc_wire::{read_frame, write_frame, Frame, FrameKind, WireError};

use crate::{primary, Agent};

pub fn serve<S: Read + Write>(agent: &Arc<Agent>, mut c: S) {
    loop {
        match read_frame(&mut c) {
            Ok(f) => {
                if !answer(agent, &mut c, f) {
                    return;
                }
            }
            Err(WireError::Closed) => return,
            Err(e) => {
                tracing::warn!("CLI connection: {e}");
                let _ = write_frame(&mut c, FrameKind::Response, &Frame::json(FrameKind::Response, &Response::err(e)).payload);
                return;
            }
        }
    }
}

/// A connection whose first frame was already read.
pub fn serve_one<S: Read + Write>(agent: &Arc<Agent>, mut c: S, first: Frame) {
    if answer(agent, &mut c, first) {
        serve(agent, c);
    }
}

fn answer<S: Write>(agent: &Arc<Agent>, c: &mut S, f: Frame) -> bool {
    let resp = match f.expect(FrameKind::Request).and_then(|f| f.parse::<Request>()) {
        Ok(req) => {
            tracing::debug!(?req, "request");
            match handle(agent, req) {
                Ok(v) => Response::ok(v),
                Err(e) => {
                    tracing::warn!("request failed: {e:#}");
                    Response::err(format!("{e:#}"))
                }
            }
        }
        Err(e) => Response::err(e),
    };
    write_frame(c, FrameKind::Response, &Frame::json(FrameKind::Response, &resp).payload).is_ok()
}

fn handle(agent: &Arc<Agent>, req: Request) -> Result<serde_json::Value> {
    match req {
        Request::Ping => Ok(serde_json::json!({"host": agent.cfg.name, "pid": std::process::id()})),
        Request::Run { spec } => primary::start(agent, spec),
        Request::Status { name } => Ok(agent.status(name.as_deref())),
        Request::Stop { name } => agent.stop(&name, "rrc stop"),
        Request::Fault { name, fault } => fault_request(agent, &name, fault),
        Request::Export { name, dir } => match agent.backup(&name) {
            Some(b) => b.export(Path::new(&dir)),
            None => bail!("host {} is not the backup of a service named {name:?}", agent.cfg.name),
        },
    }
}

fn fault_request(agent: &Arc<Agent>, name: &str, fault: Fault) -> Result<serde_json::Value> {
    if let Some(p) = agent.primary(name) {
        return p.fault(fault);
    }
    if let Some(b) = agent.backup(name) {
        return b.fault(fault);
    }
    bail!("host {} has no service named {name:?}", agent.cfg.name)
}
