//! Fuzz target bodies for every decoder that takes bytes from the network
//! (issue 12): checkpoint images and the backup's store, FILEOPS and the
//! data-directory copy, the gate's packet parser, decision core and
//! netlink parsing, the record log (issue 13).
//!
//! Each target is a `pub fn(&[u8])` that must not panic on any input; a
//! panic is a finding. Targets also assert invariants (an image that
//! parses re-encodes to one that parses the same, a store that rejects an
//! image is unchanged, no data-directory operation touches anything
//! outside the copy's root, the gate releases each held packet once).
//!
//! `fuzz/` (a cargo workspace of its own) wraps each target in a
//! libFuzzer binary; `tests/corpus.rs` replays `fuzz/corpus/<target>/` and
//! `fuzz/regressions/<target>/` under `cargo test`. fuzz/README.md says
//! how to add a target.

pub mod alloc;
mod datadir;
mod gate;
mod image;
mod rrlog;
pub mod seeds;
mod wire;

pub use datadir::{datadir, fileops};
pub use gate::{gate_core, gate_packet, nfqueue};
pub use image::{image, store};
pub use rrlog::rrlog;
pub use wire::{frame, heartbeat, json, session};

/// A target body: must not panic on any input.
pub type Target = fn(&[u8]);

/// Every target by name (the name of its corpus directory and of its
/// binary in fuzz/).
pub const TARGETS: &[(&str, Target)] = &[
    ("image", image),
    ("store", store),
    ("fileops", fileops),
    ("datadir", datadir),
    ("gate_packet", gate_packet),
    ("gate_core", gate_core),
    ("nfqueue", nfqueue),
    ("frame", frame),
    ("session", session),
    ("heartbeat", heartbeat),
    ("json", json),
    ("rrlog", rrlog),
];

/// The body of a libFuzzer binary in fuzz/src/bin/: the allocator that
/// makes an input-controlled huge allocation a crash, and the target.
/// `libfuzzer_sys` is resolved where the macro is used (fuzz/ depends on
/// it, this crate does not).
#[macro_export]
macro_rules! fuzz_binary {
    ($target:ident) => {
        #[global_allocator]
        static ALLOC: $crate::alloc::Limited = $crate::alloc::Limited;
        libfuzzer_sys::fuzz_target!(|d: &[u8]| $crate::$target(d));
    };
}

/// A little-endian reader over fuzz input that never fails: past the end
/// it yields zeros, so every input decodes to something.
pub(crate) struct Bytes<'a> {
    b: &'a [u8],
}

impl<'a> Bytes<'a> {
    pub(crate) fn new(b: &'a [u8]) -> Bytes<'a> {
        Bytes { b }
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.b.is_empty()
    }
    pub(crate) fn take(&mut self, n: usize) -> &'a [u8] {
        let (h, t) = self.b.split_at(n.min(self.b.len()));
        self.b = t;
        h
    }
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        self.take(self.b.len())
    }
    pub(crate) fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut a = [0u8; N];
        let h = self.take(N);
        a[..h.len()].copy_from_slice(h);
        a
    }
    pub(crate) fn u8(&mut self) -> u8 {
        self.array::<1>()[0]
    }
    pub(crate) fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.array())
    }
    pub(crate) fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.array())
    }
}
