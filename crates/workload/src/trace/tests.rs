use super::*;
use crate::WlRequest;
use crate::Workload;
use std::sync::Arc;

fn sample() -> Trace {
    let text = "# comment\n100 0 8 8 1\n300 1 16 16 0\n200 0 1000000 8 1\n";
    Trace::parse("t.trace", text.as_bytes(), None).unwrap()
}

#[test]
fn parse_rebases_and_sorts() {
    let t = sample();
    assert_eq!(t.format, TraceFormat::Disksim);
    assert_eq!(
        t.records.iter().map(|r| r.arrival_ns).collect::<Vec<_>>(),
        vec![0, 100, 200]
    );
    let i = t.info();
    assert_eq!((i.requests, i.reads, i.writes), (3, 2, 1));
    assert_eq!(i.devices[&0].requests, 2);
    assert_eq!(
        i.size_histogram,
        vec![("<=4096".to_string(), 2), ("<=8192".to_string(), 1)]
    );
}

#[test]
fn errors_name_file_and_line() {
    let e = Trace::parse("bad.trace", "1 0 8 8 1\n2 0 8\n".as_bytes(), None).unwrap_err();
    assert_eq!(
        e.to_string().split(':').take(2).collect::<Vec<_>>(),
        vec!["bad.trace", "2"]
    );
    let e = Trace::parse("x.csv", "what is this\n".as_bytes(), None).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("x.csv:1: unrecognised trace format"),
        "{e}"
    );
}

/// Issue 11: `0 0 36028797018963968 8 1` overflowed `lba * 512` (a panic in debug, a
/// wrapped offset in release); every reader checks its arithmetic and says where.
#[test]
fn out_of_range_fields_are_errors_with_file_and_line() {
    let cases = [
        ("1 0 8 8 1\n0 0 36028797018963968 8 1\n", "StartLBA"),
        ("0 0 8 36028797018963968 1\n", "SizeInSectors"),
        ("0 4294967296 8 8 1\n", "Device"),
        ("0 0 36028797018963960 8 1\n", "ends beyond 2^64"),
        ("1e30 0 8 8 1\n", "ArrivalTime"),
        ("0,36028797018963968,4096,W,0.5\n", "LBA"),
        ("0,8,4096,W,1e30\n", "Timestamp"),
        ("200000000000000000,h,0,Read,0,4096,1\n", "Timestamp"),
        ("18446744073709551615,h,0,Read,1,4096,1\n", "Timestamp"),
        (
            "0,h,0,Read,18446744073709551615,4096,1\n",
            "ends beyond 2^64",
        ),
        ("0,h,0,Read,0,2199023255553,1\n", "limit"),
        ("8,16 0 1 0.5 7 D W 36028797018963968 + 8 [x]\n", "sector"),
        ("16777216,16 0 1 0.5 7 D W 8 + 8 [x]\n", "major"),
        ("18446744073709551615 /dev/x write 0 4096\n", "time"),
        ("18446744073709551615,0,8,1,0\n", "Timestamp"),
        ("0,0,36028797018963968,1,0\n", "Size"),
        ("0,0,W,4294967296,0,4096\n", "LUN"),
    ];
    for (text, what) in cases {
        let e = Trace::parse("big.trace", text.as_bytes(), None)
            .expect_err(&format!("{text:?} must be rejected"))
            .to_string();
        let line = text.lines().count();
        assert!(
            e.starts_with(&format!("big.trace:{line}:")),
            "{text:?}: {e}"
        );
        assert!(e.contains(what), "{text:?}: {e}");
    }
}

/// Sizes over 4 GiB are kept, not truncated by a cast to `u32`.
#[test]
fn sizes_over_4_gib_are_kept() {
    let t = Trace::parse("t", "0 0 0 16777216 0\n".as_bytes(), None).unwrap();
    assert_eq!(t.records[0].len_bytes, 8 << 30);
    let t = Trace::parse("t", "0,h,0,Write,0,8589934592,1\n".as_bytes(), None).unwrap();
    assert_eq!(t.records[0].len_bytes, 8 << 30);
    assert_eq!(t.info().write_bytes, 8 << 30);
}

#[test]
fn zero_length_records_are_counted_not_replayed() {
    let t = Trace::parse("t", "0 0 8 0 1\n1 0 8 8 1\n2 0 16 0 0\n".as_bytes(), None).unwrap();
    assert_eq!(t.records.len(), 1);
    assert_eq!(t.zero_length_records, 2);
    let i = t.info();
    assert_eq!((i.requests, i.zero_length_records), (1, 2));
}

/// A parse that kept nothing is an error that says what was skipped, never an empty
/// success.
#[test]
fn a_trace_without_requests_is_an_error() {
    let e = Trace::parse("empty", "".as_bytes(), None)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("empty: no trace records"), "{e}");
    let e = Trace::parse("c", "# only\n\n".as_bytes(), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no trace records"), "{e}");
    let text = "8,0 1 1 0.1 9 Q W 8 + 8 [a]\n8,0 1 2 0.2 9 C W 8 + 8 [0]\n";
    let e = Trace::parse("q.txt", text.as_bytes(), None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no request records")
            && e.contains("1 blkparse Q events")
            && e.contains("1 blkparse C events"),
        "{e}"
    );
    let e = Trace::parse("z", "0 0 8 0 1\n".as_bytes(), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("1 of zero bytes"), "{e}");
}

#[test]
fn binary_input_is_named_not_parsed() {
    let e = Trace::parse("x.bin", &[1u8, 0, 0, 0, 7, 0, 0, 0][..], None)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("x.bin: binary data") && e.contains("raw-u32"),
        "{e}"
    );
    let blktrace = [0x07u8, b't', b'a', b'e', 1, 2, 3, 4];
    let e = Trace::parse("sda.blktrace.0", &blktrace[..], None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("blkparse -i"), "{e}");
    let e = Trace::parse("u", &[b'1', b' ', 0xff, 0xfe, b'\n'][..], None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("byte 2 is 0xff"), "{e}");
}

#[test]
fn blkparse_event_is_a_choice_with_skips_counted() {
    let text =
        "8,0 1 1 0.1 9 Q W 8 + 8 [a]\n8,0 1 2 0.1 9 Q W 16 + 8 [a]\n8,0 1 3 0.2 9 D W 8 + 16 [a]\n";
    let d = Trace::parse("b", text.as_bytes(), None).unwrap();
    assert_eq!(d.records.len(), 1);
    assert_eq!(d.records[0].len_bytes, 16 * 512);
    assert_eq!(d.skipped["blkparse Q events (queued; D is the request)"], 2);
    let opts = LoadOptions {
        blkparse_event: BlkEvent::Queue,
        ..LoadOptions::default()
    };
    let q = Trace::parse_with("b", text.as_bytes(), &opts).unwrap();
    assert_eq!(q.records.len(), 2);
    assert_eq!(q.info().skipped.values().sum::<u64>(), 1);
}

#[test]
fn header_csv_is_detected_and_cloudphysics_read() {
    let text = "version,time,op,size,lbn\n1,0.25,28,4096,8\n1,0.5,2a,512,0\n1,0.5,35,0,0\n";
    let t = Trace::parse("cp.csv", text.as_bytes(), None).unwrap();
    assert_eq!(t.format, TraceFormat::Csv);
    assert_eq!(t.records.len(), 2);
    assert_eq!(
        (
            t.records[0].op,
            t.records[0].offset_bytes,
            t.records[1].arrival_ns
        ),
        (TraceOp::Read, 4096, 250_000_000)
    );
    assert_eq!(t.skipped["SCSI commands other than READ and WRITE"], 1);
    let e = Trace::parse(
        "cp.csv",
        "version,time,op,size,lbn\n1,0.25,28,4096\n".as_bytes(),
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("cp.csv:2:"), "{e}");
}

#[test]
fn address_only_traces_need_an_assumption_and_are_labelled() {
    let arc = "100 8 0 1\n200 8 0 2\n100 8 0 3\n";
    let named = LoadOptions {
        format: Some(TraceFormat::Arc),
        ..LoadOptions::default()
    };
    let e = Trace::parse_with("p1.lis", arc.as_bytes(), &named)
        .unwrap_err()
        .to_string();
    assert!(e.contains("assume-op"), "{e}");
    // Not detected by itself: four numbers could be many things.
    assert!(Trace::parse("p1.lis", arc.as_bytes(), None).is_err());
    let opts = LoadOptions {
        assume_op: Some(AssumeOp::Read),
        ..named.clone()
    };
    let t = Trace::parse_with("p1.lis", arc.as_bytes(), &opts).unwrap();
    assert_eq!(t.records.len(), 3);
    assert!(!t.timed);
    assert!(t.locality_only().unwrap().contains("locality only"));
    assert!(t.check_mode(ReplayMode::Timed { speed: 1.0 }).is_err());
    assert!(t.check_mode(ReplayMode::Rate { iops: 100.0 }).is_ok());
    // An assumption for a trace that has operations is refused.
    let e = Trace::parse_with(
        "d",
        "0 0 8 8 1\n".as_bytes(),
        &LoadOptions {
            assume_op: Some(AssumeOp::Read),
            ..LoadOptions::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("only to traces without"), "{e}");
    let raw: Vec<u8> = [5u32, 6].iter().flat_map(|b| b.to_le_bytes()).collect();
    let mut o = LoadOptions {
        format: Some(TraceFormat::RawU32),
        assume_op: Some(AssumeOp::Write),
        ..LoadOptions::default()
    };
    let e = Trace::parse_with("r.bin", &raw[..], &o)
        .unwrap_err()
        .to_string();
    assert!(e.contains("block size"), "{e}");
    o.block_size_bytes = Some(8192);
    let t = Trace::parse_with("r.bin", &raw[..], &o).unwrap();
    assert_eq!(t.records[1].offset_bytes, 6 * 8192);
}

#[test]
fn coarse_timestamps_warn_and_can_be_spread() {
    let text: String = (0..100)
        .map(|i| format!("0,{},4096,W,{}\n", i * 8, i / 25))
        .collect();
    let t = Trace::parse("s.csv", text.as_bytes(), None).unwrap();
    assert_eq!(t.distinct_times, 4);
    assert!(
        t.warnings()[0].contains("coarse timestamps"),
        "{:?}",
        t.warnings()
    );
    let s = Trace::parse_with(
        "s.csv",
        text.as_bytes(),
        &LoadOptions {
            spread_ticks: true,
            ..LoadOptions::default()
        },
    )
    .unwrap();
    assert!(s.warnings().is_empty());
    assert_eq!(s.records[1].arrival_ns, 1_000_000_000 / 25);
    assert!(
        s.records
            .windows(2)
            .all(|w| w[0].arrival_ns < w[1].arrival_ns)
    );
}

#[test]
fn rate_replay_spaces_requests_evenly() {
    let t = Arc::new(sample());
    let mut w = TraceWorkload::new(t, &[], ReplayMode::Rate { iops: 1000.0 }, 2, 1 << 30);
    let at: Vec<u64> = std::iter::from_fn(|| w.next(0))
        .map(|r| r.at_ns.unwrap())
        .collect();
    assert_eq!(
        at,
        vec![0, 1_000_000, 2_000_000, 3_000_000, 4_000_000, 5_000_000]
    );
}

#[test]
fn replay_filters_devices_wraps_offsets_and_repeats() {
    let t = Arc::new(sample());
    let mut w = TraceWorkload::new(
        t.clone(),
        &[0],
        ReplayMode::Timed { speed: 2.0 },
        2,
        1 << 20,
    );
    let reqs: Vec<WlRequest> = std::iter::from_fn(|| w.next(0)).collect();
    assert_eq!(reqs.len(), 4);
    assert!(
        reqs.iter()
            .all(|r| r.offset_bytes + r.len_bytes <= 1 << 20 && r.offset_bytes % 512 == 0)
    );
    assert_eq!(reqs[0].at_ns, Some(0));
    assert!(reqs[2].at_ns.unwrap() > reqs[1].at_ns.unwrap());
}
