//! AWS SDK errors as one readable sentence for the admin commands and the local stack.

/// An SDK error with its whole chain of causes, for a person to read.
pub fn describe(doing: &str, err: impl std::error::Error) -> String {
    format!("{doing}: {}", aws_sdk_dynamodb::error::DisplayErrorContext(err))
}
