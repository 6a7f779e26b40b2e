//! Requests from the CLI, on the agent's local Unix socket only (issue
//! 12): one Request frame, one Response frame, repeated until the client
//! closes. The socket is root's alone: its directory may be written by no
//! one else, it is made mode 0600 and checked after binding, and each
//! client's credentials (SO_PEERCRED) are checked again at accept, so a
//! socket whose mode was loosened later still serves only root.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use rrc_wire::msg::{Fault, Request, Response};
use rrc_wire::reply::{FaultSet, Pong, Reply};
use rrc_wire::{read_frame, write_frame, Frame, FrameKind, Rejection, WireError};

use crate::{primary, Agent};

/// Binds the CLI socket at `path`, refusing a place or a result that
/// others could write to.
pub fn bind(path: &Path) -> Result<UnixListener> {
    // SAFETY: geteuid has no failure mode.
    let me = unsafe { libc::geteuid() };
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let md = std::fs::metadata(dir).with_context(|| format!("the CLI socket's directory {}", dir.display()))?;
    if md.uid() != me {
        bail!("the CLI socket's directory {} belongs to uid {}, not to this agent's user (uid {me}): another user could replace the socket", dir.display(), md.uid());
    }
    if md.mode() & 0o022 != 0 {
        bail!(
            "the CLI socket's directory {} can be written by group or others (mode {:04o}): another user could replace the socket; use a directory only root can write to",
            dir.display(),
            md.mode() & 0o7777
        );
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => std::fs::remove_file(path).with_context(|| format!("removing the old socket {}", path.display()))?,
        Ok(_) => bail!("{} exists and is not a socket; not replaced", path.display()),
        Err(_) => {}
    }
    // Born 0600: no window in which another user could connect.
    // SAFETY: umask only swaps the process's mask; no thread runs yet that
    // creates files (the agent binds before it starts any).
    let old = unsafe { libc::umask(0o177) };
    let l = UnixListener::bind(path);
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    let l = l.with_context(|| format!("binding the CLI socket {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).with_context(|| format!("chmod 600 {}", path.display()))?;
    let md = std::fs::symlink_metadata(path).with_context(|| format!("checking {}", path.display()))?;
    if !md.file_type().is_socket() || md.uid() != me || md.mode() & 0o077 != 0 {
        bail!("the CLI socket {} is not this agent's private socket after binding (uid {}, mode {:04o})", path.display(), md.uid(), md.mode() & 0o7777);
    }
    Ok(l)
}

/// The uid of the process at the other end of a Unix connection.
fn peer_uid(c: &UnixStream) -> std::io::Result<u32> {
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED fills a ucred of the size given.
    let r = unsafe { libc::getsockopt(c.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PEERCRED, &mut cred as *mut libc::ucred as *mut libc::c_void, &mut len) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// Serves CLI clients until the listener fails: root (or the agent's own
/// user) only.
pub fn serve_listener(agent: Arc<Agent>, l: UnixListener) {
    // SAFETY: geteuid has no failure mode.
    let me = unsafe { libc::geteuid() };
    for c in l.incoming() {
        let mut c = match c {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("CLI accept: {e}");
                continue;
            }
        };
        match peer_uid(&c) {
            Ok(uid) if uid == 0 || uid == me => {}
            Ok(uid) => {
                agent.security.reject(Rejection::CliPeerNotRoot, &format!("uid {uid}"), "a CLI client that is not root");
                let e = Response::<()>::err(format!("the rrc agent serves root only (this client runs as uid {uid})"));
                let _ = write_frame(&mut c, FrameKind::Response, &Frame::json(FrameKind::Response, &e).payload);
                continue;
            }
            Err(e) => {
                tracing::warn!("CLI client's credentials: {e}; refused");
                continue;
            }
        }
        let a = agent.clone();
        let _ = std::thread::Builder::new().name("cli-conn".into()).spawn(move || serve(&a, c));
    }
}

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
                let _ = write_frame(&mut c, FrameKind::Response, &Frame::json(FrameKind::Response, &Response::<()>::err(e)).payload);
                return;
            }
        }
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

fn handle(agent: &Arc<Agent>, req: Request) -> Result<Reply> {
    Ok(match req {
        Request::Ping => Reply::Pong(Pong { host: agent.cfg.name.clone(), pid: std::process::id() }),
        Request::Run { spec } => Reply::Service(Box::new(primary::start(agent, spec)?)),
        Request::Status { name } => Reply::Agent(Box::new(agent.status(name.as_deref()))),
        Request::Stop { name } => Reply::Stopped(agent.stop(&name, "rrc stop")?),
        Request::Fault { name, fault } => Reply::Fault(fault_request(agent, &name, fault)?),
        Request::Export { name, dir } => match agent.backup(&name) {
            Some(b) => Reply::Exported(b.export(Path::new(&dir))?),
            None => bail!("host {} is not the backup of a service named {name:?}", agent.cfg.name),
        },
        Request::Views { name } => Reply::Views(crate::views::stored_views(agent, name.as_deref())?),
        Request::RemoveView { name, revision } => Reply::ViewRemoved(crate::views::remove_stored_view(agent, &name, revision)?),
    })
}

fn fault_request(agent: &Arc<Agent>, name: &str, fault: Fault) -> Result<FaultSet> {
    if let Some(p) = agent.primary(name) {
        return p.fault(fault);
    }
    if let Some(b) = agent.backup(name) {
        return b.fault(fault);
    }
    bail!("host {} has no service named {name:?}", agent.cfg.name)
}
