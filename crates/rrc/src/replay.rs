//! `rrc restore --replay LOG` (issue 13 §4): the log is checked before
//! anything runs (every batch's checksums, its order, a cut for the image
//! restored), handed to rrc-restore, and the replay is then watched until
//! every thread went live together, or it diverged (the library's report
//! names the thread, the event, what was expected and what happened).

use std::fs::File;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rrc_container::Container;
use rrc_control::ReplayState;
use rrc_image::rrlog::{EventKind, LogError, LogReader};
use rrc_image::ImageId;

/// A log fit to replay from one image.
pub struct CheckedLog {
    pub file: File,
    /// Where the log ends inside its last batch (a recording cut short):
    /// what precedes it is replayed.
    pub partial_tail: Option<String>,
}

/// Reads the whole log (refusing by name what is corrupt, out of order or
/// of another version) and finds the cut of `image` (and of `to`, a later
/// one, if given).
pub fn check(path: &Path, image: &ImageId, to: Option<&ImageId>) -> Result<CheckedLog> {
    let name = path.display().to_string();
    let f = File::open(path).with_context(|| format!("--replay {name}"))?;
    let mut rd = LogReader::open(std::io::BufReader::new(&f), &name)?;
    let mut cut_seq: Option<u64> = None;
    let mut to_seq: Option<u64> = None;
    let mut cuts_seen = Vec::new();
    let mut partial_tail = None;
    loop {
        let b = match rd.next_batch() {
            Ok(Some(b)) => b,
            Ok(None) => break,
            Err(e @ LogError::Truncated { .. }) => {
                partial_tail = Some(e.to_string());
                break;
            }
            Err(e) => return Err(e.into()),
        };
        for e in b.events.iter().filter(|e| e.kind == EventKind::Cut) {
            let c = rrc_image::rrlog::Cut::decode(&e.data).map_err(anyhow::Error::msg)?;
            cuts_seen.push(c.image_id.to_string());
            if c.image_id == *image {
                cut_seq = Some(c.sequence);
            }
            if Some(&c.image_id) == to {
                to_seq = Some(c.sequence);
            }
        }
    }
    let Some(cut_seq) = cut_seq else {
        bail!(
            "{name}: no cut for image {image} (the log's cuts: {}): the log was not recorded across this checkpoint",
            if cuts_seen.is_empty() { "none".to_string() } else { cuts_seen.join(", ") }
        );
    };
    if let Some(to) = to {
        match to_seq {
            None => bail!("{name}: no cut for image {to} (--replay-to): the log was not recorded across that checkpoint"),
            Some(s) if s <= cut_seq => bail!("--replay-to: image {to} (sequence {s}) is not after the restored image (sequence {cut_seq})"),
            Some(_) => {}
        }
    }
    Ok(CheckedLog { file: f, partial_tail })
}

/// Polls the restored library until the replay is live or diverged
/// (rrc_launch::watch_replay).
pub fn watch(c: &Container, wait: Duration) -> Result<ReplayState> {
    rrc_launch::watch_replay(&c.control_socket(), wait)
}
