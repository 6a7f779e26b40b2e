//! What sealing costs: a writer and a reader of 1 MiB checkpoint frames
//! through memory, with an authenticated session's keys and with an
//! unauthenticated one's (CRC32C only), in alternating rounds. Prints one
//! JSON object per round (bench/wire_auth.py runs it).
//!
//!     cargo run --release --example seal_speed -- [ROUNDS] [MIB_PER_ROUND]

use std::io::Cursor;
use std::time::Instant;

use rrc_wire::auth::{derive_keys, transcript, Key};
use rrc_wire::session::{FrameOpener, FrameSealer};
use rrc_wire::{FrameKind, FrameReader, FrameWriter};

fn round(sealer: FrameSealer, opener: FrameOpener, frames: usize, chunk: &[u8]) -> (f64, f64) {
    let mut buf = Vec::with_capacity(frames * (chunk.len() + 64));
    let t = Instant::now();
    {
        let mut w = FrameWriter::new(&mut buf, sealer);
        for _ in 0..frames {
            w.send(FrameKind::CheckpointData, chunk).expect("in memory");
        }
    }
    let write_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut r = FrameReader::new(Cursor::new(&buf), opener);
    for _ in 0..frames {
        r.recv().expect("what was written");
    }
    (write_s, t.elapsed().as_secs_f64())
}

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).map(|a| a.parse().expect("a number")).collect();
    let rounds = args.first().copied().unwrap_or(5);
    let mib = args.get(1).copied().unwrap_or(256);
    let chunk: Vec<u8> = (0..1 << 20).map(|i: u32| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    let t = transcript(b"client hello", b"server hello");
    let keys = derive_keys(&Key::from_bytes([7; 32]), &t);
    for i in 0..rounds {
        for mode in ["hmac-sha256", "none"] {
            let (s, o) = match mode {
                "none" => (FrameSealer::plain(), FrameOpener::plain()),
                _ => (FrameSealer::keyed(keys.frames_c2s), FrameOpener::keyed(keys.frames_c2s)),
            };
            let (w, r) = round(s, o, mib, &chunk);
            println!(
                "{{\"round\":{i},\"auth\":\"{mode}\",\"mib\":{mib},\"write_s\":{w:.6},\"read_s\":{r:.6},\"write_mib_s\":{:.1},\"read_mib_s\":{:.1}}}",
                mib as f64 / w,
                mib as f64 / r
            );
        }
    }
}
