//! The rrc wire format: how agents talk to each other (TCP, replication
//! network) and how the CLI talks to an agent (Unix socket).
//!
//! One frame format for both (docs/protocol.md):
//!
//! ```text
//! offset size
//!   0     4   magic "RRCW"
//!   4     2   version (2), little endian
//!   6     2   kind (FrameKind)
//!   8     4   payload length (<= MAX_PAYLOAD)
//!  12     4   CRC32C of the payload
//!  16     4   flags: bit 0 = a 32-byte MAC follows the payload
//!  20     4   CRC32C of bytes 0..20
//!  24     -   payload, then the MAC if flagged
//! ```
//!
//! Control payloads are JSON (serde structs in [`msg`]); checkpoint data
//! is raw bytes. A frame whose header or payload CRC does not hold, of
//! another version or an unknown kind is refused with an error naming the
//! cause; the receiver then drops the connection (framing is lost).
//!
//! Peer connections open with [`auth`]'s handshake and then carry
//! [`session`] frames, each with a MAC when the agents share a key;
//! heartbeats travel as [`datagram`]s. The CLI's Unix socket carries plain
//! frames ([`read_frame`], [`write_frame`]).

pub mod auth;
pub mod datagram;
pub mod frame;
pub mod logstream;
pub mod msg;
pub mod reply;
pub mod session;

pub use auth::{HandshakeError, Key, PeerAuth, Rejection, Session};
pub use frame::{read_frame, write_frame, Frame, FrameKind, WireError, HEADER_SIZE, MAGIC, MAX_PAYLOAD, VERSION};
pub use session::{FrameReader, FrameWriter};
