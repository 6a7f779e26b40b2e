//! Little-endian field access at explicit offsets.
//!
//! Every struct of image.h is decoded from a byte slice whose length the
//! caller has checked against the struct size first; the helpers below then
//! read at fixed offsets. No transmute of untrusted bytes anywhere.

#[inline]
pub(crate) fn u16_at(b: &[u8], off: usize) -> u16 {
    let mut a = [0u8; 2];
    a.copy_from_slice(&b[off..off + 2]);
    u16::from_le_bytes(a)
}

#[inline]
pub(crate) fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(a)
}

#[inline]
pub(crate) fn i32_at(b: &[u8], off: usize) -> i32 {
    u32_at(b, off) as i32
}

#[inline]
pub(crate) fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

#[inline]
pub(crate) fn i64_at(b: &[u8], off: usize) -> i64 {
    u64_at(b, off) as i64
}

#[inline]
pub(crate) fn id_at(b: &[u8], off: usize) -> [u8; 16] {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[off..off + 16]);
    a
}

/// Bytes of a fixed-size C string field up to (excluding) the first NUL.
/// `None` if the field holds no NUL.
pub(crate) fn cstr_field(b: &[u8]) -> Option<&[u8]> {
    b.iter().position(|&c| c == 0).map(|n| &b[..n])
}

/// `n` rounded up to a multiple of 8 (section payloads and variable
/// records are padded to 8 bytes).
#[inline]
pub(crate) fn pad8(n: u64) -> u64 {
    (n + 7) & !7
}
