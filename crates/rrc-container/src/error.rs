use std::path::PathBuf;

use crate::init::Stage;

#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    #[error("{what}: {source}")]
    Setup {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("command not found: {command:?} (searched PATH={path})")]
    CommandNotFound { command: String, path: String },
    #[error("network namespace {name:?} not found ({path}): {source}")]
    NetnsNotFound {
        name: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A step of the container start-up failed in a child process.
    #[error("starting the container for {command:?} failed at {}: {}", stage.describe(), std::io::Error::from_raw_os_error(*errno))]
    Start { command: String, stage: Stage, errno: i32 },
    #[error("starting the container for {command:?}: {reason}")]
    Lost { command: String, reason: String },
    #[error("cleaning up container {id}: {what}: {source}")]
    Cleanup {
        id: String,
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cleaning up container {id}: {reason}")]
    CleanupStuck { id: String, reason: String },
    #[error("registry {path}: {reason}")]
    Registry { path: PathBuf, reason: String },
}

pub(crate) fn setup(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ContainerError {
    let what = what.into();
    move |source| ContainerError::Setup { what, source }
}
