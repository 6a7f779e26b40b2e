//! The backup's intake of checkpoints (issue 14 §7): what the frames of a
//! replication connection decide, apart from the connection, the store
//! and the locks, in the shape of rrc-gate's GateCore. `backup.rs` reads
//! a frame, hands it here, and carries out the [`Step`] it gets back;
//! the unit tests below drive every decision without a lab.
//!
//! A checkpoint arrives as CheckpointBegin, CheckpointData*, CheckpointEnd
//! (docs/protocol.md); DataDirInit frames before a Begin carry
//! data-directory operations that belong to the next checkpoint. A
//! checkpoint is queued for the committer only whole: its end names the
//! epoch, the size and the CRC32C of what arrived. Everything else is a
//! rejection the primary hears about (an Ack with `committed: false`, so
//! it sends a full checkpoint next), or, for what no primary following the
//! protocol sends, the end of the replication. A rejected checkpoint's
//! content goes with it: the primary sends the operations of rejected
//! checkpoints again ahead of every checkpoint until one commits
//! (epochs.rs, `Plan::carried`), so keeping them here would apply them
//! twice.

use rrc_wire::msg::{CheckpointBegin, CheckpointEnd};

/// A checkpoint received whole, waiting for the committer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub begin: CheckpointBegin,
    pub image: Vec<u8>,
    /// Data-directory operations sent ahead of this checkpoint (initial
    /// content, or those of a rejected checkpoint): applied, in order,
    /// before the checkpoint's own, and only if it commits.
    pub carried: Vec<Vec<u8>>,
}

/// What the backup does with a frame.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing to do yet (a checkpoint in progress, content held).
    Continue,
    /// Tell the primary this epoch is not committed, and why.
    Reject { epoch: u64, why: String },
    /// A whole checkpoint, for the committer's queue.
    Queue(Received),
    /// Worth a line in the log, nothing else.
    Ignore(String),
    /// The primary broke the protocol in a way that leaves nothing to
    /// resynchronise on: end the replication, keep the committed state.
    End(String),
}

/// The bounds a backup holds a primary to.
#[derive(Debug, Clone, Copy)]
pub struct IntakeLimits {
    /// The largest checkpoint announced (the backup's memory).
    pub max_checkpoint_bytes: u64,
    /// Data-directory content held ahead of a checkpoint.
    pub max_carried_bytes: usize,
    /// Checkpoints waiting for the committer.
    pub max_pending: usize,
}

/// One replication connection's intake.
#[derive(Debug)]
pub struct Intake {
    limits: IntakeLimits,
    current: Option<Received>,
    carried: Vec<Vec<u8>>,
}

impl Intake {
    pub fn new(limits: IntakeLimits) -> Intake {
        Intake { limits, current: None, carried: Vec::new() }
    }

    /// A CheckpointBegin. A checkpoint still open is given up with a
    /// rejection of its own: the primary waits for each epoch's ack.
    pub fn begin(&mut self, b: CheckpointBegin) -> Vec<Step> {
        let mut steps = Vec::new();
        if let Some(open) = self.current.take() {
            steps.push(Step::Reject { epoch: open.begin.epoch, why: format!("epoch {} began before this one ended", b.epoch) });
        }
        if b.bytes > self.limits.max_checkpoint_bytes {
            // refused at once, so that the primary hears why; its data
            // frames are then ignored, its content goes with it
            self.carried.clear();
            steps.push(Step::Reject {
                epoch: b.epoch,
                why: format!("a checkpoint of {} bytes announced; this backup holds at most {} (its memory)", b.bytes, self.limits.max_checkpoint_bytes),
            });
            return steps;
        }
        // memory follows the data that arrives, not the announcement (a
        // peer's number)
        let reserve = (b.bytes as usize).min(64 << 20);
        self.current = Some(Received { image: Vec::with_capacity(reserve), begin: b, carried: std::mem::take(&mut self.carried) });
        steps.push(Step::Continue);
        steps
    }

    /// A CheckpointData frame's payload.
    pub fn data(&mut self, payload: &[u8]) -> Step {
        let Some(r) = self.current.as_mut() else { return Step::Ignore("checkpoint data outside a checkpoint; ignored".into()) };
        if (r.image.len() + payload.len()) as u64 > r.begin.bytes {
            let r = self.current.take().expect("checked above");
            return Step::Reject { epoch: r.begin.epoch, why: format!("checkpoint data beyond the {} bytes announced", r.begin.bytes) };
        }
        r.image.extend_from_slice(payload);
        Step::Continue
    }

    /// A CheckpointEnd; `pending` is how many checkpoints wait for the
    /// committer now.
    pub fn end(&mut self, end: CheckpointEnd, pending: usize) -> Step {
        let Some(r) = self.current.take() else { return Step::Ignore(format!("the end of epoch {} outside a checkpoint; ignored", end.epoch)) };
        let whole = r.begin.epoch == end.epoch && r.image.len() as u64 == end.bytes && crc32c::crc32c(&r.image) == end.crc32c;
        if !whole {
            let why = format!("checkpoint stream incomplete or damaged ({} of {} bytes, epoch {} vs {})", r.image.len(), end.bytes, r.begin.epoch, end.epoch);
            return Step::Reject { epoch: end.epoch, why };
        }
        if pending >= self.limits.max_pending {
            return Step::Reject { epoch: end.epoch, why: format!("{pending} checkpoints already wait to be committed") };
        }
        Step::Queue(r)
    }

    /// A DataDirInit frame's payload: held for the next checkpoint.
    pub fn data_dir(&mut self, payload: Vec<u8>) -> Step {
        let held: usize = self.carried.iter().map(Vec::len).sum();
        if held + payload.len() > self.limits.max_carried_bytes {
            return Step::End(format!("the primary sent more data-directory content than the backup holds ({} bytes ahead of a checkpoint)", self.limits.max_carried_bytes));
        }
        self.carried.push(payload);
        Step::Continue
    }

    /// A frame that parsed as none of its kind: the checkpoint in progress
    /// cannot end whole any more.
    pub fn malformed(&mut self, why: String) -> Step {
        match self.current.take() {
            Some(r) => Step::Reject { epoch: r.begin.epoch, why },
            None => Step::Ignore(why),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: IntakeLimits = IntakeLimits { max_checkpoint_bytes: 1000, max_carried_bytes: 100, max_pending: 2 };

    fn begin(epoch: u64, bytes: u64) -> CheckpointBegin {
        CheckpointBegin { epoch, image_id: "00".repeat(16), full: false, bytes, arrival_bound: 0, pause_us: 0 }
    }

    fn end_of(epoch: u64, image: &[u8]) -> CheckpointEnd {
        CheckpointEnd { epoch, bytes: image.len() as u64, crc32c: crc32c::crc32c(image) }
    }

    fn rejected(s: &Step) -> (u64, &str) {
        match s {
            Step::Reject { epoch, why } => (*epoch, why.as_str()),
            other => panic!("expected a rejection, got {other:?}"),
        }
    }

    #[test]
    fn a_whole_checkpoint_is_queued_with_the_content_sent_ahead_of_it() {
        let mut i = Intake::new(LIMITS);
        assert_eq!(i.data_dir(b"ops".to_vec()), Step::Continue);
        assert_eq!(i.begin(begin(1, 6)), vec![Step::Continue]);
        assert_eq!(i.data(b"abc"), Step::Continue);
        assert_eq!(i.data(b"def"), Step::Continue);
        match i.end(end_of(1, b"abcdef"), 0) {
            Step::Queue(r) => {
                assert_eq!(r.image, b"abcdef");
                assert_eq!(r.carried, vec![b"ops".to_vec()]);
            }
            other => panic!("{other:?}"),
        }
        // the content went with it: the next checkpoint carries none
        i.begin(begin(2, 1));
        i.data(b"x");
        match i.end(end_of(2, b"x"), 0) {
            Step::Queue(r) => assert!(r.carried.is_empty()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_damaged_checkpoint_is_rejected_with_the_content_sent_ahead_of_it() {
        for (end, want) in [
            (CheckpointEnd { epoch: 1, bytes: 3, crc32c: crc32c::crc32c(b"abd") }, "damaged"),
            (CheckpointEnd { epoch: 1, bytes: 4, crc32c: crc32c::crc32c(b"abc") }, "3 of 4 bytes"),
            (CheckpointEnd { epoch: 2, bytes: 3, crc32c: crc32c::crc32c(b"abc") }, "epoch 1 vs 2"),
        ] {
            let mut i = Intake::new(LIMITS);
            i.data_dir(b"ops".to_vec());
            i.begin(begin(1, 3));
            i.data(b"abc");
            let s = i.end(end, 0);
            assert!(rejected(&s).1.contains(want), "{s:?} lacks {want:?}");
            i.begin(begin(3, 1));
            i.data(b"y");
            match i.end(end_of(3, b"y"), 0) {
                Step::Queue(r) => assert!(r.carried.is_empty(), "the primary sends a rejected checkpoint's content again: it must not be applied twice"),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn an_announcement_beyond_memory_is_refused_and_its_data_ignored() {
        let mut i = Intake::new(LIMITS);
        i.data_dir(b"ops".to_vec());
        let s = i.begin(begin(4, 1001));
        assert_eq!(s.len(), 1);
        assert_eq!(rejected(&s[0]).0, 4);
        assert!(rejected(&s[0]).1.contains("at most 1000"));
        assert!(matches!(i.data(b"zz"), Step::Ignore(_)));
        assert!(matches!(i.end(end_of(4, b"zz"), 0), Step::Ignore(_)));
        i.begin(begin(5, 1));
        i.data(b"y");
        match i.end(end_of(5, b"y"), 0) {
            Step::Queue(r) => assert!(r.carried.is_empty()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn data_beyond_the_announcement_is_refused() {
        let mut i = Intake::new(LIMITS);
        i.begin(begin(5, 4));
        assert_eq!(i.data(b"abc"), Step::Continue);
        let s = i.data(b"de");
        assert_eq!(rejected(&s), (5, "checkpoint data beyond the 4 bytes announced"));
        assert!(matches!(i.end(end_of(5, b"abcde"), 0), Step::Ignore(_)), "nothing of it is queued");
    }

    #[test]
    fn a_checkpoint_left_open_is_rejected_when_the_next_begins() {
        let mut i = Intake::new(LIMITS);
        i.begin(begin(6, 10));
        i.data(b"abc");
        let s = i.begin(begin(7, 1));
        assert_eq!(s.len(), 2);
        assert_eq!(rejected(&s[0]), (6, "epoch 7 began before this one ended"));
        assert_eq!(s[1], Step::Continue);
        i.data(b"q");
        assert!(matches!(i.end(end_of(7, b"q"), 0), Step::Queue(_)));
    }

    #[test]
    fn a_full_queue_refuses_the_next_checkpoint() {
        let mut i = Intake::new(LIMITS);
        i.begin(begin(8, 1));
        i.data(b"a");
        let s = i.end(end_of(8, b"a"), 2);
        assert_eq!(rejected(&s), (8, "2 checkpoints already wait to be committed"));
    }

    #[test]
    fn too_much_content_ahead_of_a_checkpoint_ends_the_replication() {
        let mut i = Intake::new(LIMITS);
        assert_eq!(i.data_dir(vec![0; 60]), Step::Continue);
        assert!(matches!(i.data_dir(vec![0; 41]), Step::End(_)));
    }

    #[test]
    fn a_malformed_frame_rejects_the_checkpoint_in_progress() {
        let mut i = Intake::new(LIMITS);
        assert!(matches!(i.malformed("bad begin".into()), Step::Ignore(_)));
        i.begin(begin(9, 3));
        i.data(b"ab");
        assert_eq!(rejected(&i.malformed("bad end".into())), (9, "bad end"));
    }
}
