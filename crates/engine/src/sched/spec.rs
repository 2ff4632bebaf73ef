//! A scheduler described by name and parameters, and typed access to those parameters.

use std::collections::BTreeMap;

use super::api::Scheduler;
pub use super::params::SpecError;
use super::params::{ParamValue, Params};
use super::registry::{lookup, names};

/// Which scheduler a pool runs, and its parameters (kernel defaults apply to keys left
/// out). Parsed once by the configuration layer; [`SchedSpec::build`] checks it.
#[derive(Clone, Debug, PartialEq)]
pub struct SchedSpec {
    pub name: String,
    pub params: BTreeMap<String, ParamValue>,
}

impl Default for SchedSpec {
    fn default() -> Self {
        SchedSpec::named("fifo")
    }
}

impl SchedSpec {
    pub fn named(name: &str) -> SchedSpec {
        SchedSpec {
            name: name.to_string(),
            params: BTreeMap::new(),
        }
    }

    pub fn with(mut self, key: &str, value: ParamValue) -> SchedSpec {
        self.params.insert(key.to_string(), value);
        self
    }

    /// Build the scheduler; unknown names and keys and bad values are errors.
    pub fn build(&self) -> Result<Box<dyn Scheduler>, SpecError> {
        let reg = lookup(&self.name).ok_or_else(|| SpecError {
            key: None,
            message: format!(
                "unknown scheduler {:?}; expected one of: {}",
                self.name,
                names().join(", ")
            ),
        })?;
        let mut p = Params::new(reg.name, &self.params);
        let s = (reg.build)(&mut p).map_err(|message| SpecError {
            key: p.last_key.clone(),
            message,
        })?;
        p.finish()?;
        Ok(s)
    }

    /// The registry's canonical name (aliases resolved), if the name is known.
    pub fn canonical_name(&self) -> Option<&'static str> {
        lookup(&self.name).map(|r| r.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_names_list_the_registry() {
        let e = SchedSpec::named("elevator").build().err().expect("refused");
        assert!(e.message.contains("fifo"), "{}", e.message);
        assert_eq!(e.key, None);
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = SchedSpec::named("fifo")
            .with("quantum", ParamValue::Int(8))
            .build()
            .err()
            .expect("refused");
        assert_eq!(e.key.as_deref(), Some("quantum"));
    }

    #[test]
    fn typed_getters_check_ranges() {
        let map: BTreeMap<String, ParamValue> = [
            ("a".to_string(), ParamValue::Int(5)),
            ("b".to_string(), ParamValue::Float(2.5)),
            ("c".to_string(), ParamValue::Str("x".into())),
        ]
        .into_iter()
        .collect();
        let mut p = Params::new("t", &map);
        assert_eq!(p.u64_in("a", 1, 1..=10), Ok(5));
        assert!(p.u64_in("a", 1, 6..=10).is_err());
        assert_eq!(p.ms_as_ns("b", 1.0, 0.0..=10.0), Ok(2_500_000));
        assert!(p.bool("c", false).is_err());
        assert_eq!(p.u64_in("missing", 7, 1..=10), Ok(7));
        assert!(p.finish().is_ok());
    }
}
