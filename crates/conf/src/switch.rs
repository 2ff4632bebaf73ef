//! An on/off key: `true`/`false`, or `"on"`/`"off"` as operators often write it.

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// A switch as written in a configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Switch(pub bool);

impl<'de> Deserialize<'de> for Switch {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Switch, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Switch;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("true, false, \"on\" or \"off\"")
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<Switch, E> {
                Ok(Switch(b))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Switch, E> {
                match s {
                    "on" | "true" => Ok(Switch(true)),
                    "off" | "false" => Ok(Switch(false)),
                    _ => Err(E::invalid_value(de::Unexpected::Str(s), &self)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct T {
        log: Switch,
    }

    #[test]
    fn booleans_and_on_off_parse_anything_else_is_an_error() {
        for (text, want) in [
            ("log = true", true),
            ("log = false", false),
            ("log = \"on\"", true),
            ("log = \"off\"", false),
        ] {
            let t: T = toml::from_str(text).unwrap();
            assert_eq!(t.log, Switch(want), "{text}");
        }
        let e = toml::from_str::<T>("log = \"maybe\"")
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("\"on\" or \"off\"") && e.contains("line 1"),
            "{e}"
        );
        assert!(toml::from_str::<T>("log = 1").is_err());
    }
}
