//! Frames of an established peer session (after [`crate::auth`]'s
//! handshake): every frame of an authenticated session carries
//! HMAC-SHA256(direction key, sequence number ‖ header ‖ payload). The
//! sequence number is not sent: each side counts the frames of each
//! direction from 0, so a frame replayed, dropped, reordered or moved to
//! another connection or direction fails its MAC. A frame that fails ends
//! the connection (as TLS does): nothing of it is used, and TCP's stream
//! cannot be re-synchronised past bytes someone injected.
//!
//! A session's reading and writing halves are separate values, so that one
//! thread can block reading while others write (the agents' shape).

use std::io::{Read, Write};

use crate::auth::{hmac, hmac_verify, KEY_LEN};
use crate::frame::{check_len, read_raw, write_parts, Frame, FrameKind, RawFrame, WireError, FLAG_MAC, HEADER_SIZE, MAC_LEN, MAX_PAYLOAD};

/// Computes the MACs of one direction's frames, in order.
pub struct FrameSealer {
    key: Option<[u8; KEY_LEN]>,
    seq: u64,
}

impl FrameSealer {
    pub fn keyed(key: [u8; KEY_LEN]) -> FrameSealer {
        FrameSealer { key: Some(key), seq: 0 }
    }

    /// An unauthenticated session's: frames go without a MAC.
    pub fn plain() -> FrameSealer {
        FrameSealer { key: None, seq: 0 }
    }

    fn seal(&mut self, kind: FrameKind, payload: &[u8]) -> ([u8; HEADER_SIZE], Option<[u8; MAC_LEN]>) {
        match &self.key {
            None => (Frame::header(kind, payload, 0), None),
            Some(k) => {
                let h = Frame::header(kind, payload, FLAG_MAC);
                let mac = hmac(k, &[&self.seq.to_le_bytes(), &h, payload]);
                self.seq += 1;
                (h, Some(mac))
            }
        }
    }
}

/// Checks the MACs of one direction's frames, in order.
pub struct FrameOpener {
    key: Option<[u8; KEY_LEN]>,
    seq: u64,
}

impl FrameOpener {
    pub fn keyed(key: [u8; KEY_LEN]) -> FrameOpener {
        FrameOpener { key: Some(key), seq: 0 }
    }

    /// The same, its first frame numbered `seq` (a stream another writer
    /// takes over after `seq` frames: a recorded process's log, rr-sink.c).
    pub fn keyed_from(key: [u8; KEY_LEN], seq: u64) -> FrameOpener {
        FrameOpener { key: Some(key), seq }
    }

    pub fn plain() -> FrameOpener {
        FrameOpener { key: None, seq: 0 }
    }

    /// The frame, if it is the next one of this direction.
    pub fn open(&mut self, raw: RawFrame) -> Result<Frame, WireError> {
        let kind = raw.decoded.kind;
        match (&self.key, &raw.mac) {
            (None, None) => Ok(raw.into_frame()),
            (None, Some(_)) => Err(WireError::MacUnexpected(kind)),
            (Some(_), None) => Err(WireError::MacMissing(kind)),
            (Some(k), Some(mac)) => {
                if !hmac_verify(k, &[&self.seq.to_le_bytes(), &raw.header, &raw.payload], mac) {
                    return Err(WireError::BadMac { kind, seq: self.seq });
                }
                self.seq += 1;
                Ok(raw.into_frame())
            }
        }
    }

    /// Frames accepted so far.
    pub fn accepted(&self) -> u64 {
        self.seq
    }
}

/// The writing half of a session.
pub struct FrameWriter<W> {
    w: W,
    sealer: FrameSealer,
}

impl<W: Write> FrameWriter<W> {
    pub fn new(w: W, sealer: FrameSealer) -> FrameWriter<W> {
        FrameWriter { w, sealer }
    }

    pub fn send(&mut self, kind: FrameKind, payload: &[u8]) -> Result<(), WireError> {
        check_len(payload)?;
        let (h, mac) = self.sealer.seal(kind, payload);
        write_parts(&mut self.w, &h, payload, mac.as_ref())
    }

    /// A JSON message ([`Frame::json`]).
    pub fn send_json<T: serde::Serialize>(&mut self, kind: FrameKind, v: &T) -> Result<(), WireError> {
        self.send(kind, &Frame::json(kind, v).payload)
    }

    pub fn flush(&mut self) -> Result<(), WireError> {
        self.w.flush().map_err(WireError::from)
    }

    pub fn get_ref(&self) -> &W {
        &self.w
    }
}

/// The reading half of a session.
pub struct FrameReader<R> {
    r: R,
    opener: FrameOpener,
    limit: u32,
}

impl<R: Read> FrameReader<R> {
    pub fn new(r: R, opener: FrameOpener) -> FrameReader<R> {
        FrameReader { r, opener, limit: MAX_PAYLOAD }
    }

    /// The next frame, its MAC checked.
    pub fn recv(&mut self) -> Result<Frame, WireError> {
        let raw = read_raw(&mut self.r, self.limit)?;
        self.opener.open(raw)
    }

    pub fn get_ref(&self) -> &R {
        &self.r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{derive_keys, transcript, Key, Role};

    fn pair() -> (FrameSealer, FrameOpener, FrameSealer, FrameOpener) {
        let keys = derive_keys(&Key::from_bytes([9; 32]), &transcript(b"c", b"s"));
        let _ = Role::Client;
        (FrameSealer::keyed(keys.frames_c2s), FrameOpener::keyed(keys.frames_c2s), FrameSealer::keyed(keys.frames_s2c), FrameOpener::keyed(keys.frames_s2c))
    }

    fn sealed(s: &mut FrameSealer, kind: FrameKind, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        let mut w = FrameWriter::new(&mut v, std::mem::replace(s, FrameSealer::plain()));
        w.send(kind, payload).unwrap();
        *s = w.sealer;
        v
    }

    fn open(o: &mut FrameOpener, b: &[u8]) -> Result<Frame, WireError> {
        let raw = read_raw(&mut &b[..], MAX_PAYLOAD)?;
        o.open(raw)
    }

    #[test]
    fn frames_in_order_pass() {
        let (mut s, mut o, _, _) = pair();
        for i in 0..5u8 {
            let b = sealed(&mut s, FrameKind::CheckpointData, &[i; 100]);
            assert_eq!(open(&mut o, &b).unwrap().payload, vec![i; 100]);
        }
        assert_eq!(o.accepted(), 5);
    }

    #[test]
    fn replayed_reordered_dropped_and_reflected_frames_fail() {
        let (mut s, mut o, mut s_back, _) = pair();
        let f0 = sealed(&mut s, FrameKind::Ack, b"{\"epoch\":1}");
        let f1 = sealed(&mut s, FrameKind::Ack, b"{\"epoch\":2}");
        let f2 = sealed(&mut s, FrameKind::Ack, b"{\"epoch\":3}");
        // reordered: frame 1 first
        let (_, mut o2, _, _) = pair();
        assert!(matches!(open(&mut o2, &f1), Err(WireError::BadMac { seq: 0, .. })));
        // in order, then a replay of frame 0
        assert!(open(&mut o, &f0).is_ok());
        assert!(matches!(open(&mut o, &f0), Err(WireError::BadMac { seq: 1, .. })));
        // dropped: frame 2 where 1 is due
        let (_, mut o3, _, _) = pair();
        open(&mut o3, &f0).unwrap();
        assert!(matches!(open(&mut o3, &f2), Err(WireError::BadMac { seq: 1, .. })));
        // reflected: the other direction's frame 0 is not this direction's
        let back = sealed(&mut s_back, FrameKind::Ack, b"{\"epoch\":1}");
        let (_, mut o4, _, _) = pair();
        assert!(matches!(open(&mut o4, &back), Err(WireError::BadMac { seq: 0, .. })));
    }

    #[test]
    fn a_frame_from_another_session_fails() {
        let other = derive_keys(&Key::from_bytes([9; 32]), &transcript(b"c2", b"s"));
        let mut s = FrameSealer::keyed(other.frames_c2s);
        let b = sealed(&mut s, FrameKind::Stop, b"{\"reason\":\"x\"}");
        let (_, mut o, _, _) = pair();
        assert!(matches!(open(&mut o, &b), Err(WireError::BadMac { .. })));
    }

    #[test]
    fn every_changed_byte_and_a_stripped_or_forged_mac_fail() {
        let (mut s, _, _, _) = pair();
        let b = sealed(&mut s, FrameKind::Stop, b"{\"reason\":\"x\"}");
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x01;
            let (_, mut o, _, _) = pair();
            assert!(open(&mut o, &c).is_err(), "byte {i} changed and accepted");
        }
        // The frame re-made without its MAC (flags 0, CRCs fixed): refused
        // by name, not taken as a plain frame.
        let payload = b"{\"reason\":\"x\"}";
        let plain = Frame { kind: FrameKind::Stop, payload: payload.to_vec() }.encode();
        let (_, mut o, _, _) = pair();
        assert!(matches!(open(&mut o, &plain), Err(WireError::MacMissing(FrameKind::Stop))));
        // A forged MAC over a well-formed header.
        let mut forged = Vec::new();
        write_parts(&mut forged, &Frame::header(FrameKind::Stop, payload, FLAG_MAC), payload, Some(&[0xAA; MAC_LEN])).unwrap();
        let (_, mut o, _, _) = pair();
        assert!(matches!(open(&mut o, &forged), Err(WireError::BadMac { .. })));
        // Truncated anywhere: refused.
        for cut in 1..b.len() {
            let (_, mut o, _, _) = pair();
            assert!(matches!(open(&mut o, &b[..cut]), Err(WireError::Truncated)), "cut at {cut}");
        }
    }

    #[test]
    fn a_plain_session_refuses_a_mac() {
        let (mut s, _, _, _) = pair();
        let b = sealed(&mut s, FrameKind::Ack, b"{}");
        assert!(matches!(open(&mut FrameOpener::plain(), &b), Err(WireError::MacUnexpected(FrameKind::Ack))));
    }
}
