//! The real cases made on an H200 with PyTorch 2.11 (`tests/fixtures/cases/`, see its README):
//! each must get the primary category and first recommendation its `.expected.json` names, from
//! the log and the snapshot together, from the log alone, and (where a snapshot carries enough)
//! from the snapshot alone.

use std::path::{Path, PathBuf};

use serde_json::Value;
use vramscope_core::diagnose::finding::VerificationStatus;
use vramscope_core::diagnose::leak::SnapshotFacts;
use vramscope_core::diagnose::log::analyze_file;
use vramscope_core::diagnose::{Category, DiagnosisInput, diagnose};

fn cases_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cases")
}

fn snapshot_facts(path: &Path) -> Vec<SnapshotFacts> {
    let snapshot = vramscope_core::formats::pytorch::read_file(path, &|_| true)
        .unwrap_or_else(|e| panic!("{e}"));
    vramscope_core::diagnose::snapshot::facts(&std::sync::Arc::new(snapshot))
}

/// (category, first recommendation id or "none") of the primary finding.
fn verdict(input: &DiagnosisInput) -> (String, String) {
    let d = diagnose(input);
    let f = d.primary().unwrap_or_else(|| panic!("no findings"));
    (
        f.category.as_str().to_owned(),
        f.recommendations
            .first()
            .map_or("none".to_owned(), |r| r.id.clone()),
    )
}

fn expected(case: &str) -> (String, String) {
    let text = std::fs::read_to_string(cases_dir().join(format!("{case}.expected.json")))
        .unwrap_or_else(|e| panic!("{e}"));
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
    (
        v["category"].as_str().unwrap_or_default().to_owned(),
        v["first_recommendation"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

fn check(case: &str, snapshots: &[&str], snapshot_alone_suffices: bool) {
    let want = expected(case);
    let log =
        analyze_file(&cases_dir().join(format!("{case}.log"))).unwrap_or_else(|e| panic!("{e}"));
    let facts: Vec<SnapshotFacts> = snapshots
        .iter()
        .flat_map(|s| snapshot_facts(&cases_dir().join(s)))
        .collect();
    let both = DiagnosisInput {
        logs: vec![log.clone()],
        snapshots: facts.clone(),
        ..Default::default()
    };
    // With an allocation history, an allocator setting is recommended only as the what-if
    // replay the diagnosis runs proves it (issue 10): the expected setting must come first.
    assert_eq!(verdict(&both), want, "{case}: log + snapshot");
    let log_only = DiagnosisInput {
        logs: vec![log],
        ..Default::default()
    };
    assert_eq!(verdict(&log_only), want, "{case}: log alone");
    if snapshot_alone_suffices {
        let snapshot_only = DiagnosisInput {
            snapshots: facts,
            ..Default::default()
        };
        assert_eq!(verdict(&snapshot_only), want, "{case}: snapshot alone");
    }
}

#[test]
fn other_process() {
    // A snapshot alone cannot see the other process (it has no device total): log needed.
    check("other_process", &["other_process.pickle"], false);
}

#[test]
fn batch_too_large() {
    check("batch_too_large", &["batch_too_large.pickle"], true);
}

#[test]
fn fragmentation() {
    check("fragmentation", &["fragmentation.pickle"], true);
}

#[test]
fn memory_cap() {
    check("memory_cap", &["memory_cap.pickle"], true);
}

#[test]
fn leak() {
    check("leak", &["leak_step10.pickle", "leak.pickle"], true);
}

#[test]
fn healthy() {
    check("healthy", &["healthy.pickle"], true);
}

#[test]
fn snapshot_numbers_agree_with_the_oom_message() {
    // fragmentation: "Tried to allocate 1.50 GiB ... 70.25 GiB is allocated by PyTorch, and
    // 69.00 GiB is reserved by PyTorch but unallocated"
    let facts = snapshot_facts(&cases_dir().join("fragmentation.pickle"));
    let oom = facts
        .iter()
        .find_map(|f| f.oom.clone())
        .unwrap_or_else(|| panic!("no OOM in the snapshot"));
    let gib = |x: f64| (x * (1u64 << 30) as f64) as u64;
    assert_eq!(oom.requested_bytes, gib(1.5));
    assert!(
        oom.allocated_bytes.abs_diff(gib(70.25)) < gib(0.01),
        "{}",
        oom.allocated_bytes
    );
    assert!((oom.reserved_bytes - oom.allocated_bytes).abs_diff(gib(69.0)) < gib(0.01));
    assert!(
        oom.largest_usable_free_bytes < oom.requested_bytes,
        "no block fits: that is the fragmentation"
    );
}

#[test]
fn leak_snapshots_name_the_growing_call_site() {
    let facts: Vec<SnapshotFacts> = ["leak_step10.pickle", "leak.pickle"]
        .iter()
        .flat_map(|s| snapshot_facts(&cases_dir().join(s)))
        .collect();
    let d = diagnose(&DiagnosisInput {
        snapshots: facts,
        ..Default::default()
    });
    let f = d.primary().unwrap_or_else(|| panic!("no findings"));
    assert_eq!(f.category, Category::Leak);
    assert!(f.title.contains("_leak.py:"), "{}", f.title);
}

/// A real H200 run that ran out under a cap (`ckpt_transformer` of the second held-out set,
/// `docs/gpu-verification/whatif-heldout2/`): its replay gets past the failure under expandable
/// segments (which ran for real) and under `garbage_collection_threshold:0.6` (which failed later
/// for real). The threshold must not be recommended as proven, and no finding may say that
/// fragmentation is not the cause while the replay proved a setting that packs better helps.
#[test]
fn a_garbage_collection_threshold_that_only_gets_past_the_failure_is_not_proof() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/whatif/heldout2/oom/ckpt_transformer__default__cap814743552.pickle");
    let input = DiagnosisInput {
        snapshots: snapshot_facts(&path),
        ..Default::default()
    };
    let diagnosis = diagnose(&input);
    let findings = &diagnosis.findings;
    assert!(!findings.is_empty());
    let actions: Vec<&str> = findings
        .iter()
        .flat_map(|f| &f.recommendations)
        .map(|r| r.action.as_str())
        .collect();
    assert!(
        actions
            .iter()
            .any(|a| a.contains("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")),
        "{actions:?}"
    );
    assert!(
        !actions
            .iter()
            .any(|a| a.contains("garbage_collection_threshold")),
        "{actions:?}"
    );
    // The snapshot was taken at the failure (the trace goes on only with the frees of the
    // failed step): the settings pass the failing request, which is not proof of the rest.
    let statuses: Vec<VerificationStatus> = findings
        .iter()
        .flat_map(|f| &f.recommendations)
        .filter(|r| r.action.contains("PYTORCH_CUDA_ALLOC_CONF"))
        .filter_map(|r| r.verification.as_ref().map(|v| v.status))
        .collect();
    assert!(!statuses.is_empty());
    assert!(
        statuses
            .iter()
            .all(|&s| s == VerificationStatus::PassesFailingRequest),
        "{statuses:?}"
    );
    assert!(
        findings.iter().flat_map(|f| &f.evidence).any(|e| e.label
            == "tried by replay: not counted as proof: garbage_collection_threshold:0.6"),
        "the threshold is shown as tried, and why it is not proof"
    );
    for finding in findings {
        assert!(
            !finding.explanation.contains("that setting would not help"),
            "{}",
            finding.explanation
        );
    }
}

/// A real H200 job under a 4 GiB cap that keeps every step's 36 MiB output
/// (`tests/fixtures/cases2/cap_growth`): its live set never falls back, yet the steps show in its
/// call sites. The cap stopped it (removing the cap let the real run finish; doubling or
/// quadrupling it did not), and the diagnosis says it is a leak: bytes per step and the line that
/// keeps them.
#[test]
fn a_cap_under_a_live_set_growing_every_step_is_said_to_be_a_leak() {
    let cases2 = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cases2");
    let log = analyze_file(&cases2.join("cap_growth.log")).unwrap_or_else(|e| panic!("{e}"));
    let diagnosis = diagnose(&DiagnosisInput {
        logs: vec![log],
        snapshots: snapshot_facts(&cases2.join("cap_growth.pickle")),
        ..Default::default()
    });
    let findings = &diagnosis.findings;
    assert_eq!(findings[0].category, Category::MemoryCap);
    assert_eq!(findings[0].recommendations[0].id, "raise-memory-fraction");
    assert!(
        findings[0]
            .explanation
            .contains("It is a leak, not a cap too small")
            && findings[0].explanation.contains("36.0 MiB more"),
        "{}",
        findings[0].explanation
    );
    let leak = findings
        .iter()
        .find(|f| f.category == Category::Leak)
        .unwrap_or_else(|| panic!("no leak finding: {findings:#?}"));
    assert!(
        leak.title.contains("36.0 MiB per iteration") && leak.title.contains("jobs.py:433"),
        "{}",
        leak.title
    );
    let fix = &leak.recommendations[0];
    assert_eq!(fix.id, "fix-leak");
    assert!(
        fix.expected_effect.contains("36.0 MiB per step")
            && fix.expected_effect.contains("jobs.py:433 job_growth"),
        "{}",
        fix.expected_effect
    );
}

fn whatif_fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/whatif")
        .join(name)
}

fn diagnose_snapshot(path: &Path) -> Vec<vramscope_core::diagnose::Finding> {
    diagnose(&DiagnosisInput {
        snapshots: snapshot_facts(path),
        ..Default::default()
    })
    .findings
}

/// A real H200 loop that keeps every step's loss with its graph (`leak_history` of the second
/// held-out set, under a 948 MiB cap, snapshot at the failure): the replay serves the failing
/// request under `max_split_size_mb:20` with 4 MiB to spare, but the step's own pattern adds
/// 72 MiB per repetition of its call sites. Under that cap every one of the 7 settings ran out
/// for real. So no setting is recommended first: the cap is, sized by the repetitions (not by
/// one request's shortfall), and the leak is named with its call site.
#[test]
fn a_setting_whose_headroom_is_less_than_one_more_repetition_is_no_fix() {
    let findings = diagnose_snapshot(&whatif_fixture(
        "heldout2/oom/leak_history__default__cap994050048.pickle",
    ));
    let primary = &findings[0];
    assert_eq!(primary.category, Category::MemoryCap, "{}", primary.title);
    let first = &primary.recommendations[0];
    assert_eq!(first.id, "raise-memory-fraction");
    assert!(
        first
            .expected_effect
            .contains("lasts less than one more repetition")
            && !first
                .expected_effect
                .contains("That is one request's shortfall"),
        "{}",
        first.expected_effect
    );
    assert!(
        primary
            .explanation
            .contains("the step's own pattern says that is not enough"),
        "{}",
        primary.explanation
    );
    assert!(
        primary.evidence.iter().any(
            |e| e.label == "tried by replay: only gets past this request: max_split_size_mb:20"
        ),
        "the setting that passes the request is shown, not recommended"
    );
    let leak = findings
        .iter()
        .find(|f| f.category == Category::Leak)
        .unwrap_or_else(|| panic!("no leak finding"));
    assert!(
        leak.title
            .contains("workloads_heldout2.py:125 leak_history"),
        "{}",
        leak.title
    );
    assert_eq!(leak.recommendations[0].id, "fix-leak");
}

/// The failing step's pattern decides for the settings (`cases2/frag_fill_card`, whose earlier
/// iteration held far more than the failing step): the setting comes first, still only "passes
/// the failing request", with why it is judged enough. The setting ran for real.
#[test]
fn a_setting_judged_enough_by_the_failing_step_comes_first_and_says_why() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/cases2/frag_fill_card.pickle");
    let why = "iterations completed before the failure held up to";
    let findings = diagnose_snapshot(&path);
    let primary = &findings[0];
    assert_eq!(
        primary.category,
        Category::Fragmentation,
        "{}",
        primary.title
    );
    assert!(!primary.title.starts_with("Uncertain"), "{}", primary.title);
    let first = &primary.recommendations[0];
    assert_eq!(first.id, "expandable-segments", "{}", path.display());
    assert_eq!(
        first.verification.as_ref().map(|v| v.status),
        Some(VerificationStatus::PassesFailingRequest)
    );
    assert!(
        first
            .expected_effect
            .contains("Judged enough from the step that failed")
            && first.expected_effect.contains(why),
        "{}: {}",
        path.display(),
        first.expected_effect
    );
}

/// Where the pattern cannot decide (a real transformer step under a cap, recorded under
/// `garbage_collection_threshold:0.6`: its backward pass adds 32 MiB per repetition and the best
/// setting leaves 96 MiB, about two more), the finding says uncertain, the cheapest change that
/// passes the failing request comes first with why it may not be enough, a smaller batch second
/// (the cheapest change if the step needs more than the card), and what settles it third.
#[test]
fn an_undecided_pattern_is_uncertain_and_names_what_settles_it() {
    let findings = diagnose_snapshot(&whatif_fixture(
        "recorded/transformer_step__garbage_collection_threshold_0_6__cap3515875328.pickle",
    ));
    let primary = &findings[0];
    assert!(primary.title.starts_with("Uncertain:"), "{}", primary.title);
    assert!(
        primary.explanation.contains("vramscope run --prove"),
        "{}",
        primary.explanation
    );
    let first = &primary.recommendations[0];
    assert!(
        first.action.contains("PYTORCH_CUDA_ALLOC_CONF"),
        "{}",
        first.action
    );
    assert!(
        first.expected_effect.contains("It may not be enough"),
        "{}",
        first.expected_effect
    );
    let ids: Vec<&str> = primary
        .recommendations
        .iter()
        .map(|r| r.id.as_str())
        .collect();
    assert_eq!(
        ids[1..3],
        ["reduce-batch-size", "prove-by-rerun"],
        "{ids:?}"
    );
    assert!(
        primary.recommendations[1]
            .expected_effect
            .starts_with("If the setting is not enough"),
        "{}",
        primary.recommendations[1].expected_effect
    );
    assert!(
        primary.recommendations[2]
            .action
            .contains("vramscope run --prove"),
        "{}",
        primary.recommendations[2].action
    );
}

/// Real H200 logs alone of jobs a per-process cap stopped while the card had room
/// (`tests/fixtures/cases2/`, `tests/fixtures/cases/memory_cap`): the cap and the cached but
/// unallocated memory are both named, and the first recommendation is the one the message's
/// numbers support: a raised cap where the cache could not have held the request (each removed
/// the failure when re-run), an allocator setting where more was cached than requested and the
/// live set plus the request fits under the cap (expandable segments removed it).
#[test]
fn a_log_of_a_cap_refusal_names_the_cap_and_the_cached_memory() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    for (log, cap_size, first) in [
        ("cases2/cap_static.log", "4.00 GiB", "raise-memory-fraction"),
        ("cases2/cap_growth.log", "4.00 GiB", "raise-memory-fraction"),
        ("cases/memory_cap.log", "14.0 GiB", "raise-memory-fraction"),
        (
            "cases2/cap_fragmentation.log",
            "24.0 GiB",
            "expandable-segments",
        ),
    ] {
        let analysis = analyze_file(&root.join(log)).unwrap_or_else(|e| panic!("{e}"));
        let findings = diagnose(&DiagnosisInput {
            logs: vec![analysis],
            ..Default::default()
        })
        .findings;
        assert_eq!(findings[0].recommendations[0].id, first, "{log}");
        let cap = findings
            .iter()
            .find(|f| f.category == Category::MemoryCap)
            .unwrap_or_else(|| panic!("{log}: no cap finding"));
        assert!(
            cap.title
                .contains(&format!("cap of {cap_size} stopped the")),
            "{log}: {}",
            cap.title
        );
        assert!(
            cap.explanation.contains("cached but unallocated"),
            "{log}: {}",
            cap.explanation
        );
    }
}

/// `ckpt_transformer` of the second held-out set fails in its backward pass, whose repetition is
/// single allocations of one line (`_engine_run_backward`): such a repetition cannot tell layers
/// apart (the same evidence judged a real forward pass "level" that was not), so the finding is
/// uncertain, with the setting that passes the failing request first (expandable segments
/// removed the failure for real) and a smaller batch second.
#[test]
fn a_failing_step_of_single_allocations_is_uncertain_with_the_setting_first() {
    let findings = diagnose_snapshot(&whatif_fixture(
        "heldout2/oom/ckpt_transformer__default__cap814743552.pickle",
    ));
    let primary = &findings[0];
    assert!(primary.title.starts_with("Uncertain"), "{}", primary.title);
    let ids: Vec<&str> = primary
        .recommendations
        .iter()
        .map(|r| r.id.as_str())
        .collect();
    assert_eq!(
        ids[..2],
        ["expandable-segments", "reduce-batch-size"],
        "{ids:?}"
    );
    assert!(
        primary.recommendations[0]
            .expected_effect
            .contains("single allocations"),
        "{}",
        primary.recommendations[0].expected_effect
    );
}
