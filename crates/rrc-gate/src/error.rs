//! The gate's errors: each names what it was doing.

#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
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
