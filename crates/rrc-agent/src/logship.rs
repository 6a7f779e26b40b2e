//! The backup's end of an rr-mode log session (issue 14 §2, §3; RRC §4.5):
//! a second authenticated connection from the primary's agent, opened by
//! a [`LogStream`] frame and then carrying the service's record log as
//! sealed frames written by its process's library (runtime/lib/rr-sink.c)
//! with no agent on the way. Every frame's MAC and every batch are checked
//! ([`SealedLog`], `LogReader`) before the batch reaches the service's
//! [`crate::shipped_log::ShippedLog`]; the first thing wrong ends the
//! session, says why in `rrc status`, and keeps what came before.
//!
//! Refused (counted like any refused peer): a log session from a host
//! that is not the service's primary, for a service this agent is not the
//! backup of, or opened twice.

use std::sync::Arc;

use rrc_image::rrlog::LogReader;
use rrc_wire::logstream::SealedLog;
use rrc_wire::msg::LogStream;
use rrc_wire::{Frame, Rejection};

use crate::marked_outputs::MarkedOutputs;
use crate::peer::PeerConn;
use crate::{lock, Agent};

pub fn serve(agent: &Arc<Agent>, conn: PeerConn, first: Frame, from: &str) {
    let peer = conn.session.peer_host.clone();
    let refuse = |why: String| agent.security.reject(Rejection::UnexpectedFrame, from, why);
    let ls: LogStream = match first.parse() {
        Ok(l) => l,
        Err(e) => return refuse(format!("{peer}'s log session: {e}")),
    };
    let Some(backup) = agent.backup(&ls.service) else {
        return refuse(format!("{peer} opened a log session for {:?}, which this host is not the backup of", ls.service));
    };
    if backup.spec.primary != peer {
        return refuse(format!("{peer} opened a log session for {:?}, whose primary is {}", ls.service, backup.spec.primary));
    }
    let Some(log) = backup.shipped_log() else {
        return refuse(format!("{peer} opened a log session for {:?}, which runs in {} mode", ls.service, backup.spec.mode.as_str()));
    };
    {
        let mut l = lock(log);
        if l.session_open() {
            drop(l);
            return refuse(format!("{peer} opened a second log session for {:?}", ls.service));
        }
        l.session_started();
    }
    // the library writes when it has something: no read timeout; the
    // backup's halt (stop, failover) shuts the socket down instead
    let attached = conn.ctl.try_clone().map(|c| backup.attach_log_session(c));
    match (attached, conn.set_read_timeout(None)) {
        (Ok(true), Ok(())) => {}
        (Ok(false), _) => return,
        (Err(e), _) | (_, Err(e)) => {
            lock(log).broken(format!("log session: {e}"));
            return;
        }
    }
    tracing::info!(service = %ls.service, %peer, "log session opened");
    // rr mode: a reply goes out as soon as the log that reproduces it is
    // here (the gate checks it against the packets); a failover replays
    // the log up to there (failover.rs)
    if let Err(e) = backup.gate().set_log_release(true) {
        tracing::warn!(service = %ls.service, "turning the gate's release on the log on: {e}");
    }
    let name = format!("{}'s record log", ls.service);
    let mut marks = MarkedOutputs::new();
    let ended = match LogReader::open(SealedLog::from_frames(conn.reader), &name) {
        Ok(mut rd) => {
            // a failover's replay log begins with it (shipped_log.rs)
            lock(log).set_header(*rd.header());
            loop {
                match rd.next_batch() {
                    Ok(Some(b)) => {
                        // the outputs a mark covers go to the gate at once: a
                        // reply waits there for them (RRC §4.5)
                        let covered = marks.batch(&b);
                        if !covered.is_empty() {
                            if let Err(e) = backup.gate().logged(&covered) {
                                tracing::warn!(service = %ls.service, "telling the gate what the log covers: {e}");
                            }
                        }
                        let mut l = lock(log);
                        l.push(b);
                        l.outputs(covered.len() as u64, marks.waiting() as u64, marks.dropped);
                    }
                    Ok(None) => break None,
                    Err(e) => break Some(e.to_string()),
                }
                if backup.is_stopping() {
                    break None;
                }
            }
        }
        Err(e) => Some(e.to_string()),
    };
    let mut l = lock(log);
    match ended {
        Some(why) => {
            tracing::warn!(service = %ls.service, "log session: {why}");
            l.broken(why);
        }
        None => l.session_ended(),
    }
}
