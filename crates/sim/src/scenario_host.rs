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
//!
//! And a `[vm.host_journal]` table: the VM stands for the host's own file system, whose
//! journal commits every `commit_s` (seed 001's hTag requests; its volume is the host file
//! system's journal, and its FLUSHes carry that volume's tag):
//!
//! ```toml
//! [vm.host_journal]
//! commit_s = 5               # jbd2's default commit interval
//! runtime_s = 20
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

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHostJournal {
    commit_s: Option<Spanned<f64>>,
    runtime_s: Spanned<f64>,
}

/// A validated `[vm.host_journal]` table.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HostJournalJob {
    pub commit_ns: u64,
    pub runtime_ns: u64,
}

/// Validate a `[vm.host_journal]` table.
pub(super) fn host_journal(
    cx: &Source,
    h: &RawHostJournal,
) -> Result<HostJournalJob, ScenarioError> {
    let secs = |v: &Spanned<f64>, what: &str| -> Result<u64, ScenarioError> {
        let x = *v.get_ref();
        if !(x.is_finite() && x > 0.0) {
            return cx.err(
                v.span(),
                format!("[vm.host_journal] {what}: expected a positive number of seconds"),
            );
        }
        Ok((x * 1e9) as u64)
    };
    Ok(HostJournalJob {
        commit_ns: match &h.commit_s {
            Some(c) => secs(c, "commit_s")?,
            None => 5_000_000_000,
        },
        runtime_ns: secs(&h.runtime_s, "runtime_s")?,
    })
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::Scenario;

    const VM: &str = r#"
[[pool]]
name = "ssd"
model = "intel-x25m-80g"
capacity = "4g"
[[volume]]
name = "v"
pool = "ssd"
size = "1g"
[[vm]]
volume = "v"
fio = { rw = "randwrite", bs = "4k", size = "64m" }
"#;

    fn parse(host: &str) -> Result<Scenario, String> {
        Scenario::parse("s.toml", &format!("{VM}{host}"), Path::new(".")).map_err(|e| e.to_string())
    }

    #[test]
    fn a_host_profile_parses_and_bad_values_name_their_line() {
        let s = parse(
            "[vm.host]\noverhead_us = 50\n[vm.host.page_cache]\ndirty = \"64m\"\nin_flight = 2\n",
        )
        .unwrap();
        let h = &s.vms[0].host;
        assert_eq!(h.overhead_ns, 50_000);
        let pc = h.page_cache.as_ref().unwrap();
        assert_eq!(
            (pc.dirty_bytes, pc.in_flight, pc.max_merge_bytes),
            (64 << 20, 2, 512 << 10)
        );
        assert!(parse("").unwrap().vms[0].host.is_direct());
        for (bad, want) in [
            (
                "[vm.host.page_cache]\ndirty = \"64m\"\nin_flight = 0\n",
                "in_flight = 0",
            ),
            (
                "[vm.host.page_cache]\ndirty = \"1k\"\n",
                "dirty: expected at least 4k",
            ),
            (
                "[vm.host.page_cache]\ndirty = \"1m\"\nmax_merge = \"1000\"\n",
                "max_merge",
            ),
            ("[vm.host]\noverhead_us = -1.0\n", "overhead_us"),
            ("[vm.host]\nlatency = 3\n", "unknown field"),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("s.toml:") && e.contains(want), "{bad}: {e}");
        }
    }
}
