//! A pool's `throttle` key: seed 003's virtual performance throttle, shared by server
//! configurations and scenarios. Written as a model name (`throttle = "cheetah-15k4"`)
//! or a table: `throttle = { model = "cheetah-15k4" | "linear", k = 8, adapt = false }`,
//! where a linear model takes `rotation_ms`, `max_seek_ms` and `max_seek_sectors` (0: the
//! pool's size) and any model may set its shadow cache (`cache_segments`,
//! `sectors_per_segment`, `prefetch_sectors`, `cache_hit_ms`).

use tiervisor_engine::ThrottleConfig;
use tiervisor_engine::sched::{ParamValue, Params};
use toml::Spanned;

use crate::sched::param_values;
use crate::{ConfError, Source};

const MODELS: &[&str] = &["cheetah-15k4", "linear"];

/// `throttle = "model"` or `throttle = { model = "...", ... }`; absent: not throttled.
pub fn throttle(
    src: &Source,
    key: Option<&Spanned<toml::Value>>,
) -> Result<Option<ThrottleConfig>, ConfError> {
    let Some(k) = key else { return Ok(None) };
    let expected = || {
        format!(
            "throttle: expected a model ({}) or a table {{ model = \"...\", k = 8, adapt = false }}",
            MODELS.join(", ")
        )
    };
    let params = match k.get_ref() {
        toml::Value::String(s) => [("model".to_string(), ParamValue::Str(s.clone()))]
            .into_iter()
            .collect(),
        toml::Value::Table(t) => {
            let p = param_values(src, k, t, "", "throttle")?;
            if !p.contains_key("model") {
                return src.err(k.span(), expected());
            }
            p
        }
        _ => return src.err(k.span(), expected()),
    };
    from_params(&params)
        .map(Some)
        .map_err(|e| src.error(k.span(), e))
}

fn from_params(
    map: &std::collections::BTreeMap<String, ParamValue>,
) -> Result<ThrottleConfig, String> {
    let mut p = Params::for_subject("throttle".into(), map);
    let model = p.str_of("model", "linear", MODELS)?;
    let k = p.f64_in("k", 8.0, 1.0..=1000.0)?;
    let adapt = p.bool("adapt", false)?;
    let base = ThrottleConfig::cheetah_15k4(k, adapt);
    let linear = model == "linear";
    let ms = |ns: u64| ns as f64 / 1e6;
    let rotation_ns = p.ms_as_ns("rotation_ms", ms(2 * base.half_rotation_ns), 0.0..=1000.0)?;
    let c = ThrottleConfig {
        model: model.to_string(),
        half_rotation_ns: rotation_ns / 2,
        max_seek_ns: p.ms_as_ns("max_seek_ms", ms(base.max_seek_ns), 0.0..=1000.0)?,
        max_seek_sectors: p.u64_in("max_seek_sectors", 0, 0..=1 << 48)?,
        // A linear model has no cache unless it asks for one.
        cache_segments: p.u64_in(
            "cache_segments",
            if linear {
                0
            } else {
                base.cache_segments as u64
            },
            0..=4096,
        )? as usize,
        sectors_per_segment: p.u64_in(
            "sectors_per_segment",
            base.sectors_per_segment,
            1..=1 << 20,
        )?,
        prefetch_sectors: p.u64_in("prefetch_sectors", base.prefetch_sectors, 0..=1 << 20)?,
        cache_hit_ns: p.ms_as_ns("cache_hit_ms", ms(base.cache_hit_ns), 0.0..=1000.0)?,
        k,
        adapt,
    };
    p.finish().map_err(|e| e.message)?;
    if c.cache_segments > 0 && c.prefetch_sectors >= c.sectors_per_segment {
        return Err(format!(
            "throttle: prefetch_sectors = {}: expected less than sectors_per_segment ({})",
            c.prefetch_sectors, c.sectors_per_segment
        ));
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize)]
    struct P {
        throttle: Option<Spanned<toml::Value>>,
    }

    fn parse(text: &str) -> Result<Option<ThrottleConfig>, ConfError> {
        let src = Source::new("pool.toml", text);
        let p: P = src.parse()?;
        throttle(&src, p.throttle.as_ref())
    }

    /// The error as a user sees it: `file:line: message`.
    fn error(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn valid_forms() {
        assert_eq!(parse("").unwrap(), None);
        // A model name alone: the paper's k = 8, no adaptation.
        let c = parse("throttle = \"cheetah-15k4\"\n").unwrap().unwrap();
        assert_eq!(c, ThrottleConfig::cheetah_15k4(8.0, false));
        let c = parse("throttle = { model = \"cheetah-15k4\", k = 3, adapt = true }\n")
            .unwrap()
            .unwrap();
        assert_eq!(c, ThrottleConfig::cheetah_15k4(3.0, true));
        // A linear model: R = 6 ms, S = 10 ms over 1000 sectors, no cache unless asked.
        let c = parse(
            "throttle = { model = \"linear\", k = 1.5, rotation_ms = 6, max_seek_ms = 10, \
             max_seek_sectors = 1000 }\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.model, "linear");
        assert_eq!(c.half_rotation_ns, 3_000_000);
        assert_eq!(c.max_seek_ns, 10_000_000);
        assert_eq!(c.max_seek_sectors, 1000);
        assert_eq!(c.cache_segments, 0);
        assert_eq!(c.k, 1.5);
        let c = parse("throttle = { model = \"linear\", cache_segments = 4, cache_hit_ms = 0.5 }")
            .unwrap()
            .unwrap();
        assert_eq!((c.cache_segments, c.cache_hit_ns), (4, 500_000));
    }

    #[test]
    fn unknown_key_is_named_with_its_line() {
        let e = error("\n\nthrottle = { model = \"linear\", rotation = 6 }\n");
        assert!(e.starts_with("pool.toml:3: "), "{e}");
        assert!(e.contains("throttle has no parameter \"rotation\""), "{e}");
    }

    #[test]
    fn bad_model_lists_the_valid_ones() {
        let e = error("throttle = \"barracuda\"\n");
        assert!(e.starts_with("pool.toml:1: "), "{e}");
        assert!(e.contains("model = \"barracuda\""), "{e}");
        assert!(e.contains("one of cheetah-15k4, linear"), "{e}");
        let e = error("\nthrottle = { k = 8 }\n");
        assert!(e.starts_with("pool.toml:2: "), "{e}");
        assert!(e.contains("expected a model (cheetah-15k4, linear)"), "{e}");
        let e = error("throttle = 8\n");
        assert!(e.contains("expected a model"), "{e}");
    }

    #[test]
    fn k_out_of_range() {
        for bad in ["0.5", "1001", "\"eight\""] {
            let e = error(&format!(
                "\n\n\n\nthrottle = {{ model = \"cheetah-15k4\", k = {bad} }}\n"
            ));
            assert!(e.starts_with("pool.toml:5: "), "{bad}: {e}");
            assert!(e.contains("throttle: k = "), "{bad}: {e}");
            assert!(e.contains("expected a number from 1 to 1000"), "{bad}: {e}");
        }
        let e = error(
            "throttle = { model = \"cheetah-15k4\", sectors_per_segment = 10, prefetch_sectors = 10 }",
        );
        assert!(
            e.contains("prefetch_sectors = 10: expected less than"),
            "{e}"
        );
    }
}
