//! Connections between agents (issue 12; docs/protocol.md "What each
//! listener accepts").
//!
//! The peer port takes the peer protocol only: a connection must pass the
//! handshake of [`rrc_wire::auth`] (both sides prove they hold the shared
//! key; `--insecure-no-auth` agents only exchange names), then open a
//! replication session with Replicate. Anything else — a CLI request, a
//! forged or replayed handshake, garbage, an oversized or truncated frame,
//! a peer that says nothing for [`HANDSHAKE_TIMEOUT`] — is refused,
//! counted ([`crate::security`]) and dropped, having changed nothing. At
//! most [`MAX_HANDSHAKES`] connections are in their handshake at once, and
//! [`MAX_HANDSHAKES_PER_ADDR`] from one address, so that a flood of idle
//! connections can neither exhaust the agent's threads nor, from one host,
//! keep the real peers out.

use std::collections::HashMap;
use std::io::BufReader;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use rrc_wire::auth::{client_handshake, server_handshake, Session};
use rrc_wire::{Frame, FrameKind, FrameReader, FrameWriter, Rejection};

use crate::Agent;

/// A handshake (and the session's first frame) must be done within this.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections in their handshake at once; more are dropped at accept.
pub const MAX_HANDSHAKES: usize = 64;
/// The same, from one address.
pub const MAX_HANDSHAKES_PER_ADDR: usize = 8;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A session's reading half, buffered: a log session's frames are small
/// and many (one per pass of the primary's log writer), and reading each
/// header, body and MAC with a system call of its own cost the backup's
/// `log-in` thread three `recvfrom` per reply under load.
pub type PeerReader = FrameReader<BufReader<TcpStream>>;

/// Bytes a [`PeerReader`] asks the kernel for at once.
const READ_BUFFER: usize = 64 << 10;

/// An established, authenticated (unless `--insecure-no-auth`) session
/// with another agent, in halves: one thread reads, others write.
pub struct PeerConn {
    pub session: Session,
    pub reader: PeerReader,
    pub writer: FrameWriter<TcpStream>,
    /// A third handle, to shut the connection down from any thread.
    pub ctl: TcpStream,
    pub peer_addr: SocketAddr,
    pub local_addr: SocketAddr,
}

impl PeerConn {
    fn split(stream: TcpStream, session: Session) -> std::io::Result<PeerConn> {
        let (sealer, opener) = session.frame_keys();
        Ok(PeerConn {
            peer_addr: stream.peer_addr()?,
            local_addr: stream.local_addr()?,
            reader: FrameReader::new(BufReader::with_capacity(READ_BUFFER, stream.try_clone()?), opener),
            writer: FrameWriter::new(stream.try_clone()?, sealer),
            ctl: stream,
            session,
        })
    }

    /// Connects to the agent of `host` (a `--peer`) and runs the handshake.
    pub fn connect(agent: &Agent, host: &str) -> Result<PeerConn> {
        let at = *agent
            .cfg
            .peers
            .get(host)
            .with_context(|| format!("host {} does not know a peer named {host:?} (its peers: {:?})", agent.cfg.name, agent.cfg.peers.keys().collect::<Vec<_>>()))?;
        let mut s = TcpStream::connect_timeout(&at, CONNECT_TIMEOUT).with_context(|| format!("connecting to the agent of {host} at {at}"))?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
        s.set_write_timeout(Some(HANDSHAKE_TIMEOUT))?;
        let session = client_handshake(&mut s, &agent.cfg.auth, &agent.cfg.name, Some(host)).map_err(|e| {
            if let Some(cause) = e.rejection() {
                agent.security.reject(cause, &at.to_string(), format!("connecting to {host}: {e}"));
            }
            anyhow::Error::new(e).context(format!("handshake with the agent of {host} at {at}"))
        })?;
        s.set_write_timeout(None)?;
        agent.security.session_opened();
        Ok(PeerConn::split(s, session)?)
    }

    /// Sets (or clears) the read timeout of every half.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        // One socket under three handles: the option is the socket's.
        self.ctl.set_read_timeout(t)
    }
}

/// Connections in their handshake, by source address.
#[derive(Default)]
struct Pending {
    by_addr: Mutex<HashMap<IpAddr, usize>>,
}

impl Pending {
    /// A slot for a new handshake from `ip`, or why there is none.
    fn take(self: &Arc<Self>, ip: IpAddr) -> Result<HandshakeSlot, String> {
        let mut m = crate::lock(&self.by_addr);
        let total: usize = m.values().sum();
        let mine = m.get(&ip).copied().unwrap_or(0);
        if total >= MAX_HANDSHAKES {
            return Err(format!("{total} connections already in their handshake"));
        }
        if mine >= MAX_HANDSHAKES_PER_ADDR {
            return Err(format!("{mine} connections from {ip} already in their handshake"));
        }
        *m.entry(ip).or_insert(0) += 1;
        Ok(HandshakeSlot { pending: self.clone(), ip })
    }
}

/// Frees its place in [`Pending`] when a connection's handshake ends.
struct HandshakeSlot {
    pending: Arc<Pending>,
    ip: IpAddr,
}

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        let mut m = crate::lock(&self.pending.by_addr);
        if let Some(n) = m.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

/// Accepts peers until the listener fails.
pub fn serve_listener(agent: Arc<Agent>, listener: TcpListener) {
    let pending = Arc::new(Pending::default());
    for c in listener.incoming() {
        let c = match c {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("peer accept: {e}");
                continue;
            }
        };
        let Ok(addr) = c.peer_addr() else { continue };
        let from = addr.to_string();
        let slot = match pending.take(addr.ip()) {
            Ok(s) => s,
            Err(why) => {
                agent.security.reject(Rejection::TooManyHandshakes, &from, why);
                continue;
            }
        };
        let a = agent.clone();
        let spawned = std::thread::Builder::new().name("peer-conn".into()).spawn(move || {
            if let Some((conn, first)) = open_session(&a, c, &from, slot) {
                dispatch(&a, conn, first, &from);
            }
        });
        if let Err(e) = spawned {
            tracing::warn!("peer connection from {addr}: no thread: {e}");
        }
    }
}

/// Handshake and first session frame, within [`HANDSHAKE_TIMEOUT`]; None
/// (counted) when the connection is refused. The handshake's `slot` is
/// given back before the connection closes, so that a peer that sees the
/// close may count on its place being free.
fn open_session(agent: &Agent, mut c: TcpStream, from: &str, slot: HandshakeSlot) -> Option<(PeerConn, Frame)> {
    let _ = c.set_nodelay(true);
    if c.set_read_timeout(Some(HANDSHAKE_TIMEOUT)).and_then(|_| c.set_write_timeout(Some(HANDSHAKE_TIMEOUT))).is_err() {
        drop(slot);
        return None;
    }
    let session = match server_handshake(&mut c, &agent.cfg.auth, &agent.cfg.name, Some(&agent.seen_nonces)) {
        Ok(s) => s,
        Err(e) => {
            drop(slot);
            match e.rejection() {
                Some(cause) => agent.security.reject(cause, from, &e),
                None => tracing::info!(%from, "peer connection ended in its handshake: {e}"),
            }
            return None;
        }
    };
    let _ = c.set_write_timeout(None);
    let mut conn = match PeerConn::split(c, session) {
        Ok(c) => c,
        Err(e) => {
            drop(slot);
            tracing::warn!(%from, "peer connection: {e}");
            return None;
        }
    };
    let first = conn.reader.recv();
    drop(slot);
    match first {
        Ok(f) => {
            agent.security.session_opened();
            Some((conn, f))
        }
        Err(e) => {
            match e.rejection() {
                Some(cause) => agent.security.reject(cause, from, format!("first frame of {}'s session: {e}", conn.session.peer_host)),
                None => tracing::info!(%from, "peer connection closed after its handshake: {e}"),
            }
            None
        }
    }
}

/// What an established session asks for: replication, or (rr mode) the
/// record log of a service this agent is the backup of.
fn dispatch(agent: &Arc<Agent>, conn: PeerConn, first: Frame, from: &str) {
    match first.kind {
        FrameKind::Replicate => {
            crate::name_this_thread("repl-in");
            crate::backup::serve(agent, conn, first)
        }
        FrameKind::LogStream => {
            crate::name_this_thread("log-in");
            crate::logship::serve(agent, conn, first, from)
        }
        FrameKind::Request => agent.security.reject(Rejection::CliRequest, from, format!("a CLI request inside {}'s session", conn.session.peer_host)),
        k => agent.security.reject(Rejection::UnexpectedFrame, from, format!("{}'s session opened with a {k:?} frame, not Replicate or LogStream", conn.session.peer_host)),
    }
}
