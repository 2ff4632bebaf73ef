//! Helpers shared by tiervisor's TOML files (simulator scenarios, server configs): sizes
//! written with units, and errors that say `file:line: what was expected`.

mod log;
pub mod sched;
mod size;
mod switch;
pub mod system;
pub mod throttle;
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
#[derive(Debug, Clone)]
pub enum SizeVal {
    Int(u64),
    Str(String),
}

/// What a size should look like, in errors (not serde's "untagged enum SizeVal").
pub const SIZE_EXPECTED: &str = "a size such as 4096 or \"4k\"";

impl<'de> Deserialize<'de> for SizeVal {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<SizeVal, D::Error> {
        use serde::de::{self, Visitor};
        struct V;
        impl Visitor<'_> for V {
            type Value = SizeVal;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(SIZE_EXPECTED)
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<SizeVal, E> {
                Ok(SizeVal::Int(n))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<SizeVal, E> {
                u64::try_from(n)
                    .map(SizeVal::Int)
                    .map_err(|_| E::invalid_value(de::Unexpected::Signed(n), &self))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<SizeVal, E> {
                Ok(SizeVal::Str(s.to_string()))
            }
        }
        d.deserialize_any(V)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize, Debug)]
    #[allow(dead_code)] // only the error matters
    struct T {
        size: Spanned<SizeVal>,
    }

    /// Issue 15: serde's internal wording leaked into errors.
    #[test]
    fn a_bad_size_says_what_a_size_looks_like() {
        for bad in ["size = 1.5", "size = -4", "size = true", "size = [1]"] {
            let text = format!("# a comment\n{bad}\n");
            let e = Source::new("s.toml", &text).parse::<T>().unwrap_err();
            assert_eq!(e.line, Some(2), "{e}");
            assert!(e.message.contains(SIZE_EXPECTED), "{bad}: {e}");
            assert!(
                !e.message.contains("untagged") && !e.message.contains("SizeVal"),
                "{e}"
            );
        }
        let ok: T = Source::new("s.toml", "size = \"4k\"").parse().unwrap();
        assert!(matches!(ok.size.get_ref(), SizeVal::Str(s) if s == "4k"));
    }
}
