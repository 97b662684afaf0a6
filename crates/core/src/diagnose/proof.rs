//! Recommendations proven before they are shown: what a what-if replay of the allocation history
//! (`analysis::replay`) says about each allocator setting, turned into evidence the rules can
//! stand on.
//!
//! A setting is *proven* when the replay of the failing run under it does not run out of memory,
//! and it is shown with the predicted headroom ("replayed: peak 61.2 GiB of 64.0 GiB allowed").
//! Settings whose replay still runs out are *useless* and listed as "tried by replay: does not
//! help", so nobody spends a run on them. A replay whose self-check failed (replayed under the
//! recorded settings it did not reproduce the real run) proves nothing: recommendations then stay
//! unverified, with the self-check's reason. Without an allocation history there is nothing to
//! replay, and the recommendation says how to record one.
//!
//! The replay ends where the recorded run ended. A setting is *proven* only when the replay went
//! past the recorded failure and through at least one completed iteration of recorded work after
//! it ([`super::trajectory::iteration_after_failure`]). A snapshot taken at the failure ends inside
//! the step that failed: a setting whose replay serves the failing request then only *passes the
//! failing request*, and the rest of the step is unknown (on the H200 such settings also failed
//! later in real runs, `docs/gpu-verification/whatif-heldout/`). When the live set was still
//! growing, the headroom is used up by the growth, and [`headroom_lasts`] says for how long.

use serde::{Deserialize, Serialize};

use super::finding::Verification;
use super::trajectory;
use crate::analysis::replay::{self, ReplayError, SettingOutcome, WhatIfReport, WhatIfRequest};
use crate::analysis::timetravel::TimeTravel;
use crate::model::format_bytes;

/// Where a replayed run ran out of memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayedOom {
    /// Index of the trace event whose request failed.
    pub event_index: usize,
    pub request_bytes: u64,
    /// Reserved bytes at that moment.
    pub reserved_bytes: u64,
    /// What the allocator was allowed to reserve (cap or device memory), when known.
    pub allowed_bytes: Option<u64>,
}

/// The replay of the recorded run under one allocator setting.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayedSetting {
    /// The setting in `PYTORCH_CUDA_ALLOC_CONF` syntax (`default` for PyTorch's defaults).
    pub conf: String,
    pub peak_reserved_bytes: u64,
    pub peak_allocated_bytes: u64,
    /// `None`: the replayed run did not run out of memory.
    pub oom: Option<ReplayedOom>,
    pub num_alloc_retries: u64,
    /// Why the replay had to stop before the end of the trace (it proves nothing either way).
    pub incomplete: Option<String>,
    /// The outcome is not settled (it proves nothing either way): the cap was inferred and
    /// the outcome differs between the lowest and highest cap that explain the trace, or it
    /// differs between the GPU timings replayed (when other streams' work on freed blocks
    /// finishes, which changes from run to run).
    pub uncertain: bool,
}

impl ReplayedSetting {
    /// The replay ran the whole trace, with a certain outcome.
    fn conclusive(&self) -> bool {
        self.incomplete.is_none() && !self.uncertain
    }
}

/// What a what-if replay of one device's trace said.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayEvidence {
    /// The self-check passed: replayed under the recorded settings, the model reproduced the
    /// real final state and the real failure.
    pub reliable: bool,
    /// The self-check's message (where the model disagreed, when it did).
    pub self_check: String,
    /// What the allocator may reserve (the cap, or the device's memory), when known.
    pub limit_bytes: Option<u64>,
    /// The settings the run was recorded with (`PYTORCH_CUDA_ALLOC_CONF` syntax).
    pub recorded_conf: String,
    /// One replay per setting tried, the recorded one included.
    pub settings: Vec<ReplayedSetting>,
    /// Why no replay was run although there is a history (the trace is too long to replay
    /// within a diagnosis, see [`MAX_REPLAYED_EVENTS`]); then `settings` is empty and nothing
    /// is proven.
    pub not_run: Option<String>,
    /// Trace position where the first iteration of recorded work after the recorded failure
    /// ends ([`trajectory::iteration_after_failure`]); `None` when the trace ends inside the step
    /// that failed, so that a setting serving the failing request is not proof of the rest. Absent
    /// in evidence written before it existed.
    #[serde(default)]
    pub iteration_after_failure: Option<usize>,
}

/// The replay's verdict on the settings other than the recorded one.
#[derive(Clone, Debug, PartialEq)]
pub struct SettingsProof<'a> {
    /// Settings that did not run out, the most general first (`generality`), then the lowest peak.
    pub helps: Vec<&'a ReplayedSetting>,
    /// Settings that still ran out. (Replays that stopped early or whose outcome depends on an
    /// inferred cap are in neither list.)
    pub useless: Vec<&'a ReplayedSetting>,
    /// Settings that got past a recorded failure only by adding a garbage collection
    /// threshold: not proof (see [`LAYOUT_ONLY_WHY`]), so neither recommended nor useless.
    pub layout_only: Vec<&'a ReplayedSetting>,
    pub limit_bytes: Option<u64>,
    /// Where the recorded run ran out in the replay of its own settings, if it did.
    pub recorded_oom_event: Option<usize>,
    /// Where the first completed iteration after the recorded failure ends, when the trace goes
    /// that far (see [`ReplayEvidence::iteration_after_failure`]).
    pub iteration_after_failure: Option<usize>,
}

impl SettingsProof<'_> {
    /// The replayed trace ends inside the step that failed: a setting that did not run out only
    /// passes the failing request.
    pub fn ends_in_failed_step(&self) -> bool {
        self.recorded_oom_event.is_some() && self.iteration_after_failure.is_none()
    }
}

/// The evidence of a what-if replay report (`analysis::replay`): the self-check's verdict in
/// words, the limit the replays ran against, and every setting replayed, the recorded one first.
pub fn from_what_if(report: &WhatIfReport) -> ReplayEvidence {
    let check = &report.self_check;
    let self_check = match &check.problem {
        Some(problem) => problem.clone(),
        None => format!(
            "replayed under the recorded settings ({}), the model reproduced the snapshot's final state ({} segments, {} blocks){}",
            if check.recorded_conf.is_empty() {
                "default"
            } else {
                check.recorded_conf.as_str()
            },
            check.segments_compared,
            check.blocks_compared,
            match check.real_oom_events.as_slice() {
                [] => String::new(),
                [one] => format!(" and the out-of-memory error at event {one}"),
                many => format!(" and the {} out-of-memory errors", many.len()),
            }
        ),
    };
    let setting = |outcome: &SettingOutcome| ReplayedSetting {
        conf: outcome.conf.clone(),
        peak_reserved_bytes: outcome.peak_reserved_bytes,
        peak_allocated_bytes: outcome.peak_allocated_bytes,
        oom: outcome.oom.map(|oom| ReplayedOom {
            event_index: oom.event_index,
            request_bytes: oom.request_bytes,
            reserved_bytes: oom.reserved_bytes,
            allowed_bytes: oom.allowed_bytes,
        }),
        num_alloc_retries: outcome.num_alloc_retries,
        incomplete: outcome
            .incomplete
            .as_ref()
            .map(|i| format!("stopped at event {}: {}", i.event_index, i.reason)),
        uncertain: outcome.verdict_uncertain(),
    };
    ReplayEvidence {
        reliable: check.reliable,
        self_check,
        limit_bytes: report.limits.cap_bytes.or(report.limits.device_limit_bytes),
        recorded_conf: report.recorded.conf.clone(),
        settings: std::iter::once(&report.recorded)
            .chain(&report.results)
            .map(setting)
            .collect(),
        not_run: None,
        iteration_after_failure: None,
    }
}

/// [`from_what_if`] for the report of `travel`'s trace, with where the first iteration after the
/// recorded failure ends ([`trajectory::iteration_after_failure`]).
pub fn from_what_if_of(report: &WhatIfReport, travel: &TimeTravel) -> ReplayEvidence {
    let mut evidence = from_what_if(report);
    evidence.iteration_after_failure = trajectory::iteration_after_failure(travel);
    evidence
}

/// Trace events × settings a diagnosis replays at most (about 10 s at the replay's ~5 M events
/// per second per setting, `docs/benchmarks.md`). A longer history is left to `vramscope
/// whatif`, which shows progress and can be cancelled; the diagnosis then says its settings are
/// unproven and why.
pub const MAX_REPLAYED_EVENTS: usize = 50_000_000;

/// Replays the trace of `travel` under the sweep of candidate settings (`analysis::replay`) and
/// returns what it says; `Err` when there is nothing to say (no history, no such device).
/// A trace too long for [`MAX_REPLAYED_EVENTS`] is not replayed: the evidence says why.
pub fn replay_trace(travel: &TimeTravel, device: u32) -> Result<ReplayEvidence, ReplayError> {
    if let Some((events, passes)) = too_long_to_replay(travel) {
        return Ok(ReplayEvidence {
            reliable: false,
            self_check: String::new(),
            limit_bytes: None,
            recorded_conf: String::new(),
            settings: Vec::new(),
            not_run: Some(format!(
                "the trace has {events} events; replaying the sweep of settings over them ({passes} passes or more) is more than a diagnosis replays ({MAX_REPLAYED_EVENTS} events in all), so run the replay on its own: vramscope whatif {}",
                travel.snapshot().name
            )),
            iteration_after_failure: None,
        });
    }
    let request = WhatIfRequest {
        device,
        candidates: Vec::new(),
        cap_bytes: None,
        device_memory_bytes: None,
    };
    replay::what_if(travel, &request, &|_| true).map(|report| from_what_if_of(&report, travel))
}

/// `Some((events, passes))` (passes: at least that many) when replaying the trace of `travel`
/// under the sweep of candidate settings would take more than [`MAX_REPLAYED_EVENTS`]
/// event-passes: a diagnosis does not replay it (`vramscope whatif` does, on its own).
pub fn too_long_to_replay(travel: &TimeTravel) -> Option<(usize, usize)> {
    let events = travel.trace().len();
    // The fewest passes any sweep makes (the self-check and the recorded settings): a trace too
    // long even for those is not scanned for the candidates (84 ms of the web page's thread at
    // 13.3 M events).
    let fewest_passes = 2 + replay::DRAWN_PLACEMENTS as usize;
    if events.saturating_mul(fewest_passes) > MAX_REPLAYED_EVENTS {
        return Some((events, fewest_passes));
    }
    let (candidates, _) = replay::sweep_candidates(travel, true);
    // The self-check, the recorded settings and each candidate: one pass over the trace each,
    // and at worst (near a limit, as at an OOM) the recorded settings and each candidate again
    // under every drawn placement of segments (see `replay::PlacementSpread`).
    let settings = candidates.len() + 1;
    let passes = 1 + settings * (1 + replay::DRAWN_PLACEMENTS as usize);
    (events.saturating_mul(passes) > MAX_REPLAYED_EVENTS).then_some((events, passes))
}

/// Sorts the replayed settings into those that help and those that do not; `None` when the
/// replay is not reliable (then nothing it says is proof).
pub fn judge(evidence: &ReplayEvidence) -> Option<SettingsProof<'_>> {
    if !evidence.reliable || evidence.not_run.is_some() {
        return None;
    }
    let others = evidence
        .settings
        .iter()
        .filter(|s| !same_conf(&s.conf, &evidence.recorded_conf));
    let (helps, useless): (Vec<_>, Vec<_>) = others
        .filter(|s| s.conclusive())
        .partition(|s| s.oom.is_none());
    let recorded_oom_event = evidence
        .settings
        .iter()
        .find(|s| same_conf(&s.conf, &evidence.recorded_conf))
        .and_then(|s| s.oom.map(|oom| oom.event_index));
    let (layout_only, mut helps): (Vec<_>, Vec<_>) = helps.into_iter().partition(|s| {
        recorded_oom_event.is_some()
            && generality(&s.conf, &evidence.recorded_conf) == GARBAGE_COLLECTION_ONLY
    });
    helps.sort_by_key(|s| {
        (
            generality(&s.conf, &evidence.recorded_conf),
            s.peak_reserved_bytes,
            s.conf.len(),
        )
    });
    Some(SettingsProof {
        helps,
        useless,
        layout_only,
        limit_bytes: evidence.limit_bytes,
        recorded_oom_event,
        iteration_after_failure: evidence.iteration_after_failure,
    })
}

/// Why a garbage collection threshold that got past a recorded failure in the replay is not
/// counted as proof. PyTorch's failure path (`release_cached_blocks` before the error) already
/// returns every wholly free cached segment, so the threshold, which returns them sooner, adds
/// no memory at the failure; what the replay gains from it is another order in which segments
/// are made and split, which the job's next steps need not repeat. Measured on the H200
/// (`docs/gpu-verification/whatif-heldout2/`): of 8 such settings in held-out workloads, 6
/// failed later in the real run; every other setting the diagnosis proved from a failed run's
/// trace (43 of 43) ran.
pub const LAYOUT_ONLY_WHY: &str = "a garbage collection threshold only returns cached segments \
     sooner than PyTorch does itself before it reports out of memory, so it adds no memory at \
     the failure; the replay got past it through another order of segments, which the next \
     steps need not repeat (on the H200, 6 of 8 such settings failed later in the real run)";

/// [`generality`] of a setting that adds a garbage collection threshold and neither expandable
/// segments nor a `max_split_size_mb`.
const GARBAGE_COLLECTION_ONLY: u8 = 2;

/// How far beyond the replayed run a setting's proof is likely to carry, lower first. The replay
/// proves the recorded run up to where it ended; the next iterations allocate differently.
/// `expandable_segments` changes how every segment grows and shrinks, so what it proves holds
/// for allocation patterns in general; a `max_split_size_mb` value is chosen around the failing
/// request and helps requests of that size; garbage collection thresholds and rounding depend
/// on the exact sizes and timing of the trace. Among settings of one kind, the lower peak wins.
fn generality(conf: &str, recorded_conf: &str) -> u8 {
    let recorded = normalized(recorded_conf);
    let added: Vec<String> = normalized(conf)
        .into_iter()
        .filter(|part| !recorded.contains(part))
        .collect();
    let adds = |key: &str| added.iter().any(|part| part.starts_with(key));
    if adds("expandable_segments:true") {
        0
    } else if adds("max_split_size_mb:") {
        1
    } else if adds("garbage_collection_threshold:") {
        GARBAGE_COLLECTION_ONLY
    } else {
        3
    }
}

/// Whether two settings strings name the same settings (order, spaces and case of the values
/// aside; `default` and the empty string are the same).
pub fn same_conf(a: &str, b: &str) -> bool {
    normalized(a) == normalized(b)
}

fn normalized(conf: &str) -> Vec<String> {
    let mut parts: Vec<String> = conf
        .split(',')
        .map(|p| p.trim().to_ascii_lowercase())
        .filter(|p| !p.is_empty() && p != "default")
        .collect();
    parts.sort();
    parts
}

/// "replayed: peak 61.2 GiB of 64.0 GiB allowed (2.8 GiB spare)", the evidence of a proven
/// setting.
pub fn proven_text(setting: &ReplayedSetting, limit_bytes: Option<u64>) -> String {
    match limit_bytes {
        Some(limit) => format!(
            "replayed: peak {} of {} allowed ({} spare)",
            format_bytes(setting.peak_reserved_bytes),
            format_bytes(limit),
            format_bytes(limit.saturating_sub(setting.peak_reserved_bytes))
        ),
        None => format!(
            "replayed: the run did not run out of memory (peak {} reserved)",
            format_bytes(setting.peak_reserved_bytes)
        ),
    }
}

/// "runs out at event 1234: 24.0 GiB requested with 63.9 GiB of 64.0 GiB reserved", why a
/// useless setting does not help.
pub fn useless_text(setting: &ReplayedSetting) -> String {
    match &setting.oom {
        Some(oom) => format!(
            "still runs out at event {}: {} requested with {} reserved{}",
            oom.event_index,
            format_bytes(oom.request_bytes),
            format_bytes(oom.reserved_bytes),
            oom.allowed_bytes
                .map(|a| format!(" of {} allowed", format_bytes(a)))
                .unwrap_or_default()
        ),
        None => "did not run out".to_owned(),
    }
}

/// The verification of a setting the replay did not see run out. When the recorded run failed,
/// it says how far the replay reaches: through a completed iteration after the failure (proven:
/// the job got past it and did recorded work again), or only through the failing request when
/// the trace ends inside the step that failed. Then the setting *passes the failing request* and
/// the rest of the step is unknown (on the H200 two garbage-collection settings of a held-out
/// workload got past the failure in the replay and failed later on a request the trace never
/// saw: `docs/gpu-verification/whatif-heldout/`); the detail names what settles it.
pub fn proven(setting: &ReplayedSetting, proof: &SettingsProof) -> Verification {
    let mut text = proven_text(setting, proof.limit_bytes);
    match (proof.recorded_oom_event, proof.iteration_after_failure) {
        (None, _) => Verification::proven(text),
        (Some(event), Some(end)) => {
            text.push_str(&format!(
                "; this proves the job gets past the failure at event {event} and through the \
                 iteration that completed at event {end}, to the end of the recorded trace, not \
                 what it allocates after the snapshot was taken"
            ));
            Verification::proven(text)
        }
        (Some(event), None) => {
            text.push_str(&format!(
                "; this shows the failing request at event {event} served, but the trace ends \
                 inside the step that failed, so what the rest of the step needs is unknown. \
                 {SETTLES_IT}"
            ));
            Verification::passes_failing_request(text)
        }
    }
}

/// The evidence that settles whether a setting that passes the failing request gets the job
/// through: a real re-run, or a trace that goes on past the failure.
pub const SETTLES_IT: &str = "What settles it: re-run the job under it (vramscope run --prove \
     -- COMMAND), or record a trace that reaches one completed iteration after the failure (catch \
     the out-of-memory error, run one more step, then dump the snapshot)";

/// How long the spare memory of a proven setting lasts when the live set still grows by
/// `growth_per_iteration_bytes`: whole iterations, `None` when it is not growing.
pub fn headroom_lasts(
    setting: &ReplayedSetting,
    limit_bytes: Option<u64>,
    growth_per_iteration_bytes: Option<u64>,
) -> Option<u64> {
    let growth = growth_per_iteration_bytes.filter(|&g| g > 0)?;
    Some(limit_bytes?.saturating_sub(setting.peak_reserved_bytes) / growth)
}

/// Why a recommendation could not be proven, and how to prove it: `why` is the reason ("the log
/// has no allocation history").
pub fn unverified(why: &str) -> Verification {
    Verification::unverified(format!(
        "Unverified: {why}. To verify it before a real run, record the allocation history \
         (torch.cuda.memory._record_memory_history(max_entries=1_000_000) before the failing \
         step, torch.cuda.memory._dump_snapshot(\"oom.pickle\") in an except \
         torch.OutOfMemoryError block) and replay it: vramscope whatif oom.pickle"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::finding::VerificationStatus;
    use crate::model::GIB;

    fn setting(conf: &str, peak_gib: f64, oom_at: Option<usize>) -> ReplayedSetting {
        ReplayedSetting {
            conf: conf.to_owned(),
            peak_reserved_bytes: (peak_gib * GIB as f64) as u64,
            peak_allocated_bytes: 0,
            oom: oom_at.map(|event_index| ReplayedOom {
                event_index,
                request_bytes: 24 * GIB,
                reserved_bytes: 63 * GIB,
                allowed_bytes: Some(64 * GIB),
            }),
            num_alloc_retries: 0,
            incomplete: None,
            uncertain: false,
        }
    }

    fn evidence(reliable: bool) -> ReplayEvidence {
        ReplayEvidence {
            reliable,
            self_check: if reliable {
                "reproduced the final state and the OOM at event 1234".to_owned()
            } else {
                "segment at 0x7f00 differs at event 99".to_owned()
            },
            limit_bytes: Some(64 * GIB),
            recorded_conf: "default".to_owned(),
            settings: vec![
                setting("", 64.0, Some(1234)),
                setting("max_split_size_mb:4096", 64.0, Some(1234)),
                setting("expandable_segments:True", 61.2, None),
                setting("garbage_collection_threshold:0.6", 62.5, None),
                ReplayedSetting {
                    uncertain: true,
                    ..setting("roundup_power2_divisions:4", 60.0, None)
                },
                ReplayedSetting {
                    incomplete: Some("no block at 0x10 for event 7".into()),
                    ..setting("roundup_power2_divisions:8", 60.0, None)
                },
            ],
            not_run: None,
            iteration_after_failure: None,
        }
    }

    #[test]
    fn a_setting_is_proven_only_through_an_iteration_after_the_failure() {
        // The trace ends inside the step that failed: the setting only passes the failing
        // request, with what settles it.
        let e = evidence(true);
        let proof = judge(&e).unwrap_or_else(|| panic!("reliable"));
        assert_eq!(proof.recorded_oom_event, Some(1234));
        assert!(proof.ends_in_failed_step());
        let verification = proven(proof.helps[0], &proof);
        assert_eq!(
            verification.status,
            VerificationStatus::PassesFailingRequest
        );
        assert!(
            verification.detail.contains(
                "the failing request at event 1234 served, but the trace ends inside the step \
                 that failed"
            ) && verification.detail.contains("vramscope run --prove"),
            "{}",
            verification.detail
        );
        // The trace goes on through an iteration completed after the failure: proven.
        let mut on = evidence(true);
        on.iteration_after_failure = Some(2000);
        let proof = judge(&on).unwrap_or_else(|| panic!("reliable"));
        assert!(!proof.ends_in_failed_step());
        let verification = proven(proof.helps[0], &proof);
        assert_eq!(verification.status, VerificationStatus::Proven);
        assert!(
            verification.detail.contains(
                "gets past the failure at event 1234 and through the iteration that completed at \
                 event 2000"
            ),
            "{}",
            verification.detail
        );
        // A recorded run that did not fail: nothing to get past.
        let mut fine = evidence(true);
        fine.settings[0].oom = None;
        let proof = judge(&fine).unwrap_or_else(|| panic!("reliable"));
        assert_eq!(proof.recorded_oom_event, None);
        let verification = proven(proof.helps[0], &proof);
        assert_eq!(verification.status, VerificationStatus::Proven);
        assert!(
            !verification.detail.contains("gets past"),
            "{}",
            verification.detail
        );
    }

    #[test]
    fn helpful_settings_come_most_headroom_first_and_useless_ones_are_kept() {
        let e = evidence(true);
        let proof = judge(&e).unwrap_or_else(|| panic!("reliable"));
        let helps: Vec<&str> = proof.helps.iter().map(|s| s.conf.as_str()).collect();
        assert_eq!(helps, ["expandable_segments:True"]);
        // The recorded run ran out: a garbage collection threshold that got past the failure is
        // kept apart, not proof.
        let layout: Vec<&str> = proof.layout_only.iter().map(|s| s.conf.as_str()).collect();
        assert_eq!(layout, ["garbage_collection_threshold:0.6"]);
        // Of two proven settings, the one whose proof carries further comes first even with a
        // higher peak.
        let mut e = evidence(true);
        e.settings
            .push(setting("roundup_power2_divisions:2", 50.0, None));
        e.settings
            .push(setting("max_split_size_mb:512", 63.0, None));
        let proof = judge(&e).unwrap_or_else(|| panic!("reliable"));
        let helps: Vec<&str> = proof.helps.iter().map(|s| s.conf.as_str()).collect();
        assert_eq!(
            helps,
            [
                "expandable_segments:True",
                "max_split_size_mb:512",
                "roundup_power2_divisions:2"
            ]
        );
        // Added to a max_split_size_mb, the threshold is proof of that setting.
        let mut e = evidence(true);
        e.settings.push(setting(
            "garbage_collection_threshold:0.6,max_split_size_mb:512",
            63.0,
            None,
        ));
        let proof = judge(&e).unwrap_or_else(|| panic!("reliable"));
        assert!(
            proof
                .helps
                .iter()
                .any(|s| s.conf == "garbage_collection_threshold:0.6,max_split_size_mb:512")
        );
        // A recorded run that did not run out: the threshold's lower peak is proof.
        let mut fine = evidence(true);
        fine.settings[0].oom = None;
        let proof = judge(&fine).unwrap_or_else(|| panic!("reliable"));
        assert!(proof.layout_only.is_empty());
        assert!(
            proof
                .helps
                .iter()
                .any(|s| s.conf == "garbage_collection_threshold:0.6")
        );
        let useless: Vec<&str> = proof.useless.iter().map(|s| s.conf.as_str()).collect();
        assert_eq!(
            useless,
            ["max_split_size_mb:4096"],
            "the recorded one, uncertain and incomplete replays are left out"
        );
        assert_eq!(
            proven_text(proof.helps[0], proof.limit_bytes),
            "replayed: peak 61.2 GiB of 64.0 GiB allowed (2.80 GiB spare)"
        );
        assert_eq!(
            useless_text(proof.useless[0]),
            "still runs out at event 1234: 24.0 GiB requested with 63.0 GiB reserved of 64.0 GiB allowed"
        );
    }

    #[cfg(feature = "native")]
    #[test]
    fn a_setting_whose_verdict_depends_on_gpu_timing_is_neither_proven_nor_useless() {
        use std::sync::Arc;
        // A real two-stream trace (H200): under a 230 MiB cap, expandable segments runs out with
        // the side stream's work finishing as recorded but not when it finishes sooner.
        let path = crate::test_fixtures::fixture_path("whatif/two_streams.pickle");
        let snapshot =
            crate::formats::pytorch::read_file(&path, &|_| true).unwrap_or_else(|e| panic!("{e}"));
        let travel = TimeTravel::new(Arc::new(snapshot), 0);
        let request = WhatIfRequest {
            device: 0,
            candidates: vec![
                replay::AllocConf::parse("expandable_segments:True")
                    .unwrap_or_else(|e| panic!("{e}")),
            ],
            cap_bytes: Some(230 << 20),
            device_memory_bytes: None,
        };
        let report =
            replay::what_if(&travel, &request, &|_| true).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            report.results[0].timing_uncertain,
            "{:?}",
            report.results[0]
        );
        let evidence = from_what_if(&report);
        let replayed = evidence
            .settings
            .iter()
            .find(|s| s.conf == "expandable_segments:True")
            .unwrap_or_else(|| panic!("replayed"));
        assert!(replayed.uncertain);
        let proof = judge(&evidence).unwrap_or_else(|| panic!("reliable"));
        assert!(proof.helps.is_empty(), "{:?}", proof.helps);
        assert!(proof.useless.is_empty(), "{:?}", proof.useless);
    }

    #[test]
    fn an_unreliable_replay_proves_nothing() {
        assert!(judge(&evidence(false)).is_none());
        let v = unverified("the replay's self-check failed (segment at 0x7f00 differs)");
        assert_eq!(v.status, VerificationStatus::Unverified);
        assert!(v.detail.contains("vramscope whatif"), "{}", v.detail);
        assert!(v.detail.contains("_record_memory_history"), "{}", v.detail);
    }

    #[test]
    fn a_replay_left_to_whatif_proves_nothing() {
        let mut e = evidence(true);
        e.not_run = Some("the trace has 30000000 events".into());
        assert!(judge(&e).is_none());
    }

    #[test]
    fn headroom_is_measured_in_iterations_of_growth() {
        let s = setting("expandable_segments:True", 61.0, None);
        assert_eq!(headroom_lasts(&s, Some(64 * GIB), Some(GIB / 2)), Some(6));
        assert_eq!(headroom_lasts(&s, Some(64 * GIB), None), None);
        assert_eq!(headroom_lasts(&s, None, Some(GIB)), None);
    }

    #[test]
    fn settings_compare_regardless_of_order_and_default() {
        assert!(same_conf("default", ""));
        assert!(same_conf(
            "expandable_segments:True,max_split_size_mb:128",
            " max_split_size_mb:128 , expandable_segments:true"
        ));
        assert!(!same_conf("expandable_segments:True", "default"));
    }
}
