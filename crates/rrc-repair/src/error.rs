//! Why a connection could not be repaired.

use std::net::SocketAddrV4;

/// A connection state this crate cannot rebuild yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsupported {
    /// The gate never saw the handshake (it started mid-connection): no
    /// ISNs, no SYN options, no recorded client bytes.
    NoIsns,
    /// The client's FIN lies past a hole in the gate's recording (or
    /// bytes were recorded past it): the receive queue cannot end in it.
    ClientFin,
    /// An RST went out or came in: the connection is gone.
    Reset,
    /// The checkpoint's socket is in no state a connection is rebuilt from
    /// (ESTABLISHED, or half-closed or closing: kernel state number).
    State(u8),
    /// The checkpoint's socket carries no sequence values (no `TCP_F_SEQ`).
    NoSequence,
    /// Only IPv4 connections are recorded by the gate.
    NotIpv4,
}

impl std::fmt::Display for Unsupported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unsupported::NoIsns => write!(
                f,
                "the gate never saw the handshake (started mid-connection): no ISNs"
            ),
            Unsupported::ClientFin => write!(f, "the client's FIN does not follow the gate's contiguous recording"),
            Unsupported::Reset => write!(f, "the connection was reset"),
            Unsupported::State(s) => write!(
                f,
                "the checkpoint's socket is in state {} ({s}), not ESTABLISHED, half-closed or closing",
                rrc_image::sections::tcp_state_name(*s).unwrap_or("unknown")
            ),
            Unsupported::NoSequence => write!(
                f,
                "the checkpoint's TCP table entry has no sequence values (no TCP_F_SEQ)"
            ),
            Unsupported::NotIpv4 => write!(f, "not an IPv4 connection"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RepairError {
    #[error("{client} -> {server}: cannot repair: {reason} (not supported yet)")]
    Unsupported {
        client: SocketAddrV4,
        server: SocketAddrV4,
        reason: Unsupported,
    },

    /// The checkpoint's application had written bytes the gate never saw go
    /// out (still in the dead primary's send queue): they exist nowhere any
    /// more, so the stream cannot be continued; the caller closes it.
    /// Offsets are relative to server ISN + 1.
    #[error(
        "{client} -> {server}: write queue gap: the checkpoint's application had written up to offset {need}, \
         the gate holds server bytes only up to {have}; bytes [{have}, {need}) were never transmitted and exist nowhere any more"
    )]
    WriteQueueGap {
        client: SocketAddrV4,
        server: SocketAddrV4,
        have: u64,
        need: u64,
    },

    /// The gate's recording of client bytes starts after the point the
    /// checkpoint's application had read to (or ends before it). Offsets
    /// are relative to client ISN + 1.
    #[error(
        "{client} -> {server}: receive queue gap: the checkpoint's application had read up to offset {read}, \
         the gate's contiguous recording covers [{recorded_from}, {recorded_to})"
    )]
    RecordingGap {
        client: SocketAddrV4,
        server: SocketAddrV4,
        read: u64,
        recorded_from: u64,
        recorded_to: u64,
    },

    /// The gate's view and the checkpoint's table contradict each other.
    #[error("{client} -> {server}: the gate and the checkpoint disagree: {what}")]
    Inconsistent {
        client: SocketAddrV4,
        server: SocketAddrV4,
        what: String,
    },

    /// What was to be sent again as a client's SYN is not one.
    #[error("not a client's SYN to send again: {why}")]
    NotASyn { why: String },

    /// A system call of the repair sequence failed.
    #[error("repairing {local} -> {remote}: {step}: {source}")]
    Sys {
        local: SocketAddrV4,
        remote: SocketAddrV4,
        step: String,
        source: std::io::Error,
    },
}
