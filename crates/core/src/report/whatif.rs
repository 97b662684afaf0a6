//! The what-if replay as text (the `whatif` command, Markdown reports) and as JSON with a
//! versioned schema (`vramscope.whatif/1`, documented in `docs/report-schema.md`).

use serde::Serialize;

use crate::analysis::frames::stack_lines;
use crate::analysis::replay::{
    CapSource, OomPoint, ReplayStart, SelfCheck, SettingOutcome, WhatIfReport, format_table_bytes,
};
use crate::model::allocator::{AllocatorSnapshot, StackId};

/// The JSON schema name; fields are only ever added within one version.
pub const WHATIF_SCHEMA: &str = "vramscope.whatif/1";

/// A `vramscope.whatif/1` document (also embedded in the `vramscope.report/1` report).
#[derive(Debug, Serialize)]
pub(crate) struct JsonReport {
    schema: &'static str,
    generator: String,
    snapshot: String,
    device: u32,
    events: usize,
    recorded_settings: String,
    limits: JsonLimits,
    self_check: JsonSelfCheck,
    recorded: JsonOutcome,
    results: Vec<JsonOutcome>,
    notes: Vec<String>,
}

#[derive(Debug, Serialize)]
struct JsonLimits {
    cap_bytes: Option<u64>,
    /// "none", "given" or "inferred".
    cap_source: &'static str,
    cap_low_bytes: Option<u64>,
    cap_high_bytes: Option<u64>,
    device_limit_bytes: Option<u64>,
}

#[derive(Debug, Serialize)]
struct JsonSelfCheck {
    reliable: bool,
    /// "empty" or "seeded".
    start: &'static str,
    seeded_segments: Option<usize>,
    final_state_matches: bool,
    segments_compared: usize,
    blocks_compared: usize,
    real_oom_events: Vec<usize>,
    replay_oom_events: Vec<usize>,
    diverged_at: Option<usize>,
    problem: Option<String>,
    cap_bytes: Option<u64>,
}

#[derive(Debug, Serialize)]
struct JsonOutcome {
    setting: String,
    recorded: bool,
    reliable: bool,
    peak_reserved_bytes: u64,
    peak_allocated_bytes: u64,
    peak_event: usize,
    cached_at_peak_bytes: u64,
    segments_at_peak: u64,
    final_reserved_bytes: u64,
    oom: bool,
    oom_event: Option<usize>,
    oom_detail: Option<JsonOom>,
    survived_real_ooms: usize,
    shared_caught_ooms: usize,
    uncertain: bool,
    peak_reserved_range_bytes: Option<[u64; 2]>,
    timing_uncertain: bool,
    placement: Option<JsonPlacement>,
    placement_uncertain: bool,
    scratch_oom: Option<JsonOom>,
    scratch_oom_caught: bool,
    headroom_bytes: Option<u64>,
    num_alloc_retries: u64,
    num_device_alloc: u64,
    num_device_free: u64,
    events_replayed: usize,
    incomplete: Option<JsonIncomplete>,
    garbage_collection_without_cap: bool,
}

#[derive(Debug, Serialize)]
struct JsonOom {
    event: usize,
    request_bytes: u64,
    segment_bytes: u64,
    reserved_bytes: u64,
    allocated_bytes: u64,
    allowed_bytes: Option<u64>,
    stack: Vec<String>,
}

#[derive(Debug, Serialize)]
struct JsonPlacement {
    drawn: u32,
    ran_out: u32,
    peak_reserved_range_bytes: [u64; 2],
}

#[derive(Debug, Serialize)]
struct JsonIncomplete {
    event: usize,
    reason: String,
}

/// Parts of the names of C++ frames that record the stack, hand out the memory or make an
/// empty tensor: a request recorded with `stacks="all"` starts with them, so they tell nothing
/// of which operation asked.
const MACHINERY_FRAMES: [&str; 8] = [
    "unwind::unwind",
    "CapturedTraceback",
    "gather_with_cpp",
    "CachingAllocator",
    "c10::cuda::",
    "at::detail::empty",
    "at::native::empty",
    "at::empty",
];

/// The most telling frame of a stack: the innermost Python frame outside torch's own files,
/// else the innermost frame that is not the machinery's ([`MACHINERY_FRAMES`]).
pub fn telling_frame(snapshot: &AllocatorSnapshot, stack: StackId) -> Option<String> {
    let lines = stack_lines(snapshot, stack);
    lines
        .iter()
        .find(|line| line.contains(".py:") && !line.contains("/torch/"))
        .or_else(|| {
            lines.iter().find(|line| {
                !MACHINERY_FRAMES
                    .iter()
                    .any(|machinery| line.contains(machinery))
            })
        })
        .or_else(|| lines.first())
        .cloned()
}

fn json_outcome(
    outcome: &SettingOutcome,
    report: &WhatIfReport,
    snapshot: &AllocatorSnapshot,
) -> JsonOutcome {
    JsonOutcome {
        setting: outcome.conf.clone(),
        recorded: outcome.recorded,
        reliable: report.self_check.reliable && outcome.incomplete.is_none(),
        peak_reserved_bytes: outcome.peak_reserved_bytes,
        peak_allocated_bytes: outcome.peak_allocated_bytes,
        peak_event: outcome.peak_event,
        cached_at_peak_bytes: outcome.cached_at_peak_bytes,
        segments_at_peak: outcome.segments_at_peak,
        final_reserved_bytes: outcome.final_reserved_bytes,
        oom: outcome.oom.is_some(),
        oom_event: outcome.oom.map(|o| o.event_index),
        oom_detail: outcome.oom.map(|o| json_oom(&o, snapshot)),
        survived_real_ooms: outcome.survived_real_ooms,
        shared_caught_ooms: outcome.shared_caught_ooms,
        uncertain: outcome.uncertain,
        peak_reserved_range_bytes: outcome
            .peak_reserved_range_bytes
            .map(|(low, high)| [low, high]),
        timing_uncertain: outcome.timing_uncertain,
        placement: outcome.placement.map(|spread| JsonPlacement {
            drawn: spread.drawn,
            ran_out: spread.ran_out,
            peak_reserved_range_bytes: [spread.peak_range_bytes.0, spread.peak_range_bytes.1],
        }),
        placement_uncertain: outcome.placement_uncertain(),
        scratch_oom: outcome.scratch_oom.map(|o| json_oom(&o, snapshot)),
        scratch_oom_caught: outcome.scratch_oom_caught,
        headroom_bytes: outcome.headroom_bytes(&report.limits),
        num_alloc_retries: outcome.num_alloc_retries,
        num_device_alloc: outcome.num_device_alloc,
        num_device_free: outcome.num_device_free,
        events_replayed: outcome.events_replayed,
        incomplete: outcome.incomplete.as_ref().map(|i| JsonIncomplete {
            event: i.event_index,
            reason: i.reason.clone(),
        }),
        garbage_collection_without_cap: outcome.gc_without_cap,
    }
}

fn json_oom(oom: &OomPoint, snapshot: &AllocatorSnapshot) -> JsonOom {
    JsonOom {
        event: oom.event_index,
        request_bytes: oom.request_bytes,
        segment_bytes: oom.segment_bytes,
        reserved_bytes: oom.reserved_bytes,
        allocated_bytes: oom.allocated_bytes,
        allowed_bytes: oom.allowed_bytes,
        stack: stack_lines(snapshot, oom.stack),
    }
}

fn json_self_check(check: &SelfCheck) -> JsonSelfCheck {
    let (start, seeded_segments) = match check.start {
        ReplayStart::Empty => ("empty", None),
        ReplayStart::Seeded { segments, .. } => ("seeded", Some(segments)),
    };
    JsonSelfCheck {
        reliable: check.reliable,
        start,
        seeded_segments,
        final_state_matches: check.final_state_matches,
        segments_compared: check.segments_compared,
        blocks_compared: check.blocks_compared,
        real_oom_events: check.real_oom_events.clone(),
        replay_oom_events: check.replay_oom_events.clone(),
        diverged_at: check.diverged_at,
        problem: check.problem.clone(),
        cap_bytes: check.cap_bytes,
    }
}

/// The report as a `vramscope.whatif/1` JSON document.
pub fn to_json(report: &WhatIfReport, snapshot: &AllocatorSnapshot) -> String {
    serde_json::to_string_pretty(&json_document(report, snapshot))
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// The report as a serializable `vramscope.whatif/1` document.
pub(crate) fn json_document(report: &WhatIfReport, snapshot: &AllocatorSnapshot) -> JsonReport {
    let (cap_source, cap_low_bytes, cap_high_bytes) = match report.limits.cap_source {
        CapSource::None => ("none", None, None),
        CapSource::Given => ("given", None, None),
        CapSource::Inferred {
            low_bytes,
            high_bytes,
        } => ("inferred", Some(low_bytes), Some(high_bytes)),
    };
    JsonReport {
        schema: WHATIF_SCHEMA,
        generator: format!("vramscope {}", env!("CARGO_PKG_VERSION")),
        snapshot: report.snapshot.clone(),
        device: report.device,
        events: report.events,
        recorded_settings: report.self_check.recorded_conf.clone(),
        limits: JsonLimits {
            cap_bytes: report.limits.cap_bytes,
            cap_source,
            cap_low_bytes,
            cap_high_bytes,
            device_limit_bytes: report.limits.device_limit_bytes,
        },
        self_check: json_self_check(&report.self_check),
        recorded: json_outcome(&report.recorded, report, snapshot),
        results: report
            .results
            .iter()
            .map(|o| json_outcome(o, report, snapshot))
            .collect(),
        notes: report.notes.clone(),
    }
}

/// One line on the self-check, for people.
pub fn self_check_line(check: &SelfCheck) -> String {
    let start = match check.start {
        ReplayStart::Empty => "from an empty allocator".to_string(),
        ReplayStart::Seeded { segments, exact } => format!(
            "seeded with the {segments} segment(s) reconstructed at the first recorded event \
             (the ring buffer wrapped or history began late){}",
            if exact {
                ""
            } else {
                ", reconstruction estimated"
            }
        ),
    };
    if check.reliable {
        let ooms = if check.real_oom_events.is_empty() {
            String::new()
        } else {
            format!(
                ", and runs out at event {} as the real run did",
                join_events(&check.real_oom_events)
            )
        };
        format!(
            "self-check OK: replayed {start} under the recorded settings ({}), the model ends in \
             the snapshot's final state ({} segments, {} blocks, addresses and sizes exact){ooms}",
            check.recorded_conf, check.segments_compared, check.blocks_compared
        )
    } else {
        format!(
            "self-check FAILED — the numbers below are UNRELIABLE: {} (replayed {start})",
            check
                .problem
                .as_deref()
                .unwrap_or("the replay does not reproduce the real run")
        )
    }
}

fn join_events(events: &[usize]) -> String {
    let list: Vec<String> = events.iter().map(usize::to_string).collect();
    list.join(", ")
}

/// The outcome of one setting in words.
pub fn outcome_words(outcome: &SettingOutcome, report: &WhatIfReport) -> String {
    if let Some(incomplete) = &outcome.incomplete {
        return format!(
            "incomplete: stopped at event {} ({})",
            incomplete.event_index, incomplete.reason
        );
    }
    let mut depends_on = Vec::new();
    if outcome.uncertain {
        depends_on.push("the exact cap".to_string());
    }
    if outcome.timing_uncertain {
        depends_on.push("when the GPU finishes other streams' work".to_string());
    }
    if let Some(spread) = outcome.placement.filter(|_| outcome.placement_uncertain()) {
        depends_on.push(format!(
            "where the driver places segments: {} of {} other placements run out",
            spread.ran_out, spread.drawn
        ));
    }
    let uncertain = if depends_on.is_empty() {
        String::new()
    } else {
        format!(" (uncertain: depends on {})", depends_on.join(" and on "))
    };
    if outcome.oom.is_none()
        && !outcome.scratch_oom_caught
        && let Some(scratch) = outcome.scratch_oom
    {
        return format!(
            "uncertain: runs out at event {} on a {} scratch buffer (freed before any other \
             request or free, like cuDNN's convolution workspace, whose failure PyTorch catches \
             to use an algorithm that needs less); without it the rest runs{uncertain}",
            scratch.event_index,
            format_table_bytes(scratch.request_bytes)
        );
    }
    let words = match outcome.oom {
        Some(oom) => {
            let allowed = oom
                .allowed_bytes
                .map(|a| format!(" of {} allowed", format_table_bytes(a)))
                .unwrap_or_default();
            format!(
                "OUT OF MEMORY at event {}: {} request with {} reserved{allowed}{uncertain}",
                oom.event_index,
                format_table_bytes(oom.request_bytes),
                format_table_bytes(oom.reserved_bytes)
            )
        }
        None => match outcome.headroom_bytes(&report.limits) {
            Some(headroom) => format!(
                "runs: {} headroom at the peak{uncertain}",
                format_table_bytes(headroom)
            ),
            None => format!("runs{uncertain}"),
        },
    };
    let words = match outcome.scratch_oom {
        Some(scratch) if outcome.oom.is_none() && outcome.scratch_oom_caught => format!(
            "{words}; a {} cuDNN convolution workspace at event {} does not fit, and PyTorch \
             catches that to use an algorithm that needs less",
            format_table_bytes(scratch.request_bytes),
            scratch.event_index
        ),
        _ => words,
    };
    match outcome.peak_range_bytes() {
        Some((low, high)) if low != high => {
            let mut by = Vec::new();
            if outcome.peak_reserved_range_bytes.is_some() {
                by.push("when the GPU finishes other streams' work");
            }
            if outcome.placement_uncertain() {
                by.push("where the driver places segments");
            }
            format!(
                "{words}; peak {} – {} depending on {}",
                format_table_bytes(low),
                format_table_bytes(high),
                by.join(" and on ")
            )
        }
        _ => words,
    }
}

/// Says in reports that the what-if table holds predictions, not measurements.
pub const PREDICTION_NOTE: &str = "Replay predictions, not measurements: the recorded \
    allocations replayed through vramscope's model of PyTorch's caching allocator under each \
    setting. The self-check says whether the model reproduced the real run.";

/// One row of the what-if table in reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableRow {
    /// The setting in `PYTORCH_CUDA_ALLOC_CONF` syntax, `(recorded)` after the run's own.
    pub setting: String,
    pub peak_reserved_bytes: u64,
    /// [`outcome_words`].
    pub outcome: String,
    /// Where it runs out: the event, the request and the innermost user frame; empty when it
    /// runs.
    pub fails_at: String,
}

/// The rows of the table: the recorded settings first, then every other setting in the
/// report's order (those that run first, then by peak reserved).
pub fn table_rows(report: &WhatIfReport, snapshot: &AllocatorSnapshot) -> Vec<TableRow> {
    std::iter::once(&report.recorded)
        .chain(
            report
                .results
                .iter()
                .filter(|o| o.conf != report.recorded.conf),
        )
        .map(|outcome| TableRow {
            setting: if outcome.recorded {
                format!("{} (recorded)", outcome.conf)
            } else {
                outcome.conf.clone()
            },
            peak_reserved_bytes: outcome.peak_reserved_bytes,
            outcome: outcome_words(outcome, report),
            fails_at: outcome
                .oom
                .map(|oom| {
                    let frame = telling_frame(snapshot, oom.stack)
                        .map(|f| format!(" from {f}"))
                        .unwrap_or_default();
                    format!(
                        "event {}: {} request{frame}",
                        oom.event_index,
                        format_table_bytes(oom.request_bytes)
                    )
                })
                .unwrap_or_default(),
        })
        .collect()
}

/// The report as text: the self-check, the limits, one row per setting, notes.
pub fn to_text(report: &WhatIfReport, snapshot: &AllocatorSnapshot) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "What-if replay of {} (device {}, {} trace events)\n",
        report.snapshot, report.device, report.events
    ));
    out.push_str(&self_check_line(&report.self_check));
    out.push('\n');
    let cap = match report.limits.cap_source {
        CapSource::None => "none".to_string(),
        CapSource::Given => report
            .limits
            .cap_bytes
            .map(format_table_bytes)
            .unwrap_or_default(),
        CapSource::Inferred {
            low_bytes,
            high_bytes,
        } => format!(
            "inferred {} – {}",
            format_table_bytes(low_bytes),
            format_table_bytes(high_bytes)
        ),
    };
    let device = report
        .limits
        .device_limit_bytes
        .map_or("not reached in the trace".to_string(), format_table_bytes);
    let self_check_cap = if report.self_check.cap_bytes == report.limits.cap_bytes {
        String::new()
    } else {
        format!(
            " (the settings' replays; the self-check ran under the trace's own: {})",
            report
                .self_check
                .cap_bytes
                .map_or("none".to_string(), format_table_bytes)
        )
    };
    out.push_str(&format!(
        "Per-process cap: {cap}{self_check_cap}; device memory for the process: {device}\n\n"
    ));
    let width = report
        .results
        .iter()
        .chain(std::iter::once(&report.recorded))
        .map(|o| o.conf.len() + if o.recorded { 11 } else { 0 })
        .max()
        .unwrap_or(7)
        .max(7);
    out.push_str(&format!(
        "{:<width$}  {:>14}  {:>14}  {:>8}  outcome\n",
        "setting", "peak reserved", "peak allocated", "retries"
    ));
    let mut rows: Vec<&SettingOutcome> = vec![&report.recorded];
    rows.extend(
        report
            .results
            .iter()
            .filter(|o| o.conf != report.recorded.conf),
    );
    for outcome in rows {
        let label = if outcome.recorded {
            format!("{} (recorded)", outcome.conf)
        } else {
            outcome.conf.clone()
        };
        out.push_str(&format!(
            "{:<width$}  {:>14}  {:>14}  {:>8}  {}\n",
            label,
            format_table_bytes(outcome.peak_reserved_bytes),
            format_table_bytes(outcome.peak_allocated_bytes),
            outcome.num_alloc_retries,
            outcome_words(outcome, report)
        ));
        if let Some(oom) = outcome.oom
            && let Some(frame) = telling_frame(snapshot, oom.stack)
        {
            out.push_str(&format!("{:<width$}    request from {frame}\n", ""));
        }
        if outcome.gc_without_cap {
            out.push_str(&format!(
                "{:<width$}    garbage_collection_threshold has no effect without a per-process cap\n",
                ""
            ));
        }
    }
    for note in &report.notes {
        out.push_str(&format!("\nNote: {note}\n"));
    }
    out
}
