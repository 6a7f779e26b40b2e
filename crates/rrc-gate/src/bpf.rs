//! The little of eBPF the gate needs, by the bpf(2) system call: maps,
//! programs assembled in Rust (`xdp.rs`, `observe.rs`), and BPF links to
//! attach them. No compiler, libbpf or BTF at run time: nothing for
//! scripts/setup.sh to install, and each program is short enough to read
//! instruction by instruction beside its comments.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::error::GateError;

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;

pub const BPF_MAP_TYPE_XSKMAP: u32 = 17;
pub const BPF_MAP_TYPE_RINGBUF: u32 = 27;
pub const BPF_PROG_TYPE_SCHED_CLS: u32 = 3;
pub const BPF_PROG_TYPE_XDP: u32 = 6;
pub const BPF_XDP: u32 = 37;
pub const BPF_TCX_INGRESS: u32 = 46;
pub const BPF_PSEUDO_MAP_FD: u8 = 1;

/// Size of the `union bpf_attr` buffer handed to the kernel (larger than
/// any command's fields here; the kernel requires the tail to be zero).
const ATTR_SIZE: usize = 128;

/// One eBPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    pub code: u8,
    /// dst register in the low nibble, src in the high one.
    pub regs: u8,
    pub off: i16,
    pub imm: i32,
}

pub const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn { code, regs: (src << 4) | (dst & 0xf), off, imm }
}

// opcodes (class | size/op | source)
pub const LDX_W: u8 = 0x61; // BPF_LDX | BPF_MEM | BPF_W
pub const LDX_H: u8 = 0x69; // BPF_LDX | BPF_MEM | BPF_H
pub const STX_W: u8 = 0x63; // BPF_STX | BPF_MEM | BPF_W
pub const MOV64_X: u8 = 0xbf;
pub const MOV64_K: u8 = 0xb7;
pub const ADD64_K: u8 = 0x07;
pub const OR64_K: u8 = 0x47;
pub const JA: u8 = 0x05;
pub const JEQ_K: u8 = 0x15;
pub const JGT_K: u8 = 0x25;
pub const JLT_K: u8 = 0xa5;
pub const JGT_X: u8 = 0x2d;
pub const JLT_X: u8 = 0xad;
pub const JNE_K: u8 = 0x55;
pub const JNE32_K: u8 = 0x56; // BPF_JMP32: compares the low 32 bits
pub const LD_DW_IMM: u8 = 0x18;
pub const CALL: u8 = 0x85;
pub const EXIT: u8 = 0x95;

/// Whether `code` is a conditional or unconditional jump (its `off` is
/// relative to the next instruction).
pub fn is_jump(code: u8) -> bool {
    matches!(code, JA | JEQ_K | JGT_K | JLT_K | JGT_X | JLT_X | JNE_K | JNE32_K)
}

fn bpf(cmd: libc::c_long, attr: &mut [u8; ATTR_SIZE]) -> std::io::Result<libc::c_long> {
    // SAFETY: the attr buffer is ATTR_SIZE bytes, laid out as the command's
    // part of `union bpf_attr`, the rest zero; pointers in it outlive the call.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), ATTR_SIZE as libc::c_uint) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(r)
}

fn put32(a: &mut [u8; ATTR_SIZE], at: usize, v: u32) {
    a[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

fn put64(a: &mut [u8; ATTR_SIZE], at: usize, v: u64) {
    a[at..at + 8].copy_from_slice(&v.to_ne_bytes());
}

fn owned(r: libc::c_long) -> OwnedFd {
    // SAFETY: a descriptor the bpf() call just created for us.
    unsafe { OwnedFd::from_raw_fd(r as RawFd) }
}

/// A map of `map_type` (`what` names it in errors).
pub fn map_create(map_type: u32, key_size: u32, value_size: u32, max_entries: u32, what: &str) -> Result<OwnedFd, GateError> {
    let mut a = [0u8; ATTR_SIZE];
    put32(&mut a, 0, map_type);
    put32(&mut a, 4, key_size);
    put32(&mut a, 8, value_size);
    put32(&mut a, 12, max_entries);
    Ok(owned(bpf(BPF_MAP_CREATE, &mut a).map_err(GateError::io(format!("creating {what} (bpf BPF_MAP_CREATE)")))?))
}

pub fn map_update(map: RawFd, key: &[u8], value: &[u8]) -> std::io::Result<()> {
    let mut a = [0u8; ATTR_SIZE];
    put32(&mut a, 0, map as u32);
    put64(&mut a, 8, key.as_ptr() as u64);
    put64(&mut a, 16, value.as_ptr() as u64);
    bpf(BPF_MAP_UPDATE_ELEM, &mut a).map(|_| ())
}

pub fn map_delete(map: RawFd, key: &[u8]) -> std::io::Result<()> {
    let mut a = [0u8; ATTR_SIZE];
    put32(&mut a, 0, map as u32);
    put64(&mut a, 8, key.as_ptr() as u64);
    bpf(BPF_MAP_DELETE_ELEM, &mut a).map(|_| ())
}

/// Loads a program of `prog_type` for `attach_type`, named `name` (at
/// most 15 bytes); a refusal carries the verifier's log.
pub fn prog_load(prog_type: u32, attach_type: u32, name: &str, insns: &[Insn]) -> Result<OwnedFd, GateError> {
    let license = b"GPL\0";
    let mut log = vec![0u8; 16 << 10];
    let mut a = [0u8; ATTR_SIZE];
    put32(&mut a, 0, prog_type);
    put32(&mut a, 4, insns.len() as u32);
    put64(&mut a, 8, insns.as_ptr() as u64);
    put64(&mut a, 16, license.as_ptr() as u64);
    put32(&mut a, 24, 1); // log level
    put32(&mut a, 28, log.len() as u32);
    put64(&mut a, 32, log.as_mut_ptr() as u64);
    let n = name.len().min(15);
    a[48..48 + n].copy_from_slice(&name.as_bytes()[..n]);
    put32(&mut a, 68, attach_type); // expected attach type
    match bpf(BPF_PROG_LOAD, &mut a) {
        Ok(fd) => Ok(owned(fd)),
        Err(e) => {
            let end = log.iter().position(|&c| c == 0).unwrap_or(log.len());
            let verifier = String::from_utf8_lossy(&log[..end]).trim().to_string();
            Err(GateError::Other(format!("loading the gate's {name} program: {e}; verifier: {verifier}")))
        }
    }
}

/// Attaches `prog` to interface `ifindex` (of the calling thread's network
/// namespace) by a BPF link: closing the returned descriptor, or the
/// process dying, detaches it.
pub fn link_create(prog: &OwnedFd, ifindex: u32, attach_type: u32, flags: u32) -> std::io::Result<OwnedFd> {
    let mut a = [0u8; ATTR_SIZE];
    put32(&mut a, 0, prog.as_raw_fd() as u32);
    put32(&mut a, 4, ifindex);
    put32(&mut a, 8, attach_type);
    put32(&mut a, 12, flags);
    Ok(owned(bpf(BPF_LINK_CREATE, &mut a)?))
}
