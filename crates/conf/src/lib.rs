//! Helpers shared by tiervisor's TOML files (simulator scenarios, server configs): sizes
//! written with units, and errors that say `file:line: what was expected`.

mod log;
pub mod sched;
mod size;
mod switch;
pub mod system;
mod tiering;
pub mod volume;

use std::fmt;
use std::ops::Range;

pub use log::LogToml;
use serde::Deserialize;
pub use size::parse_size;
pub use switch::Switch;
pub use tiering::TieringToml;
pub use toml::Spanned;

/// A size as written: a number of bytes or a string with a unit (`"4k"`, `"1g"`).
#[derive(Deserialize, Debug, Clone)]
#[serde(untagged)]
pub enum SizeVal {
    Int(u64),
    Str(String),
}

/// An error at a place in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfError {
    pub file: String,
    pub line: Option<u64>,
    pub message: String,
}

impl ConfError {
    pub fn at(file: &str, line: u64, message: impl Into<String>) -> Self {
        ConfError {
            file: file.to_string(),
            line: Some(line),
            message: message.into(),
        }
    }
    pub fn file(file: &str, message: impl Into<String>) -> Self {
        ConfError {
            file: file.to_string(),
            line: None,
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{}: {}", self.file, l, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

impl std::error::Error for ConfError {}

/// A file being parsed: turns byte spans into line numbers.
pub struct Source<'a> {
    pub file: &'a str,
    pub text: &'a str,
}

impl<'a> Source<'a> {
    pub fn new(file: &'a str, text: &'a str) -> Self {
        Source { file, text }
    }

    pub fn line_of(&self, offset: usize) -> u64 {
        self.text[..offset.min(self.text.len())]
            .bytes()
            .filter(|&b| b == b'\n')
            .count() as u64
            + 1
    }

    pub fn error(&self, span: Range<usize>, message: impl Into<String>) -> ConfError {
        ConfError {
            file: self.file.to_string(),
            line: Some(self.line_of(span.start)),
            message: message.into(),
        }
    }

    pub fn err<T>(&self, span: Range<usize>, message: impl Into<String>) -> Result<T, ConfError> {
        Err(self.error(span, message))
    }

    /// Deserialize the whole file, reporting syntax and unknown-key errors at their line.
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T, ConfError> {
        toml::from_str(self.text).map_err(|e| ConfError {
            file: self.file.to_string(),
            line: Some(e.span().map_or(1, |s| self.line_of(s.start))),
            message: e.message().replace('\n', " "),
        })
    }

    /// A size field, with its line on error.
    pub fn size(&self, v: &Spanned<SizeVal>, what: &str) -> Result<u64, ConfError> {
        match v.get_ref() {
            SizeVal::Int(n) => Ok(*n),
            SizeVal::Str(s) => {
                parse_size(s).map_err(|e| self.error(v.span(), format!("{what}: {e}")))
            }
        }
    }
}
