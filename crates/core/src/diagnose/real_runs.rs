//! What the re-runs of `vramscope run --prove` prove: the change that removed the failure with
//! the least slowdown and the most headroom becomes the first recommendation, "proven by a real
//! run" (stronger than a replay: the job itself went past its failure); where none did, the
//! finding says so, how much memory the best try still lacked, and which changes no environment
//! variable can make.

use super::finding::{
    Category, Evidence, EvidenceSource, Finding, Recommendation, Severity, Unit, Verification,
};
use crate::model::format_bytes;
use crate::model::run::{MEMORY_FRACTION_VARIABLE, ProofRun, raised_memory_fraction};

/// The outcome word of a re-run that got past the original failure.
pub const REMOVED: &str = "removed";

/// The re-run to recommend: among those that removed the failure, the fastest (relative speed,
/// unknown counts as 1), then the lowest peak reserved (the most headroom).
pub fn best(proof: &[ProofRun]) -> Option<&ProofRun> {
    proof
        .iter()
        .filter(|p| p.outcome == REMOVED)
        .max_by(|a, b| {
            let speed = |p: &ProofRun| p.relative_speed.unwrap_or(1.0);
            speed(a)
                .total_cmp(&speed(b))
                .then(b.peak_reserved_bytes.cmp(&a.peak_reserved_bytes))
        })
}

/// A change as a sentence names it: the hook's raised cap as the job's cap raised, anything else
/// as written.
fn change_in_words(change: &str) -> String {
    match raised_memory_fraction(change) {
        Some(fraction) if is_whole_gpu(fraction) => {
            format!("the job's memory cap lifted to the whole GPU (fraction {fraction})")
        }
        Some(fraction) => format!("the job's memory cap raised to {fraction} of the GPU"),
        None => change.to_owned(),
    }
}

/// Whether a raised cap's fraction is the whole card: the cap, not its size, was the limit.
fn is_whole_gpu(fraction: &str) -> bool {
    fraction.parse::<f64>().is_ok_and(|f| f >= 1.0)
}

/// How a change is applied: `export NAME=VALUE` for an environment variable, the command line
/// for an argument.
fn action(change: &str) -> String {
    if let Some(fraction) = raised_memory_fraction(change) {
        // The hook's raised cap: the job's own cap is the thing to change.
        return format!(
            "torch.cuda.set_per_process_memory_fraction({fraction})  # where the job sets its \
             cap\n# or, with no code change: {MEMORY_FRACTION_VARIABLE}={fraction} vramscope \
             run -- COMMAND (raises the job's own cap to {fraction})"
        );
    }
    match change.split_once('=') {
        Some((name, value))
            if !name.starts_with('-')
                && name.chars().all(|c| c.is_ascii_uppercase() || c == '_') =>
        {
            format!("export {name}={value}")
        }
        _ => format!("run the job with {change}"),
    }
}

fn evidence_of(run: &ProofRun) -> Evidence {
    let mut display = run.outcome.replace('_', " ");
    if let Some(at) = run.ran_out_at_allocation {
        display.push_str(&format!(" at allocation {at}"));
    }
    if let Some(peak) = run.peak_reserved_bytes {
        display.push_str(&format!(", peak reserved {}", format_bytes(peak)));
    }
    if run.relative_speed.is_some() {
        display.push_str(&format!(", speed {}", run.speed_text()));
    }
    if let Some(why) = &run.ended_by {
        display.push_str(&format!(", ended by: {why}"));
    }
    Evidence::text(
        format!("re-run with {}", run.change),
        display,
        EvidenceSource::User {
            what: format!("vramscope run --prove ({})", run.folder),
        },
    )
}

/// The finding of the re-runs, `None` when there were none. A proven fix is filed under
/// `category`, the cause the diagnosis gave the failure.
pub fn finding(proof: &[ProofRun], category: Category) -> Option<Finding> {
    if proof.is_empty() {
        return None;
    }
    let evidence: Vec<Evidence> = proof.iter().map(evidence_of).collect();
    if let Some(best) = best(proof) {
        let speed = match (best.relative_speed, best.speed_basis) {
            (Some(s), Some(basis)) => {
                format!(", at ×{s:.2} the original speed ({})", basis.label())
            }
            (Some(s), None) => format!(", at ×{s:.2} the original speed"),
            _ => String::new(),
        };
        let detail = format!(
            "re-run past the original failure by a clear margin{}{speed}",
            best.peak_reserved_bytes.map_or(String::new(), |p| format!(
                ", peak reserved {}",
                format_bytes(p)
            ))
        );
        let recommendation = Recommendation {
            id: "proven-by-run".to_owned(),
            title: match raised_memory_fraction(&best.change) {
                Some(fraction) if is_whole_gpu(fraction) => {
                    format!("Lift the job's memory cap to the whole GPU (fraction {fraction})")
                }
                Some(fraction) => format!("Raise the job's memory cap to {fraction} of the GPU"),
                None => format!("Run with {}", best.change),
            },
            expected_effect: format!("The job got past its out-of-memory error with it: {detail}."),
            action: action(&best.change),
            estimated_saving_bytes: None,
            verification: Some(Verification::proven_by_run(detail)),
        };
        return Some(
            Finding::new(
                category,
                Severity::Info,
                format!(
                    "Proven by a real run: {} removes the out-of-memory error",
                    change_in_words(&best.change)
                ),
            )
            .with_evidence(evidence)
            .explained(
                "vramscope re-ran the job under the candidate changes, each in a fresh process \
                 tree, and stopped each re-run once it was past the original failure by a clear \
                 margin (more allocations than the original made, counted by the allocator hook, \
                 and one more completed optimizer step; a job without optimizer steps ran to its \
                 end), when it ran out, or at the budget. The change recommended removed the \
                 failure with the least slowdown.",
            )
            .recommend([recommendation]),
        );
    }
    let missing = proof.iter().filter_map(|p| p.missing_bytes).min();
    let title = match missing {
        Some(bytes) => format!(
            "No change tried removed the out-of-memory error; the best still lacked {}",
            format_bytes(bytes)
        ),
        None => "No change tried removed the out-of-memory error".to_owned(),
    };
    let mut finding = if category == Category::Leak {
        // A job that keeps memory from every step runs out later with any setting or smaller
        // batch: the leak is the fix, and the diagnosis's leak finding names what keeps it.
        Finding::new(Category::Leak, Severity::Critical, title)
            .with_evidence(evidence)
            .explained(
                "Every allocator setting and declared change was tried on the job itself and none \
                 got past the failure by a clear margin: the job keeps memory from step to step, \
                 so any setting only moves the failure later. Free what the loop keeps.",
            )
            .recommend([leak_change()])
    } else {
        Finding::new(Category::Capacity, Severity::Critical, title)
            .with_evidence(evidence)
            .explained(
                "Every allocator setting and declared change was tried on the job itself and none \
                 got past the failure: what the job needs does not fit, whatever the allocator \
                 does. The changes that make the job need less are in its code or its launch: a \
                 smaller batch, lower precision, activation checkpointing, sharding across GPUs.",
            )
            .recommend(capacity_changes())
    };
    if let Some(bytes) = missing {
        finding.evidence.push(Evidence::number(
            "memory missing at the best try's failure",
            bytes as f64,
            Unit::Bytes,
            format_bytes(bytes),
            EvidenceSource::Derived,
        ));
    }
    Some(finding)
}

/// What fixes a leak that no setting could outrun: the code that keeps memory from each step.
fn leak_change() -> Recommendation {
    Recommendation {
        id: "fix-leak".to_owned(),
        title: "Stop keeping GPU memory from every step (see the leak finding for the call site)"
            .to_owned(),
        expected_effect: "The live set returns to the same floor after every step.".to_owned(),
        action: "total_loss += loss.item()  # not the tensor\n\
                 history.append(out.detach().cpu())  # not the GPU tensor with its graph\n\
                 with torch.no_grad(): ...  # around evaluation"
            .to_owned(),
        estimated_saving_bytes: None,
        verification: Some(Verification::unverified(
            "a code change: re-run with `vramscope run` after it to see the floor stay flat",
        )),
    }
}

/// The changes no environment variable can make.
fn capacity_changes() -> Vec<Recommendation> {
    let unverified = || {
        Some(Verification::unverified(
            "not tried: declare it with --vary-arg (e.g. --vary-arg --batch-size=16,8) to prove it",
        ))
    };
    vec![
        Recommendation {
            id: "reduce-batch-size".to_owned(),
            title: "Reduce the batch size (or use gradient accumulation)".to_owned(),
            expected_effect:
                "Activations shrink with the batch; accumulation keeps the effective batch."
                    .to_owned(),
            action: "halve the batch size; accumulate gradients over 2 micro-batches".to_owned(),
            estimated_saving_bytes: None,
            verification: unverified(),
        },
        Recommendation {
            id: "lower-precision".to_owned(),
            title: "Train in bf16 (autocast) or with lower-precision optimizer states".to_owned(),
            expected_effect:
                "Halves activations; 8-bit optimizer states quarter Adam's two states.".to_owned(),
            action: "with torch.autocast(\"cuda\", dtype=torch.bfloat16): ...".to_owned(),
            estimated_saving_bytes: None,
            verification: unverified(),
        },
        Recommendation {
            id: "activation-checkpointing".to_owned(),
            title: "Checkpoint activations".to_owned(),
            expected_effect:
                "Keeps one layer's activations instead of all, for about a third more compute."
                    .to_owned(),
            action: "torch.utils.checkpoint.checkpoint(layer, x, use_reentrant=False)".to_owned(),
            estimated_saving_bytes: None,
            verification: unverified(),
        },
        Recommendation {
            id: "shard".to_owned(),
            title: "Shard parameters, gradients and optimizer state across GPUs (FSDP, ZeRO)"
                .to_owned(),
            expected_effect: "Each GPU keeps 1/N of the model's state.".to_owned(),
            action: "torch.distributed.fsdp.fully_shard(model)".to_owned(),
            estimated_saving_bytes: None,
            verification: unverified(),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(change: &str, outcome: &str, speed: Option<f64>, peak: Option<u64>) -> ProofRun {
        ProofRun {
            change: change.to_owned(),
            outcome: outcome.to_owned(),
            relative_speed: speed,
            peak_reserved_bytes: peak,
            ..ProofRun::default()
        }
    }

    #[test]
    fn the_fastest_removal_with_the_most_headroom_is_recommended_first() {
        let proof = [
            run(
                "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128",
                "ran_out",
                Some(1.0),
                Some(90),
            ),
            run(
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                REMOVED,
                Some(0.97),
                Some(70),
            ),
            run("--batch-size 16", REMOVED, Some(0.97), Some(50)),
            run("--batch-size 8", REMOVED, Some(0.6), Some(30)),
        ];
        let finding = finding(&proof, Category::Fragmentation).expect("a finding");
        assert!(
            finding.title.contains("--batch-size 16"),
            "{}",
            finding.title
        );
        let first = &finding.recommendations[0];
        assert_eq!(first.verification_label(), Some("proven by a real run"));
        assert_eq!(first.action, "run the job with --batch-size 16");
        assert_eq!(finding.evidence.len(), 4);
        assert_eq!(
            action("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
            "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
        );
        // A raised cap is a change to the job's own cap, not an export that would do nothing.
        let raised = action("VRAMSCOPE_RUN_MEMORY_FRACTION=0.4");
        assert!(
            raised.starts_with("torch.cuda.set_per_process_memory_fraction(0.4)"),
            "{raised}"
        );
        assert!(!raised.starts_with("export"), "{raised}");
        // ... and named as one, not as the hook's variable.
        let proven = super::finding(
            &[run(
                "VRAMSCOPE_RUN_MEMORY_FRACTION=0.4",
                "removed",
                Some(1.0),
                None,
            )],
            Category::MemoryCap,
        )
        .unwrap_or_else(|| panic!("a finding"));
        assert_eq!(
            proven.title,
            "Proven by a real run: the job's memory cap raised to 0.4 of the GPU removes the out-of-memory error"
        );
        assert_eq!(
            proven.recommendations[0].title,
            "Raise the job's memory cap to 0.4 of the GPU"
        );
        // A cap raised to the whole card is the cap lifted, not a size of the card.
        let lifted = super::finding(
            &[run(
                "VRAMSCOPE_RUN_MEMORY_FRACTION=1",
                "removed",
                Some(1.0),
                None,
            )],
            Category::MemoryCap,
        )
        .unwrap_or_else(|| panic!("a finding"));
        assert_eq!(
            lifted.recommendations[0].title,
            "Lift the job's memory cap to the whole GPU (fraction 1)"
        );
        assert!(
            lifted.title.contains("lifted to the whole GPU"),
            "{}",
            lifted.title
        );
    }

    #[test]
    fn when_nothing_works_the_finding_says_so_with_what_is_missing() {
        let mut a = run(
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
            "ran_out",
            None,
            None,
        );
        a.missing_bytes = Some(3 << 30);
        let mut b = run(
            "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:512",
            "ran_out",
            None,
            None,
        );
        b.missing_bytes = Some(1 << 30);
        let finding = finding(
            &[a, b, run("X=1", "undecided", None, None)],
            Category::Capacity,
        )
        .expect("a finding");
        assert_eq!(finding.severity, Severity::Critical);
        assert!(
            finding.title.contains("lacked 1.00 GiB"),
            "{}",
            finding.title
        );
        assert_eq!(finding.recommendations[0].id, "reduce-batch-size");
        assert!(super::finding(&[], Category::Capacity).is_none());
    }

    #[test]
    fn a_leak_that_no_change_outran_stays_a_leak() {
        let proof = [
            run(
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                "ran_out",
                None,
                None,
            ),
            run("--batch-size 8", "ran_out", None, None),
        ];
        let leak = finding(&proof, Category::Leak).expect("a finding");
        assert_eq!(leak.category, Category::Leak);
        assert_eq!(leak.recommendations[0].id, "fix-leak");
        let capacity = finding(&proof, Category::Capacity).expect("a finding");
        assert_eq!(capacity.category, Category::Capacity);
        assert_eq!(capacity.recommendations[0].id, "reduce-batch-size");
    }
}
