//! The primary's epochs (issue 14 §7): which checkpoint comes next and
//! what an ack means for the ones after it, apart from the dumps, the
//! connection and the locks. primary.rs takes the checkpoint a [`Plan`]
//! names, sends it with the data-directory operations the plan carries,
//! waits for its ack ([`take_ack`]) and reports the outcome here.
//!
//! The rules (docs/architecture.md, "Epochs"): the first checkpoint is
//! full, each next one incremental on the last committed; a rejected or
//! failed one is followed by a full one (the backup's chain is not known
//! to hold it). A rejected checkpoint's data-directory operations were
//! dropped from the library's journal when its snapshot was written: they
//! are sent again ahead of every checkpoint until one commits.

use rrc_wire::msg::Ack;

pub type ImageId = [u8; 16];

/// The next checkpoint to take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub epoch: u64,
    /// Incremental on this image; None: full.
    pub parent: Option<ImageId>,
    /// Data-directory operations (FILEOPS payloads) to send ahead of it.
    pub carried: Vec<Vec<u8>>,
}

/// The epochs of one replication.
#[derive(Debug, Default)]
pub struct Epochs {
    epoch: u64,
    parent: Option<ImageId>,
    carried: Vec<Vec<u8>>,
}

impl Epochs {
    pub fn new() -> Epochs {
        Epochs::default()
    }

    pub fn plan_next(&mut self) -> Plan {
        self.epoch += 1;
        Plan { epoch: self.epoch, parent: self.parent, carried: self.carried.clone() }
    }

    /// The backup committed the plan's checkpoint: the next is incremental
    /// on it, and the operations sent ahead of it are in its state now.
    pub fn committed(&mut self, plan: &Plan, image_id: ImageId) {
        self.parent = Some(image_id);
        // operations carried after the plan was made stay for the next
        let n = plan.carried.len().min(self.carried.len());
        self.carried.drain(..n);
    }

    /// The backup rejected it: the next is full, and carries `fileops`
    /// (the rejected checkpoint's own operations) after those already
    /// carried.
    pub fn rejected(&mut self, fileops: Vec<Vec<u8>>) {
        self.parent = None;
        self.carried.extend(fileops);
    }

    /// Taking or sending it failed: the next is full.
    pub fn failed(&mut self) {
        self.parent = None;
    }
}

/// The ack of `epoch` among those received, removed with every older one
/// (acks of checkpoints given up); newer ones stay.
pub fn take_ack(acks: &mut Vec<Ack>, epoch: u64) -> Option<Ack> {
    let i = acks.iter().position(|a| a.epoch == epoch)?;
    let a = acks.remove(i);
    acks.retain(|x| x.epoch > epoch);
    Some(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: ImageId = [1; 16];
    const B: ImageId = [2; 16];

    fn ack(epoch: u64) -> Ack {
        Ack { epoch, committed: true, error: None, arrival: 0, apply_us: 0, new_streams: vec![] }
    }

    #[test]
    fn the_first_checkpoint_is_full_the_next_incremental_on_the_last_committed() {
        let mut e = Epochs::new();
        let p = e.plan_next();
        assert_eq!((p.epoch, p.parent), (1, None));
        e.committed(&p, A);
        let p = e.plan_next();
        assert_eq!((p.epoch, p.parent), (2, Some(A)));
        e.committed(&p, B);
        assert_eq!(e.plan_next().parent, Some(B));
    }

    #[test]
    fn after_a_rejection_or_a_failure_the_next_is_full() {
        let mut e = Epochs::new();
        let p = e.plan_next();
        e.committed(&p, A);
        e.plan_next();
        e.rejected(vec![]);
        assert_eq!(e.plan_next().parent, None);
        let p = e.plan_next();
        e.committed(&p, B);
        e.plan_next();
        e.failed();
        assert_eq!(e.plan_next().parent, None);
    }

    #[test]
    fn a_rejected_checkpoint_s_operations_go_ahead_of_every_next_until_one_commits() {
        let mut e = Epochs::new();
        e.plan_next();
        e.rejected(vec![b"op1".to_vec()]);
        let p2 = e.plan_next();
        assert_eq!(p2.carried, vec![b"op1".to_vec()]);
        e.rejected(vec![b"op2".to_vec()]);
        let p3 = e.plan_next();
        assert_eq!(p3.carried, vec![b"op1".to_vec(), b"op2".to_vec()], "in the order they happened");
        e.failed();
        let p4 = e.plan_next();
        assert_eq!(p4.carried.len(), 2, "a failure drops nothing");
        e.committed(&p4, A);
        assert!(e.plan_next().carried.is_empty());
    }

    #[test]
    fn operations_carried_after_a_plan_was_made_survive_its_commit() {
        let mut e = Epochs::new();
        e.plan_next();
        e.rejected(vec![b"op1".to_vec()]);
        let p = e.plan_next();
        e.rejected(vec![b"op2".to_vec()]);
        e.committed(&p, A);
        assert_eq!(e.plan_next().carried, vec![b"op2".to_vec()]);
    }

    #[test]
    fn an_ack_is_taken_with_the_older_ones_the_newer_stay() {
        let mut acks = vec![ack(3), ack(5), ack(4), ack(7)];
        assert_eq!(take_ack(&mut acks, 5).map(|a| a.epoch), Some(5));
        assert_eq!(acks.iter().map(|a| a.epoch).collect::<Vec<_>>(), vec![7]);
        assert!(take_ack(&mut acks, 6).is_none());
        assert_eq!(acks.len(), 1, "nothing is dropped while the epoch's own ack has not come");
    }
}
