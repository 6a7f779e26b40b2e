//! The kernel interface of TCP repair: uapi constants and structures
//! (include/uapi/linux/tcp.h, defined here once: the libc crate does not
//! carry all of them) and the raw socket calls, each returning
//! `io::Result`. Nothing here knows the order of operations (see `repair`).

use std::io;
use std::mem::size_of;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use libc::{c_int, c_void, socklen_t};

// ---- uapi (include/uapi/linux/tcp.h) ----------------------------------

/// setsockopt(SOL_TCP) names.
pub const TCP_REPAIR: c_int = 19;
pub const TCP_REPAIR_QUEUE: c_int = 20;
pub const TCP_QUEUE_SEQ: c_int = 21;
pub const TCP_REPAIR_OPTIONS: c_int = 22;
pub const TCP_TIMESTAMP: c_int = 24;
pub const TCP_REPAIR_WINDOW: c_int = 29;

/// TCP_REPAIR values. OFF sends a window probe on an established socket
/// (kernel >= 4.14, commit "tcp: send window probe after leaving repair
/// mode"); OFF_NO_WP does not.
pub const TCP_REPAIR_ON: c_int = 1;
pub const TCP_REPAIR_OFF: c_int = 0;
pub const TCP_REPAIR_OFF_NO_WP: c_int = -1;

/// TCP_REPAIR_QUEUE values.
pub const TCP_NO_QUEUE: c_int = 0;
pub const TCP_RECV_QUEUE: c_int = 1;
pub const TCP_SEND_QUEUE: c_int = 2;

/// `struct tcp_repair_opt` codes (the TCP option kinds).
pub const TCPOPT_MSS: u32 = 2;
pub const TCPOPT_WINDOW: u32 = 3;
pub const TCPOPT_SACK_PERM: u32 = 4;
pub const TCPOPT_TIMESTAMP: u32 = 8;

/// The largest window scale the kernel accepts (TCP_MAX_WSCALE).
pub const TCP_MAX_WSCALE: u8 = 14;

/// `struct tcp_repair_opt`
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpRepairOpt {
    pub opt_code: u32,
    pub opt_val: u32,
}

/// `struct tcp_repair_window`
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpRepairWindow {
    pub snd_wl1: u32,
    pub snd_wnd: u32,
    pub max_window: u32,
    pub rcv_wnd: u32,
    pub rcv_wup: u32,
}

// ---- raw calls -----------------------------------------------------------

fn check(r: c_int) -> io::Result<c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A new IPv4 TCP socket (close-on-exec) in the calling thread's network
/// namespace.
pub fn tcp_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the descriptor is fresh and ours.
    let fd =
        check(unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: fd was just returned by socket().
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// setsockopt with a plain-old-data value (`T` is one of this module's
/// `repr(C)` structs, an array of them, or an integer).
pub fn setsockopt<T: Copy>(fd: &OwnedFd, level: c_int, name: c_int, value: &[T]) -> io::Result<()> {
    let len = std::mem::size_of_val(value) as socklen_t;
    // SAFETY: value points to `len` readable bytes for the call's duration.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            value.as_ptr() as *const c_void,
            len,
        )
    })?;
    Ok(())
}

pub fn setsockopt_int(fd: &OwnedFd, level: c_int, name: c_int, value: c_int) -> io::Result<()> {
    setsockopt(fd, level, name, &[value])
}

pub fn setsockopt_u32(fd: &OwnedFd, level: c_int, name: c_int, value: u32) -> io::Result<()> {
    setsockopt(fd, level, name, &[value])
}

pub fn getsockopt_int(fd: &OwnedFd, level: c_int, name: c_int) -> io::Result<c_int> {
    let mut v: c_int = 0;
    let mut len = size_of::<c_int>() as socklen_t;
    // SAFETY: v and len are valid for writing.
    check(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            &mut v as *mut c_int as *mut c_void,
            &mut len,
        )
    })?;
    Ok(v)
}

/// A socket option read into a plain C struct (TCP_INFO...); a kernel
/// that fills less leaves the rest zero.
pub fn getsockopt_struct<T: Copy>(fd: &OwnedFd, level: c_int, name: c_int) -> io::Result<T> {
    // SAFETY: the options read this way are plain C structs, valid zeroed.
    let mut v: T = unsafe { std::mem::zeroed() };
    let mut len = size_of::<T>() as socklen_t;
    // SAFETY: v and len are valid for writing, len bytes at most.
    check(unsafe { libc::getsockopt(fd.as_raw_fd(), level, name, &mut v as *mut T as *mut c_void, &mut len) })?;
    Ok(v)
}

fn sockaddr_in(a: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*a.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

pub fn bind(fd: &OwnedFd, addr: SocketAddrV4) -> io::Result<()> {
    let sa = sockaddr_in(addr);
    // SAFETY: sa is a valid sockaddr_in of the length given.
    check(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &sa as *const libc::sockaddr_in as *const libc::sockaddr,
            size_of::<libc::sockaddr_in>() as socklen_t,
        )
    })?;
    Ok(())
}

/// connect(); in repair mode the kernel sends no SYN and puts the socket
/// straight into ESTABLISHED.
pub fn connect(fd: &OwnedFd, addr: SocketAddrV4) -> io::Result<()> {
    let sa = sockaddr_in(addr);
    // SAFETY: sa is a valid sockaddr_in of the length given.
    check(unsafe {
        libc::connect(
            fd.as_raw_fd(),
            &sa as *const libc::sockaddr_in as *const libc::sockaddr,
            size_of::<libc::sockaddr_in>() as socklen_t,
        )
    })?;
    Ok(())
}

/// One send() call; returns the bytes the kernel took.
pub fn send(fd: &OwnedFd, buf: &[u8], flags: c_int) -> io::Result<usize> {
    // SAFETY: buf is readable for its length.
    let n = unsafe {
        libc::send(
            fd.as_raw_fd(),
            buf.as_ptr() as *const c_void,
            buf.len(),
            flags,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Sends one whole IPv4 packet (its own header included) from a raw
/// socket of the calling thread's network namespace, addressed to `dst`:
/// to an address of the namespace, it goes through the loopback to that
/// address's sockets as if it had arrived (the kernel fills in the IP
/// header's checksum and id; the source address is not checked).
pub fn send_ipv4(packet: &[u8], dst: Ipv4Addr) -> io::Result<()> {
    // SAFETY: plain syscall; the descriptor is fresh and ours.
    let fd = check(unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::IPPROTO_RAW) })?;
    // SAFETY: fd was just returned by socket().
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let sa = sockaddr_in(SocketAddrV4::new(dst, 0));
    // SAFETY: packet is readable for its length; sa is a valid sockaddr_in.
    let n = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            packet.as_ptr() as *const c_void,
            packet.len(),
            0,
            &sa as *const libc::sockaddr_in as *const libc::sockaddr,
            size_of::<libc::sockaddr_in>() as socklen_t,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// shutdown(how): SHUT_RD, SHUT_WR or SHUT_RDWR.
pub fn shutdown(fd: &OwnedFd, how: c_int) -> io::Result<()> {
    // SAFETY: plain syscall on an fd we own.
    check(unsafe { libc::shutdown(fd.as_raw_fd(), how) })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uapi_layouts_and_values_match_the_kernel_headers() {
        assert_eq!(size_of::<TcpRepairOpt>(), 8);
        assert_eq!(size_of::<TcpRepairWindow>(), 20);
        // the ones the libc crate does define must agree
        assert_eq!(TCP_REPAIR, libc::TCP_REPAIR);
        assert_eq!(TCP_REPAIR_QUEUE, libc::TCP_REPAIR_QUEUE);
        assert_eq!(TCP_QUEUE_SEQ, libc::TCP_QUEUE_SEQ);
        assert_eq!(TCP_REPAIR_OPTIONS, libc::TCP_REPAIR_OPTIONS);
        assert_eq!(TCP_REPAIR_WINDOW, libc::TCP_REPAIR_WINDOW);
    }
}
