//! Failover's TCP repair (DESIGN.md §2.3 "failover"; issue 4 §2): rebuilds
//! each established client connection of a restored service with
//! `TCP_REPAIR`, so that the client carries on over the same connection
//! (NiLiCon §V-E, RRC §4.4). See docs/tcp-repair.md.
//!
//! Layers: `sys` (the uapi constants and the raw socket calls, defined
//! once), `spec` (`RepairSpec`: what one connection needs, and how it is
//! derived from the gate's recording plus the checkpoint's TCP table),
//! `repair` (the sequence of operations that builds the socket), `end`
//! (resetting what cannot be rebuilt, silencing a socket about to close),
//! `syn` (handing the restored service the SYNs the primary never
//! answered).

pub mod end;
pub mod error;
pub mod repair;
pub mod spec;
pub mod syn;
pub mod sys;

pub use crate::end::{reset, silence, Silenced};
pub use crate::error::{RepairError, Unsupported};
pub use crate::repair::repair;
pub use crate::syn::resend_syn;
pub use crate::spec::{seq_cmp, spec_for_replay, spec_from_gate, spec_to_reset, RepairSpec, TsSpec, DEFAULT_RCV_WND};
