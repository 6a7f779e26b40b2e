//! Path-cost probe (bench/path_costs.sh): binds an NFQUEUE in the calling
//! network namespace and accepts every packet at once, batched as the
//! gate does (recvmmsg, one verdict datagram per batch). What a gate
//! costs before it decides anything.
//!
//!   nfq_passthrough QUEUE_NUM
use rrc_gate::nfqueue::{parse_datagram, Event, NfQueue, QueueOptions, RecvBatch};

fn main() {
    let q: u16 = std::env::args().nth(1).and_then(|a| a.parse().ok()).expect("usage: nfq_passthrough QUEUE_NUM");
    let queue = NfQueue::open(QueueOptions { queue_num: q, max_len: 65536, rcvbuf: 32 << 20 }).expect("binding the queue");
    let mut batch = RecvBatch::new(32);
    let mut ids = Vec::new();
    loop {
        let mut pfd = libc::pollfd { fd: std::os::fd::AsRawFd::as_raw_fd(&queue), events: libc::POLLIN, revents: 0 };
        // SAFETY: one pollfd on the stack.
        unsafe { libc::poll(&mut pfd, 1, -1) };
        loop {
            let got = queue.recv_many(&mut batch).expect("reading the queue");
            if got == 0 {
                break;
            }
            ids.clear();
            for d in batch.datagrams(got) {
                for e in parse_datagram(d) {
                    if let Event::Packet { id, .. } = e {
                        ids.push(id);
                    }
                }
            }
            queue.accept(&ids).expect("verdicts");
        }
    }
}
