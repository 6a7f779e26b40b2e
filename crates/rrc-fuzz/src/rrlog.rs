//! The record log's decoder (rrc_image::rrlog), which the backup's agent
//! will run on what a primary's library sends it (issue 14).

use rrc_image::rrlog::{Batch, Cut, Event, EventKind, LogHeader, LogReader, LogSummary};
use rrc_image::ImageId;

use crate::Bytes;

/// The input as is, and the input read as a recipe for a well-formed log
/// (right CRCs, sizes and numbering, then a few bytes changed where the
/// input says): whatever the reader accepts re-encodes to exactly the
/// bytes it read, and a reader that stops with an error has accepted a
/// prefix of them.
pub fn rrlog(data: &[u8]) {
    check(data);
    check(&build(data));
}

fn check(b: &[u8]) {
    let _ = LogSummary::read(b, "fuzz").map(|s| (s.to_string(), serde_json::to_string(&s)));
    let Ok(mut rd) = LogReader::open(b, "fuzz") else { return };
    let mut out = rd.header().encode().to_vec();
    loop {
        match rd.next_batch() {
            Ok(Some(batch)) => {
                out.extend(batch.encode());
                assert_eq!(rd.offset() as usize, out.len(), "the reader's offset is not what it accepted");
            }
            Ok(None) => {
                assert_eq!(out, b, "an accepted log does not re-encode to its bytes");
                return;
            }
            Err(e) => {
                let _ = e.to_string();
                assert!(b.starts_with(&out), "what was accepted before an error is not a prefix of the input");
                return;
            }
        }
    }
}

fn build(data: &[u8]) -> Vec<u8> {
    let mut r = Bytes::new(data);
    let header = LogHeader { log_id: ImageId(r.array()), created_ns: u64::from(r.u32()), pid: r.u32(), continues: r.u32() & 1 == 1 };
    let mut out = header.encode().to_vec();
    let mut next = std::collections::BTreeMap::<u32, u64>::new();
    let mut seq = 0u64;
    while !r.is_empty() && out.len() < 1 << 20 {
        let op = r.u8();
        let tid = u32::from(op & 3);
        let n = usize::from(r.u8() % 6);
        let mut events = Vec::with_capacity(n);
        for _ in 0..n {
            let kind = EventKind::ALL[usize::from(r.u8()) % EventKind::ALL.len()];
            let data = match kind {
                EventKind::Cut => {
                    let k = usize::from(r.u8() % 4);
                    Cut { image_id: ImageId(r.array()), sequence: u64::from(r.u8()), threads: (1..=k as u32).map(|t| (t, u64::from(r.u8()))).collect() }.encode()
                }
                EventKind::Output => r.take(24).to_vec(),
                _ => {
                    let len = usize::from(r.u8() % 40);
                    r.take(len).to_vec()
                }
            };
            let mut e = Event::new(kind, u64::from(r.u32()), u64::from(r.u16()), i64::from(r.u32() as i32), data);
            e.flags = u16::from(r.u8() & 3);
            events.push(e);
        }
        let first = next.get(&tid).copied().unwrap_or(0);
        let b = Batch { tid, batch_seq: seq, first_event: first, events };
        let mut bytes = b.encode();
        if op & 0x80 != 0 && !bytes.is_empty() {
            // one byte changed (before or after the CRCs were computed: the
            // header CRC protects the first 36 bytes)
            let at = usize::from(r.u16()) % bytes.len();
            bytes[at] ^= r.u8() | 1;
        }
        if op & 0x40 != 0 {
            bytes.truncate(usize::from(r.u16()) % (bytes.len() + 1));
        }
        out.extend(bytes);
        seq += 1;
        if tid != 0 {
            next.insert(tid, first + b.events.len() as u64);
        }
    }
    out
}
