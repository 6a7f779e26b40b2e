//! The repair sequence: builds one established socket from a `RepairSpec`
//! (NiLiCon §V-E, RRC §4.4; the order of operations follows CRIU's
//! soccr/soccr.c `libsoccr_restore` and criu/sk-tcp.c).
//!
//! 1. socket(), TCP_REPAIR on (also lets bind() share the port with the
//!    service's listener: the kernel forces address reuse in repair mode);
//! 2. both queue sequence numbers (TCP_REPAIR_QUEUE + TCP_QUEUE_SEQ; only
//!    allowed while the socket is closed);
//! 3. bind(local), TCP_MAXSEG = the peer's MSS, connect(remote): no SYN,
//!    straight to ESTABLISHED (and the MSS computed from that clamp);
//! 4. TCP_REPAIR_OPTIONS (MSS, window scales, SACK, timestamps; the kernel
//!    takes them only before anything was sent) and TCP_TIMESTAMP;
//! 5. the receive queue (TCP_REPAIR_QUEUE = RECV, then send() in a loop);
//! 6. TCP_REPAIR_WINDOW;
//! 7. TCP_REPAIR off: the kernel sends a window probe at once (>= 4.14),
//!    which the client answers with an ACK carrying its window and
//!    acknowledgment: the connection resumes without waiting for a timer;
//! 8. the write queue, sent as ordinary data (see below);
//! 9. FINs (docs/tcp-repair.md "FINs"): a client FIN after the receive
//!    queue as shutdown(SHUT_RD) before leaving repair mode (a repair
//!    queue takes no FIN; reads then return EOF where they would have), a
//!    server FIN after the write queue as shutdown(SHUT_WR) once it is
//!    sent (the same FIN at the same sequence number).
//!
//! The write queue holds bytes that were transmitted once but are not
//! acknowledged. Put into the send queue in repair mode (as CRIU does),
//! they count as in flight and go out again only when a retransmission
//! timer fires (a fresh socket has no RTT sample) or when later data draws
//! SACKs from the client; the window probe's answer is no duplicate ACK.
//! Measured on 6.18 with this crate's end-to-end test and the application
//! silent for 3 s: nothing reached the client for those 3 s. Sent after
//! leaving repair mode, from snd_una, they are the same bytes at the same
//! sequence numbers and reach the client within ~2 ms; a client
//! that already had some of them drops the duplicates and acknowledges.

use std::io;
use std::os::fd::OwnedFd;
use std::time::Instant;

use libc::c_int;

use crate::error::RepairError;
use crate::spec::RepairSpec;
use crate::sys::{self, TcpRepairOpt, TcpRepairWindow};

/// Largest single send() while filling a queue. The kernel takes what it
/// can (tcp_send_rcvq builds one skb per call) and returns a short count.
const MAX_CHUNK: usize = 1 << 20;
/// The smallest TCP_MAXSEG the kernel accepts.
const TCP_MIN_MSS: u16 = 88;
/// Below this, halving the chunk further will not help.
const MIN_CHUNK: usize = 1024;

/// Rebuilds the connection of `spec` in the calling thread's network
/// namespace and returns the live socket (blocking, close-on-exec). On
/// error nothing reached the network: a socket still in repair mode is
/// closed silently (no FIN, no RST).
pub fn repair(spec: &RepairSpec) -> Result<OwnedFd, RepairError> {
    let started = Instant::now();
    let err = |step: &str| {
        let step = step.to_string();
        move |source: io::Error| RepairError::Sys {
            local: spec.local,
            remote: spec.remote,
            step,
            source,
        }
    };
    let sol_tcp = libc::SOL_TCP;

    let fd = sys::tcp_socket().map_err(err("creating the socket"))?;
    sys::setsockopt_int(&fd, sol_tcp, sys::TCP_REPAIR, sys::TCP_REPAIR_ON).map_err(err(
        "TCP_REPAIR on (needs CAP_NET_ADMIN in the socket's network namespace)",
    ))?;

    // 2. Queue sequence numbers, while the socket is still closed.
    set_queue_seq(&fd, sys::TCP_RECV_QUEUE, spec.recv_seq)
        .map_err(err("TCP_QUEUE_SEQ of the receive queue"))?;
    set_queue_seq(&fd, sys::TCP_SEND_QUEUE, spec.send_seq)
        .map_err(err("TCP_QUEUE_SEQ of the send queue"))?;

    // 3. Addresses. connect() computes the socket's MSS once, from the
    //    MSS clamp it has then (536 by default); TCP_REPAIR_OPTIONS changes
    //    the clamp later but does not recompute it, and the socket would
    //    send 524-byte segments for good. A TCP_MAXSEG set before connect()
    //    becomes the clamp it computes with; it is cleared afterwards so it
    //    does not also clamp what we advertise.
    sys::bind(&fd, spec.local).map_err(err(&format!(
        "binding {} (is the address in this network namespace?)",
        spec.local
    )))?;
    sys::setsockopt_int(
        &fd,
        sol_tcp,
        libc::TCP_MAXSEG,
        c_int::from(spec.mss.max(TCP_MIN_MSS)),
    )
    .map_err(err(&format!("TCP_MAXSEG {}", spec.mss)))?;
    sys::connect(&fd, spec.remote).map_err(err(&format!(
        "connecting to {} in repair mode",
        spec.remote
    )))?;
    sys::setsockopt_int(&fd, sol_tcp, libc::TCP_MAXSEG, 0).map_err(err("clearing TCP_MAXSEG"))?;

    // 4. Options, then our timestamp clock.
    let opts = repair_options(spec);
    sys::setsockopt(&fd, sol_tcp, sys::TCP_REPAIR_OPTIONS, &opts)
        .map_err(err("TCP_REPAIR_OPTIONS"))?;
    if let Some(ts) = spec.timestamps {
        sys::setsockopt_u32(
            &fd,
            sol_tcp,
            sys::TCP_TIMESTAMP,
            timestamp_value(ts.our_last_tsval),
        )
        .map_err(err("TCP_TIMESTAMP"))?;
    }

    // 5. The receive queue.
    if !spec.recv_queue.is_empty() {
        sys::setsockopt_int(&fd, sol_tcp, sys::TCP_REPAIR_QUEUE, sys::TCP_RECV_QUEUE)
            .map_err(err("TCP_REPAIR_QUEUE = receive"))?;
        fill(&fd, &spec.recv_queue, 0, libc::SO_RCVBUFFORCE).map_err(err(&format!(
            "filling the receive queue ({} bytes)",
            spec.recv_queue.len()
        )))?;
    }
    sys::setsockopt_int(&fd, sol_tcp, sys::TCP_REPAIR_QUEUE, sys::TCP_NO_QUEUE)
        .map_err(err("TCP_REPAIR_QUEUE = none"))?;
    //    The client's FIN after it: a repair queue takes bytes, not a FIN,
    //    so the socket stops reading there instead (sends nothing; reads
    //    return the queue, then 0, as after the FIN).
    if spec.fin_received {
        sys::shutdown(&fd, libc::SHUT_RD).map_err(err("shutdown(SHUT_RD) for the client's FIN"))?;
    }

    // 6. Windows.
    let window = repair_window(spec);
    sys::setsockopt(&fd, sol_tcp, sys::TCP_REPAIR_WINDOW, &[window])
        .map_err(err(&format!("TCP_REPAIR_WINDOW {window:?}")))?;

    // 7. Live: the kernel sends a window probe now. A connection its
    //    client has ended gets its FIN as sent and no probe: nothing goes
    //    out.
    if spec.quiet {
        if spec.fin_sent {
            sys::setsockopt_int(&fd, sol_tcp, sys::TCP_REPAIR_QUEUE, sys::TCP_SEND_QUEUE)
                .map_err(err("TCP_REPAIR_QUEUE = send"))?;
            sys::shutdown(&fd, libc::SHUT_WR).map_err(err("shutdown(SHUT_WR) in repair mode"))?;
            sys::setsockopt_int(&fd, sol_tcp, sys::TCP_REPAIR_QUEUE, sys::TCP_NO_QUEUE)
                .map_err(err("TCP_REPAIR_QUEUE = none"))?;
        }
        sys::setsockopt_int(&fd, sol_tcp, sys::TCP_REPAIR, sys::TCP_REPAIR_OFF_NO_WP)
            .map_err(err("TCP_REPAIR off, no window probe"))?;
    } else {
        sys::setsockopt_int(&fd, sol_tcp, sys::TCP_REPAIR, sys::TCP_REPAIR_OFF)
            .map_err(err("TCP_REPAIR off"))?;
    }

    // 8. The unacknowledged bytes, transmitted at once.
    if !spec.write_queue.is_empty() {
        if let Err(e) = fill(
            &fd,
            &spec.write_queue,
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            libc::SO_SNDBUFFORCE,
        ) {
            // Back into repair mode so that closing sends neither FIN nor RST.
            let _ = sys::setsockopt_int(&fd, sol_tcp, sys::TCP_REPAIR, sys::TCP_REPAIR_ON);
            return Err(err(&format!(
                "sending the write queue ({} bytes)",
                spec.write_queue.len()
            ))(e));
        }
    }

    // 9. The server's FIN after it, as the checkpoint's application had
    //    shut down: sent now, at the same sequence number (a client that
    //    has it acknowledges it again).
    if spec.fin_sent && !spec.quiet {
        if let Err(e) = sys::shutdown(&fd, libc::SHUT_WR) {
            let _ = sys::setsockopt_int(&fd, sol_tcp, sys::TCP_REPAIR, sys::TCP_REPAIR_ON);
            return Err(err("shutdown(SHUT_WR) for the server's FIN")(e));
        }
    }

    tracing::info!(
        local = %spec.local,
        remote = %spec.remote,
        send_seq = spec.send_seq,
        write_queue = spec.write_queue.len(),
        recv_seq = spec.recv_seq,
        recv_queue = spec.recv_queue.len(),
        fin_sent = spec.fin_sent,
        fin_received = spec.fin_received,
        quiet = spec.quiet,
        micros = started.elapsed().as_micros() as u64,
        "TCP connection repaired"
    );
    Ok(fd)
}

fn set_queue_seq(fd: &OwnedFd, queue: c_int, seq: u32) -> io::Result<()> {
    sys::setsockopt_int(fd, libc::SOL_TCP, sys::TCP_REPAIR_QUEUE, queue)?;
    sys::setsockopt_u32(fd, libc::SOL_TCP, sys::TCP_QUEUE_SEQ, seq)
}

/// The TCP_REPAIR_OPTIONS array: MSS always; window scales (peer's in the
/// low 16 bits, ours in the high), SACK and timestamps when negotiated.
pub fn repair_options(spec: &RepairSpec) -> Vec<TcpRepairOpt> {
    let mut v = vec![TcpRepairOpt {
        opt_code: sys::TCPOPT_MSS,
        opt_val: u32::from(spec.mss),
    }];
    if let (Some(snd), Some(rcv)) = (spec.snd_wscale, spec.rcv_wscale) {
        let (snd, rcv) = (snd.min(sys::TCP_MAX_WSCALE), rcv.min(sys::TCP_MAX_WSCALE));
        v.push(TcpRepairOpt {
            opt_code: sys::TCPOPT_WINDOW,
            opt_val: u32::from(snd) | (u32::from(rcv) << 16),
        });
    }
    if spec.sack {
        v.push(TcpRepairOpt {
            opt_code: sys::TCPOPT_SACK_PERM,
            opt_val: 0,
        });
    }
    if spec.timestamps.is_some() {
        v.push(TcpRepairOpt {
            opt_code: sys::TCPOPT_TIMESTAMP,
            opt_val: 0,
        });
    }
    v
}

/// The TCP_TIMESTAMP value that makes our next TSval at least
/// `our_last_tsval + 1`: the kernel sets tsoffset = value - now. Its low bit
/// selects microsecond timestamps (kernel >= 6.7), so it is kept clear:
/// millisecond TSvals as Linux uses by default.
pub fn timestamp_value(our_last_tsval: u32) -> u32 {
    our_last_tsval.wrapping_add(2) & !1
}

/// TCP_REPAIR_WINDOW: the peer's window as last advertised, ours from
/// rcv_nxt. snd_wl1 (the sequence number of the segment that last updated
/// the send window) is the read point, older than any segment to come, so
/// the client's next segment updates the window (the kernel's window probe
/// on leaving repair mode sets it to rcv_nxt - 1 for the same reason).
/// max_window bounds the MSS by half of it: never below 64 KiB - 1 so a
/// momentarily small peer window does not shrink our segments.
pub fn repair_window(spec: &RepairSpec) -> TcpRepairWindow {
    TcpRepairWindow {
        snd_wl1: spec.recv_seq,
        snd_wnd: spec.snd_wnd,
        max_window: spec.snd_wnd.max(u32::from(u16::MAX)),
        rcv_wnd: spec.rcv_wnd,
        rcv_wup: spec.rcv_nxt(),
    }
}

/// send()s all of `data`, in chunks the kernel accepts: a short count
/// continues with the rest; a refusal (no memory, buffer full) first grows
/// the socket buffer once (`force_opt`: SO_RCVBUFFORCE / SO_SNDBUFFORCE,
/// CAP_NET_ADMIN) to hold all of it, then halves the chunk down to
/// MIN_CHUNK (a large linear allocation may fail where a small one works).
fn fill(fd: &OwnedFd, data: &[u8], flags: c_int, force_opt: c_int) -> io::Result<()> {
    let mut off = 0;
    let mut chunk = data.len().min(MAX_CHUNK);
    let mut grown = false;
    while off < data.len() {
        let n = chunk.min(data.len() - off);
        let refused = match sys::send(fd, &data[off..off + n], flags) {
            Ok(0) => None,
            Ok(k) => {
                off += k;
                continue;
            }
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENOMEM | libc::ENOBUFS | libc::EAGAIN)
                ) =>
            {
                Some(e)
            }
            Err(e) => return Err(e),
        };
        if !grown {
            grown = true;
            let want = (data.len() - off)
                .saturating_mul(2)
                .saturating_add(1 << 16)
                .min(i32::MAX as usize / 2);
            let level = libc::SOL_SOCKET;
            let current = if force_opt == libc::SO_RCVBUFFORCE {
                libc::SO_RCVBUF
            } else {
                libc::SO_SNDBUF
            };
            let have = sys::getsockopt_int(fd, level, current)? as usize;
            tracing::debug!(
                have,
                want = have + want,
                "growing the socket buffer to fill a repaired queue"
            );
            sys::setsockopt_int(fd, level, force_opt, (have + want) as c_int)?;
        } else if chunk > MIN_CHUNK {
            chunk /= 2;
        } else {
            return Err(refused.unwrap_or_else(|| {
                io::Error::new(io::ErrorKind::WriteZero, "the kernel took no bytes")
            }));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::TsSpec;
    use std::net::{Ipv4Addr, SocketAddrV4};

    fn spec() -> RepairSpec {
        RepairSpec {
            local: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 1),
            remote: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 2),
            send_seq: 100,
            write_queue: vec![0; 10],
            recv_seq: u32::MAX - 3,
            recv_queue: vec![0; 10],
            mss: 1460,
            snd_wscale: Some(7),
            rcv_wscale: Some(20),
            sack: true,
            timestamps: Some(TsSpec {
                our_last_tsval: 7,
                peer_last_tsval: 0,
            }),
            snd_wnd: 1 << 20,
            rcv_wnd: 5000,
            fin_sent: false,
            fin_received: false,
            quiet: false,
        }
    }

    #[test]
    fn options_window_and_timestamp() {
        let s = spec();
        let o = repair_options(&s);
        assert_eq!(
            o[0],
            TcpRepairOpt {
                opt_code: 2,
                opt_val: 1460
            }
        );
        assert_eq!(
            o[1],
            TcpRepairOpt {
                opt_code: 3,
                opt_val: 7 | (14 << 16)
            },
            "scale clamped to 14"
        );
        assert_eq!((o[2].opt_code, o[3].opt_code, o.len()), (4, 8, 4));
        let w = repair_window(&s);
        assert_eq!(
            w,
            TcpRepairWindow {
                snd_wl1: u32::MAX - 3,
                snd_wnd: 1 << 20,
                max_window: 1 << 20,
                rcv_wnd: 5000,
                rcv_wup: 6
            }
        );
        assert_eq!(timestamp_value(7), 8);
        assert_eq!(timestamp_value(8), 10);
        assert_eq!(timestamp_value(u32::MAX), 0);
        assert_eq!(timestamp_value(u32::MAX - 1), 0);
    }
}
