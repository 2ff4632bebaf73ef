//! A `[[vm]]`'s `[vm.host]` table: the host profile between its workload and its
//! volume (`tiervisor_workload::host`), such as seed 002's guest page cache under BitVisor.
//!
//! ```toml
//! [vm.host]
//! overhead_us = 150          # per request, one at a time (a VMM trapping each command)
//! [vm.host.page_cache]       # writes go through the guest's page cache
//! dirty = "640m"             # dirty bytes the writer keeps ahead of the writeback
//! in_flight = 4              # writeback requests outstanding
//! max_merge = "512k"         # largest merged writeback request
//! ```

use serde::Deserialize;
use tiervisor_conf::{SizeVal, Source, Spanned};
use tiervisor_workload::{HostProfile, PageCache};

use super::ScenarioError;

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHost {
    overhead_us: Option<Spanned<f64>>,
    page_cache: Option<RawPageCache>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct RawPageCache {
    dirty: Spanned<SizeVal>,
    in_flight: Option<Spanned<u32>>,
    max_merge: Option<Spanned<SizeVal>>,
}

/// Validate a `[vm.host]` table.
pub(super) fn host_profile(cx: &Source, h: &RawHost) -> Result<HostProfile, ScenarioError> {
    let overhead_ns = match &h.overhead_us {
        Some(o) if !(o.get_ref().is_finite() && *o.get_ref() >= 0.0) => {
            return cx.err(
                o.span(),
                "[vm.host] overhead_us: expected a number of microseconds, 0 or more",
            );
        }
        Some(o) => (o.get_ref() * 1000.0).round() as u64,
        None => 0,
    };
    let page_cache = match &h.page_cache {
        None => None,
        Some(p) => {
            let dirty_bytes = cx.size(&p.dirty, "dirty")?;
            if dirty_bytes < 4096 {
                return cx.err(
                    p.dirty.span(),
                    "[vm.host.page_cache] dirty: expected at least 4k",
                );
            }
            let in_flight = match &p.in_flight {
                Some(n) if *n.get_ref() == 0 => {
                    return cx.err(
                        n.span(),
                        "[vm.host.page_cache] in_flight = 0: expected at least 1",
                    );
                }
                Some(n) => *n.get_ref(),
                None => 1,
            };
            let max_merge_bytes = match &p.max_merge {
                Some(m) => {
                    let b = cx.size(m, "max_merge")?;
                    if b < 512 || b % 512 != 0 {
                        return cx.err(
                            m.span(),
                            "[vm.host.page_cache] max_merge: expected a positive multiple of 512",
                        );
                    }
                    b
                }
                None => 512 << 10,
            };
            Some(PageCache {
                dirty_bytes,
                in_flight,
                max_merge_bytes,
            })
        }
    };
    Ok(HostProfile {
        page_cache,
        overhead_ns,
    })
}
