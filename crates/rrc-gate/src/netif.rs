//! What the gate (and the agent) ask of a network interface of the calling
//! thread's namespace: its index, MAC address, MTU and receive queues,
//! by `if_nametoindex` and interface ioctls on a throwaway socket.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The index of interface `name`.
pub fn index(name: &str) -> io::Result<u32> {
    let c = std::ffi::CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in the interface name"))?;
    // SAFETY: a NUL-terminated name.
    match unsafe { libc::if_nametoindex(c.as_ptr()) } {
        0 => Err(io::Error::last_os_error()),
        i => Ok(i),
    }
}

/// `ioctl(request)` with an ifreq naming interface `ifindex`, `set` filling
/// the rest first; the ifreq as the kernel left it.
fn ioctl(ifindex: u32, request: libc::c_ulong, set: impl FnOnce(&mut libc::ifreq)) -> io::Result<libc::ifreq> {
    // SAFETY: zeroed ifreq, filled below.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    // SAFETY: the name buffer is IF_NAMESIZE bytes.
    if unsafe { libc::if_indextoname(ifindex, ifr.ifr_name.as_mut_ptr()) }.is_null() {
        return Err(io::Error::last_os_error());
    }
    set(&mut ifr);
    // SAFETY: plain socket creation.
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh descriptor.
    let s = unsafe { OwnedFd::from_raw_fd(s) };
    // SAFETY: an interface ioctl on our socket; it reads and writes ifr
    // (and, for SIOCETHTOOL, the buffer `set` pointed it at).
    if unsafe { libc::ioctl(s.as_raw_fd(), request, &mut ifr) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(ifr)
}

/// The interface's MAC address.
pub fn mac(ifindex: u32) -> io::Result<[u8; 6]> {
    let ifr = ioctl(ifindex, libc::SIOCGIFHWADDR, |_| {})?;
    // SAFETY: the union's hwaddr member is what SIOCGIFHWADDR set.
    let d = unsafe { ifr.ifr_ifru.ifru_hwaddr.sa_data };
    Ok(std::array::from_fn(|i| d[i] as u8))
}

/// The interface's MTU.
pub fn mtu(ifindex: u32) -> io::Result<u32> {
    let ifr = ioctl(ifindex, libc::SIOCGIFMTU, |_| {})?;
    // SAFETY: the union's mtu member is what SIOCGIFMTU set.
    Ok(unsafe { ifr.ifr_ifru.ifru_mtu }.max(68) as u32)
}

/// The interface's receive queues (ETHTOOL_GCHANNELS: its RX-only and
/// combined channels); 1 when the driver does not say (a queue without a
/// socket still reaches the gate, through NFQUEUE).
pub fn rx_queues(ifindex: u32) -> u32 {
    const ETHTOOL_GCHANNELS: u32 = 0x3c;
    // struct ethtool_channels: cmd, max_rx, max_tx, max_other,
    // max_combined, rx_count, tx_count, other_count, combined_count
    let mut ch = [0u32; 9];
    ch[0] = ETHTOOL_GCHANNELS;
    let at = ch.as_mut_ptr();
    match ioctl(ifindex, libc::SIOCETHTOOL, |ifr| ifr.ifr_ifru.ifru_data = at as *mut libc::c_char) {
        Ok(_) => (ch[5] + ch[8]).max(1),
        Err(_) => 1,
    }
}
