//! Errors of the lab, each naming the step that failed and, for an `ip`
//! command, the command line and its stderr.

#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("{step}: `{command}` exited with {status}: {stderr}")]
    Command { step: String, command: String, status: String, stderr: String },
    #[error("{step}: cannot run `{command}`: {source}")]
    Spawn {
        step: String,
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("a lab is already up; `rrc lab down` first ({found})")]
    AlreadyUp { found: String },
    #[error("no lab is up (no {path}); `rrc lab up` first")]
    NoLab { path: String },
    #[error("unknown host {host:?}: the lab's hosts are {known}")]
    UnknownHost { host: String, known: String },
    #[error("host {host:?} was killed (`rrc lab kill`); it runs nothing until `rrc lab down` and `rrc lab up`")]
    HostKilled { host: String },
    #[error("{path}: {reason}")]
    State { path: String, reason: String },
    #[error("{0}")]
    Other(String),
    /// Several independent steps failed (down and the clean-up after a
    /// failed up go on after an error, then report all of them).
    #[error("{}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; "))]
    Many(Vec<LabError>),
}

pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LabError {
    let what = what.into();
    move |source| LabError::Io { what, source }
}
