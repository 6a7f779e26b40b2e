//! Which outputs of the shipped record log the gate may count as covered
//! (rr mode, issue 14; RRC §4.5's PBSN/BBSN): decisions only, no I/O.
//!
//! The log session (`logship.rs`) hands every verified batch here. A
//! thread's outputs to IPv4 TCP connections wait until a release mark
//! (a tid-0 record the primary's log writer adds after each pass that
//! follows outputs) names a position of that thread beyond them: the
//! stream then holds everything that happened before them, so the log
//! reproduces them, and they go to the gate ([`rrc_gate::LoggedOutput`]),
//! which checks their bytes against the server's packets before it
//! counts them.

use std::collections::{HashMap, VecDeque};

use rrc_gate::LoggedOutput;
use rrc_image::rrlog::{Batch, EventKind, Mark, Output, EVF_FIN};

/// Outputs waiting for their mark, per thread at most this many: a log
/// without marks (an older writer, a fault) must not grow this without
/// bound; the oldest go (they wait for a commit instead).
pub const MAX_WAITING_PER_THREAD: usize = 65536;

#[derive(Debug, Default)]
pub struct MarkedOutputs {
    /// Per thread: (event index, the output), in index order.
    waiting: HashMap<u32, VecDeque<(u64, LoggedOutput)>>,
    /// Outputs dropped unreleased (a thread's tid began again, the bound).
    pub dropped: u64,
}

impl MarkedOutputs {
    pub fn new() -> MarkedOutputs {
        MarkedOutputs::default()
    }

    /// A verified batch, in stream order: the outputs it makes covered.
    pub fn batch(&mut self, b: &Batch) -> Vec<LoggedOutput> {
        if b.tid == 0 {
            let mut out = Vec::new();
            for e in b.events.iter().filter(|e| e.kind == EventKind::Mark) {
                if let Ok(m) = Mark::decode(&e.data) {
                    self.mark(&m, &mut out);
                }
            }
            return out;
        }
        if b.first_event == 0 {
            // the kernel gave the tid to a new thread: what the old one
            // left unmarked waits for a commit
            if let Some(old) = self.waiting.remove(&b.tid) {
                self.dropped += old.len() as u64;
            }
        }
        for (i, e) in b.events.iter().enumerate() {
            // bytes that went out, or the program's end of sending (a FIN)
            let fin = e.flags & EVF_FIN != 0;
            if e.kind != EventKind::Output || (e.result <= 0 && !fin) {
                continue;
            }
            let Ok(Output { offset, length, crc, conn: Some(conn), made }) = Output::decode(&e.data) else { continue };
            let w = self.waiting.entry(b.tid).or_default();
            if w.len() >= MAX_WAITING_PER_THREAD {
                w.pop_front();
                self.dropped += 1;
            }
            let o = LoggedOutput { client: conn.peer, server: conn.local, made, offset, length, crc, fin };
            w.push_back((b.first_event + i as u64, o));
        }
        Vec::new()
    }

    fn mark(&mut self, m: &Mark, out: &mut Vec<LoggedOutput>) {
        for &(tid, next) in &m.threads {
            let Some(w) = self.waiting.get_mut(&tid) else { continue };
            while w.front().is_some_and(|&(index, _)| index < next) {
                if let Some((_, o)) = w.pop_front() {
                    out.push(o);
                }
            }
            if w.is_empty() {
                self.waiting.remove(&tid);
            }
        }
    }

    /// Outputs waiting for a mark.
    pub fn waiting(&self) -> usize {
        self.waiting.values().map(VecDeque::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rrc_image::rrlog::{Event, OutputConn};

    fn output(offset: u64, len: u64, made: u64) -> Event {
        let o = Output {
            offset,
            length: len,
            crc: 1,
            conn: Some(OutputConn { local: "198.18.0.100:6379".parse().unwrap(), peer: "10.0.0.1:40000".parse().unwrap() }),
            made,
        };
        Event::new(EventKind::Output, 5, 0, len as i64, o.encode()).returned(1, 1)
    }

    fn other() -> Event {
        Event::new(EventKind::Clock, 1, 0, 0, Vec::new()).returned(1, 1)
    }

    fn batch(tid: u32, first: u64, events: Vec<Event>) -> Batch {
        Batch { tid, batch_seq: 0, first_event: first, events }
    }

    fn mark(number: u64, threads: &[(u32, u64)]) -> Batch {
        let m = Mark { number, threads: threads.to_vec() };
        batch(0, 0, vec![Event::new(EventKind::Mark, 0, 0, 0, m.encode())])
    }

    #[test]
    fn outputs_go_once_a_mark_passes_them() {
        let mut t = MarkedOutputs::new();
        assert!(t.batch(&batch(3, 0, vec![other(), output(0, 5, 7), other(), output(5, 2, 7)])).is_empty());
        let got = t.batch(&mark(1, &[(3, 2)]));
        assert_eq!(got.len(), 1, "the mark covers events 0 and 1");
        assert_eq!((got[0].offset, got[0].length, got[0].made), (0, 5, 7));
        assert_eq!(got[0].client, "10.0.0.1:40000".parse().unwrap());
        assert_eq!(got[0].server, "198.18.0.100:6379".parse().unwrap());
        assert_eq!(t.waiting(), 1);
        assert!(t.batch(&mark(2, &[(4, 9)])).is_empty(), "another thread's mark");
        assert_eq!(t.batch(&mark(3, &[(3, 4)])).len(), 1);
        assert_eq!(t.waiting(), 0);
    }

    #[test]
    fn a_fin_goes_like_an_output() {
        let mut t = MarkedOutputs::new();
        let fin = Event { flags: EVF_FIN, ..output(5, 0, 7) };
        assert!(t.batch(&batch(3, 0, vec![output(0, 5, 7), fin])).is_empty());
        let got = t.batch(&mark(1, &[(3, 2)]));
        assert_eq!(got.len(), 2);
        assert_eq!((got[1].offset, got[1].length, got[1].fin), (5, 0, true));
        assert!(!got[0].fin);
    }

    #[test]
    fn failed_empty_and_unnamed_outputs_are_not_waited_for() {
        let mut t = MarkedOutputs::new();
        let failed = Event::new(EventKind::Output, 5, 0, -11, Output { offset: 0, length: 0, crc: 0, conn: None, made: 0 }.encode()).returned(1, 1);
        let unnamed = Event::new(EventKind::Output, 5, 0, 3, Output { offset: 0, length: 3, crc: 0, conn: None, made: 0 }.encode()).returned(1, 1);
        t.batch(&batch(3, 0, vec![failed, unnamed]));
        assert_eq!(t.waiting(), 0);
    }

    #[test]
    fn a_tid_begun_again_drops_what_its_predecessor_left() {
        let mut t = MarkedOutputs::new();
        t.batch(&batch(3, 0, vec![output(0, 5, 7)]));
        t.batch(&batch(3, 0, vec![other()])); // a new thread, same tid
        assert_eq!((t.waiting(), t.dropped), (0, 1));
        assert!(t.batch(&mark(1, &[(3, 1)])).is_empty(), "its index 0 is the new thread's");
    }

    #[test]
    fn waiting_is_bounded() {
        let mut t = MarkedOutputs::new();
        let evs: Vec<Event> = (0..MAX_WAITING_PER_THREAD as u64 + 3).map(|i| output(i, 1, 7)).collect();
        t.batch(&batch(3, 0, evs));
        assert_eq!((t.waiting(), t.dropped), (MAX_WAITING_PER_THREAD, 3));
    }
}
