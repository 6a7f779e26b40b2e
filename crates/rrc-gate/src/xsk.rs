//! AF_XDP sockets, each with its own UMEM (the output path: docs/gate.md
//! "The output path"; the XDP program is `xdp.rs`).
//!
//! Copy mode (`XDP_COPY`: veth and most drivers have no zero-copy).
//! `XskRx`, one per receive queue of the link from the primary: the gate
//! copies each frame out as it reads it and hands the frame straight back
//! to the fill ring, so frames never wait for an epoch and the UMEM stays
//! small (held packets live in the gate's own buffers, bounded by its
//! `max_held_packets`). `XskTx`, on the link to the clients: released
//! packets are written into its frames behind an Ethernet header and
//! transmitted by the driver directly (no routing, netfilter or qdisc on
//! the way: that is what makes this path cheaper than NFQUEUE's reinjection
//! or a raw socket, bench/results/path_costs_gate_xdp.json).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::error::GateError;

const AF_XDP: libc::c_int = 44;
const SOL_XDP: libc::c_int = 283;
const XDP_MMAP_OFFSETS: libc::c_int = 1;
const XDP_RX_RING: libc::c_int = 2;
const XDP_TX_RING: libc::c_int = 3;
const XDP_UMEM_REG: libc::c_int = 4;
const XDP_UMEM_FILL_RING: libc::c_int = 5;
const XDP_UMEM_COMPLETION_RING: libc::c_int = 6;
const XDP_STATISTICS: libc::c_int = 7;
const XDP_COPY: u16 = 1 << 1;
const XDP_PGOFF_RX_RING: libc::off_t = 0;
const XDP_PGOFF_TX_RING: libc::off_t = 0x8000_0000;
const XDP_UMEM_PGOFF_FILL_RING: libc::off_t = 0x1_0000_0000;
const XDP_UMEM_PGOFF_COMPLETION_RING: libc::off_t = 0x1_8000_0000;

/// Frame size: a whole 1500-byte-MTU frame and the kernel's headroom.
pub const FRAME_SIZE: u32 = 4096;
/// Frames per socket (16 MiB of UMEM); also the fill and RX ring sizes.
pub const FRAMES: u32 = 4096;

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct RingOffset {
    producer: u64,
    consumer: u64,
    desc: u64,
    flags: u64,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct MmapOffsets {
    rx: RingOffset,
    tx: RingOffset,
    fr: RingOffset,
    cr: RingOffset,
}

/// `struct xdp_umem_reg` (its v2 layout: no TX metadata).
#[repr(C)]
struct UmemReg {
    addr: u64,
    len: u64,
    chunk_size: u32,
    headroom: u32,
    flags: u32,
    _pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct Desc {
    addr: u64,
    len: u32,
    options: u32,
}

/// `struct xdp_statistics`: what the kernel dropped on the socket's way.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct XskStats {
    pub rx_dropped: u64,
    pub rx_invalid_descs: u64,
    pub tx_invalid_descs: u64,
    pub rx_ring_full: u64,
    pub rx_fill_ring_empty_descs: u64,
    pub tx_ring_empty_descs: u64,
}

/// A mapped ring of `n` entries of `T`.
struct Ring<T> {
    map: *mut libc::c_void,
    map_len: usize,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    descs: *mut T,
    mask: u32,
}

impl<T> Ring<T> {
    fn map(fd: RawFd, off: &RingOffset, n: u32, pgoff: libc::off_t, what: &str) -> Result<Ring<T>, GateError> {
        let map_len = off.desc as usize + n as usize * std::mem::size_of::<T>();
        // SAFETY: maps the ring the kernel made for this socket.
        let map = unsafe { libc::mmap(std::ptr::null_mut(), map_len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED | libc::MAP_POPULATE, fd, pgoff) };
        if map == libc::MAP_FAILED {
            return Err(GateError::io(format!("mapping the AF_XDP {what} ring"))(std::io::Error::last_os_error()));
        }
        let at = |o: u64| (map as usize + o as usize) as *mut u8;
        Ok(Ring {
            map,
            map_len,
            producer: at(off.producer) as *const AtomicU32,
            consumer: at(off.consumer) as *const AtomicU32,
            descs: at(off.desc) as *mut T,
            mask: n - 1,
        })
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: points into the live mapping, 4-aligned (kernel layout).
        unsafe { &*self.producer }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as above.
        unsafe { &*self.consumer }
    }

    fn slot(&self, i: u32) -> *mut T {
        // SAFETY: masked into the ring's n entries.
        unsafe { self.descs.add((i & self.mask) as usize) }
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        // SAFETY: unmaps what `map` mapped.
        unsafe { libc::munmap(self.map, self.map_len) };
    }
}

/// The receive side of one queue.
pub struct XskRx {
    // field order: the rings go before the socket closes
    rx: Ring<Desc>,
    fill: Ring<u64>,
    _completion: Ring<u64>,
    sock: Socket,
    queue: u32,
}

// SAFETY: the raw pointers are into mappings this value owns; the gate
// uses one XskRx from one thread at a time (behind its lock).
unsafe impl Send for XskRx {}
unsafe impl Sync for XskRx {}

fn setsockopt<T>(fd: RawFd, opt: libc::c_int, v: &T, what: &str) -> Result<(), GateError> {
    // SAFETY: v is a T of the size given.
    let r = unsafe { libc::setsockopt(fd, SOL_XDP, opt, v as *const T as *const libc::c_void, std::mem::size_of::<T>() as libc::socklen_t) };
    if r < 0 {
        return Err(GateError::io(format!("AF_XDP socket: {what}"))(std::io::Error::last_os_error()));
    }
    Ok(())
}

fn getsockopt<T: Default>(fd: RawFd, opt: libc::c_int, what: &str) -> Result<T, GateError> {
    let mut v = T::default();
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: the kernel writes at most len bytes into v.
    let r = unsafe { libc::getsockopt(fd, SOL_XDP, opt, &mut v as *mut T as *mut libc::c_void, &mut len) };
    if r < 0 {
        return Err(GateError::io(format!("AF_XDP socket: {what}"))(std::io::Error::last_os_error()));
    }
    Ok(v)
}

/// An AF_XDP socket with its UMEM registered (not yet bound).
struct Socket {
    fd: OwnedFd,
    umem: Umem,
}

/// The UMEM's anonymous mapping.
struct Umem {
    at: *mut u8,
    len: usize,
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: unmaps the mapping made in `Socket::new`. The kernel pins
        // the pages for as long as its socket lives, so this is safe even
        // before the socket closes.
        unsafe { libc::munmap(self.at as *mut libc::c_void, self.len) };
    }
}

impl Socket {
    fn new() -> Result<Socket, GateError> {
        // SAFETY: plain socket creation.
        let raw = unsafe { libc::socket(AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(GateError::io("creating an AF_XDP socket")(std::io::Error::last_os_error()));
        }
        // SAFETY: fresh descriptor.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let len = (FRAMES * FRAME_SIZE) as usize;
        // SAFETY: anonymous private mapping, owned by the Umem below.
        let at = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
        if at == libc::MAP_FAILED {
            return Err(GateError::io("allocating the AF_XDP UMEM")(std::io::Error::last_os_error()));
        }
        let umem = Umem { at: at as *mut u8, len };
        let reg = UmemReg { addr: umem.at as u64, len: len as u64, chunk_size: FRAME_SIZE, headroom: 0, flags: 0, _pad: 0 };
        setsockopt(fd.as_raw_fd(), XDP_UMEM_REG, &reg, "registering the UMEM")?;
        Ok(Socket { fd, umem })
    }

    fn bind(&self, ifindex: u32, queue: u32) -> Result<(), GateError> {
        let mut sa: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        {
            // struct sockaddr_xdp { u16 family; u16 flags; u32 ifindex; u32 queue_id; u32 shared_umem_fd; }
            let b = &mut sa as *mut libc::sockaddr_storage as *mut u8;
            // SAFETY: writes the 16 bytes of a sockaddr_xdp into sa.
            unsafe {
                std::ptr::write_unaligned(b as *mut u16, AF_XDP as u16);
                std::ptr::write_unaligned(b.add(2) as *mut u16, XDP_COPY);
                std::ptr::write_unaligned(b.add(4) as *mut u32, ifindex);
                std::ptr::write_unaligned(b.add(8) as *mut u32, queue);
            }
        }
        // SAFETY: binds our socket with a 16-byte sockaddr_xdp.
        let r = unsafe { libc::bind(self.fd.as_raw_fd(), &sa as *const libc::sockaddr_storage as *const libc::sockaddr, 16) };
        if r < 0 {
            return Err(GateError::io(format!("binding an AF_XDP socket to queue {queue} of interface {ifindex}"))(std::io::Error::last_os_error()));
        }
        Ok(())
    }
}

impl XskRx {
    /// A socket bound to receive queue `queue` of `ifindex` (in the calling
    /// thread's network namespace), every frame given to the kernel.
    pub fn open(ifindex: u32, queue: u32) -> Result<XskRx, GateError> {
        let sock = Socket::new()?;
        let fdr = sock.fd.as_raw_fd();
        setsockopt(fdr, XDP_UMEM_FILL_RING, &FRAMES, "sizing the fill ring")?;
        setsockopt(fdr, XDP_UMEM_COMPLETION_RING, &FRAMES, "sizing the completion ring")?;
        setsockopt(fdr, XDP_RX_RING, &FRAMES, "sizing the RX ring")?;
        let off: MmapOffsets = getsockopt(fdr, XDP_MMAP_OFFSETS, "reading the ring offsets")?;
        let rx = Ring::map(fdr, &off.rx, FRAMES, XDP_PGOFF_RX_RING, "RX")?;
        let fill = Ring::map(fdr, &off.fr, FRAMES, XDP_UMEM_PGOFF_FILL_RING, "fill")?;
        let completion = Ring::map(fdr, &off.cr, FRAMES, XDP_UMEM_PGOFF_COMPLETION_RING, "completion")?;
        // every frame to the kernel before binding
        for i in 0..FRAMES {
            // SAFETY: a slot of the fill ring, which only we produce into.
            unsafe { *fill.slot(i) = u64::from(i * FRAME_SIZE) };
        }
        fill.producer().store(FRAMES, Ordering::Release);
        sock.bind(ifindex, queue)?;
        Ok(XskRx { rx, fill, _completion: completion, sock, queue })
    }

    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// Hands each received frame (from its Ethernet header on) to `f`, up
    /// to `max`, then gives the frames back to the kernel. Returns how many.
    pub fn drain(&self, max: u32, mut f: impl FnMut(&[u8])) -> u32 {
        let prod = self.rx.producer().load(Ordering::Acquire);
        let cons = self.rx.consumer().load(Ordering::Relaxed);
        let n = prod.wrapping_sub(cons).min(max);
        if n == 0 {
            return 0;
        }
        // the fill ring has room for every frame: each is in exactly one
        // of fill, RX, or here
        let fill_at = self.fill.producer().load(Ordering::Relaxed);
        for i in 0..n {
            // SAFETY: a descriptor the kernel published (acquire above).
            let d = unsafe { *self.rx.slot(cons.wrapping_add(i)) };
            let base = d.addr & !u64::from(FRAME_SIZE - 1);
            if d.addr as usize + d.len as usize <= self.sock.umem.len {
                // SAFETY: inside the UMEM, which the kernel wrote before
                // publishing the descriptor.
                let frame = unsafe { std::slice::from_raw_parts(self.sock.umem.at.add(d.addr as usize), d.len as usize) };
                f(frame);
            }
            // SAFETY: a fill slot past our producer (room: see above).
            unsafe { *self.fill.slot(fill_at.wrapping_add(i)) = base };
        }
        self.rx.consumer().store(cons.wrapping_add(n), Ordering::Release);
        self.fill.producer().store(fill_at.wrapping_add(n), Ordering::Release);
        n
    }

    pub fn stats(&self) -> XskStats {
        getsockopt(self.sock.fd.as_raw_fd(), XDP_STATISTICS, "reading its statistics").unwrap_or_default()
    }
}

impl AsRawFd for XskRx {
    fn as_raw_fd(&self) -> RawFd {
        self.sock.fd.as_raw_fd()
    }
}

/// The transmit side on one interface (queue 0).
pub struct XskTx {
    tx: Ring<Desc>,
    completion: Ring<u64>,
    _fill: Ring<u64>,
    sock: Socket,
    /// Frames not in the TX ring nor waiting for their completion.
    free: Vec<u64>,
    /// Our TX producer index (the kernel's copy is written on submit).
    produced: u32,
    src_mac: [u8; 6],
    ifindex: u32,
    max_frame: u16,
}

// SAFETY: as for XskRx.
unsafe impl Send for XskTx {}
unsafe impl Sync for XskTx {}

/// Frames of the TX ring; also its completion ring's size.
const TX_FRAMES: u32 = 2048;

impl XskTx {
    /// A socket transmitting on queue 0 of `ifindex`, whose own MAC address
    /// its frames carry as their source.
    pub fn open(ifindex: u32) -> Result<XskTx, GateError> {
        let netif = |what: &str| GateError::io(format!("the {what} of interface {ifindex}"));
        let src_mac = crate::netif::mac(ifindex).map_err(netif("MAC address"))?;
        let mtu = crate::netif::mtu(ifindex).map_err(netif("MTU"))?;
        // the copy into a receive socket's frame leaves 256 bytes of headroom
        let max_frame = (14 + mtu).min(FRAME_SIZE - 256) as u16;
        let sock = Socket::new()?;
        let fdr = sock.fd.as_raw_fd();
        // a UMEM's socket needs both rings even if it never receives
        setsockopt(fdr, XDP_UMEM_FILL_RING, &64u32, "sizing the fill ring")?;
        setsockopt(fdr, XDP_UMEM_COMPLETION_RING, &TX_FRAMES, "sizing the completion ring")?;
        setsockopt(fdr, XDP_TX_RING, &TX_FRAMES, "sizing the TX ring")?;
        let off: MmapOffsets = getsockopt(fdr, XDP_MMAP_OFFSETS, "reading the ring offsets")?;
        let tx = Ring::map(fdr, &off.tx, TX_FRAMES, XDP_PGOFF_TX_RING, "TX")?;
        let fill = Ring::map(fdr, &off.fr, 64, XDP_UMEM_PGOFF_FILL_RING, "fill")?;
        let completion = Ring::map(fdr, &off.cr, TX_FRAMES, XDP_UMEM_PGOFF_COMPLETION_RING, "completion")?;
        sock.bind(ifindex, 0)?;
        let free = (0..TX_FRAMES).rev().map(|i| u64::from(i * FRAME_SIZE)).collect();
        Ok(XskTx { tx, completion, _fill: fill, sock, free, produced: 0, src_mac, ifindex, max_frame })
    }

    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The longest frame the interface sends (its MTU and the Ethernet
    /// header; within what a receive socket's frame holds).
    pub fn max_frame(&self) -> u16 {
        self.max_frame
    }

    /// Frames whose transmission completed are free again.
    fn reap(&mut self) {
        let prod = self.completion.producer().load(Ordering::Acquire);
        let cons = self.completion.consumer().load(Ordering::Relaxed);
        for k in 0..prod.wrapping_sub(cons) {
            // SAFETY: an entry the kernel published (acquire above).
            self.free.push(unsafe { *self.completion.slot(cons.wrapping_add(k)) } & !u64::from(FRAME_SIZE - 1));
        }
        self.completion.consumer().store(prod, Ordering::Release);
    }

    /// Has the driver take what the TX ring holds (copy mode transmits in
    /// the sendto call, at most 32 frames per call).
    fn kick(&self) -> std::io::Result<()> {
        for _ in 0..(TX_FRAMES / 32 + 2) {
            if self.tx.consumer().load(Ordering::Acquire) == self.produced {
                return Ok(());
            }
            // SAFETY: a zero-length send on our socket: the TX wakeup.
            let r = unsafe { libc::sendto(self.sock.fd.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT, std::ptr::null(), 0) };
            if r < 0 {
                let e = std::io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EAGAIN) | Some(libc::EBUSY) | Some(libc::EINTR) => continue,
                    _ => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// Queues `packet` (an IPv4 packet) behind an Ethernet header to
    /// `dst_mac`. False when no frame or ring slot is free even after
    /// the ones in flight were reaped: the caller sends it another way.
    pub fn push(&mut self, dst_mac: [u8; 6], packet: &[u8]) -> bool {
        if 14 + packet.len() > usize::from(self.max_frame) {
            return false;
        }
        let ring_full = |t: &XskTx| t.produced.wrapping_sub(t.tx.consumer().load(Ordering::Acquire)) >= TX_FRAMES;
        if self.free.is_empty() || ring_full(self) {
            self.submit();
            self.reap();
            if self.free.is_empty() || ring_full(self) {
                return false;
            }
        }
        let Some(addr) = self.free.pop() else { return false };
        // SAFETY: a free frame of our UMEM (FRAME_SIZE bytes, checked above).
        let f = unsafe { std::slice::from_raw_parts_mut(self.sock.umem.at.add(addr as usize), 14 + packet.len()) };
        f[..6].copy_from_slice(&dst_mac);
        f[6..12].copy_from_slice(&self.src_mac);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14..].copy_from_slice(packet);
        // SAFETY: a TX slot past the kernel's consumer (room checked).
        unsafe { *self.tx.slot(self.produced) = Desc { addr, len: f.len() as u32, options: 0 } };
        self.produced = self.produced.wrapping_add(1);
        true
    }

    /// Frames published that the driver has not taken yet.
    pub fn pending(&self) -> bool {
        self.tx.consumer().load(Ordering::Acquire) != self.produced
    }

    /// Publishes what `push` queued and has it transmitted.
    pub fn submit(&mut self) {
        self.tx.producer().store(self.produced, Ordering::Release);
        if let Err(e) = self.kick() {
            tracing::warn!(error = %e, "AF_XDP transmit");
        }
        self.reap();
    }

    pub fn stats(&self) -> XskStats {
        getsockopt(self.sock.fd.as_raw_fd(), XDP_STATISTICS, "reading its statistics").unwrap_or_default()
    }
}
