//! The record log a backup keeps in rr mode (issue 14 §3; RRC §4.3): what
//! the primary's library sent since the last committed checkpoint, so that
//! "that checkpoint plus the log after its cut" can re-create the
//! primary's execution. Decisions only, no I/O (the gate's shape): the
//! log session (`logship.rs`) pushes each verified batch, the committer
//! says which checkpoint it committed, and the log before that
//! checkpoint's cut is dropped.
//!
//! A batch is dropped at a commit when its thread is in the checkpoint's
//! cut and all its events come before the thread's position there. A
//! thread the cut does not name either ended before the checkpoint
//! (nothing of it is needed) or was born after it (all of it is); the
//! library writes a cut at its writer's first pass after the pause, so a
//! newborn's first batches may precede the cut in the stream, but never
//! the previous committed checkpoint's cut: such a batch is dropped only
//! when it arrived before that one.

use std::collections::{BTreeMap, VecDeque};

use rrc_image::rrlog::{Batch, Cut, Event, EventKind, LogHeader, Output, Released, BATCH_HEADER_SIZE, EVENT_HEADER_SIZE};
use rrc_image::ImageId;
use rrc_wire::reply::ShippedLogStats;

/// One batch kept, with its place in the stream.
struct Kept {
    batch: Batch,
    bytes: u64,
}

pub struct ShippedLog {
    kept: VecDeque<Kept>,
    /// Cuts seen in the stream and not yet committed, by image, with the
    /// stream position (batch_seq) of the batch that carried them.
    cuts: BTreeMap<[u8; 16], (Cut, u64)>,
    /// The stream position of the last committed checkpoint's cut, and
    /// the cut.
    committed_at: Option<u64>,
    committed_cut: Option<Cut>,
    /// The log's header (its id, the process).
    header: Option<LogHeader>,
    /// A checkpoint committed before its cut arrived: applied when it does.
    awaiting: Option<ImageId>,
    /// A log session was opened (one per service).
    session: bool,
    /// The alter-next-logged-output fault is armed.
    alter_next: bool,
    /// The counters; what is kept and the cuts pending are derived in
    /// [`ShippedLog::stats`].
    stats: ShippedLogStats,
}

/// A batch's size in the log's encoding.
fn encoded_len(b: &Batch) -> u64 {
    BATCH_HEADER_SIZE as u64 + b.events.iter().map(|e| EVENT_HEADER_SIZE as u64 + (e.data.len() as u64).div_ceil(8) * 8).sum::<u64>()
}

impl Default for ShippedLog {
    fn default() -> ShippedLog {
        ShippedLog {
            kept: VecDeque::new(),
            cuts: BTreeMap::new(),
            committed_at: None,
            committed_cut: None,
            header: None,
            awaiting: None,
            session: false,
            alter_next: false,
            stats: ShippedLogStats { state: "waiting for the log session".into(), ..Default::default() },
        }
    }
}

impl ShippedLog {
    pub fn new() -> ShippedLog {
        ShippedLog::default()
    }

    /// A log session is (or was) open: one per service.
    pub fn session_open(&self) -> bool {
        self.session
    }

    /// The log's header, as the session's reader checked it.
    pub fn set_header(&mut self, h: LogHeader) {
        self.header = Some(h);
    }

    pub fn session_started(&mut self) {
        self.session = true;
        self.stats.state = "receiving".into();
    }

    /// The stream ended between two batches (the primary stopped).
    pub fn session_ended(&mut self) {
        self.stats.state = "ended".into();
    }

    /// A batch that arrived (verified by the log's reader).
    pub fn push(&mut self, mut b: Batch) {
        if self.alter_next && alter_output(&mut b) {
            self.alter_next = false;
            self.stats.outputs_altered += 1;
        }
        let bytes = encoded_len(&b);
        self.stats.received_batches += 1;
        self.stats.received_bytes += bytes;
        self.stats.received_events += b.events.len() as u64;
        if b.tid == 0 {
            for e in b.events.iter().filter(|e| e.kind == EventKind::Cut) {
                if let Ok(c) = Cut::decode(&e.data) {
                    self.stats.cuts += 1;
                    let id = c.image_id;
                    self.cuts.insert(c.image_id.0, (c, b.batch_seq));
                    if self.awaiting == Some(id) {
                        self.awaiting = None;
                        self.committed(&id);
                    }
                }
            }
            return; // cuts are kept as cuts, not as batches
        }
        self.kept.push_back(Kept { batch: b, bytes });
    }

    /// The checkpoint of `image` committed: the log before its cut is
    /// dropped, and the cuts of earlier images with it. false if its cut
    /// has not arrived (nothing is dropped: the log may lag the
    /// checkpoint; the next commit trims further).
    pub fn committed(&mut self, image: &ImageId) -> bool {
        let Some((cut, at)) = self.cuts.remove(&image.0) else {
            self.stats.commits_without_cut += 1;
            // the log lags the checkpoint: its cut commits when it comes
            self.awaiting = Some(*image);
            return false;
        };
        self.awaiting = None;
        let pos: BTreeMap<u32, u64> = cut.threads.iter().copied().collect();
        let before = self.kept.len();
        let earlier = self.committed_at;
        self.kept.retain(|k| match pos.get(&k.batch.tid) {
            Some(&next) => k.batch.first_event + k.batch.events.len() as u64 > next,
            // a thread the cut does not name: ended before it, if its batch
            // came before the previous commit's cut (module doc)
            None => earlier.map_or(true, |e| k.batch.batch_seq > e),
        });
        self.committed_at = Some(at);
        self.committed_cut = Some(cut.clone());
        self.stats.trimmed_batches += (before - self.kept.len()) as u64;
        // an earlier image's cut can no longer be committed
        self.cuts.retain(|_, (c, _)| c.sequence > cut.sequence);
        self.stats.last_cut_committed = Some(cut.sequence);
        true
    }

    /// Where the session's release marks stand (`marked_outputs.rs`).
    pub fn outputs(&mut self, marked: u64, waiting: u64, dropped: u64) {
        self.stats.outputs_marked += marked;
        self.stats.outputs_waiting = waiting;
        self.stats.outputs_dropped = dropped;
    }

    /// The stream stopped with this error (the session ends; what was
    /// kept stays).
    pub fn broken(&mut self, why: String) {
        self.stats.state = "broken".into();
        self.stats.last_error = Some(why);
    }

    pub fn stats(&self) -> ShippedLogStats {
        ShippedLogStats {
            cuts_pending: self.cuts.len() as u64,
            kept_batches: self.kept.len() as u64,
            kept_bytes: self.kept.iter().map(|k| k.bytes).sum(),
            ..self.stats.clone()
        }
    }

    /// What a failover replays from the committed checkpoint (RRC §4.4),
    /// as a log the restored library reads (runtime/lib/rr-replay-load.c):
    /// the header, the committed checkpoint's cut, then every batch kept,
    /// numbered again from 0 (a thread's first batch starts where the log
    /// was trimmed, which the loader takes as that thread's base). The
    /// cut names `restored`, the image a failover restores (the store's
    /// committed state under an id of its own). None without a header or
    /// a committed cut (nothing to replay from). It ends with `released`,
    /// what the clients were sent (kind 92): how far the replay goes and
    /// what it does not send again.
    pub fn replay_log(&self, committed: &ImageId, restored: ImageId, released: &Released) -> Option<Vec<u8>> {
        self.log_from(committed, restored, Event::new(EventKind::Released, 0, 0, 0, released.encode()), false)
    }

    /// Fault injection (tests, `alter-first-replay`): the same log with
    /// the CRC32C of its first output to a connection altered, for the
    /// failover's first replay only (which then diverges there; the paced
    /// one after it gets the log as kept).
    pub fn replay_log_altered(&self, committed: &ImageId, restored: ImageId, released: &Released) -> Option<Vec<u8>> {
        self.log_from(committed, restored, Event::new(EventKind::Released, 0, 0, 0, released.encode()), true)
    }

    /// What a shadow replay (`shadow.rs`) runs: the log from the committed
    /// checkpoint's cut (naming `restored`, the image the shadow restores)
    /// to the cut of the later image `to`, which must have arrived (it
    /// ends the log: the replay goes live there, `--replay-to`). None
    /// without both cuts.
    pub fn segment(&self, committed: &ImageId, restored: ImageId, to: &ImageId) -> Option<Vec<u8>> {
        let (end, _) = self.cuts.get(&to.0)?;
        self.log_from(committed, restored, Event::new(EventKind::Cut, 0, 0, 0, end.encode()), false)
    }

    /// The header, the committed cut (naming `restored`), an empty batch
    /// for each thread of the cut that logged nothing since, the batches
    /// kept (with `alter`, the first output to a connection in them with
    /// its CRC32C altered), and `last` in a process-wide batch of its own.
    fn log_from(&self, committed: &ImageId, restored: ImageId, last: Event, mut alter: bool) -> Option<Vec<u8>> {
        let (header, cut) = (self.header.as_ref()?, self.committed_cut.as_ref()?);
        // the log continues the checkpoint the store holds, or nothing
        if cut.image_id != *committed {
            return None;
        }
        let cut = Cut { image_id: restored, ..cut.clone() };
        let mut out = header.encode().to_vec();
        let mut seq = 0..;
        let mut put = |b: Batch| out.extend(Batch { batch_seq: seq.next().unwrap_or_default(), ..b }.encode());
        put(Batch { tid: 0, batch_seq: 0, first_event: 0, events: vec![Event::new(EventKind::Cut, 0, 0, 0, cut.encode())] });
        // a thread of the cut that did nothing since: an empty batch at its
        // position (the loader wants every thread of the cut in the log)
        for &(tid, next) in &cut.threads {
            if next > 0 && !self.kept.iter().any(|k| k.batch.tid == tid) {
                put(Batch { tid, batch_seq: 0, first_event: next, events: Vec::new() });
            }
        }
        for k in &self.kept {
            let mut b = k.batch.clone();
            if alter && alter_output(&mut b) {
                alter = false;
            }
            put(b);
        }
        put(Batch { tid: 0, batch_seq: 0, first_event: 0, events: vec![last] });
        Some(out)
    }

    /// Fault injection (tests): the next output to a connection that
    /// arrives is kept with its CRC32C altered, as a bug of the recording
    /// would leave it (the batch stays well formed).
    pub fn alter_next_output(&mut self) {
        self.alter_next = true;
    }

    /// The batches kept, in stream order.
    pub fn batches(&self) -> impl Iterator<Item = &Batch> {
        self.kept.iter().map(|k| &k.batch)
    }
}

/// Flips a bit of the CRC32C of `b`'s first output to a connection.
fn alter_output(b: &mut Batch) -> bool {
    for e in b.events.iter_mut().filter(|e| e.kind == EventKind::Output) {
        if let Ok(o) = Output::decode(&e.data).map(|o| Output { crc: o.crc ^ 1, ..o }) {
            if o.conn.is_some() {
                e.data = o.encode();
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use rrc_image::rrlog::Event;

    fn batch(tid: u32, seq: u64, first: u64, n: u64) -> Batch {
        Batch { tid, batch_seq: seq, first_event: first, events: (0..n).map(|_| Event::new(EventKind::Clock, 1, 0, 0, Vec::new())).collect() }
    }

    fn cut(id: u8, sequence: u64, seq: u64, threads: &[(u32, u64)]) -> Batch {
        let c = Cut { image_id: ImageId([id; 16]), sequence, threads: threads.to_vec() };
        Batch { tid: 0, batch_seq: seq, first_event: 0, events: vec![Event::new(EventKind::Cut, 0, 0, 0, c.encode())] }
    }

    #[test]
    fn a_commit_drops_what_comes_before_its_cut() {
        let mut l = ShippedLog::new();
        l.push(batch(1, 0, 0, 10));
        l.push(batch(2, 1, 0, 5));
        l.push(cut(9, 1, 2, &[(1, 10), (2, 3)]));
        l.push(batch(1, 3, 10, 4));
        assert_eq!(l.stats().kept_batches, 3);
        assert_eq!(l.stats().cuts, 1);
        assert!(l.committed(&ImageId([9; 16])));
        // thread 1's first batch is all before the cut; thread 2's crosses it
        let kept: Vec<(u32, u64)> = l.batches().map(|b| (b.tid, b.first_event)).collect();
        assert_eq!(kept, vec![(2, 0), (1, 10)]);
        let s = l.stats();
        assert_eq!((s.trimmed_batches, s.kept_batches, s.last_cut_committed, s.cuts_pending), (1, 2, Some(1), 0));
        assert_eq!(s.received_events, 10 + 5 + 1 + 4);
    }

    #[test]
    fn a_commit_whose_cut_has_not_arrived_applies_when_it_does() {
        let mut l = ShippedLog::new();
        l.push(batch(1, 0, 0, 10));
        assert!(!l.committed(&ImageId([9; 16])));
        assert_eq!((l.stats().kept_batches, l.stats().commits_without_cut), (1, 1));
        // the cut comes later: the commit applies then
        l.push(cut(9, 1, 1, &[(1, 10)]));
        assert_eq!((l.stats().kept_batches, l.stats().last_cut_committed), (0, Some(1)));
    }

    #[test]
    fn threads_the_cut_does_not_name() {
        let mut l = ShippedLog::new();
        l.push(batch(5, 0, 0, 3)); // ended before the checkpoint
        l.push(batch(7, 1, 0, 2)); // born after it, drained before its cut
        l.push(cut(9, 1, 2, &[(1, 0)]));
        l.push(batch(6, 3, 0, 3)); // born after it
        assert!(l.committed(&ImageId([9; 16])));
        let kept: Vec<u32> = l.batches().map(|b| b.tid).collect();
        assert_eq!(kept, vec![5, 7, 6], "nothing of an unnamed thread goes at the first commit");
        // the next checkpoint names 6 and 7 (alive); 5 is gone
        l.push(cut(10, 2, 4, &[(6, 0), (7, 0)]));
        assert!(l.committed(&ImageId([10; 16])));
        let kept: Vec<u32> = l.batches().map(|b| b.tid).collect();
        assert_eq!(kept, vec![7, 6]);
    }

    #[test]
    fn earlier_cuts_go_with_a_later_commit() {
        let mut l = ShippedLog::new();
        l.push(cut(1, 1, 0, &[]));
        l.push(cut(2, 2, 1, &[]));
        l.push(cut(3, 3, 2, &[]));
        assert!(l.committed(&ImageId([2; 16])));
        assert_eq!(l.stats().cuts_pending, 1);
        assert!(!l.committed(&ImageId([1; 16])), "an image older than the committed one");
        assert!(l.committed(&ImageId([3; 16])));
    }

    #[test]
    fn the_replay_log_is_the_committed_cut_and_what_follows_numbered_again() {
        let mut l = ShippedLog::new();
        let none = Released { conns: vec![] };
        assert!(l.replay_log(&ImageId([9; 16]), ImageId([4; 16]), &none).is_none(), "no header, no cut");
        let h = LogHeader { log_id: ImageId([3; 16]), created_ns: 5, pid: 1, continues: false };
        l.set_header(h);
        l.push(batch(1, 0, 0, 10));
        l.push(batch(2, 1, 0, 3));
        l.push(cut(9, 1, 2, &[(1, 8), (2, 3)]));
        l.push(batch(1, 3, 10, 4));
        assert!(l.replay_log(&ImageId([9; 16]), ImageId([4; 16]), &none).is_none(), "nothing committed yet");
        assert!(l.committed(&ImageId([9; 16])));
        assert!(l.replay_log(&ImageId([8; 16]), ImageId([4; 16]), &none).is_none(), "the store holds another checkpoint");
        let out = l.replay_log(&ImageId([9; 16]), ImageId([4; 16]), &none).unwrap();
        // the committed image's cut, naming the image restored
        let c = Cut { image_id: ImageId([4; 16]), sequence: 1, threads: vec![(1, 8), (2, 3)] };
        let mut want = h.encode().to_vec();
        want.extend(Batch { tid: 0, batch_seq: 0, first_event: 0, events: vec![Event::new(EventKind::Cut, 0, 0, 0, c.encode())] }.encode());
        // thread 2 did nothing since the cut: an empty batch at its place
        want.extend(batch(2, 1, 3, 0).encode());
        want.extend(batch(1, 2, 0, 10).encode()); // crosses the cut: kept
        want.extend(batch(1, 3, 10, 4).encode());
        // and what the clients were sent, last
        want.extend(Batch { tid: 0, batch_seq: 4, first_event: 0, events: vec![Event::new(EventKind::Released, 0, 0, 0, none.encode())] }.encode());
        assert_eq!(out, want);
        let conn = rrc_image::rrlog::OutputConn { local: "198.18.0.100:6379".parse().unwrap(), peer: "198.18.0.10:4000".parse().unwrap() };
        let some = Released { conns: vec![rrc_image::rrlog::ReleasedConn { conn, released: 1 << 33, fin: false }] };
        let out = l.replay_log(&ImageId([9; 16]), ImageId([4; 16]), &some).unwrap();
        let last = Batch { tid: 0, batch_seq: 4, first_event: 0, events: vec![Event::new(EventKind::Released, 0, 0, 0, some.encode())] }.encode();
        assert!(out.ends_with(&last));
    }

    /// A shadow replay's segment: from the committed cut (renamed) to a
    /// later cut that has arrived, which ends it.
    #[test]
    fn a_segment_runs_from_the_committed_cut_to_a_later_one() {
        let mut l = ShippedLog::new();
        l.set_header(LogHeader { log_id: ImageId([3; 16]), created_ns: 5, pid: 1, continues: false });
        l.push(cut(9, 1, 0, &[(1, 0)]));
        assert!(l.committed(&ImageId([9; 16])));
        l.push(batch(1, 1, 0, 6));
        assert!(l.segment(&ImageId([9; 16]), ImageId([4; 16]), &ImageId([10; 16])).is_none(), "its end has not come");
        l.push(cut(10, 2, 2, &[(1, 6)]));
        assert!(l.segment(&ImageId([8; 16]), ImageId([4; 16]), &ImageId([10; 16])).is_none(), "not from the committed checkpoint");
        let out = l.segment(&ImageId([9; 16]), ImageId([4; 16]), &ImageId([10; 16])).unwrap();
        // the restored image's cut first, the end's last
        let mut want = l.header.unwrap().encode().to_vec();
        want.extend(cut(4, 1, 0, &[(1, 0)]).encode());
        want.extend(batch(1, 1, 0, 6).encode());
        want.extend(cut(10, 2, 2, &[(1, 6)]).encode());
        assert_eq!(out, want);
        // a commit of the end trims what the segment held
        assert!(l.committed(&ImageId([10; 16])));
        assert!(l.segment(&ImageId([9; 16]), ImageId([4; 16]), &ImageId([10; 16])).is_none());
    }

    /// The fault alters the next output to a connection, once; batches
    /// without one pass as they are and leave it armed.
    #[test]
    fn the_fault_alters_the_next_output_to_a_connection_once() {
        use rrc_image::rrlog::OutputConn;
        let conn = OutputConn { local: "198.18.0.100:6379".parse().unwrap(), peer: "198.18.0.10:4000".parse().unwrap() };
        let out = |crc, conn| Event::new(EventKind::Output, 5, 0, 0, Output { offset: 0, length: 4, crc, conn, made: 1 }.encode());
        let crc_of = |l: &ShippedLog, i: usize| l.batches().nth(i).unwrap().events.iter().filter_map(|e| Output::decode(&e.data).ok()).map(|o| o.crc).collect::<Vec<_>>();
        let mut l = ShippedLog::new();
        l.alter_next_output();
        l.push(batch(1, 0, 0, 3));
        l.push(Batch { tid: 1, batch_seq: 1, first_event: 3, events: vec![out(7, None), out(8, Some(conn)), out(9, Some(conn))] });
        l.push(Batch { tid: 1, batch_seq: 2, first_event: 6, events: vec![out(10, Some(conn))] });
        assert_eq!(crc_of(&l, 1), vec![7, 9, 9], "the first to a connection only");
        assert_eq!(crc_of(&l, 2), vec![10], "once");
        assert_eq!(l.stats().outputs_altered, 1);
    }
}
