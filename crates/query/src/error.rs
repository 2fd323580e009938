/// A malformed `query`, `sort`, `fields`, `max` or `offset`; the message names the
/// parameter and what is wrong with it, and is meant to be shown to the client as is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct QueryError {
    pub message: String,
}

impl QueryError {
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}
