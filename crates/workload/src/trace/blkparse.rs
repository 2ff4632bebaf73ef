//! `blkparse` text output, as it really prints it.
//!
//! An event line is `maj,min cpu seq time pid action rwbs [sector + count] [process]`.
//! Only one action is the request: `D` (issued to the driver, after merging: what the
//! device saw) by default, or `Q` (queued by the file system: what the application asked,
//! before merging). Every other line (plug `P`, unplug `U`/`UT`, merges `M`/`F`, get
//! request `G`, insert `I`, complete `C`, remap `A`, split `X`, message `m`, ...) is
//! counted as skipped by kind, as are flushes without data, discards, and the per-CPU
//! summary blkparse prints at the end.

use super::formats::{Parsed, int, record, sectors, time_ns};
use super::{BlkEvent, TraceOp};

/// Reads blkparse lines; remembers whether the trailing summary has begun.
#[derive(Clone, Debug)]
pub(crate) struct Parser {
    event: BlkEvent,
    in_summary: bool,
}

const EXPECTED: &str =
    "a blkparse event line `maj,min cpu seq time pid action rwbs [sector + count] [process]`";

impl Parser {
    pub(crate) fn new(event: BlkEvent) -> Parser {
        Parser {
            event,
            in_summary: false,
        }
    }

    pub(crate) fn line(&mut self, line: &str) -> Result<Parsed, String> {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.is_empty() {
            return Ok(Parsed::Blank);
        }
        if !is_device(f[0]) {
            // The summary starts with "CPU0 (8,0):" or "Total (8,0):" and runs to the end.
            if f[0].starts_with("CPU") || f[0] == "Total" {
                self.in_summary = true;
            }
            if self.in_summary {
                return Ok(Parsed::Skip("blkparse summary lines"));
            }
            return Err(format!("expected {EXPECTED}, got {line:?}"));
        }
        if f.len() < 7 {
            return Err(format!(
                "expected {EXPECTED}, got {} field(s) in {line:?}",
                f.len()
            ));
        }
        let (action, rwbs) = (f[5], f[6]);
        if action != self.event.action() {
            return Ok(Parsed::Skip(skipped_action(action)));
        }
        let has_sector = f.len() >= 10 && f[8] == "+";
        let op = match data_direction(rwbs) {
            Some('W') => TraceOp::Write,
            Some('R') => TraceOp::Read,
            Some('D') | Some('E') | Some('Z') => {
                return Ok(Parsed::Skip("discards and write-zeroes (D, E, Z in rwbs)"));
            }
            Some('N') if rwbs.starts_with('F') => {
                return Ok(Parsed::Skip("flushes without data"));
            }
            Some('N') => return Ok(Parsed::Skip("requests without data (N in rwbs)")),
            _ => return Err(format!("rwbs {rwbs:?} has no R, W, D or N ({EXPECTED})")),
        };
        if !has_sector {
            if rwbs.starts_with('F') {
                return Ok(Parsed::Skip("flushes without data"));
            }
            return Err(format!(
                "a {action} {rwbs} event without `sector + count` ({EXPECTED})"
            ));
        }
        let (maj, min) = f[0]
            .split_once(',')
            .ok_or_else(|| format!("device {:?} is not maj,min", f[0]))?;
        let (major, minor) = (int(maj, "major")?, int(min, "minor")?);
        if major > 0xff_ffff || minor > 0xff {
            return Err(format!(
                "device {}: expected major at most {} and minor at most 255",
                f[0], 0xff_ffff
            ));
        }
        record(
            time_ns(f[3], "time", 1e9)?,
            ((major << 8) | minor) as u32,
            sectors(f[7], "sector")?,
            sectors(f[9], "count")?,
            op,
        )
        .map(Parsed::Record)
    }
}

fn is_device(s: &str) -> bool {
    s.split_once(',').is_some_and(|(a, b)| {
        !a.is_empty()
            && !b.is_empty()
            && a.bytes().all(|c| c.is_ascii_digit())
            && b.bytes().all(|c| c.is_ascii_digit())
    })
}

/// The data letter of an rwbs field: after an optional leading `F` (preflush), one of
/// `R`, `W`, `D` (discard), `E` (secure erase), `Z` (write zeroes) or `N` (none).
fn data_direction(rwbs: &str) -> Option<char> {
    let mut c = rwbs.chars().peekable();
    if c.peek() == Some(&'F') {
        c.next();
    }
    c.next()
        .filter(|d| matches!(d, 'R' | 'W' | 'D' | 'E' | 'Z' | 'N'))
}

fn skipped_action(action: &str) -> &'static str {
    match action {
        "Q" => "blkparse Q events (queued; D is the request)",
        "D" => "blkparse D events (issued; Q is the request)",
        "C" => "blkparse C events (completions)",
        "M" | "F" => "blkparse M and F events (back and front merges)",
        "P" => "blkparse P events (plug)",
        "U" | "UT" => "blkparse U and UT events (unplug)",
        "G" | "S" => "blkparse G and S events (get request, sleep)",
        "I" => "blkparse I events (inserted into the scheduler)",
        "A" => "blkparse A events (remaps)",
        "X" => "blkparse X events (splits)",
        "B" => "blkparse B events (bounces)",
        "R" => "blkparse R events (requeues)",
        "T" => "blkparse T events (timer unplugs)",
        "m" => "blkparse m lines (scheduler messages)",
        _ => "blkparse events of other kinds",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(event: BlkEvent, text: &str) -> Vec<Result<Parsed, String>> {
        let mut p = Parser::new(event);
        text.lines().map(|l| p.line(l)).collect()
    }

    /// One line of each kind blkparse prints, from a real `blkparse -i sda` run's shape.
    const SAMPLE: &str = "\
  8,0    3        1     0.000000000   697  Q   W 223490 + 8 [kjournald]
  8,0    3        2     0.000001000   697  G   W 223490 + 8 [kjournald]
  8,0    3        3     0.000002000   697  P   N [kjournald]
  8,0    3        4     0.000002500   697  Q   W 223498 + 8 [kjournald]
  8,0    3        5     0.000003000   697  M   W 223498 + 8 [kjournald]
  8,0    3        6     0.000003500   697  I   W 223490 + 16 [kjournald]
  8,0    3        7     0.000004000   697  U   N [kjournald] 1
  8,0    3        8     0.000005000   697  D   W 223490 + 16 [kjournald]
  8,0    1        9     0.000100000     0  C   W 223490 + 16 [0]
  8,0    0        0     0.000200000     0  m   N cfq697 slice expired t=0
  8,0    3       10     0.000300000   697  UT  N [kjournald] 1
  8,0    3       11     0.000400000   412  Q FWS [kworker/3:1H]
  8,0    3       12     0.000400500   412  D FWS [kworker/3:1H]
  8,0    2       13     0.000500000   900  A   R 4096 + 8 <- (8,1) 2048
  8,0    2       14     0.000510000   900  Q  RA 4096 + 8 [cat]
  8,0    2       15     0.000520000   900  D  RA 4096 + 8 [cat]
  8,0    2       16     0.000600000   900  D   D 8192 + 2048 [fstrim]
  8,0    2       17     0.000700000   900  F   R 4088 + 8 [cat]
CPU0 (8,0):
 Reads Queued:           1,        4KiB\t Writes Queued:           2,        8KiB
Total (8,0):
 Reads Queued:           1,        4KiB\t Writes Queued:           2,        8KiB
Throughput (R/W): 0KiB/s / 0KiB/s
Events (8,0): 18 entries
";

    fn records(v: &[Result<Parsed, String>]) -> Vec<(u64, u64, TraceOp)> {
        v.iter()
            .filter_map(|r| match r {
                Ok(Parsed::Record(r)) => Some((r.offset_bytes / 512, r.len_bytes / 512, r.op)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn issue_events_are_the_merged_requests() {
        let v = parse(BlkEvent::Issue, SAMPLE);
        assert!(v.iter().all(|r| r.is_ok()), "{v:?}");
        assert_eq!(
            records(&v),
            vec![(223490, 16, TraceOp::Write), (4096, 8, TraceOp::Read)]
        );
        let skip = |why: &str| {
            v.iter()
                .filter(|r| matches!(r, Ok(Parsed::Skip(w)) if *w == why))
                .count()
        };
        assert_eq!(skip("flushes without data"), 1);
        assert_eq!(skip("discards and write-zeroes (D, E, Z in rwbs)"), 1);
        assert_eq!(skip("blkparse P events (plug)"), 1);
        assert_eq!(skip("blkparse U and UT events (unplug)"), 2);
        assert_eq!(skip("blkparse M and F events (back and front merges)"), 2);
        assert_eq!(skip("blkparse m lines (scheduler messages)"), 1);
        assert_eq!(skip("blkparse A events (remaps)"), 1);
        assert_eq!(skip("blkparse summary lines"), 6);
    }

    #[test]
    fn queue_events_are_what_was_asked_before_merging() {
        let v = parse(BlkEvent::Queue, SAMPLE);
        assert_eq!(
            records(&v),
            vec![
                (223490, 8, TraceOp::Write),
                (223498, 8, TraceOp::Write),
                (4096, 8, TraceOp::Read)
            ]
        );
    }

    #[test]
    fn a_garbled_event_line_is_an_error_not_a_skip() {
        let v = parse(BlkEvent::Issue, "8,0 3 1 0.1 697 D W 10 + x [a]\n");
        assert!(matches!(&v[0], Err(e) if e.contains("count")), "{v:?}");
        let v = parse(BlkEvent::Issue, "8,0 3 1 0.1 697 D W\n");
        assert!(
            matches!(&v[0], Err(e) if e.contains("sector + count")),
            "{v:?}"
        );
        let v = parse(BlkEvent::Issue, "hello there\n");
        assert!(
            matches!(&v[0], Err(e) if e.contains("blkparse event line")),
            "{v:?}"
        );
        let v = parse(BlkEvent::Issue, "8,0 3 1 0.1 697 D X 10 + 8 [a]\n");
        assert!(matches!(&v[0], Err(e) if e.contains("rwbs")), "{v:?}");
    }
}
