//! The record log as sealed frames (issue 14 §2; RRC §4.5): what a
//! recorded process's library sends when its log goes straight to the
//! backup (runtime/lib/rr-sink.c writes it in C). The log stream of
//! rrc/rrlog.h, cut where its own units end: a [`FrameKind::LogHeader`]
//! frame with the log's header, then one [`FrameKind::LogBatch`] frame per
//! batch, each with the session's MAC. [`SealedLog`] gives back the bare
//! stream for `rrc_image::rrlog::LogReader`, having checked every frame's
//! MAC (nothing added, dropped, reordered or changed without the key) and
//! that the kinds come in that order.

use std::io::Read;

use crate::auth::KEY_LEN;
use crate::frame::{FrameKind, WireError};
use crate::session::{FrameOpener, FrameReader};

/// The bare log stream out of its sealed frames.
pub struct SealedLog<R> {
    frames: FrameReader<R>,
    payload: Vec<u8>,
    at: usize,
    frames_read: u64,
}

impl<R: Read> SealedLog<R> {
    /// Frames sealed with `key`, the first numbered `first_seq`.
    pub fn new(r: R, key: [u8; KEY_LEN], first_seq: u64) -> SealedLog<R> {
        SealedLog { frames: FrameReader::new(r, FrameOpener::keyed_from(key, first_seq)), payload: Vec::new(), at: 0, frames_read: 0 }
    }

    /// Frames of a session already open (its first frames read): the
    /// next one must be the log's header.
    pub fn from_frames(frames: FrameReader<R>) -> SealedLog<R> {
        SealedLog { frames, payload: Vec::new(), at: 0, frames_read: 0 }
    }

    /// Frames read so far.
    pub fn frames_read(&self) -> u64 {
        self.frames_read
    }

    fn next_frame(&mut self) -> Result<bool, WireError> {
        let f = match self.frames.recv() {
            Ok(f) => f,
            // the stream may end between two frames: the log's reader says
            // whether the log was whole
            Err(WireError::Closed) => return Ok(false),
            Err(e) => return Err(e),
        };
        let expected = if self.frames_read == 0 { FrameKind::LogHeader } else { FrameKind::LogBatch };
        if f.kind != expected {
            return Err(WireError::Unexpected { expected, got: f.kind });
        }
        self.frames_read += 1;
        self.payload = f.payload;
        self.at = 0;
        Ok(true)
    }
}

impl<R: Read> Read for SealedLog<R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.payload.len() {
            match self.next_frame() {
                Ok(true) => {}
                Ok(false) => return Ok(0),
                Err(e) => return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("sealed log frame {}: {e}", self.frames_read))),
            }
        }
        let n = out.len().min(self.payload.len() - self.at);
        out[..n].copy_from_slice(&self.payload[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::{FrameSealer, FrameWriter};

    fn sealed(key: [u8; KEY_LEN], frames: &[(FrameKind, &[u8])]) -> Vec<u8> {
        let mut w = FrameWriter::new(Vec::new(), FrameSealer::keyed(key));
        for (k, p) in frames {
            w.send(*k, p).unwrap();
        }
        w.get_ref().clone()
    }

    fn all(r: impl Read) -> std::io::Result<Vec<u8>> {
        let mut r = r;
        let mut v = Vec::new();
        r.read_to_end(&mut v)?;
        Ok(v)
    }

    #[test]
    fn the_bare_stream_comes_back_and_every_change_is_refused() {
        let key = [7u8; KEY_LEN];
        let good = sealed(key, &[(FrameKind::LogHeader, b"head"), (FrameKind::LogBatch, b"one"), (FrameKind::LogBatch, b"two")]);
        assert_eq!(all(SealedLog::new(&good[..], key, 0)).unwrap(), b"headonetwo");
        // another key, another first number
        assert!(all(SealedLog::new(&good[..], [8u8; KEY_LEN], 0)).is_err());
        assert!(all(SealedLog::new(&good[..], key, 1)).is_err());
        // a byte changed anywhere: refused (or, in a frame's header, named as such)
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x01;
            assert!(all(SealedLog::new(&bad[..], key, 0)).is_err(), "byte {i} changed: accepted");
        }
        // a batch dropped: the next one's number does not match
        let one = sealed(key, &[(FrameKind::LogHeader, b"head"), (FrameKind::LogBatch, b"one")]);
        let batch_frame = good.len() - one.len(); // "one" and "two" frame alike
        let mut dropped = good[..one.len() - batch_frame].to_vec();
        dropped.extend_from_slice(&good[one.len()..]);
        let e = all(SealedLog::new(&dropped[..], key, 0)).unwrap_err();
        assert!(e.to_string().contains("sealed log frame"), "{e}");
        // batches before the header, or a frame of another kind
        let no_header = sealed(key, &[(FrameKind::LogBatch, b"one")]);
        assert!(all(SealedLog::new(&no_header[..], key, 0)).unwrap_err().to_string().contains("expected a LogHeader"));
        let other = sealed(key, &[(FrameKind::LogHeader, b"head"), (FrameKind::Heartbeat, b"{}")]);
        assert!(all(SealedLog::new(&other[..], key, 0)).is_err());
        // cut inside a frame: truncated, not a clean end
        assert!(all(SealedLog::new(&good[..good.len() - 3], key, 0)).is_err());
    }
}
