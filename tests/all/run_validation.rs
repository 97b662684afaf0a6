//! `vramscope run --prove` on a corpus of real programs that run out of memory (issue 32):
//! each case ran on a real GPU under `vramscope run --prove --try-all`, and the first
//! recommendation was then confirmed by a separate full run of the program under it, with no
//! vramscope (`scripts/run-corpus/`, results in `docs/gpu-verification/run-corpus/`). This test
//! reads those recorded results and holds the targets: where any candidate removed the failure,
//! the first recommendation is a proven one and its full run succeeded; where none did, the
//! finding says so. The table is `docs/run-validation.md`;
//! `VRAMSCOPE_WRITE_DOCS=1 cargo test --test all run_validation::` rewrites it.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::skip::skipped;

/// Why a test of this module did not do its work: the corpus has not been run on a GPU yet.
const NOT_RUN: &str = "no GPU run of the corpus is recorded yet (docs/gpu-verification/run-corpus/ \
                       is missing: run scripts/run-corpus/gpu_corpus.sh on a GPU machine)";

fn results_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/gpu-verification/run-corpus")
}

/// Every recorded case, from every `results-*.json` of the corpus folder, in corpus order;
/// `None` when the corpus has not been run on a GPU yet.
fn recorded_cases() -> Option<Vec<Value>> {
    let dir = results_dir();
    if !dir.is_dir() {
        return None;
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("results-") && n.ends_with(".json"))
        })
        .collect();
    files.sort();
    let order: Vec<String> = corpus_cases().into_iter().map(|c| c.0).collect();
    let mut cases: Vec<Value> = files
        .iter()
        .flat_map(|p| {
            let text = std::fs::read_to_string(p).unwrap();
            serde_json::from_str::<Vec<Value>>(&text).unwrap()
        })
        .filter(|c| c.get("error").is_none())
        .collect();
    // A case run twice (a later call redid it) counts once: its latest run.
    cases.reverse();
    let mut seen = std::collections::HashSet::new();
    cases.retain(|c| seen.insert(c["case"].as_str().unwrap_or("").to_owned()));
    cases.sort_by_key(|c| order.iter().position(|n| c["case"] == n.as_str()));
    Some(cases)
}

/// (name, what it is) of every case in `scripts/run-corpus/cases.json`.
fn corpus_cases() -> Vec<(String, String)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/run-corpus/cases.json");
    let cases: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    cases
        .iter()
        .map(|c| {
            (
                c["case"].as_str().unwrap().to_owned(),
                c["kind"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

fn removed(case: &Value) -> Vec<&str> {
    case["proof"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .filter(|r| r["outcome"] == "removed")
                .filter_map(|r| r["change"].as_str())
                .collect()
        })
        .unwrap_or_default()
}

fn first_finding_title(case: &Value) -> &str {
    case["findings"][0]["title"].as_str().unwrap_or("")
}

#[test]
fn every_case_of_the_corpus_was_run_on_a_gpu() {
    let Some(recorded) = recorded_cases() else {
        return skipped(
            "run_validation::every_case_of_the_corpus_was_run_on_a_gpu",
            NOT_RUN,
        );
    };
    let corpus = corpus_cases();
    assert!(
        corpus.len() >= 12,
        "the corpus has {} programs",
        corpus.len()
    );
    for (name, _) in &corpus {
        assert!(
            recorded.iter().any(|c| c["case"] == name.as_str()),
            "{name} has no recorded run in {}",
            results_dir().display()
        );
    }
}

#[test]
fn each_original_run_failed_out_of_memory_and_was_proven_or_said_unfixable() {
    let Some(cases) = recorded_cases() else {
        return skipped(
            "run_validation::each_original_run_failed_out_of_memory_and_was_proven_or_said_unfixable",
            NOT_RUN,
        );
    };
    for case in cases {
        let name = case["case"].as_str().unwrap();
        assert_ne!(case["exit"], 0, "{name}: the original run did not fail");
        let proof = case["proof"].as_array().map_or(0, Vec::len);
        let says_unfixable = first_finding_title(&case).starts_with("No change tried removed");
        assert!(
            proof > 0 || says_unfixable,
            "{name}: no re-run and no finding that says none works: {}",
            first_finding_title(&case)
        );
    }
}

#[test]
fn where_a_change_removed_the_failure_the_first_recommendation_works_in_a_full_run() {
    let Some(cases) = recorded_cases() else {
        return skipped(
            "run_validation::where_a_change_removed_the_failure_the_first_recommendation_works_in_a_full_run",
            NOT_RUN,
        );
    };
    for case in cases {
        let name = case["case"].as_str().unwrap();
        let removed = removed(&case);
        if removed.is_empty() {
            assert!(
                first_finding_title(&case).starts_with("No change tried removed"),
                "{name}: no change removed the failure, but the finding says: {}",
                first_finding_title(&case)
            );
            continue;
        }
        assert_eq!(
            case["first_recommendation"]["id"], "proven-by-run",
            "{name}: the first recommendation is not the proven fix"
        );
        let confirmation = &case["confirmation"];
        let change = confirmation["change"].as_str().unwrap_or("");
        assert!(
            removed.contains(&change),
            "{name}: recommended {change}, which no re-run proved ({removed:?})"
        );
        assert_eq!(
            confirmation["exit"], 0,
            "{name}: the full run under {change} failed: {}",
            confirmation["stderr_tail"]
        );
    }
}

/// The Markdown table of the recorded results.
fn table(cases: &[Value]) -> String {
    let kinds = corpus_cases();
    let mut out = String::from(
        "| case | what it is | cap | re-runs: change → outcome | first recommendation | full run under it |\n\
         | --- | --- | --- | --- | --- | --- |\n",
    );
    for case in cases {
        let name = case["case"].as_str().unwrap_or("");
        let kind = kinds
            .iter()
            .find(|(n, _)| n == name)
            .map_or("", |(_, k)| k.as_str());
        let proof: Vec<String> = case["proof"]
            .as_array()
            .map(|rows| {
                rows.iter()
                    .map(|r| {
                        format!(
                            "`{}` → {}",
                            r["change"].as_str().unwrap_or(""),
                            r["outcome"].as_str().unwrap_or("").replace('_', " ")
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let first = case["first_recommendation"]["title"]
            .as_str()
            .unwrap_or("")
            .replace('|', "\\|");
        let confirmed = match case.get("confirmation") {
            Some(c) if c["exit"] == 0 => format!("finished (exit 0, {} s)", c["seconds"]),
            Some(c) => format!("**failed** (exit {})", c["exit"]),
            None => "— (nothing to confirm)".to_owned(),
        };
        out.push_str(&format!(
            "| `{name}` | {kind} | {} GiB | {} | {} — {} | {confirmed} |\n",
            case["cap_gib"],
            if proof.is_empty() {
                "none".to_owned()
            } else {
                proof.join("<br>")
            },
            first_finding_title(case).replace('|', "\\|"),
            first,
        ));
    }
    out
}

#[test]
fn the_validation_document_shows_the_recorded_results() {
    let Some(cases) = recorded_cases() else {
        return skipped(
            "run_validation::the_validation_document_shows_the_recorded_results",
            NOT_RUN,
        );
    };
    let generated = table(&cases);
    let doc_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/run-validation.md");
    let doc = std::fs::read_to_string(&doc_path).unwrap_or_default();
    const START: &str = "<!-- results: generated by tests/all/run_validation.rs -->\n";
    const END: &str = "<!-- end of results -->";
    if std::env::var_os("VRAMSCOPE_WRITE_DOCS").is_some() {
        let (head, tail) = match (doc.find(START), doc.find(END)) {
            (Some(s), Some(e)) => (doc[..s].to_owned(), doc[e..].to_owned()),
            _ => (doc.clone(), format!("{END}\n")),
        };
        std::fs::write(&doc_path, format!("{head}{START}{generated}{tail}")).unwrap();
        return;
    }
    assert!(
        doc.contains(&format!("{START}{generated}{END}")),
        "docs/run-validation.md does not show the recorded results; rewrite it with \
         VRAMSCOPE_WRITE_DOCS=1 cargo test --test all run_validation::"
    );
}
