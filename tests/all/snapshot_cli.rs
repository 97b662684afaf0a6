//! `vramscope analyze` end to end: the binary on real fixtures, JSON numbers equal to
//! `torch.cuda.memory_stats()`, text for people, exit code 1 on unreadable input.

use std::path::PathBuf;

use crate::support::cli::run_command;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/pytorch")
        .join(name)
}

fn analyze(args: &[&std::ffi::OsStr]) -> (i32, String, String) {
    run_command("analyze", args)
}

#[test]
fn json_totals_match_memory_stats() {
    let files = ["oom.pickle", "maxsplit.pickle", "expandable.pickle"];
    let paths: Vec<PathBuf> = files.iter().map(|f| fixture(f)).collect();
    let mut args: Vec<&std::ffi::OsStr> = paths.iter().map(|p| p.as_os_str()).collect();
    args.push("--json".as_ref());
    let (code, stdout, stderr) = analyze(&args);
    assert_eq!(code, 0, "{stderr}");
    let reports: serde_json::Value = serde_json::from_str(&stdout).expect("JSON output");
    let reports = reports.as_array().expect("array");
    assert_eq!(reports.len(), files.len());
    for (report, file) in reports.iter().zip(files) {
        let truth_path = fixture(&file.replace(".pickle", ".truth.json"));
        let truth: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(truth_path).expect("truth"))
                .expect("truth JSON");
        let stats = &truth["memory_stats"];
        let totals = &report["devices"][0]["totals"];
        for (ours, key) in [
            ("all.reserved_bytes", "reserved_bytes.all.current"),
            ("all.allocated_bytes", "allocated_bytes.all.current"),
            ("large_pool.active_bytes", "active_bytes.large_pool.current"),
            (
                "small_pool.requested_bytes",
                "requested_bytes.small_pool.current",
            ),
            (
                "all.inactive_split_bytes",
                "inactive_split_bytes.all.current",
            ),
            ("all.segment_count", "segment.all.current"),
            ("all.oversize_segment_count", "oversize_segments.current"),
        ] {
            let (pool, field) = ours.split_once('.').expect("key");
            assert_eq!(totals[pool][field], stats[key], "{file}: {key}");
        }
        assert!(report["file"].as_str().unwrap_or("").ends_with(file));
        assert_eq!(report["format"], "pickle protocol 4");
    }
    assert_eq!(reports[0]["devices"][0]["oom_event_count"], 1);
    assert_eq!(reports[2]["expandable_segments"], true);
}

#[test]
fn text_report_reads_like_a_table() {
    let path = fixture("graphs.pickle");
    let (code, stdout, stderr) = analyze(&[path.as_os_str()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("12 segments, 22 blocks, 60 trace events"),
        "{stdout}"
    );
    assert!(stdout.contains("non-releasable"), "{stdout}");
    for pool in ["small", "large", "all"] {
        assert!(
            stdout.lines().any(|l| l.trim_start().starts_with(pool)),
            "{pool} row missing: {stdout}"
        );
    }
    let path = fixture("expandable.pickle");
    let (_, stdout, _) = analyze(&[path.as_os_str()]);
    assert!(
        stdout.contains("expandable segments: 2 mapped ranges"),
        "{stdout}"
    );
}

#[test]
fn unreadable_input_exits_1_and_still_reports_the_rest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("evil.pickle");
    std::fs::write(&bad, b"\x80\x02cos\nsystem\n.").expect("write");
    let missing = dir.path().join("missing.pickle");
    let good = fixture("leak.pickle");
    let (code, stdout, stderr) = analyze(&[bad.as_os_str(), good.as_os_str(), missing.as_os_str()]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("evil.pickle: not a memory snapshot"),
        "{stderr}"
    );
    assert!(stderr.contains("os.system"), "{stderr}");
    assert!(
        stderr.contains("missing.pickle: cannot read the file"),
        "{stderr}"
    );
    assert!(stdout.contains("leak.pickle"), "{stdout}");

    let (code, _, _) = analyze(&[]);
    assert_eq!(code, 2, "usage error without files");
}

#[test]
fn fragmentation_and_oom_explanations_are_reported() {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cases/fragmentation.pickle");
    let (code, stdout, stderr) = analyze(&[path.as_os_str(), "--json".as_ref()]);
    assert_eq!(code, 0, "{stderr}");
    let reports: serde_json::Value = serde_json::from_str(&stdout).expect("JSON output");
    let device = &reports[0]["devices"][0];
    let fragmentation = &device["fragmentation"];
    // PyTorch's OOM message in this case: 69.00 GiB reserved but unallocated, in split segments.
    let free = fragmentation["free_bytes"].as_u64().expect("free_bytes");
    assert_eq!(
        free,
        device["totals"]["all"]["inactive_split_bytes"]
            .as_u64()
            .unwrap_or(0)
    );
    assert_eq!(free, 69 << 30, "69.00 GiB as PyTorch reported");
    assert_eq!(fragmentation["stranded_bytes"].as_u64(), Some(free));
    assert!(fragmentation["fragmentation_ratio"].as_f64().unwrap_or(0.0) > 0.9);
    assert!(
        fragmentation["summary"]
            .as_str()
            .unwrap_or("")
            .contains("most unused memory is stranded")
    );
    let ooms = device["ooms"].as_array().expect("ooms");
    assert_eq!(ooms.len(), 3);
    let last = &ooms[2];
    assert_eq!(last["verdict"], "fragmentation");
    assert_eq!(last["rounded_request_bytes"].as_u64(), Some(3 << 29));
    assert_eq!(last["usable_largest_free_bytes"].as_u64(), Some(1 << 30));
    assert!(!device["pools"].as_array().expect("pools").is_empty());

    let (_, text, _) = analyze(&[fixture("oom.pickle").as_os_str()]);
    assert!(text.contains("fragmentation: "), "{text}");
    assert!(
        text.contains("OOM at event 298: 70.0 MiB requested (large pool"),
        "{text}"
    );
    // The GPU had 135 GiB free: a per-process cap refused the cudaMalloc, as `diagnose` says
    // (the verdict text is the diagnosis's title for it).
    assert!(
        text.contains(
            "stream 0x0). Memory cap: The allocator refused 70.0 MiB while 135 GiB was free on GPU 0"
        ),
        "{text}"
    );
    assert!(
        text.contains("The GPU had 135 GiB free for the 70.0 MiB segment"),
        "{text}"
    );
    assert!(!text.contains("Capacity"), "{text}");
    assert!(
        text.contains("fragmentation ratio (share of free memory"),
        "{text}"
    );
    let (_, json, _) = analyze(&[fixture("oom.pickle").as_os_str(), "--json".as_ref()]);
    let reports: serde_json::Value = serde_json::from_str(&json).expect("JSON output");
    let oom = &reports[0]["devices"][0]["ooms"][0];
    assert_eq!(oom["verdict"], "memory-cap");
    assert!(
        oom["verdict_text"]
            .as_str()
            .unwrap_or("")
            .starts_with("The allocator refused 70.0 MiB while 135 GiB was free"),
        "{oom}"
    );
}
