//! What can go wrong with views, named so that the agent's messages say it.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum ViewError {
    /// The host has no right to this change in this view.
    #[error("view {view}: {host} may not make this change: {why}")]
    NotAllowed { view: u64, host: String, why: String },
    #[error("service name {0:?} cannot name an etcd key (empty, or holds '/')")]
    BadServiceName(String),
    #[error("etcd configuration: {0}")]
    Config(String),
    /// No endpoint answered (down, partitioned, no quorum, timed out).
    #[error("etcd unreachable: {0}")]
    Unreachable(String),
    #[error("etcd answered {url} with something unreadable: {why}")]
    BadAnswer { url: String, why: String },
    /// The key holds something that is not a view of this version.
    #[error("etcd key {key} does not hold a view rrc can read: {why}")]
    BadRecord { key: String, why: String },
    #[error("encoding a view: {0}")]
    Encode(String),
}
