//! Path-cost probe (bench/path_costs.py, config `routed_gate_xdp_out`): the
//! gate's own AF_XDP output path with nothing held: the XDP program on
//! IN_IF takes the packets from SERVICE_IP, the reader copies each out of
//! its frame (as the gate does), readies it as the gate does (TTL,
//! checksums) and transmits it on OUT_IF to CLIENT_MAC by the gate's
//! AF_XDP transmit socket, in batches. What that path costs before the
//! gate decides anything.
//!
//!   xdp_passthrough IN_IF OUT_IF SERVICE_IP CLIENT_MAC
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;

use rrc_gate::ipsend::prepare;
use rrc_gate::xdp::XdpRedirect;
use rrc_gate::xsk::{XskRx, XskTx};

fn ifindex(name: &str) -> u32 {
    rrc_gate::netif::index(name).unwrap_or_else(|e| panic!("interface {name}: {e}"))
}

fn main() {
    let usage = "usage: xdp_passthrough IN_IF OUT_IF SERVICE_IP CLIENT_MAC";
    let args: Vec<String> = std::env::args().collect();
    assert_eq!(args.len(), 5, "{usage}");
    let (inx, outx) = (ifindex(&args[1]), ifindex(&args[2]));
    let svc: Ipv4Addr = args[3].parse().expect(usage);
    let mac: Vec<u8> = args[4].split(':').map(|h| u8::from_str_radix(h, 16).expect(usage)).collect();
    let mac: [u8; 6] = mac.try_into().expect(usage);
    let mut tx = XskTx::open(outx).expect("the AF_XDP transmit socket");
    let redirect = XdpRedirect::attach(inx, svc, tx.max_frame(), 1).expect("attaching the XDP program");
    let rx = XskRx::open(inx, 0).expect("the AF_XDP socket");
    redirect.set_socket(0, rx.as_raw_fd()).expect("the socket map");
    let mut out: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut pfd = libc::pollfd { fd: rx.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one pollfd on the stack.
        unsafe { libc::poll(&mut pfd, 1, -1) };
        while rx.drain(256, |frame| out.push(frame[14..].to_vec())) > 0 {
            for p in &mut out {
                if prepare(p).is_some() && !tx.push(mac, p) {
                    // ring full: let the driver take it, then once more
                    tx.submit();
                    tx.push(mac, p);
                }
            }
            tx.submit();
            out.clear();
        }
    }
}
