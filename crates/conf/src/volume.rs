//! Volume keys that server configurations and scenarios share: the pool a key names,
//! provisioning, the fast pool and placement.

use tiervisor_engine::{CachePolicy, Placement, Provisioning};
use toml::Spanned;

use crate::{ConfError, SizeVal, Source};

/// The index of the pool `key` names, among `names`.
pub fn pool_named(src: &Source, key: &Spanned<String>, names: &[&str]) -> Result<usize, ConfError> {
    names
        .iter()
        .position(|n| *n == key.get_ref())
        .ok_or_else(|| {
            src.error(
                key.span(),
                format!(
                    "unknown pool {:?}; defined pools: {}",
                    key.get_ref(),
                    names.join(", ")
                ),
            )
        })
}

/// `provisioning = "thin" | "thick"`, `default` when absent.
pub fn provisioning(
    src: &Source,
    key: Option<&Spanned<String>>,
    default: Provisioning,
) -> Result<Provisioning, ConfError> {
    match key.map(|k| (k.get_ref().as_str(), k.span())) {
        None => Ok(default),
        Some(("thin", _)) => Ok(Provisioning::Thin),
        Some(("thick", _)) => Ok(Provisioning::Thick),
        Some((o, span)) => src.err(
            span,
            format!("provisioning {o:?}: expected \"thin\" or \"thick\""),
        ),
    }
}

/// `fast_pool`, or by default the first SSD pool other than the home pool.
pub fn fast_pool(
    src: &Source,
    key: Option<&Spanned<String>>,
    names: &[&str],
    home: usize,
    is_ssd: impl Fn(usize) -> bool,
) -> Result<Option<usize>, ConfError> {
    match key {
        Some(k) => pool_named(src, k, names).map(Some),
        None => Ok((0..names.len()).find(|&i| i != home && is_ssd(i))),
    }
}

/// A volume's placement keys as written.
pub struct PlacementKeys<'a> {
    pub placement: Option<&'a Spanned<String>>,
    pub fast_percent: Option<&'a Spanned<u8>>,
    pub fast_budget: Option<&'a Spanned<SizeVal>>,
    pub priority: Option<u8>,
    pub cache_policy: Option<&'a Spanned<String>>,
}

/// `placement = "pinned" | "split" | "hot" | "cache"` with the keys each takes.
pub fn placement(src: &Source, k: PlacementKeys) -> Result<Placement, ConfError> {
    let is_cache = k.placement.is_some_and(|p| p.get_ref() == "cache");
    if let Some(c) = k.cache_policy
        && !is_cache
    {
        return src.err(c.span(), "cache_policy: only for placement = \"cache\"");
    }
    if let Some(f) = k.fast_percent
        && *f.get_ref() > 100
    {
        return src.err(f.span(), "fast_percent: expected 0 to 100");
    }
    match k.placement.map(|p| (p.get_ref().as_str(), p.span())) {
        None | Some(("pinned", _)) => Ok(Placement::Pinned),
        Some(("split", _)) => Ok(Placement::Split {
            fast_percent: k.fast_percent.map_or(50, |f| *f.get_ref()),
        }),
        Some(("hot", _)) => Ok(Placement::Hot {
            fast_budget_bytes: match k.fast_budget {
                Some(b) => src.size(b, "fast_budget")?,
                None => 0,
            },
            priority: k.priority.unwrap_or(0),
        }),
        Some(("cache", _)) => Ok(Placement::Cache {
            cache_policy: match k.cache_policy {
                None => CachePolicy::Smq,
                Some(c) => match CachePolicy::parse(c.get_ref()) {
                    Some(p) => p,
                    None => {
                        return src.err(
                            c.span(),
                            format!(
                                "cache_policy {:?}: expected {}",
                                c.get_ref(),
                                CachePolicy::NAMES
                            ),
                        );
                    }
                },
            },
            fast_budget_bytes: match k.fast_budget {
                Some(b) => src.size(b, "fast_budget")?,
                None => 0,
            },
        }),
        Some((o @ ("oracle" | "oracle-dynamic"), span)) => src.err(
            span,
            format!(
                "placement {o:?} is for simulation scenarios only (it places data knowing the \
                 whole workload in advance); expected \"pinned\", \"split\", \"hot\" or \"cache\""
            ),
        ),
        Some((o, span)) => src.err(
            span,
            format!("placement {o:?}: expected \"pinned\", \"split\", \"hot\" or \"cache\""),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    struct V {
        pool: Spanned<String>,
        provisioning: Option<Spanned<String>>,
        placement: Option<Spanned<String>>,
        fast_percent: Option<Spanned<u8>>,
    }

    fn parse(text: &str) -> (Source<'_>, V) {
        let src = Source::new("v.toml", text);
        let v = src.parse().unwrap();
        (src, v)
    }

    #[test]
    fn keys_resolve_and_errors_name_the_line() {
        let names = ["hdd", "ssd"];
        let (src, v) = parse("pool = \"hdd\"\nplacement = \"split\"\nfast_percent = 30\n");
        assert_eq!(pool_named(&src, &v.pool, &names).unwrap(), 0);
        assert_eq!(
            provisioning(&src, v.provisioning.as_ref(), Provisioning::Thick).unwrap(),
            Provisioning::Thick
        );
        assert_eq!(
            fast_pool(&src, None, &names, 0, |i| i == 1).unwrap(),
            Some(1)
        );
        assert_eq!(fast_pool(&src, None, &names, 1, |i| i == 1).unwrap(), None);
        let keys = PlacementKeys {
            placement: v.placement.as_ref(),
            fast_percent: v.fast_percent.as_ref(),
            fast_budget: None,
            priority: None,
            cache_policy: None,
        };
        assert_eq!(
            placement(&src, keys).unwrap(),
            Placement::Split { fast_percent: 30 }
        );

        let (src, v) = parse("pool = \"tape\"\nprovisioning = \"fat\"\nfast_percent = 101\n");
        let e = pool_named(&src, &v.pool, &names).unwrap_err();
        assert_eq!(e.line, Some(1));
        assert!(
            e.message.contains("unknown pool") && e.message.contains("hdd, ssd"),
            "{e}"
        );
        let e = provisioning(&src, v.provisioning.as_ref(), Provisioning::Thin).unwrap_err();
        assert_eq!(e.line, Some(2));
        let keys = PlacementKeys {
            placement: None,
            fast_percent: v.fast_percent.as_ref(),
            fast_budget: None,
            priority: None,
            cache_policy: None,
        };
        assert_eq!(placement(&src, keys).unwrap_err().line, Some(3));

        // The oracle needs the workload in advance: scenarios only, refused here.
        let (src, v) = parse("pool = \"hdd\"\nplacement = \"oracle\"\n");
        let keys = PlacementKeys {
            placement: v.placement.as_ref(),
            fast_percent: None,
            fast_budget: None,
            priority: None,
            cache_policy: None,
        };
        let e = placement(&src, keys).unwrap_err();
        assert_eq!(e.line, Some(2));
        assert!(e.message.contains("simulation scenarios only"), "{e}");
    }

    #[test]
    fn cache_policies_parse_and_unknown_ones_list_the_valid_ones() {
        #[derive(serde::Deserialize)]
        struct C {
            placement: Option<Spanned<String>>,
            cache_policy: Option<Spanned<String>>,
        }
        fn keys(c: &C) -> PlacementKeys<'_> {
            PlacementKeys {
                placement: c.placement.as_ref(),
                fast_percent: None,
                fast_budget: None,
                priority: None,
                cache_policy: c.cache_policy.as_ref(),
            }
        }
        let src = Source::new(
            "v.toml",
            "placement = \"cache\"\ncache_policy = \"bcache\"\n",
        );
        let c: C = src.parse().unwrap();
        assert_eq!(
            placement(&src, keys(&c)).unwrap(),
            Placement::Cache {
                cache_policy: CachePolicy::Bcache,
                fast_budget_bytes: 0
            }
        );
        let src = Source::new("v.toml", "placement = \"cache\"\ncache_policy = \"lru\"\n");
        let c: C = src.parse().unwrap();
        let e = placement(&src, keys(&c)).unwrap_err();
        assert_eq!(e.line, Some(2));
        assert!(e.message.contains("\"smq\" or \"bcache\""), "{e}");
        let src = Source::new("v.toml", "placement = \"hot\"\ncache_policy = \"smq\"\n");
        let c: C = src.parse().unwrap();
        let e = placement(&src, keys(&c)).unwrap_err();
        assert!(e.message.contains("only for placement"), "{e}");
    }
}
