//! The `scheduler` key of a pool and the QoS keys of a volume, shared by server
//! configurations and scenarios. A scheduler is written as its name
//! (`scheduler = "deadline"`) or as a table with its parameters
//! (`scheduler = { name = "deadline", fifo_batch = 8 }`); both are parsed once here and
//! checked against the engine's registry, so errors name the file and line.

use tiervisor_engine::VolumeQos;
use tiervisor_engine::sched::{ParamValue, SchedSpec, names};
use toml::Spanned;

use crate::{ConfError, Source};

/// `scheduler = "name"` or `scheduler = { name = "...", key = value, ... }`.
pub fn scheduler(src: &Source, key: Option<&Spanned<toml::Value>>) -> Result<SchedSpec, ConfError> {
    let Some(k) = key else {
        return Ok(SchedSpec::default());
    };
    let expected = || {
        format!(
            "scheduler: expected a name ({}) or a table {{ name = \"...\", <parameter> = ... }}",
            names().join(", ")
        )
    };
    let spec = match k.get_ref() {
        toml::Value::String(s) => SchedSpec::named(s),
        toml::Value::Table(t) => {
            let Some(toml::Value::String(name)) = t.get("name") else {
                return src.err(k.span(), expected());
            };
            let mut spec = SchedSpec::named(name);
            spec.params = param_values(src, k, t, "name", "scheduler")?;
            spec
        }
        _ => return src.err(k.span(), expected()),
    };
    // Build once to check the name, the keys and their values; the engine builds again.
    spec.build().map_err(|e| src.error(k.span(), e.message))?;
    Ok(spec)
}

/// A parameter table's values, without its `skip` key (the name or model).
pub(crate) fn param_values(
    src: &Source,
    k: &Spanned<toml::Value>,
    t: &toml::Table,
    skip: &str,
    what: &str,
) -> Result<std::collections::BTreeMap<String, ParamValue>, ConfError> {
    let mut params = std::collections::BTreeMap::new();
    for (key, v) in t.iter().filter(|(key, _)| *key != skip) {
        let pv = match v {
            toml::Value::Integer(i) => ParamValue::Int(*i),
            toml::Value::Float(x) => ParamValue::Float(*x),
            toml::Value::Boolean(b) => ParamValue::Bool(*b),
            toml::Value::String(s) => ParamValue::Str(s.clone()),
            _ => {
                return src.err(
                    k.span(),
                    format!("{what} parameter {key}: expected a number, boolean or string"),
                );
            }
        };
        params.insert(key.clone(), pv);
    }
    Ok(params)
}

/// A volume's QoS keys as written (`Spanned` cannot be flattened by serde, so each
/// parser keeps the three keys and lends them here).
#[derive(Debug, Default, Clone, Copy)]
pub struct QosKeys<'a> {
    pub reservation_iops: Option<&'a Spanned<u32>>,
    pub limit_iops: Option<&'a Spanned<u32>>,
    pub weight: Option<&'a Spanned<u32>>,
}

/// `reservation_iops`, `limit_iops` (0: none) and `weight` (1..=1000, default 100).
pub fn qos(src: &Source, k: QosKeys) -> Result<VolumeQos, ConfError> {
    let d = VolumeQos::default();
    let weight = match k.weight {
        Some(w) if !(1..=1000).contains(w.get_ref()) => {
            return src.err(w.span(), "weight: expected 1 to 1000");
        }
        Some(w) => *w.get_ref(),
        None => d.weight,
    };
    let reservation_iops = k.reservation_iops.map_or(0, |r| *r.get_ref());
    let limit_iops = k.limit_iops.map_or(0, |l| *l.get_ref());
    if let Some(l) = k.limit_iops
        && limit_iops != 0
        && limit_iops < reservation_iops
    {
        return src.err(
            l.span(),
            format!("limit_iops {limit_iops} is below reservation_iops {reservation_iops}"),
        );
    }
    Ok(VolumeQos {
        reservation_iops,
        limit_iops,
        weight,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize)]
    struct P {
        scheduler: Option<Spanned<toml::Value>>,
        reservation_iops: Option<Spanned<u32>>,
        limit_iops: Option<Spanned<u32>>,
        weight: Option<Spanned<u32>>,
    }

    fn parse(text: &str) -> Result<(SchedSpec, VolumeQos), ConfError> {
        let src = Source::new("p.toml", text);
        let p: P = src.parse()?;
        let keys = QosKeys {
            reservation_iops: p.reservation_iops.as_ref(),
            limit_iops: p.limit_iops.as_ref(),
            weight: p.weight.as_ref(),
        };
        Ok((scheduler(&src, p.scheduler.as_ref())?, qos(&src, keys)?))
    }

    #[test]
    fn names_tables_and_errors() {
        assert_eq!(parse("").unwrap().0.name, "fifo");
        assert_eq!(parse("scheduler = \"noop\"\n").unwrap().0.name, "noop");
        let e = parse("\nscheduler = \"elevator\"\n").unwrap_err();
        assert_eq!(e.line, Some(2));
        assert!(e.message.contains("fifo"), "{e}");
        let e = parse("\n\nscheduler = { name = \"fifo\", quantum = 8 }\n").unwrap_err();
        assert_eq!(e.line, Some(3));
        assert!(e.message.contains("quantum"), "{e}");
        let e = parse("scheduler = 5\n").unwrap_err();
        assert!(e.message.contains("expected a name"), "{e}");
    }

    #[test]
    fn qos_keys() {
        let (_, q) = parse("reservation_iops = 100\nlimit_iops = 2000\nweight = 500\n").unwrap();
        assert_eq!(
            q,
            VolumeQos {
                reservation_iops: 100,
                limit_iops: 2000,
                weight: 500
            }
        );
        assert_eq!(parse("weight = 0\n").unwrap_err().line, Some(1));
        let e = parse("reservation_iops = 300\nlimit_iops = 200\n").unwrap_err();
        assert_eq!(e.line, Some(2));
    }
}
