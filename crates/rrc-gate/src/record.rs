//! Sequence arithmetic and the byte record of one direction of a stream.
//!
//! TCP sequence numbers wrap at 2^32. The gate converts them once, on
//! arrival, into *absolute offsets*: u64 byte counts from the first data
//! byte of the direction (ISN + 1 is offset 0), chosen as the value
//! nearest to a reference offset the stream already knows (the kernel's
//! `before()`/`after()` rule: within ±2^31). Everything after that works on
//! plain u64 and never wraps; the relative sequence number a commit talks
//! about is the absolute offset truncated to u32.

use std::collections::{BTreeMap, VecDeque};

/// The absolute offset of relative sequence number `rel` nearest to
/// `reference`; negative when it lies before the first data byte (e.g. a
/// keepalive at ISN, or the SYN itself).
pub fn to_abs(rel: u32, reference: u64) -> i64 {
    reference as i64 + i64::from(rel.wrapping_sub(reference as u32) as i32)
}

/// Bytes of one direction kept by absolute offset: a buffer contiguous from
/// `base` plus out-of-order pieces beyond its end (non-overlapping, keyed
/// by start). The first copy of a byte wins: a retransmission carries the
/// same bytes, and checksum-failed segments are never inserted.
#[derive(Debug, Default, Clone)]
pub struct ByteRecord {
    base: u64,
    contiguous: VecDeque<u8>,
    out_of_order: BTreeMap<u64, Vec<u8>>,
    ooo_bytes: u64,
}

impl ByteRecord {
    pub fn new(base: u64) -> ByteRecord {
        ByteRecord { base, ..ByteRecord::default() }
    }

    /// Offset of the first byte kept.
    pub fn base(&self) -> u64 {
        self.base
    }
    /// End of the contiguous part (first offset not known contiguously).
    pub fn contiguous_end(&self) -> u64 {
        self.base + self.contiguous.len() as u64
    }
    pub fn contiguous_len(&self) -> u64 {
        self.contiguous.len() as u64
    }
    pub fn out_of_order_bytes(&self) -> u64 {
        self.ooo_bytes
    }
    pub fn out_of_order_pieces(&self) -> usize {
        self.out_of_order.len()
    }
    /// Every byte held (contiguous + out of order).
    pub fn bytes_held(&self) -> u64 {
        self.contiguous.len() as u64 + self.ooo_bytes
    }
    /// The end of the highest byte known (contiguous or not).
    pub fn highest_end(&self) -> u64 {
        match self.out_of_order.iter().next_back() {
            Some((&s, v)) => s + v.len() as u64,
            None => self.contiguous_end(),
        }
    }
    /// A copy of the contiguous bytes.
    pub fn contiguous_bytes(&self) -> Vec<u8> {
        self.contiguous.iter().copied().collect()
    }

    /// Adds `data` at absolute offset `start`. Bytes below `base` (already
    /// trimmed) and bytes already held are skipped. Returns how many new
    /// bytes were stored.
    pub fn insert(&mut self, start: u64, data: &[u8]) -> u64 {
        let end = start + data.len() as u64;
        let cend = self.contiguous_end();
        if end <= cend {
            return 0; // entirely old: a retransmission or trimmed
        }
        if start <= cend {
            let fresh = &data[(cend - start) as usize..];
            self.contiguous.extend(fresh);
            // Bytes of out-of-order pieces now covered by `fresh` were
            // stored twice: drop them while absorbing the pieces.
            let mut added = fresh.len() as u64;
            added -= self.absorb_out_of_order();
            return added;
        }
        // A hole before `start`: store only the parts not yet held.
        let mut added = 0;
        let mut pos = start;
        while pos < end {
            // The piece that starts at or before `pos`, if it covers `pos`.
            if let Some((&s, v)) = self.out_of_order.range(..=pos).next_back() {
                let e = s + v.len() as u64;
                if e > pos {
                    pos = e;
                    continue;
                }
            }
            let next_start = self.out_of_order.range(pos + 1..).next().map(|(&s, _)| s).unwrap_or(u64::MAX);
            let piece_end = end.min(next_start);
            let piece = data[(pos - start) as usize..(piece_end - start) as usize].to_vec();
            added += piece.len() as u64;
            self.ooo_bytes += piece.len() as u64;
            self.out_of_order.insert(pos, piece);
            pos = piece_end;
        }
        added
    }

    /// Moves out-of-order pieces that touch the contiguous end into it;
    /// returns the bytes that were duplicates (dropped).
    fn absorb_out_of_order(&mut self) -> u64 {
        let mut dup = 0;
        loop {
            let cend = self.contiguous_end();
            let Some((&s, _)) = self.out_of_order.iter().next() else { break };
            if s > cend {
                break;
            }
            let Some(piece) = self.out_of_order.remove(&s) else { break };
            self.ooo_bytes -= piece.len() as u64;
            let skip = ((cend - s) as usize).min(piece.len());
            dup += skip as u64;
            self.contiguous.extend(&piece[skip..]);
        }
        dup
    }

    /// Drops every byte below `to`; never moves `base` backwards. When `to`
    /// is beyond the contiguous end, the base jumps there (the bytes in
    /// between were never seen, or are no longer needed).
    pub fn trim_below(&mut self, to: u64) {
        if to <= self.base {
            return;
        }
        let cend = self.contiguous_end();
        if to <= cend {
            self.contiguous.drain(..(to - self.base) as usize);
            self.base = to;
            return;
        }
        self.contiguous.clear();
        self.base = to;
        // Pieces entirely below `to` go; one straddling it is cut.
        let keep = self.out_of_order.split_off(&to);
        let below = std::mem::replace(&mut self.out_of_order, keep);
        for (s, v) in below {
            self.ooo_bytes -= v.len() as u64;
            let e = s + v.len() as u64;
            if e > to {
                let tail = v[(to - s) as usize..].to_vec();
                self.ooo_bytes += tail.len() as u64;
                self.out_of_order.insert(to, tail);
            }
        }
        self.absorb_out_of_order();
    }

    /// Copy of the bytes in [from, to) if all are held contiguously.
    pub fn range(&self, from: u64, to: u64) -> Option<Vec<u8>> {
        if from < self.base || to > self.contiguous_end() || from > to {
            return None;
        }
        Some(self.contiguous.range((from - self.base) as usize..(to - self.base) as usize).copied().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn to_abs_picks_the_nearest_and_crosses_wraparound() {
        assert_eq!(to_abs(10, 0), 10);
        assert_eq!(to_abs(u32::MAX, 0), -1); // the SYN / a keepalive before data
        // near the 2^32 boundary the next byte is 2^32, not 0
        assert_eq!(to_abs(0, (1 << 32) - 5), 1 << 32);
        assert_eq!(to_abs(u32::MAX - 2, (1 << 32) + 7), (1 << 32) - 3);
        assert_eq!(to_abs(5, (3 << 32) + 1), (3 << 32) + 5);
    }

    fn contents(r: &ByteRecord) -> Vec<u8> {
        r.contiguous_bytes()
    }

    #[test]
    fn in_order_retransmit_and_overlap() {
        let mut r = ByteRecord::new(0);
        assert_eq!(r.insert(0, b"hello"), 5);
        assert_eq!(r.insert(0, b"hello"), 0); // retransmission
        assert_eq!(r.insert(3, b"loXworld"), 6); // overlap: first copy of "lo" kept
        assert_eq!(contents(&r), b"helloXworld");
        assert_eq!(r.contiguous_end(), 11);
        assert_eq!(r.bytes_held(), 11);
    }

    #[test]
    fn out_of_order_pieces_fill_in() {
        let mut r = ByteRecord::new(0);
        assert_eq!(r.insert(6, b"ghi"), 3);
        assert_eq!(r.insert(12, b"mno"), 3);
        assert_eq!(r.insert(7, b"hijkl"), 3); // overlaps the first piece; adds "jkl"
        assert_eq!(r.out_of_order_bytes(), 9);
        assert_eq!(r.out_of_order_pieces(), 3);
        assert_eq!(r.highest_end(), 15);
        assert_eq!(r.contiguous_end(), 0);
        assert_eq!(r.insert(0, b"abcdefgh"), 6); // "gh" already held
        assert_eq!(contents(&r), b"abcdefghijklmno");
        assert_eq!(r.out_of_order_bytes(), 0);
        assert_eq!(r.bytes_held(), 15);
    }

    #[test]
    fn piece_spanning_several_holes() {
        let mut r = ByteRecord::new(0);
        r.insert(2, b"c");
        r.insert(5, b"f");
        assert_eq!(r.insert(1, b"bcdefg"), 4);
        assert_eq!(r.insert(0, b"a"), 1);
        assert_eq!(contents(&r), b"abcdefg");
    }

    #[test]
    fn trim_and_range() {
        let mut r = ByteRecord::new(100);
        r.insert(100, b"0123456789");
        r.insert(120, b"XYZ");
        assert_eq!(r.range(102, 105).as_deref(), Some(&b"234"[..]));
        r.trim_below(104);
        assert_eq!(r.base(), 104);
        assert_eq!(contents(&r), b"456789");
        assert_eq!(r.range(102, 105), None);
        r.trim_below(50); // never backwards
        assert_eq!(r.base(), 104);
        r.trim_below(121); // beyond the contiguous end: cuts the piece
        assert_eq!(r.base(), 121);
        assert_eq!(contents(&r), b"YZ");
        assert_eq!(r.bytes_held(), 2);
        assert_eq!(r.insert(110, b"old"), 0);
    }
}
