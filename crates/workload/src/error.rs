//! Errors that point at the file, the line and what was expected.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadError {
    pub file: String,
    /// 1-based line number, if the problem is on a line.
    pub line: Option<u64>,
    pub message: String,
}

impl WorkloadError {
    pub fn at(file: &str, line: u64, message: impl Into<String>) -> Self {
        WorkloadError {
            file: file.to_string(),
            line: Some(line),
            message: message.into(),
        }
    }
    pub fn file(file: &str, message: impl Into<String>) -> Self {
        WorkloadError {
            file: file.to_string(),
            line: None,
            message: message.into(),
        }
    }
}

impl fmt::Display for WorkloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{}: {}", self.file, l, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

impl std::error::Error for WorkloadError {}
