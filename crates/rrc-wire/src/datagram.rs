//! Heartbeat datagrams (UDP, docs/protocol.md): the liveness signal the
//! two agents of a service send each other every 30 ms.
//!
//! ```text
//!   0   8  magic "RRCHB\0\0\x02"
//!   8   8  sequence number (u64 LE), from 1, +1 per datagram
//!  16  32  HMAC-SHA256(heartbeat key of the direction, bytes 0..16)
//!          (authenticated sessions only; the datagram is 16 bytes else)
//! ```
//!
//! The keys come from the replication session's handshake
//! ([`crate::auth::Session::heartbeat_keys`]). A receiver takes a datagram
//! only if its MAC holds and its number is above the last one taken: a
//! forged datagram, or one replayed to keep a dead peer looking alive, is
//! refused. UDP may reorder; a late heartbeat lost that way is harmless.

use crate::auth::{hmac, hmac_verify, KEY_LEN};
use crate::frame::MAC_LEN;

pub const MAGIC: [u8; 8] = *b"RRCHB\x00\x00\x02";
pub const PLAIN_LEN: usize = 16;
pub const SEALED_LEN: usize = PLAIN_LEN + MAC_LEN;
/// A receive buffer larger than any valid datagram (a longer one is
/// then seen to be too long, not cut to size).
pub const RECV_BUF: usize = 128;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DatagramError {
    #[error("heartbeat of {got} bytes, expected {want}")]
    Size { got: usize, want: usize },
    #[error("not a heartbeat (magic {0:02x?})")]
    Magic([u8; 8]),
    #[error("heartbeat {seq}: its MAC does not match (forged, or from another session)")]
    BadMac { seq: u64 },
    #[error("heartbeat {seq} is not newer than {last}, the last one taken (replayed or late)")]
    Stale { seq: u64, last: u64 },
}

pub struct HeartbeatSealer {
    key: Option<[u8; KEY_LEN]>,
    seq: u64,
}

impl HeartbeatSealer {
    pub fn keyed(key: [u8; KEY_LEN]) -> HeartbeatSealer {
        HeartbeatSealer { key: Some(key), seq: 0 }
    }

    pub fn plain() -> HeartbeatSealer {
        HeartbeatSealer { key: None, seq: 0 }
    }

    /// The next datagram to send.
    pub fn seal_next(&mut self) -> Vec<u8> {
        self.seq += 1;
        let mut b = Vec::with_capacity(SEALED_LEN);
        b.extend_from_slice(&MAGIC);
        b.extend_from_slice(&self.seq.to_le_bytes());
        if let Some(k) = &self.key {
            let mac = hmac(k, &[&b]);
            b.extend_from_slice(&mac);
        }
        b
    }
}

pub struct HeartbeatOpener {
    key: Option<[u8; KEY_LEN]>,
    last: u64,
}

impl HeartbeatOpener {
    pub fn keyed(key: [u8; KEY_LEN]) -> HeartbeatOpener {
        HeartbeatOpener { key: Some(key), last: 0 }
    }

    pub fn plain() -> HeartbeatOpener {
        HeartbeatOpener { key: None, last: 0 }
    }

    /// Takes a received datagram: its sequence number, if it is the
    /// peer's, newer than the last one taken.
    pub fn open(&mut self, d: &[u8]) -> Result<u64, DatagramError> {
        let want = if self.key.is_some() { SEALED_LEN } else { PLAIN_LEN };
        if d.len() != want {
            return Err(DatagramError::Size { got: d.len(), want });
        }
        let magic: [u8; 8] = d[..8].try_into().expect("8 bytes");
        if magic != MAGIC {
            return Err(DatagramError::Magic(magic));
        }
        let seq = u64::from_le_bytes(d[8..16].try_into().expect("8 bytes"));
        if let Some(k) = &self.key {
            if !hmac_verify(k, &[&d[..PLAIN_LEN]], &d[PLAIN_LEN..]) {
                return Err(DatagramError::BadMac { seq });
            }
        }
        if seq <= self.last {
            return Err(DatagramError::Stale { seq, last: self.last });
        }
        self.last = seq;
        Ok(seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_heartbeats_pass_once_and_in_order() {
        let mut s = HeartbeatSealer::keyed([3; 32]);
        let mut o = HeartbeatOpener::keyed([3; 32]);
        let d1 = s.seal_next();
        let d2 = s.seal_next();
        assert_eq!(d1.len(), SEALED_LEN);
        assert_eq!(o.open(&d1), Ok(1));
        assert_eq!(o.open(&d1), Err(DatagramError::Stale { seq: 1, last: 1 }));
        assert_eq!(o.open(&d2), Ok(2));
        assert_eq!(o.open(&d1), Err(DatagramError::Stale { seq: 1, last: 2 }));
    }

    #[test]
    fn forged_and_foreign_heartbeats_fail() {
        let mut o = HeartbeatOpener::keyed([3; 32]);
        let mut other = HeartbeatSealer::keyed([4; 32]);
        assert_eq!(o.open(&other.seal_next()), Err(DatagramError::BadMac { seq: 1 }));
        // A forger that bumps the number of a real datagram.
        let mut d = HeartbeatSealer::keyed([3; 32]).seal_next();
        d[8] = 200;
        assert_eq!(o.open(&d), Err(DatagramError::BadMac { seq: 200 }));
        // The unauthenticated form is refused by a keyed receiver.
        assert_eq!(o.open(&HeartbeatSealer::plain().seal_next()), Err(DatagramError::Size { got: 16, want: 48 }));
        let mut bad = HeartbeatSealer::keyed([3; 32]).seal_next();
        bad[0] = b'X';
        assert!(matches!(o.open(&bad), Err(DatagramError::Magic(_))));
    }

    #[test]
    fn plain_heartbeats_still_refuse_replays() {
        let mut s = HeartbeatSealer::plain();
        let mut o = HeartbeatOpener::plain();
        let d = s.seal_next();
        assert_eq!(o.open(&d), Ok(1));
        assert!(o.open(&d).is_err());
        assert!(o.open(&[0; 48]).is_err());
    }
}
