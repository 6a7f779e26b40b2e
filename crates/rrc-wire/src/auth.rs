//! Peer authentication (issue 12): the handshake that opens every
//! agent-to-agent connection, and the keys it leaves for the session.
//!
//! The agents of a deployment share one 32-byte key (`--key-file`, made by
//! `rrc keygen` or `rrc lab up`). A connection starts with four frames,
//! none of which carries the key or anything from which it can be found:
//!
//! ```text
//!   client -> server  Hello  {proto, host, auth, nonce_c}
//!   server -> client  Hello  {proto, host, auth, nonce_s}
//!   client -> server  Auth   HMAC(K, "rrc-peer v2 client proof" || T)
//!   server -> client  Auth   HMAC(K, "rrc-peer v2 server proof" || T)
//! ```
//!
//! T, the transcript, is SHA-256 over both Hello payloads as sent; both
//! nonces are fresh random, so each proof holds for one connection only: a
//! recorded handshake replayed later fails (the server's nonce differs), a
//! proof cannot be reflected (the labels differ), and an altered Hello
//! changes T. The server proves itself only to a client that did. The
//! session's keys are HKDF-SHA256 (RFC 5869) of K salted with T: one per
//! direction for frames (every frame then carries an HMAC-SHA256 over its
//! sequence number, header and payload: [`crate::session`]) and one per
//! direction for heartbeat datagrams ([`crate::datagram`]).
//!
//! An agent started without a key (`--insecure-no-auth`) says `"auth":
//! "none"`; the two Hello frames are all, and frames carry no MAC. A keyed
//! agent never talks to a keyless one: each side refuses the other's Hello,
//! naming the cause, so there is no downgrade.
//!
//! HMAC-SHA256 and HKDF are the RustCrypto crates `hmac`, `sha2` and
//! `hkdf`; a C speaker (the library's log shipping, issue 14) gets the same
//! from any HMAC-SHA256. tests/vectors/mkwire.py derives a handshake and a
//! sealed frame independently (Python's `hmac`), and
//! `tests::matches_the_shared_vectors` holds this code to it.

use std::collections::{HashSet, VecDeque};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::Mutex;

use hmac::{Mac, SimpleHmac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::frame::{read_body, read_header, read_raw, write_frame, Frame, FrameKind, WireError, MAC_LEN};
use crate::session::{FrameOpener, FrameSealer};

pub const KEY_LEN: usize = 32;
pub const NONCE_LEN: usize = 32;
/// The handshake's frames are small: a Hello of a few hundred bytes, an
/// Auth of 32. A peer that announces more is refused before it is read.
pub const HANDSHAKE_LIMIT: u32 = 1024;
/// What a Hello names the protocol.
pub const PROTO: &str = "rrc-peer";
const TRANSCRIPT_LABEL: &[u8] = b"rrc-peer v2 handshake";
const CLIENT_PROOF: &[u8] = b"rrc-peer v2 client proof";
const SERVER_PROOF: &[u8] = b"rrc-peer v2 server proof";
const FRAMES_C2S: &[u8] = b"rrc-peer v2 frames client to server";
const FRAMES_S2C: &[u8] = b"rrc-peer v2 frames server to client";
const HEARTBEATS_C2S: &[u8] = b"rrc-peer v2 heartbeats client to server";
const HEARTBEATS_S2C: &[u8] = b"rrc-peer v2 heartbeats server to client";
const FINGERPRINT_LABEL: &[u8] = b"rrc-peer key fingerprint";
const RECORD_LOG_LABEL: &[u8] = b"rrc record log frames";

/// HMAC-SHA256. `SimpleHmac` keeps the key and does no block-level
/// caching; the key is 32 bytes, so nothing is lost.
pub(crate) type HmacSha256 = SimpleHmac<Sha256>;

pub(crate) fn hmac(key: &[u8; KEY_LEN], parts: &[&[u8]]) -> [u8; MAC_LEN] {
    let mut m = <HmacSha256 as Mac>::new_from_slice(key).expect("HMAC takes a key of any length");
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

/// Constant-time check of `tag` against HMAC(key, parts).
pub(crate) fn hmac_verify(key: &[u8; KEY_LEN], parts: &[&[u8]], tag: &[u8]) -> bool {
    let mut m = <HmacSha256 as Mac>::new_from_slice(key).expect("HMAC takes a key of any length");
    for p in parts {
        m.update(p);
    }
    m.verify_slice(tag).is_ok()
}

/// The key the agents of a deployment share.
#[derive(Clone)]
pub struct Key([u8; KEY_LEN]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key(fingerprint {})", self.fingerprint())
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        // Best effort: the compiler may not elide a volatile write.
        for b in self.0.iter_mut() {
            // SAFETY: a valid, aligned, exclusive reference.
            unsafe { std::ptr::write_volatile(b, 0) };
        }
    }
}

/// Why a key file was not used.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    #[error("key file {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("key file {path} is not a regular file")]
    NotAFile { path: String },
    #[error("key file {path} belongs to uid {owner}, not to this agent's user (uid {me}): chown it")]
    Owner { path: String, owner: u32, me: u32 },
    #[error("key file {path} can be read or written by other users (mode {mode:04o}): chmod 600 {path}")]
    Mode { path: String, mode: u32 },
    #[error("key file {path} does not hold a key: expected {} hexadecimal digits (make one with `rrc keygen FILE`)", KEY_LEN * 2)]
    Format { path: String },
    #[error("key file {path} already exists; not overwritten")]
    Exists { path: String },
    #[error("no random bytes from the kernel: {0}")]
    Random(String),
}

impl Key {
    pub fn from_bytes(b: [u8; KEY_LEN]) -> Key {
        Key(b)
    }

    /// A fresh key from the kernel's random source.
    pub fn generate() -> Result<Key, KeyFileError> {
        Ok(Key(random_bytes()?))
    }

    /// A short public name of the key (a hash of it, not the key): two
    /// agents with the same fingerprint hold the same key.
    /// The key a sealed record log is sealed with when it is a file
    /// (`rrc exec --record FILE --record-key-file KEY`): derived from this
    /// one (HKDF-SHA256), so that it MACs nothing else.
    pub fn record_log_key(&self) -> [u8; KEY_LEN] {
        let mut k = [0u8; KEY_LEN];
        hkdf::Hkdf::<Sha256>::new(None, &self.0).expand(RECORD_LOG_LABEL, &mut k).expect("32 bytes is a valid HKDF-SHA256 length");
        k
    }

    pub fn fingerprint(&self) -> String {
        let d = Sha256::new().chain_update(FINGERPRINT_LABEL).chain_update(self.0).finalize();
        hex(&d[..8])
    }

    /// Reads a key file: a regular file of this user, readable by no one
    /// else (as ssh wants of a private key), holding 64 hexadecimal digits
    /// (whitespace around them allowed).
    pub fn load(path: &Path) -> Result<Key, KeyFileError> {
        let p = path.display().to_string();
        let mut f = open_private_file(path)?;
        let mut text = String::new();
        // A key file is 65 bytes; read a little more to see a longer one.
        (&mut f).take(256).read_to_string(&mut text).map_err(|_| KeyFileError::Format { path: p.clone() })?;
        parse_hex_key(text.trim()).map(Key).ok_or(KeyFileError::Format { path: p })
    }

    /// Makes a new key file (mode 0600, never over an existing file).
    pub fn create_file(path: &Path) -> Result<Key, KeyFileError> {
        let p = path.display().to_string();
        let key = Key::generate()?;
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::AlreadyExists {
                KeyFileError::Exists { path: p.clone() }
            } else {
                KeyFileError::Io { path: p.clone(), source }
            }
        })?;
        // The umask may have narrowed the mode further, never widened it.
        f.write_all(format!("{}\n", hex(&key.0)).as_bytes()).and_then(|_| f.sync_all()).map_err(|source| KeyFileError::Io { path: p, source })?;
        Ok(key)
    }
}

/// Opens a file that holds a secret (the agents' key, etcd's client key):
/// a regular file of this user that no one else may read or write, as ssh
/// wants of a private key; refused, naming which of these it is not.
pub fn open_private_file(path: &Path) -> Result<std::fs::File, KeyFileError> {
    let p = path.display().to_string();
    let io = |source| KeyFileError::Io { path: p.clone(), source };
    let f = std::fs::File::open(path).map_err(io)?;
    let md = f.metadata().map_err(io)?;
    if !md.is_file() {
        return Err(KeyFileError::NotAFile { path: p });
    }
    // SAFETY: geteuid has no failure mode.
    let me = unsafe { libc::geteuid() };
    if md.uid() != me {
        return Err(KeyFileError::Owner { path: p, owner: md.uid(), me });
    }
    let mode = md.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(KeyFileError::Mode { path: p, mode });
    }
    Ok(f)
}

fn parse_hex_key(s: &str) -> Option<[u8; KEY_LEN]> {
    let b = s.as_bytes();
    if b.len() != KEY_LEN * 2 {
        return None;
    }
    let mut k = [0u8; KEY_LEN];
    for (i, pair) in b.chunks(2).enumerate() {
        let s = std::str::from_utf8(pair).ok()?;
        k[i] = u8::from_str_radix(s, 16).ok()?;
    }
    Some(k)
}

pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn random_bytes<const N: usize>() -> Result<[u8; N], KeyFileError> {
    let mut b = [0u8; N];
    getrandom::getrandom(&mut b).map_err(|e| KeyFileError::Random(e.to_string()))?;
    Ok(b)
}

/// How an agent meets its peers.
#[derive(Debug, Clone)]
pub enum PeerAuth {
    /// Peers must prove they hold this key; every frame carries a MAC.
    Key(Key),
    /// `--insecure-no-auth`: anyone who reaches the port is a peer.
    Unauthenticated,
}

impl PeerAuth {
    pub fn mode(&self) -> AuthMode {
        match self {
            PeerAuth::Key(_) => AuthMode::HmacSha256,
            PeerAuth::Unauthenticated => AuthMode::None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AuthMode {
    #[serde(rename = "hmac-sha256")]
    HmacSha256,
    #[serde(rename = "none")]
    None,
}

impl AuthMode {
    pub fn as_str(self) -> &'static str {
        match self {
            AuthMode::HmacSha256 => "hmac-sha256",
            AuthMode::None => "none",
        }
    }
}

/// Each side's first frame. Field names are part of the protocol.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hello {
    /// [`PROTO`].
    pub proto: String,
    /// The sender's host name (what `rrc run --primary/--backup` name).
    pub host: String,
    pub auth: AuthMode,
    /// 32 random bytes, hexadecimal.
    pub nonce: String,
}

impl Hello {
    fn check(&self) -> Result<(), HandshakeError> {
        if self.proto != PROTO {
            return Err(HandshakeError::BadHello(format!("protocol {:?}, expected {PROTO:?}", self.proto)));
        }
        if !valid_host(&self.host) {
            return Err(HandshakeError::BadHello(format!("host name {:?}: expected 1-64 letters, digits, '.', '-' or '_'", self.host)));
        }
        if self.nonce.len() != NONCE_LEN * 2 || !self.nonce.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(HandshakeError::BadHello(format!("nonce of {} characters, expected {} hexadecimal digits", self.nonce.len(), NONCE_LEN * 2)));
        }
        Ok(())
    }
}

/// A host name as agents use them (and as logs and errors quote them).
pub fn valid_host(h: &str) -> bool {
    !h.is_empty() && h.len() <= 64 && h.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'_'))
}

/// Why a handshake failed. Each is refused and the connection dropped.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("a CLI request (Request frame) on the peer port: the agent serves the CLI on its local Unix socket only")]
    CliRequest,
    #[error("the connection opened with a {0:?} frame, not Hello")]
    NotHello(FrameKind),
    #[error("expected the peer's proof (Auth), got a {0:?} frame")]
    NotAuth(FrameKind),
    #[error("malformed Hello: {0}")]
    BadHello(String),
    #[error("a Hello whose nonce was seen before: a replayed handshake")]
    ReplayedHello,
    #[error("peer {peer} offers no authentication, and this agent requires peers that hold its key")]
    PeerUnauthenticated { peer: String },
    #[error("peer {peer} requires authentication, and this agent runs without a key (--insecure-no-auth); give both the same --key-file")]
    PeerRequiresAuth { peer: String },
    #[error("peer {peer}'s proof does not match this agent's key: it holds another key, or forges or replays a handshake")]
    BadProof { peer: String },
    #[error("the peer refused the connection: {0}")]
    Refused(String),
}

/// What a refused connection is counted as (`rrc status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rejection {
    /// A Request frame on the peer port.
    CliRequest,
    /// Not the format: bad magic, checksums, version, kind, flags, JSON.
    Malformed,
    /// A size beyond what the receiver takes there.
    Oversized,
    /// The connection ended inside a frame.
    Truncated,
    /// Nothing complete within the time allowed (a handshake's 5 s).
    TimedOut,
    /// A frame in the wrong place (not Hello first, not Auth second...).
    UnexpectedFrame,
    /// A handshake whose proof does not match the key.
    BadProof,
    /// A Hello seen before.
    ReplayedHello,
    /// One side keyed, the other not.
    AuthMismatch,
    /// A session frame whose MAC does not match (forged, replayed,
    /// reordered or damaged), or one without a MAC where one is due.
    BadMac,
    /// A heartbeat datagram that is not the peer's next one.
    BadHeartbeat,
    /// A local CLI client that is not root.
    CliPeerNotRoot,
    /// More handshakes at once than the agent takes.
    TooManyHandshakes,
}

impl Rejection {
    pub fn as_str(self) -> &'static str {
        match self {
            Rejection::CliRequest => "CLI requests on the peer port",
            Rejection::Malformed => "malformed frames",
            Rejection::Oversized => "oversized frames",
            Rejection::Truncated => "truncated frames",
            Rejection::TimedOut => "handshakes timed out",
            Rejection::UnexpectedFrame => "frames out of place",
            Rejection::BadProof => "failed proofs (wrong key)",
            Rejection::ReplayedHello => "replayed handshakes",
            Rejection::AuthMismatch => "peers with/without a key against this one",
            Rejection::BadMac => "frames with a bad MAC",
            Rejection::BadHeartbeat => "forged or replayed heartbeats",
            Rejection::CliPeerNotRoot => "CLI clients not root",
            Rejection::TooManyHandshakes => "connections over the handshake limit",
        }
    }
}

impl WireError {
    /// What a receiver counts this error as; None for the ends of a
    /// connection that are no one's attack (a close, an I/O error).
    pub fn rejection(&self) -> Option<Rejection> {
        use WireError::*;
        Some(match self {
            Closed | Io(_) => return None,
            Truncated => Rejection::Truncated,
            TimedOut => Rejection::TimedOut,
            Magic(_) | HeaderCrc { .. } | Version(_) | Kind(_) | PayloadCrc { .. } | Flags(_) | Json { .. } => Rejection::Malformed,
            TooLarge { .. } => Rejection::Oversized,
            MacMissing(_) | MacUnexpected(_) | BadMac { .. } => Rejection::BadMac,
            Unexpected { .. } => Rejection::UnexpectedFrame,
        })
    }
}

impl HandshakeError {
    pub fn rejection(&self) -> Option<Rejection> {
        use HandshakeError::*;
        match self {
            Wire(w) => w.rejection(),
            CliRequest => Some(Rejection::CliRequest),
            NotHello(_) | NotAuth(_) => Some(Rejection::UnexpectedFrame),
            BadHello(_) => Some(Rejection::Malformed),
            ReplayedHello => Some(Rejection::ReplayedHello),
            PeerUnauthenticated { .. } | PeerRequiresAuth { .. } => Some(Rejection::AuthMismatch),
            BadProof { .. } => Some(Rejection::BadProof),
            Refused(_) => None,
        }
    }
}

/// The server's memory of recent client nonces: a Hello seen before is a
/// replay (it would fail at the proof anyway; this names it).
pub struct SeenNonces {
    inner: Mutex<NonceRing>,
    capacity: usize,
}

/// The nonces remembered, as a set and in the order they came.
#[derive(Default)]
struct NonceRing {
    set: HashSet<[u8; NONCE_LEN]>,
    order: VecDeque<[u8; NONCE_LEN]>,
}

impl SeenNonces {
    pub fn new(capacity: usize) -> SeenNonces {
        SeenNonces { inner: Mutex::new(NonceRing::default()), capacity: capacity.max(1) }
    }

    /// True when `n` is new (and now remembered).
    fn fresh(&self, n: [u8; NONCE_LEN]) -> bool {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if !g.set.insert(n) {
            return false;
        }
        g.order.push_back(n);
        while g.order.len() > self.capacity {
            if let Some(old) = g.order.pop_front() {
                g.set.remove(&old);
            }
        }
        true
    }
}

/// Which end of the connection this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Client,
    Server,
}

/// The transcript hash T of two Hello payloads, as sent.
pub fn transcript(hello_client: &[u8], hello_server: &[u8]) -> [u8; 32] {
    Sha256::new()
        .chain_update(TRANSCRIPT_LABEL)
        .chain_update((hello_client.len() as u32).to_le_bytes())
        .chain_update(hello_client)
        .chain_update((hello_server.len() as u32).to_le_bytes())
        .chain_update(hello_server)
        .finalize()
        .into()
}

/// The proof `role` sends for transcript `t`.
pub fn proof(key: &Key, role: Role, t: &[u8; 32]) -> [u8; MAC_LEN] {
    hmac(&key.0, &[if role == Role::Client { CLIENT_PROOF } else { SERVER_PROOF }, t])
}

fn proof_holds(key: &Key, role: Role, t: &[u8; 32], tag: &[u8]) -> bool {
    hmac_verify(&key.0, &[if role == Role::Client { CLIENT_PROOF } else { SERVER_PROOF }, t], tag)
}

/// A session's four keys, from the shared key and the transcript.
#[derive(Clone)]
pub struct SessionKeys {
    pub frames_c2s: [u8; KEY_LEN],
    pub frames_s2c: [u8; KEY_LEN],
    pub heartbeats_c2s: [u8; KEY_LEN],
    pub heartbeats_s2c: [u8; KEY_LEN],
}

impl std::fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionKeys(..)")
    }
}

pub fn derive_keys(key: &Key, t: &[u8; 32]) -> SessionKeys {
    let hk = hkdf::Hkdf::<Sha256>::new(Some(t), &key.0);
    let expand = |info: &[u8]| {
        let mut k = [0u8; KEY_LEN];
        hk.expand(info, &mut k).expect("32 bytes is a valid HKDF-SHA256 length");
        k
    };
    SessionKeys { frames_c2s: expand(FRAMES_C2S), frames_s2c: expand(FRAMES_S2C), heartbeats_c2s: expand(HEARTBEATS_C2S), heartbeats_s2c: expand(HEARTBEATS_S2C) }
}

/// One kind of traffic's two keys, as seen from one side.
#[derive(Clone, Copy)]
struct Directed {
    send: [u8; KEY_LEN],
    recv: [u8; KEY_LEN],
}

/// An established connection's security: who the peer is and the keys of
/// each direction (None: an unauthenticated session).
#[derive(Debug, Clone)]
pub struct Session {
    pub peer_host: String,
    pub role: Role,
    keys: Option<SessionKeys>,
}

impl Session {
    pub fn authenticated(&self) -> bool {
        self.keys.is_some()
    }

    /// The keys this side sends with and checks the peer's with:
    /// (send, receive) for frames, then for heartbeats.
    fn directions(&self) -> Option<[Directed; 2]> {
        let k = self.keys.as_ref()?;
        Some(match self.role {
            Role::Client => [Directed { send: k.frames_c2s, recv: k.frames_s2c }, Directed { send: k.heartbeats_c2s, recv: k.heartbeats_s2c }],
            Role::Server => [Directed { send: k.frames_s2c, recv: k.frames_c2s }, Directed { send: k.heartbeats_s2c, recv: k.heartbeats_c2s }],
        })
    }

    /// The key this side's frames are sealed with (None: unauthenticated):
    /// handed to a recorded process, which goes on sealing the frames of
    /// this connection (rr mode's log session).
    pub fn send_frame_key(&self) -> Option<[u8; KEY_LEN]> {
        self.directions().map(|[f, _]| f.send)
    }

    /// The frame sealer (what this side sends) and opener (what it reads).
    pub fn frame_keys(&self) -> (FrameSealer, FrameOpener) {
        match self.directions() {
            Some([f, _]) => (FrameSealer::keyed(f.send), FrameOpener::keyed(f.recv)),
            None => (FrameSealer::plain(), FrameOpener::plain()),
        }
    }

    /// The heartbeat datagram sealer and opener of this session.
    pub fn heartbeat_keys(&self) -> (crate::datagram::HeartbeatSealer, crate::datagram::HeartbeatOpener) {
        use crate::datagram::{HeartbeatOpener, HeartbeatSealer};
        match self.directions() {
            Some([_, h]) => (HeartbeatSealer::keyed(h.send), HeartbeatOpener::keyed(h.recv)),
            None => (HeartbeatSealer::plain(), HeartbeatOpener::plain()),
        }
    }

    #[cfg(test)]
    pub(crate) fn keys(&self) -> Option<&SessionKeys> {
        self.keys.as_ref()
    }
}

fn new_hello(auth: &PeerAuth, host: &str, nonce: &[u8; NONCE_LEN]) -> Vec<u8> {
    Frame::json(FrameKind::Hello, &Hello { proto: PROTO.into(), host: host.into(), auth: auth.mode(), nonce: hex(nonce) }).payload
}

fn read_hello<S: Read>(s: &mut S, first: bool) -> Result<(Hello, Vec<u8>), HandshakeError> {
    // The header is read against the format's limit so that a CLI's
    // request, bigger than a Hello may be, is still named for what it is.
    let (h, decoded) = read_header(s, crate::frame::MAX_PAYLOAD)?;
    let kind = decoded.kind;
    if kind == FrameKind::Request && first {
        return Err(HandshakeError::CliRequest);
    }
    if decoded.len > HANDSHAKE_LIMIT {
        return Err(WireError::TooLarge { len: decoded.len, limit: HANDSHAKE_LIMIT }.into());
    }
    let raw = read_body(s, h, decoded)?;
    if raw.mac.is_some() {
        return Err(WireError::MacUnexpected(kind).into());
    }
    match kind {
        FrameKind::Hello => {}
        FrameKind::Response if !first => {
            let r: crate::msg::Response<serde::de::IgnoredAny> = raw.into_frame().parse()?;
            return Err(HandshakeError::Refused(r.error.unwrap_or_else(|| "no reason given".into())));
        }
        k => return Err(HandshakeError::NotHello(k)),
    }
    let hello: Hello = serde_json::from_slice(&raw.payload).map_err(|e| HandshakeError::BadHello(e.to_string()))?;
    hello.check()?;
    Ok((hello, raw.payload))
}

fn read_auth<S: Read>(s: &mut S) -> Result<[u8; MAC_LEN], HandshakeError> {
    let raw = read_raw(s, HANDSHAKE_LIMIT)?;
    let kind = raw.decoded.kind;
    match kind {
        FrameKind::Auth if raw.payload.len() == MAC_LEN && raw.mac.is_none() => {
            let mut t = [0u8; MAC_LEN];
            t.copy_from_slice(&raw.payload);
            Ok(t)
        }
        FrameKind::Auth => Err(HandshakeError::BadHello(format!("an Auth frame of {} bytes, expected {MAC_LEN}", raw.payload.len()))),
        FrameKind::Response => {
            let r: crate::msg::Response<serde::de::IgnoredAny> = raw.into_frame().parse()?;
            Err(HandshakeError::Refused(r.error.unwrap_or_else(|| "no reason given".into())))
        }
        k => Err(HandshakeError::NotAuth(k)),
    }
}

/// Whether the two sides agree: both keyed (this side's key), both not
/// (None), or a refusal naming which side lacks the key.
fn agree<'k>(auth: &'k PeerAuth, theirs: AuthMode, peer: &str) -> Result<Option<&'k Key>, HandshakeError> {
    match (auth, theirs) {
        (PeerAuth::Key(k), AuthMode::HmacSha256) => Ok(Some(k)),
        (PeerAuth::Unauthenticated, AuthMode::None) => Ok(None),
        (PeerAuth::Key(_), AuthMode::None) => Err(HandshakeError::PeerUnauthenticated { peer: peer.into() }),
        (PeerAuth::Unauthenticated, AuthMode::HmacSha256) => Err(HandshakeError::PeerRequiresAuth { peer: peer.into() }),
    }
}

/// Tells the other side why (best effort: it may be gone or hostile).
fn refuse<S: Write>(s: &mut S, why: &HandshakeError) {
    let payload = Frame::json(FrameKind::Response, &crate::msg::Response::<()>::err(why)).payload;
    let _ = write_frame(s, FrameKind::Response, &payload);
}

/// The connecting side's handshake. `expect_host`, when given, is the host
/// this side meant to reach: another answering is refused.
pub fn client_handshake<S: Read + Write>(s: &mut S, auth: &PeerAuth, host: &str, expect_host: Option<&str>) -> Result<Session, HandshakeError> {
    client_handshake_with(s, auth, host, expect_host, random_nonce()?)
}

fn random_nonce() -> Result<[u8; NONCE_LEN], HandshakeError> {
    random_bytes().map_err(|e| HandshakeError::Wire(WireError::Io(std::io::Error::other(e.to_string()))))
}

/// [`client_handshake`] with a given nonce (tests, fuzzing: a deterministic run).
pub fn client_handshake_with<S: Read + Write>(s: &mut S, auth: &PeerAuth, host: &str, expect_host: Option<&str>, nonce: [u8; NONCE_LEN]) -> Result<Session, HandshakeError> {
    let hello_c = new_hello(auth, host, &nonce);
    write_frame(s, FrameKind::Hello, &hello_c)?;
    s.flush().map_err(WireError::from)?;
    let (hello, hello_s) = read_hello(s, false)?;
    let peer = hello.host.clone();
    if let Some(want) = expect_host {
        if want != peer {
            return Err(HandshakeError::BadHello(format!("the agent there is host {peer:?}, not {want:?}")));
        }
    }
    let Some(key) = agree(auth, hello.auth, &peer)? else {
        return Ok(Session { peer_host: peer, role: Role::Client, keys: None });
    };
    let t = transcript(&hello_c, &hello_s);
    write_frame(s, FrameKind::Auth, &proof(key, Role::Client, &t))?;
    s.flush().map_err(WireError::from)?;
    let theirs = read_auth(s)?;
    if !proof_holds(key, Role::Server, &t, &theirs) {
        return Err(HandshakeError::BadProof { peer });
    }
    Ok(Session { peer_host: peer, role: Role::Client, keys: Some(derive_keys(key, &t)) })
}

/// The accepting side's handshake. A refusal is sent to the peer (named)
/// before the error returns; the caller drops the connection.
pub fn server_handshake<S: Read + Write>(s: &mut S, auth: &PeerAuth, host: &str, seen: Option<&SeenNonces>) -> Result<Session, HandshakeError> {
    server_handshake_with(s, auth, host, seen, random_nonce()?)
}

/// [`server_handshake`] with a given nonce (tests, fuzzing: a deterministic run).
pub fn server_handshake_with<S: Read + Write>(s: &mut S, auth: &PeerAuth, host: &str, seen: Option<&SeenNonces>, nonce: [u8; NONCE_LEN]) -> Result<Session, HandshakeError> {
    let r = server_steps(s, auth, host, seen, nonce);
    if let Err(e) = &r {
        match e {
            // Nothing to tell a peer that sent garbage or went away; a CLI
            // client or a peer of another configuration is told why.
            HandshakeError::CliRequest | HandshakeError::PeerUnauthenticated { .. } | HandshakeError::PeerRequiresAuth { .. } | HandshakeError::BadProof { .. } | HandshakeError::BadHello(_) | HandshakeError::ReplayedHello => refuse(s, e),
            _ => {}
        }
    }
    r
}

fn server_steps<S: Read + Write>(s: &mut S, auth: &PeerAuth, host: &str, seen: Option<&SeenNonces>, nonce: [u8; NONCE_LEN]) -> Result<Session, HandshakeError> {
    let (hello, hello_c) = read_hello(s, true)?;
    let peer = hello.host.clone();
    if let Some(seen) = seen {
        let n = parse_hex_key(&hello.nonce).ok_or_else(|| HandshakeError::BadHello("nonce".into()))?;
        if !seen.fresh(n) {
            return Err(HandshakeError::ReplayedHello);
        }
    }
    let hello_s = new_hello(auth, host, &nonce);
    write_frame(s, FrameKind::Hello, &hello_s)?;
    s.flush().map_err(WireError::from)?;
    let Some(key) = agree(auth, hello.auth, &peer)? else {
        return Ok(Session { peer_host: peer, role: Role::Server, keys: None });
    };
    let t = transcript(&hello_c, &hello_s);
    let theirs = read_auth(s)?;
    if !proof_holds(key, Role::Client, &t, &theirs) {
        return Err(HandshakeError::BadProof { peer });
    }
    write_frame(s, FrameKind::Auth, &proof(key, Role::Server, &t))?;
    s.flush().map_err(WireError::from)?;
    Ok(Session { peer_host: peer, role: Role::Server, keys: Some(derive_keys(key, &t)) })
}

#[cfg(test)]
mod tests;
