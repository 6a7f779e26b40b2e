//! The observed input path (docs/gate.md "The input path"): what clients
//! send to the service is recorded by the gate without being taken out of
//! the kernel's forwarding path. A tc program at the ingress of the
//! clients' link (tcx, attached by a BPF link) copies each frame to the
//! service into a BPF ring buffer the gate reads, then marks the packet;
//! the gate chain's first rule lets marked packets by its NFQUEUE rule.
//! NFQUEUE cost a netlink copy, a verdict message and a reinjection per
//! client packet (bench/results/path_costs_gate_xdp*.json, "NFQUEUE both"
//! against "NFQUEUE out"); here the kernel forwards the packet itself and
//! the gate reads its copy in batches. Not the agents' default: on the
//! machine measured rr mode served less with it, the queue's batching of
//! clients' packets helping every other thread (bench/README.md "The
//! observed input path").
//!
//! Recorded before forwarded, as with NFQUEUE (RRC §4.3 PackRec): the copy
//! is in the ring before the packet goes on to the primary, so a reply to
//! it comes to the gate after it, and the gate reads the ring before it
//! decides on any output (`Gate`), so it decides in the same order as when
//! it read the queue. A failover detaches the program first and reads the
//! ring to its end (`Gate::hold_input`): every packet that went on to the
//! old primary is recorded, and every later one takes the NFQUEUE rule and
//! is held.
//!
//! Fail-safe: a packet the program does not copy is not marked, and takes
//! the NFQUEUE as before: not IPv4 over Ethernet, longer than a frame of
//! the link (a GRO or GSO packet of several segments), a full ring, a
//! detached program.
//!
//! The copy keeps the offloaded checksum a veth hands over (only the
//! pseudo-header sum in the field); the gate completes it before it checks
//! it (`ipsend::complete_checksum`), as NFQUEUE did in the kernel.

use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::bpf::{self, insn, Insn, ADD64_K, BPF_PSEUDO_MAP_FD, CALL, EXIT, JA, JEQ_K, JGT_K, JGT_X, JLT_K, JNE32_K, JNE_K, LDX_H, LDX_W, LD_DW_IMM, MOV64_K, MOV64_X, OR64_K, STX_W};
use crate::error::GateError;

/// The packet mark of a recorded packet (one bit: other marks are kept);
/// the gate chain's rule `-d SVC -m mark --mark M/M -j RETURN` matches it.
pub const OBSERVED_MARK: u32 = 0x0800_0000;
/// The ring's data area (a power of two, a multiple of the page size):
/// about 5,000 frames of 1514 bytes.
pub const RING_BYTES: u32 = 8 << 20;
/// A sample: the frame's length (u32), 4 unused bytes, the frame.
const SAMPLE_HEADER: usize = 8;

const BPF_FUNC_SKB_LOAD_BYTES: i32 = 26;
const BPF_FUNC_RINGBUF_RESERVE: i32 = 131;
const BPF_FUNC_RINGBUF_SUBMIT: i32 = 132;
const BPF_FUNC_RINGBUF_DISCARD: i32 = 133;
/// Submits without waking the reader: a wakeup is an irq_work, a
/// self-interrupt per packet (a VM exit on a virtual machine such as this
/// project's), and the gate needs the copies only when it decides on the
/// service's output, when it reads the ring anyway (`Gate`), or every few
/// milliseconds otherwise (bench/README.md "The observed input path").
const BPF_RB_NO_WAKEUP: i32 = 1;
/// tcx: go on with the next program, then the kernel's path.
const TCX_NEXT: i32 = -1;

// struct __sk_buff fields
const SKB_LEN: i16 = 0;
const SKB_MARK: i16 = 8;
const SKB_DATA: i16 = 76;
const SKB_DATA_END: i16 = 80;

/// Indexes of the program's branch targets.
const DISCARD: i16 = 35;
const PASS: i16 = 38;

/// The program: a frame of 34 to `max_frame` bytes, IPv4 to `service_ip`,
/// is copied into the ring `ring_fd` and marked `OBSERVED_MARK`; every
/// packet goes on (`TCX_NEXT`).
pub fn program(service_ip: Ipv4Addr, max_frame: u16, ring_fd: RawFd) -> Vec<Insn> {
    // the destination address as the little-endian load of its wire bytes
    let svc = i32::from_le_bytes(service_ip.octets());
    let max = i32::from(max_frame);
    let to = |target: i16, at: i16| target - at - 1;
    vec![
        insn(MOV64_X, 6, 1, 0, 0),                                      // 0: r6 = skb
        insn(LDX_W, 7, 6, SKB_LEN, 0),                                  // 1: r7 = len (from the Ethernet header on)
        insn(JGT_K, 7, 0, to(PASS, 2), max),                            // 2: longer than a frame: pass
        insn(JLT_K, 7, 0, to(PASS, 3), 14 + 20),                        // 3: shorter than the headers: pass
        insn(LDX_W, 2, 6, SKB_DATA, 0),                                 // 4: r2 = data
        insn(LDX_W, 3, 6, SKB_DATA_END, 0),                             // 5: r3 = data_end
        insn(MOV64_X, 4, 2, 0, 0),                                      // 6: r4 = r2
        insn(ADD64_K, 4, 0, 0, 14 + 20),                                // 7: r4 += Ethernet + IPv4 headers
        insn(JGT_X, 4, 3, to(PASS, 8), 0),                              // 8: headers not linear: pass
        insn(LDX_H, 5, 2, 12, 0),                                       // 9: r5 = EtherType
        insn(JNE_K, 5, 0, to(PASS, 10), 0x0008),                        // 10: not IPv4 (0x0800 on the wire): pass
        insn(LDX_W, 5, 2, 14 + 16, 0),                                  // 11: r5 = IPv4 destination
        insn(JNE32_K, 5, 0, to(PASS, 12), svc),                         // 12: not the service: pass
        insn(LD_DW_IMM, 1, BPF_PSEUDO_MAP_FD, 0, ring_fd),              // 13: r1 = &ring
        insn(0, 0, 0, 0, 0),                                            // 14: (upper half of the 64-bit load)
        insn(MOV64_K, 2, 0, 0, max + SAMPLE_HEADER as i32),             // 15: r2 = sample size
        insn(MOV64_K, 3, 0, 0, 0),                                      // 16: r3 = flags
        insn(CALL, 0, 0, 0, BPF_FUNC_RINGBUF_RESERVE),                  // 17: r0 = bpf_ringbuf_reserve(r1, r2, r3)
        insn(JEQ_K, 0, 0, to(PASS, 18), 0),                             // 18: ring full: pass unmarked
        insn(MOV64_X, 8, 0, 0, 0),                                      // 19: r8 = sample
        insn(STX_W, 8, 7, 0, 0),                                        // 20: sample.len = r7
        insn(MOV64_X, 1, 6, 0, 0),                                      // 21: r1 = skb
        insn(MOV64_K, 2, 0, 0, 0),                                      // 22: r2 = offset 0
        insn(MOV64_X, 3, 8, 0, 0),                                      // 23: r3 = sample
        insn(ADD64_K, 3, 0, 0, SAMPLE_HEADER as i32),                   // 24: r3 += header
        insn(MOV64_X, 4, 7, 0, 0),                                      // 25: r4 = len
        insn(CALL, 0, 0, 0, BPF_FUNC_SKB_LOAD_BYTES),                   // 26: r0 = bpf_skb_load_bytes(r1, r2, r3, r4)
        insn(JNE_K, 0, 0, to(DISCARD, 27), 0),                          // 27: failed: discard
        insn(MOV64_X, 1, 8, 0, 0),                                      // 28: r1 = sample
        insn(MOV64_K, 2, 0, 0, BPF_RB_NO_WAKEUP),                       // 29: r2 = flags
        insn(CALL, 0, 0, 0, BPF_FUNC_RINGBUF_SUBMIT),                   // 30: bpf_ringbuf_submit(r1, r2)
        insn(LDX_W, 2, 6, SKB_MARK, 0),                                 // 31: r2 = mark
        insn(OR64_K, 2, 0, 0, OBSERVED_MARK as i32),                    // 32: r2 |= OBSERVED_MARK
        insn(STX_W, 6, 2, SKB_MARK, 0),                                 // 33: mark = r2
        insn(JA, 0, 0, to(PASS, 34), 0),                                // 34: pass
        insn(MOV64_X, 1, 8, 0, 0),                                      // 35 discard: r1 = sample
        insn(MOV64_K, 2, 0, 0, 0),                                      // 36: r2 = flags
        insn(CALL, 0, 0, 0, BPF_FUNC_RINGBUF_DISCARD),                  // 37: bpf_ringbuf_discard(r1, r2)
        insn(MOV64_K, 0, 0, 0, TCX_NEXT),                               // 38 pass: r0 = TCX_NEXT
        insn(EXIT, 0, 0, 0, 0),                                         // 39
    ]
}

/// A record of the ring at a consumer position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Record {
    /// Reserved, not yet submitted: the ring ends here for now.
    Busy,
    /// Discarded: skip `size` bytes.
    Skip { size: u64 },
    /// A sample of `len` bytes at `at` (into the doubly mapped data area).
    Sample { at: usize, len: usize, size: u64 },
}

const BUSY_BIT: u32 = 1 << 31;
const DISCARD_BIT: u32 = 1 << 30;
/// struct bpf_ringbuf_hdr: u32 length and flags, u32 page offset.
const RECORD_HEADER: u64 = 8;

/// Reads the record header `hdr` found at consumer position `cons`.
fn record(hdr: u32, cons: u64, mask: u64) -> Record {
    if hdr & BUSY_BIT != 0 {
        return Record::Busy;
    }
    let len = hdr & !(BUSY_BIT | DISCARD_BIT);
    let size = (u64::from(len) + RECORD_HEADER + 7) & !7;
    if hdr & DISCARD_BIT != 0 {
        return Record::Skip { size };
    }
    Record::Sample { at: ((cons & mask) + RECORD_HEADER) as usize, len: len as usize, size }
}

/// The frame in a sample the program wrote (None if the sample is not one).
fn frame_of(sample: &[u8]) -> Option<&[u8]> {
    let len = u32::from_ne_bytes(sample.get(..4)?.try_into().ok()?) as usize;
    sample.get(SAMPLE_HEADER..SAMPLE_HEADER.checked_add(len)?)
}

/// One mapping of the ring map.
struct Mapping {
    at: *mut u8,
    len: usize,
}

impl Mapping {
    fn new(fd: RawFd, len: usize, offset: usize, writable: bool) -> Result<Mapping, GateError> {
        let prot = if writable { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
        // SAFETY: a shared mapping of the ring map, as the kernel lays it
        // out (consumer page; producer page then the data area twice).
        let at = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, offset as libc::off_t) };
        if at == libc::MAP_FAILED {
            return Err(GateError::io("mapping the gate's input ring")(std::io::Error::last_os_error()));
        }
        Ok(Mapping { at: at as *mut u8, len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once.
        unsafe { libc::munmap(self.at as *mut libc::c_void, self.len) };
    }
}

/// What the input path recorded.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ObserveStats {
    pub frames: u64,
    pub bytes: u64,
    /// Samples that were not frames of the program's (never expected).
    pub malformed: u64,
}

/// The attached program and its ring. Dropping it detaches the program.
pub struct InputObserver {
    ring: OwnedFd,
    _prog: OwnedFd,
    link: Option<OwnedFd>,
    ifindex: u32,
    consumer: Mapping,
    producer: Mapping,
    page: usize,
    stats: ObserveStats,
}

// SAFETY: the raw pointers are this value's own mappings of the ring; the
// gate reads them from one thread at a time (under its lock).
unsafe impl Send for InputObserver {}

impl InputObserver {
    /// Loads the program for `service_ip` and attaches it at the ingress of
    /// `ifindex` (in the calling thread's network namespace), after any
    /// program already there; frames longer than `max_frame` are not
    /// recorded.
    pub fn attach(ifindex: u32, service_ip: Ipv4Addr, max_frame: u16) -> Result<InputObserver, GateError> {
        let ring = bpf::map_create(bpf::BPF_MAP_TYPE_RINGBUF, 0, 0, RING_BYTES, "the gate's input ring")?;
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let consumer = Mapping::new(ring.as_raw_fd(), page, 0, true)?;
        let producer = Mapping::new(ring.as_raw_fd(), page + 2 * RING_BYTES as usize, page, false)?;
        let insns = program(service_ip, max_frame, ring.as_raw_fd());
        let prog = bpf::prog_load(bpf::BPF_PROG_TYPE_SCHED_CLS, bpf::BPF_TCX_INGRESS, "rrc_gate_in", &insns)?;
        let link = bpf::link_create(&prog, ifindex, bpf::BPF_TCX_INGRESS, 0)
            .map_err(GateError::io(format!("attaching the gate's input program at the ingress of interface {ifindex} (tcx)")))?;
        Ok(InputObserver { ring, _prog: prog, link: Some(link), ifindex, consumer, producer, page, stats: ObserveStats::default() })
    }

    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    pub fn attached(&self) -> bool {
        self.link.is_some()
    }

    /// Detaches the program (for good): packets to the service are neither
    /// copied nor marked any more. What it copied stays in the ring.
    pub fn detach(&mut self) {
        self.link = None;
    }

    pub fn stats(&self) -> ObserveStats {
        self.stats
    }

    /// The ring's descriptor: readable when samples are waiting.
    pub fn as_raw_fd(&self) -> RawFd {
        self.ring.as_raw_fd()
    }

    /// Hands every frame waiting in the ring to `f`, oldest first, and
    /// frees its room; returns how many.
    pub fn drain(&mut self, mut f: impl FnMut(&[u8])) -> usize {
        // SAFETY: the positions are the first u64 of the consumer page and
        // of the producer page; the kernel writes the producer's and the
        // record headers, we write the consumer's.
        let cons_pos = unsafe { &*(self.consumer.at as *const AtomicU64) };
        let prod_pos = unsafe { &*(self.producer.at as *const AtomicU64) };
        let data = unsafe { self.producer.at.add(self.page) };
        let mask = u64::from(RING_BYTES) - 1;
        let mut cons = cons_pos.load(Ordering::Relaxed);
        let mut n = 0;
        loop {
            let prod = prod_pos.load(Ordering::Acquire);
            if cons >= prod {
                break;
            }
            // SAFETY: a record header inside the data area (8-aligned).
            let hdr = unsafe { &*(data.add((cons & mask) as usize) as *const AtomicU32) }.load(Ordering::Acquire);
            match record(hdr, cons, mask) {
                Record::Busy => break,
                Record::Skip { size } => cons += size,
                Record::Sample { at, len, size } => {
                    // SAFETY: the data area is mapped twice in a row, so a
                    // sample that wraps is contiguous; len <= the ring.
                    let sample = unsafe { std::slice::from_raw_parts(data.add(at), len.min(RING_BYTES as usize)) };
                    match frame_of(sample) {
                        Some(frame) => {
                            self.stats.frames += 1;
                            self.stats.bytes += frame.len() as u64;
                            f(frame);
                            n += 1;
                        }
                        None => self.stats.malformed += 1,
                    }
                    cons += size;
                }
            }
            cons_pos.store(cons, Ordering::Release);
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn branches_land_where_their_comments_say() {
        let p = program(Ipv4Addr::new(10, 77, 0, 1), 1514, 9);
        assert_eq!(p.len(), 40);
        for (i, x) in p.iter().enumerate() {
            if bpf::is_jump(x.code) {
                let target = i as i16 + 1 + x.off;
                let want = if i == 27 { DISCARD } else { PASS };
                assert_eq!(target, want, "jump at {i}");
            }
        }
        assert_eq!(p[PASS as usize], insn(MOV64_K, 0, 0, 0, TCX_NEXT));
        assert_eq!(p[DISCARD as usize], insn(MOV64_X, 1, 8, 0, 0));
        assert_eq!(p[EXIT_AT].code, EXIT);
        assert_eq!(p[DISCARD as usize - 1].code, JA);
        // 10.77.0.1 read as a little-endian u32 from the packet
        assert_eq!(p[12].imm as u32, 0x0100_4d0a);
        assert_eq!(p[13].imm, 9);
        assert_eq!(p[13].regs, (BPF_PSEUDO_MAP_FD << 4) | 1);
        // the sample holds the longest frame the length check lets by
        assert_eq!(p[2].imm, 1514);
        assert_eq!(p[15].imm, 1514 + SAMPLE_HEADER as i32);
        assert_eq!(p[32].imm as u32, OBSERVED_MARK);
    }

    const EXIT_AT: usize = 39;

    #[test]
    fn ring_records_are_read_as_the_kernel_writes_them() {
        let mask = u64::from(RING_BYTES) - 1;
        assert_eq!(record(BUSY_BIT | 100, 0, mask), Record::Busy);
        assert_eq!(record(DISCARD_BIT | 100, 0, mask), Record::Skip { size: 112 });
        // a sample of 1522 bytes: header + data rounded up to 8
        assert_eq!(record(1522, 16, mask), Record::Sample { at: 24, len: 1522, size: 1536 });
        // a position past the ring's end wraps into the data area
        assert_eq!(record(8, mask + 1 + 40, mask), Record::Sample { at: 48, len: 8, size: 16 });
    }

    #[test]
    fn a_sample_gives_its_frame_and_nothing_past_it() {
        let mut s = vec![0u8; SAMPLE_HEADER + 100];
        s[..4].copy_from_slice(&60u32.to_ne_bytes());
        s[SAMPLE_HEADER] = 0xaa;
        let f = frame_of(&s).unwrap();
        assert_eq!(f.len(), 60);
        assert_eq!(f[0], 0xaa);
        s[..4].copy_from_slice(&101u32.to_ne_bytes());
        assert_eq!(frame_of(&s), None);
        assert_eq!(frame_of(&s[..3]), None);
    }
}
