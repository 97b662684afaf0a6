//! Issue 10, "Proven on real cases": every case of the real corpus `tests/fixtures/cases2/`
//! (made on an H200 by `scripts/cases2/`) must get its primary category, and the first
//! recommendation of every out-of-memory case must be one that removed the failure when the
//! case was re-run for real. The table goes to `docs/diagnosis-validation.md`.
//!
//! The mapping from a recommendation to a re-run and the judging rules are tested here on
//! recommendations the diagnosis really makes and on a SYNTHETIC truth file written in this
//! file (made up to exercise the rules; it is not a real case and nothing here presents it as
//! one). The real corpus test diagnoses the corpus the H200 run made (19 cases, a second or
//! so); the scripts that make the corpus run their own dry-run tests from here too.

use crate::validation;

use std::collections::BTreeMap;
use std::path::PathBuf;

use vramscope_core::diagnose::recommend;
use vramscope_core::model::{GIB, MIB};

use validation::mapping::{Change, Knob, recommended_change};
use validation::truth::{Truth, Verdict, judge};
use validation::{Recording, evaluate, evaluate_with, load_truths, render_table};

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn conf(pairs: &[(&str, &str)]) -> Change {
    Change::AllocConf(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<BTreeMap<_, _>>(),
    )
}

const TOTAL: u64 = 150_109_880_320; // an H200 as torch sees it (139.80 GiB)

// ------------------------------------------------------------------------------------ mapping

#[test]
fn allocator_recommendations_map_to_their_settings() {
    let rec = recommend::expandable_segments(Some(GIB));
    assert_eq!(
        recommended_change(&rec, None),
        Ok(conf(&[("expandable_segments", "True")]))
    );
    let rec = recommend::max_split_size(Some(1536 * MIB)).unwrap_or_else(|| panic!("no rec"));
    assert_eq!(
        recommended_change(&rec, None),
        Ok(conf(&[("max_split_size_mb", "1024")]))
    );
}

#[test]
fn a_cap_recommendation_maps_to_bytes() {
    let rec = recommend::raise_memory_fraction(Some(4 * GIB), 28 * GIB, Some(TOTAL));
    let Ok(Change::Cap(Some(bytes))) = recommended_change(&rec, Some(TOTAL)) else {
        panic!("{:?}", recommended_change(&rec, Some(TOTAL)));
    };
    // The fraction covers what was needed (28 GiB) with the recommendation's margin.
    assert!((28 * GIB..40 * GIB).contains(&bytes), "{bytes}");
    // Without a device total a fraction cannot become bytes: said, not guessed.
    assert!(recommended_change(&rec, None).is_err());
}

#[test]
fn a_batch_recommendation_maps_to_its_factor() {
    let rec = recommend::reduce_batch_size(Some(GIB), Some(10 * GIB));
    assert_eq!(
        recommended_change(&rec, None),
        Ok(Change::Scale {
            knob: Knob::Batch,
            factor: 0.5
        })
    );
}

#[test]
fn other_process_and_code_fixes_map_to_their_runs() {
    let rec = recommend::free_other_process(&[(1234, 100 * GIB)], Some(GIB));
    assert_eq!(recommended_change(&rec, None), Ok(Change::OtherProcessGone));
    let rec = recommend::find_leak(None);
    assert_eq!(
        recommended_change(&rec, None),
        Ok(Change::CodeFix("fix-leak".into()))
    );
    let rec = recommend::inference_mode();
    assert_eq!(
        recommended_change(&rec, None),
        Ok(Change::CodeFix("no-grad-inference".into()))
    );
}

#[test]
fn recommendations_that_no_rerun_tried_say_so() {
    for rec in [
        recommend::mixed_precision(None),
        recommend::activation_checkpointing(),
    ] {
        let err = recommended_change(&rec, Some(TOTAL)).err();
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains(&rec.id) && e.contains("not one of the knobs")),
            "{err:?}"
        );
    }
}

// ------------------------------------------------------------------- judging (SYNTHETIC truth)

/// A made-up truth file (not a real case): a capped job with expandable segments already on,
/// re-run under settings, caps and batch factors with invented outcomes.
const SYNTHETIC_TRUTH: &str = r#"{
 "schema": "vramscope.case-truth/2", "case": "synthetic_rules", "kind": "oom",
 "expected": {"primary_category": "memory-cap", "original_outcome": "oom"},
 "device": {"total_bytes": 150109880320},
 "baseline": {"alloc_conf": "expandable_segments:True", "cap_bytes": 4294967296},
 "original": {"id": "original", "outcome": "oom"},
 "reruns": [
  {"id": "max_split_size_mb_32", "outcome": "oom",
   "change": {"kind": "alloc-conf", "settings": {"max_split_size_mb": "32"}}},
  {"id": "max_split_size_mb_64", "outcome": "completed",
   "change": {"kind": "alloc-conf", "settings": {"max_split_size_mb": "64"}}},
  {"id": "cap_x2", "outcome": "oom", "cap_bytes": 8589934592,
   "change": {"kind": "cap", "factor": 2.0, "cap_bytes": 8589934592}},
  {"id": "cap_x8", "outcome": "completed", "cap_bytes": 34359738368, "peak_reserved_bytes": 30064771072,
   "change": {"kind": "cap", "factor": 8.0, "cap_bytes": 34359738368}},
  {"id": "no_cap", "outcome": "completed", "cap_bytes": null, "peak_reserved_bytes": 30064771072,
   "change": {"kind": "cap", "factor": null, "cap_bytes": null}},
  {"id": "batch_x0.5", "outcome": "completed",
   "change": {"kind": "scale", "knob": "batch", "factor": 0.5}},
  {"id": "batch_x0.75", "outcome": "oom",
   "change": {"kind": "scale", "knob": "batch", "factor": 0.75}},
  {"id": "batch_x0.25", "outcome": "not-run", "implied_outcome": "completed",
   "change": {"kind": "scale", "knob": "batch", "factor": 0.25}},
  {"id": "fix_fix-leak", "outcome": "timeout",
   "change": {"kind": "code-fix", "fix": "fix-leak"}}
 ]
}"#;

fn synthetic() -> Truth {
    Truth::parse(SYNTHETIC_TRUTH).unwrap_or_else(|e| panic!("{e}"))
}

fn ids(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn allocator_settings_need_the_exact_run() {
    let t = synthetic();
    assert_eq!(
        judge(&conf(&[("max_split_size_mb", "64")]), &t),
        Verdict::Proven(ids(&["max_split_size_mb_64"]))
    );
    assert_eq!(
        judge(&conf(&[("max_split_size_mb", "32")]), &t),
        Verdict::Refuted(ids(&["max_split_size_mb_32"]))
    );
    // 128 was not run, and max_split_size_mb is not monotonic: nothing decides it.
    assert!(matches!(
        judge(&conf(&[("max_split_size_mb", "128")]), &t),
        Verdict::Untried(_)
    ));
}

#[test]
fn a_setting_already_on_is_refuted_by_the_original() {
    assert_eq!(
        judge(&conf(&[("expandable_segments", "true")]), &synthetic()),
        Verdict::Refuted(ids(&["original"]))
    );
}

#[test]
fn caps_are_judged_monotonically() {
    let t = synthetic();
    // 32 GiB completed, so 40 GiB does too; the uncapped run peaked at 28 GiB, so 28 GiB is enough.
    assert_eq!(
        judge(&Change::Cap(Some(40 * GIB)), &t),
        Verdict::Proven(ids(&["cap_x8", "no_cap"]))
    );
    assert_eq!(
        judge(&Change::Cap(Some(28 * GIB)), &t),
        Verdict::Proven(ids(&["no_cap"]))
    );
    // 8 GiB failed, so 4.01 GiB fails too.
    assert_eq!(
        judge(&Change::Cap(Some(4 * GIB + 9 * MIB)), &t),
        Verdict::Refuted(ids(&["cap_x2"]))
    );
    // 16 GiB: between a failure at 8 and a need of 28, nothing was run that decides it.
    assert!(matches!(
        judge(&Change::Cap(Some(16 * GIB)), &t),
        Verdict::Untried(_)
    ));
    assert_eq!(
        judge(&Change::Cap(None), &t),
        Verdict::Proven(ids(&["no_cap"]))
    );
}

#[test]
fn batch_factors_are_judged_monotonically() {
    let t = synthetic();
    let batch = |factor| Change::Scale {
        knob: Knob::Batch,
        factor,
    };
    assert_eq!(
        judge(&batch(0.5), &t),
        Verdict::Proven(ids(&["batch_x0.5"]))
    );
    // 0.25 did not run (implied only): it is proven by 0.5, which did.
    assert_eq!(
        judge(&batch(0.25), &t),
        Verdict::Proven(ids(&["batch_x0.5"]))
    );
    assert_eq!(
        judge(&batch(0.9), &t),
        Verdict::Refuted(ids(&["batch_x0.75"]))
    );
    assert!(matches!(judge(&batch(0.6), &t), Verdict::Untried(_)));
    // The sequence knob was never scaled.
    assert!(matches!(
        judge(
            &Change::Scale {
                knob: Knob::Sequence,
                factor: 0.5
            },
            &t
        ),
        Verdict::Untried(_)
    ));
}

#[test]
fn runs_that_did_not_finish_prove_nothing() {
    let t = synthetic();
    assert!(matches!(
        judge(&Change::CodeFix("fix-leak".into()), &t),
        Verdict::Untried(_)
    ));
    assert!(matches!(
        judge(&Change::OtherProcessGone, &t),
        Verdict::Untried(_)
    ));
}

// ------------------------------------- the whole pipeline on a SYNTHETIC case over real evidence

/// The log and snapshot of the real `fragmentation` case of the first corpus with a made-up
/// truth file (its re-run outcomes are invented for this test; the real corpus has its own).
#[test]
fn the_pipeline_diagnoses_maps_judges_and_tabulates() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let cases = manifest().join("tests/fixtures/cases");
    for file in ["fragmentation.log", "fragmentation.pickle"] {
        std::fs::copy(
            cases.join(file),
            dir.path().join(format!("synthetic_{file}")),
        )
        .unwrap_or_else(|e| panic!("{file}: {e}"));
    }
    let truth_text = r#"{
 "schema": "vramscope.case-truth/2", "case": "synthetic_fragmentation", "kind": "oom",
 "expected": {"primary_category": "fragmentation", "original_outcome": "oom"},
 "device": {"total_bytes": 150109880320},
 "baseline": {"alloc_conf": "", "cap_bytes": null},
 "original": {"id": "original", "outcome": "oom"},
 "artifacts": {"log": "synthetic_fragmentation.log", "snapshot": "synthetic_fragmentation.pickle"},
 "reruns": [
  {"id": "expandable_segments", "outcome": "completed",
   "change": {"kind": "alloc-conf", "settings": {"expandable_segments": "True"}}},
  {"id": "max_split_size_mb_1024", "outcome": "completed",
   "change": {"kind": "alloc-conf", "settings": {"max_split_size_mb": "1024"}}},
  {"id": "max_split_size_mb_4096", "outcome": "oom",
   "change": {"kind": "alloc-conf", "settings": {"max_split_size_mb": "4096"}}}
 ]
}"#;
    std::fs::write(
        dir.path().join("synthetic_fragmentation.truth.json"),
        truth_text,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let truths = load_truths(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(truths.len(), 1);
    let result = evaluate(dir.path(), &truths[0]).unwrap_or_else(|e| panic!("{e}"));

    // What the pipeline reports is what diagnosing the same evidence directly gives.
    let input = validation::evidence(dir.path(), &truths[0]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(input.logs.len(), 1);
    assert!(!input.snapshots.is_empty());
    let diagnosis = vramscope_core::diagnose::diagnose(&input);
    let primary = diagnosis.primary().unwrap_or_else(|| panic!("no finding"));
    assert_eq!(result.diagnosed, primary.category.as_str());
    let first = primary
        .recommendations
        .first()
        .unwrap_or_else(|| panic!("no recommendation"));
    assert_eq!(result.first_recommendation, first.id);
    let expected_verdict = match recommended_change(first, Some(TOTAL)) {
        Ok(change) => judge(&change, &truths[0]),
        Err(why) => Verdict::Untried(why),
    };
    assert_eq!(result.verdict.as_ref(), Some(&expected_verdict));

    let table = render_table(std::slice::from_ref(&result));
    assert!(
        table.contains("| synthetic_fragmentation | oom | fragmentation |"),
        "{table}"
    );
    let works = usize::from(result.first_recommendation_works());
    assert!(
        table.contains(&format!(
            "First recommendation removed the failure when re-run: {works} of 1 OOM cases."
        )),
        "{table}"
    );
}

// ------------------------------------------------------------------- the corpus scripts' own tests

/// The scripts that make the corpus on the GPU (`scripts/cases2/`) dry-run here against their
/// mocks (a fake torch, nvidia-smi and vramscope): registry, candidate grid, bisection, timeouts,
/// both entry points in smoke mode, truth files and archives. Numbers from the mocks are not
/// real; control flow, arguments and file names are what this checks.
#[test]
fn corpus_scripts_dry_run_against_their_mocks() {
    let output = std::process::Command::new("python3")
        .arg("-B")
        .arg(manifest().join("scripts/cases2/test_cases2.py"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 (scripts/cases2's tests need it): {e}"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("\nOK"), "{stderr}");
}

// ------------------------------------------------------------------------------ the real corpus

const CORPUS: &str = "tests/fixtures/cases2";
const DOC: &str = "docs/diagnosis-validation.md";

/// The validation document: this header, then the table the test renders.
const DOC_HEADER: &str = "# Diagnosis validation on real cases\n\n\
Written by `tests/all/diagnosis_validation.rs` (`VRAMSCOPE_WRITE_VALIDATION=1 cargo test --test \
all diagnosis_validation::`) from the real corpus in `tests/fixtures/cases2/`, made on an \
NVIDIA H200 by `scripts/cases2/`: each case's log, snapshots and capture are diagnosed as \
`vramscope diagnose` would, and the first recommendation of every out-of-memory case is mapped \
onto the candidate fixes that were re-run for real (rules in `tests/fixtures/cases2/README.md`). \
Live cases are judged twice, from vramscope's recording and from nvidia-smi's own CSV logs of \
the same run; for them the primary finding's severity and the processes found leaking must be \
right too. Targets (issue 10): primary category right in every case; first recommendation \
removed the failure in at least 90 % of the OOM cases.\n\n";

/// Where the sections written by other tests begin (issue 35's fresh batch).
const LATER_SECTIONS: &str = "\n## ";

/// Cases the corpus holds. The issue asks for at least 20; the H200 run built 20, and
/// `two_streams` did not behave as built (its request was exactly what was left free, see
/// `docs/gpu-verification/cases2-run/`), so 19 are fixtures until its rebuilt version has run on
/// the GPU (`bash scripts/cases2/run_oom.sh --cases two_streams`). A case lost from the folder
/// fails here instead of silently shrinking the table.
const CORPUS_CASES: usize = 20;

/// The issue's target for first recommendations: at least 90 % of the OOM cases.
const FIRST_RECOMMENDATION_WORKS_PERCENT: usize = 90;

#[test]
fn real_cases_hold_up_when_the_fix_is_tried() {
    let dir = manifest().join(CORPUS);
    let truths = load_truths(&dir).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        truths.len() >= CORPUS_CASES,
        "{} cases in {CORPUS}, {CORPUS_CASES} expected",
        truths.len()
    );
    for t in &truths {
        assert!(!t.smoke, "{}: a smoke-mode case is not a real case", t.case);
        if let (Some(o), Some(want)) = (&t.original, &t.expected.original_outcome) {
            assert_eq!(
                &o.outcome, want,
                "{}: the original run did not behave as built",
                t.case
            );
        }
    }
    // Every case as recorded by vramscope, and the live cases once more from nvidia-smi's own
    // CSV logs of the same run: both recordings must give the same judgement.
    let results: Vec<_> = truths
        .iter()
        .flat_map(|t| {
            let smi = t.kind == "live" && t.artifacts.smi_gpu_csv.is_some();
            std::iter::once(Recording::Vramscope)
                .chain(smi.then_some(Recording::NvidiaSmi))
                .map(move |recording| (t, recording))
        })
        .map(|(t, recording)| {
            evaluate_with(&dir, t, recording).unwrap_or_else(|e| panic!("{}: {e}", t.case))
        })
        .collect();
    let doc = format!("{DOC_HEADER}{}", render_table(&results));
    let doc_path = manifest().join(DOC);
    let on_disk = std::fs::read_to_string(&doc_path).unwrap_or_default();
    // The sections after this corpus's table (the fresh batch of tests/all/run_validation.rs)
    // are another test's to write.
    let later_sections = on_disk.find(LATER_SECTIONS).map_or("", |at| &on_disk[at..]);
    if std::env::var_os("VRAMSCOPE_WRITE_VALIDATION").is_some() {
        std::fs::write(&doc_path, format!("{doc}{later_sections}"))
            .unwrap_or_else(|e| panic!("{}: {e}", doc_path.display()));
    } else {
        let ours = &on_disk[..on_disk.len() - later_sections.len()];
        assert_eq!(
            ours, doc,
            "{DOC} is not the table of the current diagnosis: rerun with VRAMSCOPE_WRITE_VALIDATION=1"
        );
    }
    let wrong: Vec<String> = results
        .iter()
        .filter(|r| !r.category_right())
        .map(|r| {
            format!(
                "{}: {} ({}, leaking {:?}) instead of {} ({:?}, leaking {:?})",
                r.case,
                r.diagnosed,
                r.severity,
                r.leaking_pids,
                r.expected,
                r.expected_severity,
                r.expected_leaking_pids
            )
        })
        .collect();
    let ooms: Vec<_> = results.iter().filter(|r| r.verdict.is_some()).collect();
    let failing: Vec<String> = ooms
        .iter()
        .filter(|r| !r.first_recommendation_works())
        .map(|r| {
            format!(
                "{}: {} -> {}",
                r.case,
                r.first_recommendation,
                r.verdict.as_ref().map_or(String::new(), Verdict::describe)
            )
        })
        .collect();
    // The issue's targets: the primary category right in every case, and the first
    // recommendation removing the failure for real in at least 90 % of the OOM cases.
    assert!(
        wrong.is_empty(),
        "primary category right in {} of {} (target: all): {wrong:#?}",
        results.len() - wrong.len(),
        results.len()
    );
    assert!(
        (ooms.len() - failing.len()) * 100 >= FIRST_RECOMMENDATION_WORKS_PERCENT * ooms.len(),
        "first recommendation works in {} of {} OOM cases (target \
         {FIRST_RECOMMENDATION_WORKS_PERCENT} %): {failing:#?}",
        ooms.len() - failing.len(),
        ooms.len()
    );
}
