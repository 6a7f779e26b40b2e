//! What the backup's record log covers of each stream (rr mode, issue 14;
//! RRC §3, §4.3–4.5): decisions only, no I/O.
//!
//! In rr mode the primary's library sends its log straight to the backup,
//! and each output in it names its connection, where its bytes start on
//! that connection, how many there are and their CRC32C
//! (`rrc_log_output`). Once a release mark says the log holds everything
//! that happened before an output (RRC's BBSN), the backup hands it here
//! as a [`LoggedOutput`]. A stream then knows up to which server offset
//! the log reproduces what the server sent: its *log cover*, which a gate
//! releasing on the log uses as its release cursor next to the commits'.
//!
//! Nothing is taken on trust: an output covers bytes only once the
//! server's own packets with those bytes have reached the gate and their
//! CRC32C is the output's. That check also tells apart two connections of
//! one 4-tuple (a client reconnecting from the same port): a stream binds
//! to the fd-table number (`made`) of the first output it verifies, and
//! outputs of another number are not its own. Outputs wait, per stream in
//! offset order, until the bytes before them are covered (by the log or
//! by a commit) and their own bytes are in; one whose bytes are gone (a
//! commit released them and the client acknowledged them before the log
//! came) or differ is dropped and counted, and the stream falls back to
//! commits until the cover continues.

use std::collections::BTreeMap;
use std::net::SocketAddrV4;

use serde::{Deserialize, Serialize};

use crate::stream::{Cover, Stream};

/// An output the backup's log holds with everything before it (a release
/// mark covers it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoggedOutput {
    pub client: SocketAddrV4,
    pub server: SocketAddrV4,
    /// The fd-table number of the call that made the server's fd.
    pub made: u64,
    /// Server offset of the first byte (bytes the fd had sent before).
    pub offset: u64,
    pub length: u64,
    /// CRC32C of the bytes.
    pub crc: u32,
    /// The program ended its sending here (shutdown or close): no bytes
    /// (`length` 0), the server's FIN at `offset`. It covers the FIN only
    /// once the server's FIN has reached the gate at exactly that offset.
    #[serde(default)]
    pub fin: bool,
}

/// What happened to the outputs handed to the gate (in `GateStats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogCoverStats {
    /// Outputs handed over, and their bytes.
    pub outputs: u64,
    pub output_bytes: u64,
    /// ... naming a connection the gate does not know.
    pub unknown_stream: u64,
    /// Bytes the log covers, verified against the server's packets.
    pub verified_bytes: u64,
    /// FINs the log covers (the program's shutdown or close), each where
    /// the server's FIN is.
    #[serde(default)]
    pub verified_fins: u64,
    /// Outputs whose bytes were not the ones the server sent (the other
    /// connection of a reused 4-tuple, or a fault): dropped.
    pub mismatched: u64,
    /// Outputs of another connection than the one the stream is bound to.
    pub foreign: u64,
    /// Outputs whose bytes the gate no longer holds (released by a commit
    /// and acknowledged before the log came): dropped.
    pub unverifiable: u64,
    /// Packets released because the log covers them (with log release on).
    pub released_packets: u64,
    /// Output bytes a commit had covered before the log came (they needed
    /// no log): with `verified_bytes`, every byte of every output once the
    /// packets are in.
    #[serde(default)]
    pub committed_first_bytes: u64,
}

/// Outputs waiting, per stream, before an output can cover anything.
pub const MAX_PENDING_PER_STREAM: usize = 4096;

/// A stream's log cover.
#[derive(Debug, Default)]
pub struct LogCover {
    /// The connection (fd-table number) this stream's outputs come from,
    /// once one of them is verified.
    pub made: Option<u64>,
    /// Server offset up to which the log covers every byte, verified.
    pub end: u64,
    /// Outputs waiting, by offset.
    pending: BTreeMap<u64, Pending>,
}

/// An output waiting in [`LogCover`]: its end (a FIN's is its offset + 1,
/// the FIN's place in sequence space), CRC32C and connection.
#[derive(Debug, Clone, Copy)]
struct Pending {
    end: u64,
    crc: u32,
    made: u64,
    fin: bool,
}

impl LogCover {
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

/// Notes an output of `s` (its stream's key matched).
pub fn add(s: &mut Stream, o: &LoggedOutput, stats: &mut LogCoverStats) {
    if o.length == 0 && !o.fin {
        return;
    }
    if s.log.pending.len() >= MAX_PENDING_PER_STREAM {
        // a log far ahead of the packets, or outputs that never line up:
        // the oldest goes (the stream falls back to commits)
        s.log.pending.pop_first();
        stats.unverifiable += 1;
    }
    let end = o.offset + if o.fin { 1 } else { o.length };
    s.log.pending.insert(o.offset, Pending { end, crc: o.crc, made: o.made, fin: o.fin });
}

/// Moves the stream's cover over every waiting output it can verify now.
/// The cover continues from wherever commits already released.
pub fn advance(s: &mut Stream, stats: &mut LogCoverStats) {
    loop {
        let committed = s.committed_write.unwrap_or(0);
        let floor = s.log.end.max(committed);
        let Some((&start, &Pending { end, crc, made, fin })) = s.log.pending.first_key_value() else { return };
        if end <= floor {
            s.log.pending.pop_first();
            if !fin {
                stats.committed_first_bytes += end.min(committed).saturating_sub(start.max(s.log.end));
            }
            continue; // covered already
        }
        if start > floor {
            return; // the bytes before it are not covered yet
        }
        if s.log.made.is_some_and(|m| m != made) {
            s.log.pending.pop_first();
            stats.foreign += 1;
            continue;
        }
        if fin {
            // the server's own FIN must stand where the program's
            // shutdown or close left its stream
            match s.server_fin_end {
                // not come yet, unless the server sent bytes past it
                // (another fd of the socket wrote on): then it never will
                None if s.server_highest <= start => return,
                Some(f) if f == end => {
                    s.log.pending.pop_first();
                    stats.verified_fins += 1;
                    s.log.made.get_or_insert(made);
                    s.log.end = end;
                }
                _ => {
                    s.log.pending.pop_first();
                    stats.mismatched += 1;
                    tracing::warn!(client = %s.client, server = %s.server, start, "a FIN in the log is not where the server's FIN is: not released on the log");
                }
            }
            continue;
        }
        let Some(crc_now) = server_crc(s, start, end) else {
            if start < s.server_retained.base() {
                s.log.pending.pop_first();
                stats.unverifiable += 1;
                continue;
            }
            return; // its bytes have not all come yet
        };
        s.log.pending.pop_first();
        if crc_now != crc {
            stats.mismatched += 1;
            tracing::warn!(client = %s.client, server = %s.server, start, end, "an output in the log does not match the bytes the server sent: not released on the log");
            continue;
        }
        stats.verified_bytes += end - floor;
        stats.committed_first_bytes += floor.min(committed).saturating_sub(start.max(s.log.end));
        s.log.made.get_or_insert(made);
        s.log.end = end;
    }
}

/// CRC32C of the server's bytes [from, to), from what was released and
/// is still kept, then the held packets; `None` unless every byte is
/// there.
fn server_crc(s: &Stream, from: u64, to: u64) -> Option<u32> {
    let mut crc = 0u32;
    let mut at = from;
    let kept = s.server_retained.contiguous_end().min(to);
    if at < kept {
        crc = crc32c::crc32c_append(crc, &s.server_retained.range(at, kept)?);
        at = kept;
    }
    // held packets are in arrival order, which a retransmission breaks:
    // look for the one holding `at` until none does
    while at < to {
        let piece = s.held.iter().find_map(|h| match h.cover {
            Cover::Sequence { .. } if h.start <= at && at < h.start + h.payload.len() as u64 => {
                let skip = (at - h.start) as usize;
                let take = (h.payload.len() - skip).min((to - at) as usize);
                Some(&h.payload[skip..skip + take])
            }
            _ => None,
        })?;
        crc = crc32c::crc32c_append(crc, piece);
        at += piece.len() as u64;
    }
    Some(crc)
}

/// The stream's release cursor: the commits', and the log's with log
/// release on.
pub fn release_cursor(s: &Stream, log_release: bool) -> Option<u64> {
    match (s.committed_write, log_release && s.log.end > 0) {
        (c, false) => c,
        (None, true) => Some(s.log.end),
        (Some(c), true) => Some(c.max(s.log.end)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{Commit, Decision};
    use crate::stream::PacketId;
    use crate::testkit::*;

    /// An output of `data` at server offset `offset`, from connection `made`.
    fn out(offset: u64, data: &[u8], made: u64) -> LoggedOutput {
        LoggedOutput { client: cli(), server: srv(), made, offset, length: data.len() as u64, crc: crc32c::crc32c(data), fin: false }
    }

    /// The program's shutdown or close at server offset `offset`.
    fn fin(offset: u64, made: u64) -> LoggedOutput {
        LoggedOutput { client: cli(), server: srv(), made, offset, length: 0, crc: 0, fin: true }
    }

    fn t(log_release: bool) -> T {
        let mut t = T::new();
        t.handshake();
        assert!(t.core.set_log_release(log_release).is_empty());
        t
    }

    fn stats(t: &T) -> LogCoverStats {
        t.core.stats().log
    }

    #[test]
    fn the_log_releases_bytes_it_covers_once_the_packets_bear_them_out() {
        let mut t = t(true);
        let (a, d) = t.s(0, 0, TCP_ACK | TCP_PSH, b"hello");
        assert_eq!(d, Decision::Hold, "no log yet");
        let (b, _) = t.s(5, 0, TCP_ACK | TCP_PSH, b"world");
        assert_eq!(t.core.logged(&[out(0, b"hello", 7)]), vec![a], "what the log covers goes, the rest waits");
        assert_eq!(t.core.logged(&[out(5, b"world", 7)]), vec![b]);
        let st = stats(&t);
        assert_eq!((st.outputs, st.output_bytes, st.verified_bytes, st.released_packets, st.mismatched), (2, 10, 10, 2, 0));
        assert_eq!(t.core.stats().held_packets, 0);
        assert_eq!(t.data().server_unacked, b"helloworld", "released bytes are kept until acknowledged");
    }

    #[test]
    fn without_log_release_the_cover_is_only_counted() {
        let mut t = t(false);
        let (a, _) = t.s(0, 0, TCP_ACK | TCP_PSH, b"hello");
        assert!(t.core.logged(&[out(0, b"hello", 7)]).is_empty());
        assert_eq!(stats(&t).verified_bytes, 5);
        assert_eq!(t.core.stats().held_packets, 1);
        // turned on: what is covered goes at once
        assert_eq!(t.core.set_log_release(true), vec![a]);
    }

    #[test]
    fn a_log_ahead_of_the_packets_waits_for_their_bytes() {
        let mut t = t(true);
        assert!(t.core.logged(&[out(0, b"hello world", 7)]).is_empty());
        let (a, d) = t.s(0, 0, TCP_ACK, b"hello");
        assert_eq!(d, Decision::Hold);
        assert!(t.core.take_released().is_empty(), "half the output's bytes are in");
        let (b, d) = t.s(5, 0, TCP_ACK | TCP_PSH, b" world");
        assert_eq!(d, Decision::Hold);
        assert_eq!(t.core.take_released(), vec![a, b], "both go, in order, once the bytes verify");
        assert_eq!(t.core.stats().packets_released, 2);
        // a later retransmission of covered bytes passes at once
        assert_eq!(t.s(5, 0, TCP_ACK, b" world").1, Decision::Accept);
    }

    #[test]
    fn outputs_wait_for_the_ones_before_them() {
        let mut t = t(true);
        let (a, _) = t.s(0, 0, TCP_ACK, b"abc");
        let (b, _) = t.s(3, 0, TCP_ACK, b"def");
        assert!(t.core.logged(&[out(3, b"def", 7)]).is_empty(), "bytes 0..3 are not covered yet");
        assert_eq!(t.core.logged(&[out(0, b"abc", 7)]), vec![a, b]);
    }

    #[test]
    fn bytes_that_differ_are_not_released_and_commits_still_are() {
        let mut t = t(true);
        let (a, _) = t.s(0, 0, TCP_ACK, b"hello");
        assert!(t.core.logged(&[out(0, b"HELLO", 7)]).is_empty());
        assert_eq!(stats(&t).mismatched, 1);
        assert_eq!(t.commit(1, 0, 5, 0), vec![a], "the commit releases them as in checkpoint mode");
        // and the cover continues from the commit's cursor
        let (b, _) = t.s(5, 0, TCP_ACK, b"!");
        assert_eq!(t.core.logged(&[out(5, b"!", 7)]), vec![b]);
    }

    #[test]
    fn another_connection_of_the_4_tuple_is_not_this_streams() {
        let mut t = t(true);
        let (a, _) = t.s(0, 0, TCP_ACK, b"+OK\r\n");
        assert_eq!(t.core.logged(&[out(0, b"+OK\r\n", 7)]), vec![a]);
        let (b, _) = t.s(5, 0, TCP_ACK, b"+OK\r\n");
        // the same bytes at the same place, from connection 9: not ours
        assert!(t.core.logged(&[out(5, b"+OK\r\n", 9)]).is_empty());
        assert_eq!(stats(&t).foreign, 1);
        assert_eq!(t.core.logged(&[out(5, b"+OK\r\n", 7)]), vec![b]);
    }

    #[test]
    fn outputs_a_commit_released_and_the_client_acknowledged_are_skipped() {
        let mut t = t(true);
        t.s(0, 0, TCP_ACK, b"hello");
        assert_eq!(t.commit(1, 0, 5, 0).len(), 1);
        t.c(0, 5, TCP_ACK, b""); // acknowledged: the gate keeps the bytes no more
        // late log: covered already by the commit, counted as such
        assert!(t.core.logged(&[out(0, b"hello", 7)]).is_empty());
        assert_eq!((stats(&t).verified_bytes, stats(&t).committed_first_bytes), (0, 5));
        let (b, _) = t.s(5, 0, TCP_ACK, b"world");
        // an output that starts below what the gate still has cannot be
        // verified: dropped, counted, the next one waits for a commit
        assert!(t.core.logged(&[out(3, b"loworld", 7)]).is_empty());
        assert_eq!(stats(&t).unverifiable, 1);
        assert_eq!(t.commit(2, 0, 10, 0), vec![b]);
        // a commit covering the first half of an output before its log:
        // half committed first, half verified
        let (c, _) = t.s(10, 0, TCP_ACK, b"abcd");
        t.commit(3, 0, 12, 0);
        assert_eq!(t.core.logged(&[out(10, b"abcd", 7)]), vec![c]);
        assert_eq!((stats(&t).verified_bytes, stats(&t).committed_first_bytes), (2, 7));
    }

    #[test]
    fn a_fin_the_log_does_not_name_waits_for_a_commit() {
        let mut t = t(true);
        let (a, _) = t.s(0, 0, TCP_ACK | TCP_FIN, b"bye");
        assert!(t.core.logged(&[out(0, b"bye", 7)]).is_empty(), "the FIN's place is no output's");
        assert_eq!(stats(&t).verified_bytes, 3);
        assert_eq!(t.commit(1, 0, 4, 0), vec![a]);
    }

    #[test]
    fn a_fin_the_log_names_goes_with_the_bytes_before_it() {
        let mut t = t(true);
        let (a, _) = t.s(0, 0, TCP_ACK | TCP_PSH, b"bye");
        let (f, _) = t.s(3, 0, TCP_ACK | TCP_FIN, b"");
        assert_eq!(t.core.logged(&[out(0, b"bye", 7)]), vec![a]);
        assert_eq!(t.core.logged(&[fin(3, 7)]), vec![f], "the program's close covers the FIN");
        assert!(t.snap().server_fin_released);
        assert_eq!((stats(&t).verified_fins, stats(&t).verified_bytes), (1, 3));
        // data and FIN in one segment, the log's FIN ahead of the packet
        let mut t = self::t(true);
        assert!(t.core.logged(&[out(0, b"bye", 7), fin(3, 7)]).is_empty());
        let (b, d) = t.s(0, 0, TCP_ACK | TCP_FIN, b"bye");
        assert_eq!(d, Decision::Hold);
        assert_eq!(t.core.take_released(), vec![b]);
    }

    #[test]
    fn a_fin_elsewhere_than_the_log_says_waits_for_a_commit() {
        let mut t = t(true);
        // the program closed after 3 bytes, the server's FIN came after 5
        // (another fd of the socket wrote on): not this close's FIN
        let (a, _) = t.s(0, 0, TCP_ACK, b"bye!!");
        let (f, _) = t.s(5, 0, TCP_ACK | TCP_FIN, b"");
        assert_eq!(t.core.logged(&[out(0, b"bye", 7), fin(3, 7)]), vec![], "bytes 3..5 are no output's");
        assert_eq!(t.core.logged(&[out(3, b"!!", 7)]), vec![a]);
        assert_eq!(stats(&t).mismatched, 1, "the FIN at 3 is not the server's at 5");
        assert_eq!(t.commit(1, 0, 6, 0), vec![f]);
        // the same before the server's FIN came: its bytes past 3 say the
        // FIN will not be there, and the outputs after it are not held up
        let mut t = self::t(true);
        let (a, _) = t.s(0, 0, TCP_ACK, b"bye");
        let (b, _) = t.s(3, 0, TCP_ACK, b"!!");
        assert_eq!(t.core.logged(&[out(0, b"bye", 7), fin(3, 7)]), vec![a]);
        assert_eq!(stats(&t).mismatched, 1);
        assert_eq!(t.core.logged(&[out(3, b"!!", 7)]), vec![b]);
        // nor does a FIN of another connection of the 4-tuple... count:
        // a FIN without the bytes before it covered waits
        let mut t = self::t(true);
        let (g, _) = t.s(0, 0, TCP_ACK | TCP_FIN, b"abc");
        assert!(t.core.logged(&[fin(3, 7)]).is_empty(), "bytes 0..3 not covered");
        assert_eq!(t.core.logged(&[out(0, b"abc", 7)]), vec![g]);
    }

    #[test]
    fn a_stream_finished_on_the_log_is_kept_until_a_commit_covers_it() {
        let mut t = t(true);
        let (a, _) = t.s(0, 0, TCP_ACK | TCP_PSH | TCP_FIN, b"+OK\r\n");
        assert_eq!(t.core.logged(&[out(0, b"+OK\r\n", 7), fin(5, 7)]), vec![a]);
        // the client acknowledges, closes, and the server acknowledges:
        // finished, but the failover's replay still needs its record
        t.c(0, 6, TCP_ACK | TCP_FIN, b"");
        t.s(6, 1, TCP_ACK, b"");
        let snap = t.snap();
        assert!(snap.server_fin_released && snap.client_fin_rel.is_some());
        assert_eq!(t.core.stats().streams, 1);
        // a commit of a checkpoint taken before the release keeps it
        t.commit(1, a.0 - 1, 0, 0);
        assert_eq!(t.core.stats().streams, 1);
        // one taken after it (its arrival bound past the release) does not
        t.core.commit(Commit { epoch: 2, arrival_bound: t.core.arrival_counter(), streams: vec![] });
        assert_eq!(t.core.stats().streams, 0);
    }

    #[test]
    fn a_client_reset_after_a_reply_released_on_the_log_waits_for_a_commit() {
        let mut t = t(true);
        let (a, _) = t.s(0, 0, TCP_ACK | TCP_PSH, b"+OK\r\n");
        assert_eq!(t.core.logged(&[out(0, b"+OK\r\n", 7)]), vec![a]);
        t.c(0, 5, TCP_RST | TCP_ACK, b"");
        assert!(t.snap().reset, "kept: the reply acknowledged a write the replay must redo");
        t.core.commit(Commit { epoch: 1, arrival_bound: t.core.arrival_counter(), streams: vec![] });
        assert_eq!(t.core.stats().streams, 0);
    }

    #[test]
    fn outputs_to_unknown_streams_are_counted() {
        let mut t = t(true);
        let mut o = out(0, b"x", 7);
        o.client.set_port(1);
        assert!(t.core.logged(&[o]).is_empty());
        assert_eq!(stats(&t).unknown_stream, 1);
    }

    #[test]
    fn with_releasing_stopped_the_log_releases_nothing() {
        let mut t = t(true);
        let (a, _) = t.s(0, 0, TCP_ACK, b"abc");
        assert!(t.core.set_release_enabled(false).is_empty());
        assert!(t.core.logged(&[out(0, b"abc", 7)]).is_empty());
        let released: Vec<PacketId> = t.core.set_release_enabled(true);
        assert!(released.is_empty(), "set_release_enabled applies commits only");
        assert_eq!(t.core.set_log_release(true), vec![a]);
    }
}
