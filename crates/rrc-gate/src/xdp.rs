//! The XDP program of the AF_XDP output path (docs/gate.md "The output
//! path"): on the interface the primary's packets arrive on, every IPv4
//! packet from the service IP goes to the AF_XDP socket of its receive
//! queue (`xsk.rs`) instead of into the kernel's forwarding path, where
//! NFQUEUE cost a netlink copy, a verdict message and a reinjection per
//! packet (bench/results/path_costs_xdp.json).
//!
//! The program is 20 eBPF instructions assembled here and loaded with the
//! bpf(2) system call: no compiler, libbpf or BTF at run time. It is
//! attached through a BPF link, so closing the link's descriptor (or the
//! gate's process dying) detaches it: nothing of it outlives the gate.
//!
//! Generic (skb) mode, not the driver's: on a veth, a driver-mode program
//! switches the device to NAPI receive and takes segmentation offload off
//! its peer, for every packet on the link (the agents' traffic included):
//! measured in the lab, a pass-all program in driver mode on the backup's
//! link cost rr-mode memcached 7-13 % of its throughput, in generic mode
//! nothing measurable (docs/gate.md "The output path").
//!
//! Fail-safe, not fail-open: a packet whose queue has no socket bound
//! (`bpf_redirect_map`'s fallback action), that is not plain IPv4 over
//! Ethernet, or that is longer than a frame of the clients' link (a GSO
//! packet of several segments, which the primary's stack hands over whole
//! when offload is on) goes on into the kernel, where the gate chain's
//! NFQUEUE rule for the service's output catches it (NFQUEUE segments it);
//! a socket whose ring is full drops it (TCP retransmits).

use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::error::GateError;

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;

const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
const BPF_PSEUDO_MAP_FD: u8 = 1;
const XDP_PASS: i32 = 2;
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;

/// Size of the `union bpf_attr` buffer handed to the kernel (larger than
/// any command's fields here; the kernel requires the tail to be zero).
const ATTR_SIZE: usize = 128;

/// One eBPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    code: u8,
    /// dst register in the low nibble, src in the high one.
    regs: u8,
    off: i16,
    imm: i32,
}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn { code, regs: (src << 4) | (dst & 0xf), off, imm }
}

// opcodes (class | size/op | source)
const LDX_W: u8 = 0x61; // BPF_LDX | BPF_MEM | BPF_W
const LDX_H: u8 = 0x69; // BPF_LDX | BPF_MEM | BPF_H
const MOV64_X: u8 = 0xbf;
const MOV64_K: u8 = 0xb7;
const ADD64_K: u8 = 0x07;
const JGT_X: u8 = 0x2d;
const JLT_X: u8 = 0xad;
const JNE_K: u8 = 0x55;
const JNE32_K: u8 = 0x56; // BPF_JMP32: compares the low 32 bits
const LD_DW_IMM: u8 = 0x18;
const CALL: u8 = 0x85;
const EXIT: u8 = 0x95;

// struct xdp_md fields
const XDP_MD_DATA: i16 = 0;
const XDP_MD_DATA_END: i16 = 4;
const XDP_MD_RX_QUEUE_INDEX: i16 = 16;

/// Index of the program's `pass:` instruction.
const PASS: i16 = 18;

/// The program: IPv4 from `service_ip` of at most `max_frame` bytes (from
/// the Ethernet header on) to `xsks[rx_queue_index]`, the rest (and a
/// queue without a socket) to the kernel.
pub fn program(service_ip: Ipv4Addr, max_frame: u16, xsks_map_fd: RawFd) -> Vec<Insn> {
    // the source address as the little-endian load of its wire bytes
    let svc = i32::from_le_bytes(service_ip.octets());
    let to_pass = |at: i16| PASS - at - 1;
    vec![
        insn(LDX_W, 2, 1, XDP_MD_DATA, 0),            // 0: r2 = data
        insn(LDX_W, 3, 1, XDP_MD_DATA_END, 0),        // 1: r3 = data_end
        insn(MOV64_X, 4, 2, 0, 0),                    // 2: r4 = r2
        insn(ADD64_K, 4, 0, 0, 14 + 20),              // 3: r4 += Ethernet + IPv4 headers
        insn(JGT_X, 4, 3, to_pass(4), 0),             // 4: too short: pass
        insn(MOV64_X, 4, 2, 0, 0),                    // 5: r4 = r2
        insn(ADD64_K, 4, 0, 0, i32::from(max_frame)), // 6: r4 += the longest frame
        insn(JLT_X, 4, 3, to_pass(7), 0),             // 7: longer: pass
        insn(LDX_H, 5, 2, 12, 0),                     // 8: r5 = EtherType
        insn(JNE_K, 5, 0, to_pass(9), 0x0008),        // 9: not IPv4 (0x0800 on the wire): pass
        insn(LDX_W, 5, 2, 14 + 12, 0),                // 10: r5 = IPv4 source
        insn(JNE32_K, 5, 0, to_pass(11), svc),        // 11: not the service: pass
        insn(LDX_W, 2, 1, XDP_MD_RX_QUEUE_INDEX, 0),  // 12: r2 = key = rx queue
        insn(LD_DW_IMM, 1, BPF_PSEUDO_MAP_FD, 0, xsks_map_fd), // 13: r1 = &xsks
        insn(0, 0, 0, 0, 0),                          // 14: (upper half of the 64-bit load)
        insn(MOV64_K, 3, 0, 0, XDP_PASS),             // 15: r3 = fallback action
        insn(CALL, 0, 0, 0, BPF_FUNC_REDIRECT_MAP),   // 16: r0 = bpf_redirect_map(r1, r2, r3)
        insn(EXIT, 0, 0, 0, 0),                       // 17
        insn(MOV64_K, 0, 0, 0, XDP_PASS),             // 18 pass: r0 = XDP_PASS
        insn(EXIT, 0, 0, 0, 0),                       // 19
    ]
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

/// The loaded program, its socket map and its attachment. Dropping it
/// detaches the program.
pub struct XdpRedirect {
    map: OwnedFd,
    _prog: OwnedFd,
    _link: OwnedFd,
    ifindex: u32,
    queues: u32,
}

impl XdpRedirect {
    /// Loads the program for `service_ip` and attaches it to `ifindex`
    /// (of the calling thread's network namespace) in generic mode, with
    /// room for `queues` sockets (one per receive queue); frames longer
    /// than `max_frame` pass.
    pub fn attach(ifindex: u32, service_ip: Ipv4Addr, max_frame: u16, queues: u32) -> Result<XdpRedirect, GateError> {
        let mut a = [0u8; ATTR_SIZE];
        put32(&mut a, 0, BPF_MAP_TYPE_XSKMAP);
        put32(&mut a, 4, 4); // key: the queue index
        put32(&mut a, 8, 4); // value: a socket's descriptor
        put32(&mut a, 12, queues.max(1));
        let map = owned(bpf(BPF_MAP_CREATE, &mut a).map_err(GateError::io("creating the XDP socket map (bpf BPF_MAP_CREATE)"))?);

        let insns = program(service_ip, max_frame, map.as_raw_fd());
        let license = b"GPL\0";
        let mut log = vec![0u8; 16 << 10];
        let mut a = [0u8; ATTR_SIZE];
        put32(&mut a, 0, BPF_PROG_TYPE_XDP);
        put32(&mut a, 4, insns.len() as u32);
        put64(&mut a, 8, insns.as_ptr() as u64);
        put64(&mut a, 16, license.as_ptr() as u64);
        put32(&mut a, 24, 1); // log level
        put32(&mut a, 28, log.len() as u32);
        put64(&mut a, 32, log.as_mut_ptr() as u64);
        a[48..48 + 12].copy_from_slice(b"rrc_gate_out");
        put32(&mut a, 68, BPF_XDP); // expected attach type
        let prog = match bpf(BPF_PROG_LOAD, &mut a) {
            Ok(fd) => owned(fd),
            Err(e) => {
                let end = log.iter().position(|&c| c == 0).unwrap_or(log.len());
                let verifier = String::from_utf8_lossy(&log[..end]).trim().to_string();
                return Err(GateError::Other(format!("loading the gate's XDP program: {e}; verifier: {verifier}")));
            }
        };

        let mut a = [0u8; ATTR_SIZE];
        put32(&mut a, 0, prog.as_raw_fd() as u32);
        put32(&mut a, 4, ifindex);
        put32(&mut a, 8, BPF_XDP);
        put32(&mut a, 12, XDP_FLAGS_SKB_MODE);
        let link = owned(bpf(BPF_LINK_CREATE, &mut a).map_err(GateError::io(format!(
            "attaching the gate's XDP program to interface {ifindex} (another XDP program there, e.g. another service's gate, makes this EBUSY)"
        )))?);
        Ok(XdpRedirect { map, _prog: prog, _link: link, ifindex, queues: queues.max(1) })
    }

    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    pub fn queues(&self) -> u32 {
        self.queues
    }

    /// Packets of receive queue `queue` go to `socket` from now on.
    pub fn set_socket(&self, queue: u32, socket: RawFd) -> Result<(), GateError> {
        let key = queue;
        let value = socket as u32;
        let mut a = [0u8; ATTR_SIZE];
        put32(&mut a, 0, self.map.as_raw_fd() as u32);
        put64(&mut a, 8, &key as *const u32 as u64);
        put64(&mut a, 16, &value as *const u32 as u64);
        bpf(BPF_MAP_UPDATE_ELEM, &mut a).map_err(GateError::io(format!("adding the AF_XDP socket of queue {queue} to the XDP map")))?;
        Ok(())
    }

    /// Packets of receive queue `queue` go into the kernel again.
    pub fn clear_socket(&self, queue: u32) -> Result<(), GateError> {
        let key = queue;
        let mut a = [0u8; ATTR_SIZE];
        put32(&mut a, 0, self.map.as_raw_fd() as u32);
        put64(&mut a, 8, &key as *const u32 as u64);
        match bpf(BPF_MAP_DELETE_ELEM, &mut a) {
            Ok(_) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            Err(e) => Err(GateError::io(format!("removing queue {queue}'s socket from the XDP map"))(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_land_on_the_pass_branch_and_the_address_is_in_wire_order() {
        let p = program(Ipv4Addr::new(10, 77, 0, 1), 1514, 7);
        assert_eq!(p.len(), 20);
        let mut jumps = 0;
        for (i, x) in p.iter().enumerate() {
            if [JGT_X, JLT_X, JNE_K, JNE32_K].contains(&x.code) {
                assert_eq!(i as i16 + 1 + x.off, PASS, "jump at {i}");
                jumps += 1;
            }
        }
        assert_eq!(jumps, 4);
        assert_eq!(p[PASS as usize], insn(MOV64_K, 0, 0, 0, XDP_PASS));
        assert_eq!(p[6].imm, 1514);
        // 10.77.0.1 read as a little-endian u32 from the packet
        assert_eq!(p[11].imm as u32, 0x0100_4d0a);
        assert_eq!(p[13].imm, 7);
        assert_eq!(p[13].regs, (BPF_PSEUDO_MAP_FD << 4) | 1);
        assert_eq!(std::mem::size_of::<Insn>(), 8);
    }
}
