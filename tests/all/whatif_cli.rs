//! `vramscope whatif` end to end on real H200 snapshots: the self-check, the table, the JSON
//! schema, and the errors a user meets (a bad setting, a snapshot without history, a trace that
//! contradicts its state).

use std::path::{Path, PathBuf};

use crate::support::cli::run_command;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn whatif(args: &[&std::ffi::OsStr]) -> (i32, String, String) {
    run_command("whatif", args)
}

fn os(path: &Path) -> &std::ffi::OsStr {
    path.as_os_str()
}

#[test]
fn a_sweep_prints_the_self_check_and_one_row_per_setting() {
    let snapshot = fixture("pytorch/frag_oom.pickle");
    let (code, stdout, stderr) = whatif(&[os(&snapshot)]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("self-check OK"), "{stdout}");
    assert!(stdout.contains("(recorded)"), "{stdout}");
    assert!(stdout.contains("expandable_segments:True"), "{stdout}");
    assert!(stdout.contains("roundup_power2_divisions:4"), "{stdout}");
    assert!(stdout.contains("max_split_size_mb:"), "{stdout}");
}

#[test]
fn json_follows_the_whatif_schema() {
    let snapshot = fixture("pytorch/frag_oom.pickle");
    let (code, stdout, stderr) = whatif(&[
        os(&snapshot),
        "--setting".as_ref(),
        "expandable_segments:True".as_ref(),
        "--setting".as_ref(),
        "default".as_ref(),
        "--json".as_ref(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(doc["schema"], "vramscope.whatif/1");
    assert_eq!(doc["self_check"]["reliable"], true, "{stdout}");
    let results = doc["results"].as_array().expect("results");
    assert_eq!(results.len(), 2);
    let settings: Vec<&str> = results
        .iter()
        .filter_map(|r| r["setting"].as_str())
        .collect();
    assert!(
        settings.contains(&"expandable_segments:True"),
        "{settings:?}"
    );
    assert!(settings.contains(&"default"), "{settings:?}");
    for result in results {
        assert!(
            result["peak_reserved_bytes"]
                .as_u64()
                .is_some_and(|b| b > 0)
        );
        assert!(result["oom"].is_boolean());
        assert!(result.get("oom_event").is_some());
    }
    // The recorded (default) setting ran out where the real run did.
    let default = results
        .iter()
        .find(|r| r["setting"] == "default")
        .expect("default row");
    assert_eq!(default["oom"], true);
    assert_eq!(
        default["oom_event"], doc["self_check"]["real_oom_events"][0],
        "{stdout}"
    );
}

#[test]
fn an_unknown_setting_is_a_usage_error_that_lists_the_known_ones() {
    let snapshot = fixture("pytorch/frag_oom.pickle");
    let (code, _, stderr) = whatif(&[
        os(&snapshot),
        "--setting".as_ref(),
        "expandable_segment:True".as_ref(),
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("'expandable_segment'"), "{stderr}");
    assert!(stderr.contains("max_split_size_mb"), "{stderr}");
    let (code, _, stderr) = whatif(&[os(&snapshot), "--cap".as_ref(), "lots".as_ref()]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--cap 'lots' is not a size"), "{stderr}");
}

#[test]
fn a_snapshot_without_history_says_how_to_record_it() {
    let snapshot = fixture("pytorch/frag_oom.v-bare.pickle");
    let (code, stdout, stderr) = whatif(&[os(&snapshot)]);
    assert_eq!(code, 1, "{stdout}");
    assert!(stderr.contains("_record_memory_history"), "{stderr}");
}

#[test]
fn a_missing_device_names_the_ones_there_are() {
    let snapshot = fixture("pytorch/frag_oom.pickle");
    let (code, _, stderr) = whatif(&[os(&snapshot), "--device".as_ref(), "7".as_ref()]);
    assert_eq!(code, 1);
    assert!(stderr.contains("no device 7"), "{stderr}");
    assert!(stderr.contains("device(s) 0"), "{stderr}");
}

#[test]
fn a_cap_below_what_the_trace_reserved_is_not_taken_for_the_recorded_runs() {
    // The uncapped two-stream run reserved up to 380 MiB; 296 MiB cannot have been its cap.
    let snapshot = fixture("whatif/two_streams.pickle");
    let args = [
        os(&snapshot),
        "--setting".as_ref(),
        "garbage_collection_threshold:0.6".as_ref(),
        "--cap".as_ref(),
        "310378496".as_ref(),
    ];
    let (code, stdout, stderr) = whatif(&args);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("self-check OK"), "{stdout}");
    assert!(!stdout.contains("UNRELIABLE"), "{stdout}");
    assert!(stdout.contains("did not run under that cap"), "{stdout}");
    let mut json_args = args.to_vec();
    json_args.push("--json".as_ref());
    let (code, stdout, stderr) = whatif(&json_args);
    assert_eq!(code, 0, "{stderr}");
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(doc["self_check"]["reliable"], true, "{stdout}");
    assert_eq!(doc["self_check"]["cap_bytes"], serde_json::Value::Null);
    assert_eq!(doc["limits"]["cap_bytes"], 310378496u64);
    // A capped run's own trace under its own cap: the cap is the recorded run's, as before.
    let recorded = fixture("whatif/recorded/two_streams__default__cap310378496.pickle");
    let (code, stdout, stderr) = whatif(&[
        os(&recorded),
        "--setting".as_ref(),
        "default".as_ref(),
        "--cap".as_ref(),
        "310378496".as_ref(),
        "--json".as_ref(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(doc["self_check"]["reliable"], true, "{stdout}");
    assert_eq!(doc["self_check"]["cap_bytes"], 310378496u64);
}

#[test]
fn a_two_stream_trace_gets_a_peak_range_and_an_uncertain_verdict_where_timing_decides() {
    let snapshot = fixture("whatif/two_streams.pickle");
    let (code, stdout, stderr) = whatif(&[
        os(&snapshot),
        "--setting".as_ref(),
        "default".as_ref(),
        "--cap".as_ref(),
        "220MiB".as_ref(),
        "--json".as_ref(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    let result = &doc["results"][0];
    let range = result["peak_reserved_range_bytes"]
        .as_array()
        .expect("a range for a trace whose frees wait for another stream");
    assert_eq!(range.len(), 2);
    assert!(range[0].as_u64() <= range[1].as_u64(), "{range:?}");
    assert_eq!(result["timing_uncertain"], true, "{stdout}");
    let (code, stdout, stderr) = whatif(&[os(&snapshot), "--setting".as_ref(), "default".as_ref()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("depending on when the GPU finishes other streams' work"),
        "{stdout}"
    );
    // A single-stream trace has no range.
    let single = fixture("pytorch/frag_oom.pickle");
    let (code, stdout, stderr) = whatif(&[
        os(&single),
        "--setting".as_ref(),
        "default".as_ref(),
        "--json".as_ref(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(
        doc["results"][0]["peak_reserved_range_bytes"],
        serde_json::Value::Null
    );
    assert_eq!(doc["results"][0]["timing_uncertain"], false);
}

#[test]
fn a_verdict_the_placement_of_segments_decides_is_uncertain_in_words_and_json() {
    // The held-out checkpointed transformer (H200) under max_split_size_mb:64 and a 777 MiB
    // cap: its ground truth fit, 3 of 6 repeats ran out; which released address range the
    // driver reuses decides it (docs/whatif-validation.md).
    let snapshot = fixture("whatif/heldout2/ckpt_transformer.pickle");
    let args = |json: bool| {
        let mut args = vec![
            os(&snapshot),
            "--setting".as_ref(),
            "max_split_size_mb:64".as_ref(),
            "--cap".as_ref(),
            "814743552".as_ref(),
        ];
        if json {
            args.push("--json".as_ref());
        }
        whatif(&args)
    };
    let (code, stdout, stderr) = args(true);
    assert_eq!(code, 0, "{stderr}");
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    let result = &doc["results"][0];
    assert_eq!(result["placement_uncertain"], true, "{stdout}");
    let drawn = result["placement"]["drawn"].as_u64().expect("drawn");
    let ran_out = result["placement"]["ran_out"].as_u64().expect("ran_out");
    // Some drawn placements run out and some do not, whichever the replay itself did.
    assert!(0 < ran_out && ran_out < drawn, "{stdout}");
    let (code, stdout, stderr) = args(false);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains(&format!(
            "uncertain: depends on where the driver places segments: {ran_out} of {drawn} other \
             placements run out)"
        )),
        "{stdout}"
    );
    // Without a cap the order cannot make it run out: nothing is replayed again.
    let (code, stdout, stderr) = whatif(&[
        os(&snapshot),
        "--setting".as_ref(),
        "default".as_ref(),
        "--json".as_ref(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(doc["results"][0]["placement"], serde_json::Value::Null);
    assert_eq!(doc["results"][0]["placement_uncertain"], false);
}

#[test]
fn drawn_placements_follow_the_drivers_chunks_as_often_as_the_recorded_driver_did() {
    // `small_churn` (H200) under roundup_power2_divisions:4 and a 233 MiB cap: its 7 real runs
    // all ran out. Its trace's driver put all 68 segments it made while released space could
    // hold them where its 32 MiB chunks say (64 in released space, 4 in a chunk's top that no
    // segment had), and replayed that way the setting runs out. Drawn placements that ignored
    // the chunks (a random released range at a random end, as before 2026-12-03) fit in 4 of
    // 8; following them 93 % of the time, with released space only, 1 of 8 fit. Following
    // them 98 % of the time, every draw runs out and the verdict is certain.
    let snapshot = fixture("whatif/small_churn.pickle");
    let (code, stdout, stderr) = whatif(&[
        os(&snapshot),
        "--setting".as_ref(),
        "roundup_power2_divisions:4".as_ref(),
        "--cap".as_ref(),
        "244318208".as_ref(),
        "--json".as_ref(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    let result = &doc["results"][0];
    assert_eq!(result["oom"], true, "{stdout}");
    let drawn = result["placement"]["drawn"].as_u64().expect("drawn");
    let ran_out = result["placement"]["ran_out"].as_u64().expect("ran_out");
    assert_eq!(drawn, 8, "{stdout}");
    assert_eq!(ran_out, drawn, "{stdout}");
    assert_eq!(result["placement_uncertain"], false, "{stdout}");
}
