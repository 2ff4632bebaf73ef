//! A scheduler's parameters: values as written in a configuration file, and the typed
//! access a scheduler's `build` takes them through (unknown keys are left for the caller
//! to report).

use std::collections::BTreeMap;
use std::fmt;

/// A parameter value as written in a configuration file.
#[derive(Clone, Debug, PartialEq)]
pub enum ParamValue {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
}

impl fmt::Display for ParamValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamValue::Int(i) => write!(f, "{i}"),
            ParamValue::Float(x) => write!(f, "{x}"),
            ParamValue::Bool(b) => write!(f, "{b}"),
            ParamValue::Str(s) => write!(f, "{s:?}"),
        }
    }
}

/// Typed, tracked access to a spec's parameters: each getter marks its key as known, so
/// [`Params::finish`] can report keys no scheduler asked for.
pub struct Params<'a> {
    /// What errors name: "deadline scheduler", "throttle".
    subject: String,
    map: &'a BTreeMap<String, ParamValue>,
    taken: Vec<&'a str>,
    pub(super) last_key: Option<String>,
}

impl<'a> Params<'a> {
    pub fn new(scheduler: &'static str, map: &'a BTreeMap<String, ParamValue>) -> Self {
        Self::for_subject(format!("{scheduler} scheduler"), map)
    }

    /// Parameters of something other than a scheduler (a pool's throttle).
    pub fn for_subject(subject: String, map: &'a BTreeMap<String, ParamValue>) -> Self {
        Params {
            subject,
            map,
            taken: Vec::new(),
            last_key: None,
        }
    }

    fn take(&mut self, key: &str) -> Option<&'a ParamValue> {
        let (k, v) = self.map.get_key_value(key)?;
        self.taken.push(k.as_str());
        self.last_key = Some(k.clone());
        Some(v)
    }

    fn bad(&self, key: &str, expected: &str, v: &ParamValue) -> String {
        format!("{}: {key} = {v}: expected {expected}", self.subject)
    }

    /// An integer in `range`, or `default` when absent.
    pub fn u64_in(
        &mut self,
        key: &str,
        default: u64,
        range: std::ops::RangeInclusive<u64>,
    ) -> Result<u64, String> {
        let Some(v) = self.take(key) else {
            return Ok(default);
        };
        let expected = format!("an integer from {} to {}", range.start(), range.end());
        match v {
            ParamValue::Int(i) if *i >= 0 && range.contains(&(*i as u64)) => Ok(*i as u64),
            _ => Err(self.bad(key, &expected, v)),
        }
    }

    /// A duration in milliseconds (integer or fractional) in `range`, returned in ns.
    pub fn ms_as_ns(
        &mut self,
        key: &str,
        default_ms: f64,
        range_ms: std::ops::RangeInclusive<f64>,
    ) -> Result<u64, String> {
        let x = self.f64_in(key, default_ms, range_ms)?;
        Ok((x * 1e6).round() as u64)
    }

    /// A number in `range`, or `default` when absent.
    pub fn f64_in(
        &mut self,
        key: &str,
        default: f64,
        range: std::ops::RangeInclusive<f64>,
    ) -> Result<f64, String> {
        let Some(v) = self.take(key) else {
            return Ok(default);
        };
        let x = match v {
            ParamValue::Int(i) => *i as f64,
            ParamValue::Float(x) => *x,
            _ => f64::NAN,
        };
        if x.is_finite() && range.contains(&x) {
            Ok(x)
        } else {
            let expected = format!("a number from {} to {}", range.start(), range.end());
            Err(self.bad(key, &expected, v))
        }
    }

    pub fn bool(&mut self, key: &str, default: bool) -> Result<bool, String> {
        match self.take(key) {
            None => Ok(default),
            Some(ParamValue::Bool(b)) => Ok(*b),
            Some(v) => Err(self.bad(key, "true or false", v)),
        }
    }

    pub fn str_of(
        &mut self,
        key: &str,
        default: &'static str,
        allowed: &[&'static str],
    ) -> Result<&'static str, String> {
        let v = match self.take(key) {
            None => return Ok(default),
            Some(v) => v,
        };
        if let ParamValue::Str(s) = v
            && let Some(a) = allowed.iter().find(|a| **a == s.as_str())
        {
            return Ok(a);
        }
        let expected = format!("one of {}", allowed.join(", "));
        Err(self.bad(key, &expected, v))
    }

    /// Every key was asked for by the scheduler; otherwise name the first unknown one.
    pub fn finish(&self) -> Result<(), SpecError> {
        match self.map.keys().find(|k| !self.taken.contains(&k.as_str())) {
            None => Ok(()),
            Some(k) => Err(SpecError {
                key: Some(k.clone()),
                message: format!(
                    "{} has no parameter {k:?}{}",
                    self.subject,
                    if self.taken.is_empty() {
                        String::new()
                    } else {
                        format!("; it takes: {}", self.taken.join(", "))
                    }
                ),
            }),
        }
    }
}

/// Why a spec cannot be built: the key at fault (for the caller's file:line), if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError {
    pub key: Option<String>,
    pub message: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}
