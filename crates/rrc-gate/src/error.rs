//! The gate's errors: each names what it was doing.

#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
    /// The AF_XDP output path could not be set up.
    #[error("the AF_XDP output path: {0}")]
    OutputPath(Box<GateError>),
    /// The observed input path could not be set up.
    #[error("the observed input path: {0}")]
    InputPath(Box<GateError>),
    #[error("the gate is shut down")]
    ShutDown,
    #[error("{0}")]
    Other(String),
}

impl GateError {
    /// `map_err(GateError::io("doing X"))`
    pub fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> GateError {
        let context = context.into();
        move |source| GateError::Io { context, source }
    }
}
