//! The XDP program of the AF_XDP output path (docs/gate.md "The output
//! path"): on the interface the primary's packets arrive on, every IPv4
//! packet from the service IP goes to the AF_XDP socket of its receive
//! queue (`xsk.rs`) instead of into the kernel's forwarding path, where
//! NFQUEUE cost a netlink copy, a verdict message and a reinjection per
//! packet (bench/results/path_costs_xdp.json).
//!
//! The program is 20 eBPF instructions assembled here and loaded with the
//! bpf(2) system call (`bpf.rs`): no compiler, libbpf or BTF at run time. It is
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
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::bpf::{self, insn, Insn, ADD64_K, BPF_PSEUDO_MAP_FD, CALL, EXIT, JGT_X, JLT_X, JNE32_K, JNE_K, LDX_H, LDX_W, LD_DW_IMM, MOV64_K, MOV64_X};
use crate::error::GateError;

const BPF_FUNC_REDIRECT_MAP: i32 = 51;
const XDP_PASS: i32 = 2;
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;

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
        // key: the queue index; value: a socket's descriptor
        let map = bpf::map_create(bpf::BPF_MAP_TYPE_XSKMAP, 4, 4, queues.max(1), "the XDP socket map")?;
        let insns = program(service_ip, max_frame, map.as_raw_fd());
        let prog = bpf::prog_load(bpf::BPF_PROG_TYPE_XDP, bpf::BPF_XDP, "rrc_gate_out", &insns)?;
        let link = bpf::link_create(&prog, ifindex, bpf::BPF_XDP, XDP_FLAGS_SKB_MODE).map_err(GateError::io(format!(
            "attaching the gate's XDP program to interface {ifindex} (another XDP program there, e.g. another service's gate, makes this EBUSY)"
        )))?;
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
        bpf::map_update(self.map.as_raw_fd(), &queue.to_ne_bytes(), &(socket as u32).to_ne_bytes())
            .map_err(GateError::io(format!("adding the AF_XDP socket of queue {queue} to the XDP map")))
    }

    /// Packets of receive queue `queue` go into the kernel again.
    pub fn clear_socket(&self, queue: u32) -> Result<(), GateError> {
        match bpf::map_delete(self.map.as_raw_fd(), &queue.to_ne_bytes()) {
            Ok(()) => Ok(()),
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
            if bpf::is_jump(x.code) {
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
