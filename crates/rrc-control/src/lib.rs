//! Client of the rrc control protocol between the `rrc` command and
//! librrc.so, mirroring `runtime/include/rrc/control.h` byte for byte.
//!
//! Transport: a SOCK_STREAM unix socket, one request per connection. Every
//! message is a 24-byte header (magic, version, type, payload length,
//! payload CRC32C, header CRC32C) followed by the payload. DUMP carries the
//! image file descriptor by SCM_RIGHTS. HOLD keeps its connection open
//! until RESUME (a brief park of the process for a copy of its data
//! directory).

mod client;
mod proto;

pub use client::{dump, hold, ping, record_to, replay_status, Client, ControlError, DumpSession, HoldSession};
pub use proto::*;
