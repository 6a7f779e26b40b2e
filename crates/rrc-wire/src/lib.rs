//! The rrc wire format: how agents talk to each other (TCP, replication
//! network) and how the CLI talks to an agent (Unix socket).
//!
//! One frame format for both (docs/protocol.md):
//!
//! ```text
//! offset size
//!   0     4   magic "RRCW"
//!   4     2   version (1), little endian
//!   6     2   kind (FrameKind)
//!   8     4   payload length (<= MAX_PAYLOAD)
//!  12     4   CRC32C of the payload
//!  16     4   reserved, zero
//!  20     4   CRC32C of bytes 0..20
//!  24     -   payload
//! ```
//!
//! Control payloads are JSON (serde structs in [`msg`]); checkpoint data
//! is raw bytes. A frame whose header or payload CRC does not hold, of
//! another version or an unknown kind is refused with an error naming the
//! cause; the receiver then drops the connection (framing is lost).

pub mod frame;
pub mod msg;

pub use frame::{read_frame, write_frame, Frame, FrameKind, WireError, HEADER_SIZE, MAGIC, MAX_PAYLOAD, VERSION};
