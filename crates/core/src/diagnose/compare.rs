//! What a comparison means: which change matters (the call site that grew most, the category
//! that follows the batch while the weights stay), which call site leaks between snapshots of
//! one run and by how much a step, which rank is heavy and by how much, and what could not be
//! compared. `analysis::compare` measures; this judges; `compare`, the reports and the app show.

use serde::Serialize;

use crate::analysis::categories::MemoryCategory;
use crate::analysis::compare::{Comparison, RankRow, SiteGrowth, SnapshotSide};
use crate::model::format_bytes;

/// Two categories' sizes "do not change" when they differ by at most this share.
pub const UNCHANGED_FRACTION: f64 = 0.05;

/// A change in live bytes smaller than this share of the larger side's allocated bytes is
/// noise: no verdict names it.
const NOTABLE_FRACTION: f64 = 0.01;

/// The judgement of a comparison: a headline and the sentences behind it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CompareVerdict {
    pub headline: String,
    pub findings: Vec<String>,
    /// What could not be compared (different devices, no trace, no stacks), said plainly.
    pub caveats: Vec<String>,
}

fn signed_bytes(delta: i64) -> String {
    let sign = if delta < 0 { "−" } else { "+" };
    format!("{sign}{}", format_bytes(delta.unsigned_abs()))
}

/// Ratio of `b` to `a`, `None` when `a` is zero.
fn ratio(a: u64, b: u64) -> Option<f64> {
    (a > 0).then(|| b as f64 / a as f64)
}

/// Caveats for sides that cannot be compared in every respect.
fn caveats(sides: &[SnapshotSide]) -> Vec<String> {
    let mut out = Vec::new();
    let devices: Vec<u32> = sides.iter().map(|s| s.device).collect();
    if devices.windows(2).any(|w| w[0] != w[1]) {
        out.push(format!(
            "The snapshots are of different GPUs ({}): compared as they are, side by side.",
            sides
                .iter()
                .map(|s| format!("{} GPU {}", s.name, s.device))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    for side in sides {
        if side.trace_events == 0 {
            out.push(format!(
                "{} has no allocator trace: only its final state is compared, and its call \
                 sites are those the snapshot's blocks recorded.",
                side.name
            ));
        }
        if !side.sites.is_empty()
            && side
                .sites
                .keys()
                .all(|s| s == crate::analysis::frames::NO_STACK)
        {
            out.push(format!(
                "{} recorded no stacks (history without context): its call sites and categories \
                 cannot be told.",
                side.name
            ));
        }
    }
    out
}

/// The verdict on two or more snapshots compared side by side (first against last).
pub fn judge(comparison: &Comparison) -> CompareVerdict {
    let sides = &comparison.sides;
    let mut verdict = CompareVerdict {
        caveats: caveats(sides),
        ..CompareVerdict::default()
    };
    let (Some(first), Some(last)) = (sides.first(), sides.last()) else {
        verdict.headline = "Nothing to compare.".to_owned();
        return verdict;
    };
    let delta = last.allocated_bytes as i64 - first.allocated_bytes as i64;
    let scale = first.allocated_bytes.max(last.allocated_bytes).max(1) as f64;
    if comparison.sites.is_empty() && delta == 0 && first.reserved_bytes == last.reserved_bytes {
        verdict.headline = format!(
            "No difference: {} and {} hold the same blocks from the same call sites at {}.",
            first.name, last.name, last.moment
        );
        return verdict;
    }
    verdict.headline = format!(
        "{} holds {} {} than {} at {} ({} against {}).",
        last.name,
        format_bytes(delta.unsigned_abs()),
        if delta < 0 { "less" } else { "more" },
        first.name,
        last.moment,
        format_bytes(last.allocated_bytes),
        format_bytes(first.allocated_bytes),
    );
    if let Some(top) = comparison.sites.first()
        && top.delta_bytes.unsigned_abs() as f64 >= NOTABLE_FRACTION * scale
    {
        verdict.findings.push(format!(
            "The largest change is at {}: {} of live memory ({} blocks against {}).",
            top.site,
            signed_bytes(top.delta_bytes),
            top.per_side.last().map_or(0, |p| p.0),
            top.per_side.first().map_or(0, |p| p.0),
        ));
    }
    verdict.findings.extend(category_findings(first, last));
    let unused = last.unused_bytes() as i64 - first.unused_bytes() as i64;
    if unused.unsigned_abs() as f64 >= 0.05 * scale {
        verdict.findings.push(format!(
            "Reserved memory no tensor uses changed by {} ({} against {}; largest free block {} \
             against {}).",
            signed_bytes(unused),
            format_bytes(last.unused_bytes()),
            format_bytes(first.unused_bytes()),
            format_bytes(last.largest_free_bytes),
            format_bytes(first.largest_free_bytes),
        ));
    }
    verdict
}

/// Which categories changed, and whether the change looks like a batch size (activations and
/// temporaries scale while parameters, gradients and optimizer state stay).
fn category_findings(first: &SnapshotSide, last: &SnapshotSide) -> Vec<String> {
    let mut out = Vec::new();
    let fixed = [
        MemoryCategory::Parameters,
        MemoryCategory::Gradients,
        MemoryCategory::OptimizerState,
    ];
    let stays = |c: MemoryCategory| {
        let (a, b) = (first.categories.bytes(c), last.categories.bytes(c));
        a.abs_diff(b) as f64 <= UNCHANGED_FRACTION * a.max(b).max(1) as f64
    };
    let activations = MemoryCategory::Activations;
    let scaled = ratio(
        first.categories.bytes(activations),
        last.categories.bytes(activations),
    );
    let fixed_present = fixed.iter().any(|c| first.categories.bytes(*c) > 0);
    if fixed_present && fixed.iter().all(|c| stays(*c)) {
        match scaled {
            Some(r) if !(1.0 - UNCHANGED_FRACTION..=1.0 + UNCHANGED_FRACTION).contains(&r) => {
                out.push(format!(
                    "Parameters, gradients and optimizer state are the same (within {:.0} %); \
                     activations are ×{r:.2}: the difference is in batch-dependent memory \
                     (a larger batch or sequence, or activations kept from step to step), not \
                     in the model or its optimizer.",
                    UNCHANGED_FRACTION * 100.0
                ));
            }
            _ => out.push(format!(
                "Parameters, gradients and optimizer state are the same (within {:.0} %).",
                UNCHANGED_FRACTION * 100.0
            )),
        }
    }
    for category in MemoryCategory::ALL {
        let (a, b) = (
            first.categories.bytes(category),
            last.categories.bytes(category),
        );
        let scale = first.allocated_bytes.max(last.allocated_bytes).max(1) as f64;
        if a.abs_diff(b) as f64 >= 0.05 * scale && !stays(category) {
            out.push(format!(
                "{}: {} against {} ({}).",
                category.label(),
                format_bytes(b),
                format_bytes(a),
                signed_bytes(b as i64 - a as i64)
            ));
        }
    }
    out
}

/// The verdict on snapshots of one run in time order: the call site that leaks and how much a
/// step, or that nothing grew in every interval.
pub fn judge_growth(growth: &[SiteGrowth], snapshots: usize) -> CompareVerdict {
    let Some(top) = growth.first() else {
        return CompareVerdict {
            headline: format!(
                "No call site grew from each of the {snapshots} snapshots to the next: no leak \
                 shows between them."
            ),
            ..CompareVerdict::default()
        };
    };
    let rate = match top.bytes_per_step {
        Some(per_step) => format!("{} per step", format_bytes(per_step.round() as u64)),
        None => format!(
            "{} per snapshot interval (steps could not be counted)",
            format_bytes(top.bytes_per_interval.round() as u64)
        ),
    };
    let mut findings: Vec<String> = growth
        .iter()
        .skip(1)
        .take(4)
        .map(|g| {
            format!(
                "{} also grows: {} → {}.",
                g.site,
                format_bytes(g.bytes.first().copied().unwrap_or(0)),
                format_bytes(g.bytes.last().copied().unwrap_or(0))
            )
        })
        .collect();
    let python: Vec<&str> = top
        .stack
        .iter()
        .filter(|line| line.contains(".py:"))
        .take(4)
        .map(String::as_str)
        .collect();
    if !python.is_empty() {
        findings.insert(0, format!("Allocated at: {}", python.join(" ← ")));
    }
    CompareVerdict {
        headline: format!(
            "Leak: {} grows in every interval, {rate} ({} → {}).",
            top.site,
            format_bytes(top.bytes.first().copied().unwrap_or(0)),
            format_bytes(top.bytes.last().copied().unwrap_or(0)),
        ),
        findings,
        caveats: Vec::new(),
    }
}

/// The verdict on a rank table: the heaviest rank and its imbalance, the call site behind it,
/// and which rank ran out first.
pub fn judge_ranks(rows: &[RankRow]) -> CompareVerdict {
    let Some(heaviest) = rows
        .iter()
        .max_by_key(|r| (r.peak_allocated_bytes, std::cmp::Reverse(r.rank)))
    else {
        return CompareVerdict {
            headline: "No rank to compare.".to_owned(),
            ..CompareVerdict::default()
        };
    };
    let mut findings = Vec::new();
    if let Some((site, bytes, median)) = heaviest.site_differences.first() {
        findings.push(format!(
            "Rank {}'s largest difference from the median rank is at {site}: {} against {}.",
            heaviest.rank,
            format_bytes(*bytes),
            format_bytes(*median)
        ));
    }
    let first_oom = rows
        .iter()
        .filter(|r| r.ooms > 0)
        .min_by_key(|r| (r.first_oom_us.unwrap_or(i64::MAX), r.rank));
    if let Some(row) = first_oom {
        findings.push(format!(
            "Rank {} ran out of memory first{}.",
            row.rank,
            if row.first_oom_us.is_none() {
                " (the only one with an OOM time recorded, or none had one)"
            } else {
                ""
            }
        ));
    }
    CompareVerdict {
        headline: format!(
            "Rank {} is the heaviest: {} at its peak, {:+.1} % against the median rank.",
            heaviest.rank,
            format_bytes(heaviest.peak_allocated_bytes),
            heaviest.imbalance_percent
        ),
        findings,
        caveats: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::compare::{SiteTotals, compare};
    use std::collections::BTreeMap;

    fn side(name: &str, device: u32, trace_events: usize, site: &str) -> SnapshotSide {
        SnapshotSide {
            name: name.to_owned(),
            device,
            moment: "peak".to_owned(),
            events_applied: trace_events,
            trace_events,
            time_us: None,
            allocated_bytes: 100,
            reserved_bytes: 120,
            largest_free_bytes: 20,
            pools: Vec::new(),
            categories: Default::default(),
            sites: BTreeMap::from([(
                site.to_owned(),
                SiteTotals {
                    blocks: 1,
                    bytes: 100,
                    stack: Vec::new(),
                    sizes: vec![(100, 1)],
                },
            )]),
            ooms: 0,
            first_oom_us: None,
        }
    }

    #[test]
    fn what_cannot_be_compared_is_said_and_the_rest_still_is() {
        let verdict = judge(&compare(vec![
            side("a.pickle", 0, 10, "t.py:1 f"),
            side("b.pickle", 1, 0, "(no stack recorded)"),
        ]));
        let caveats = verdict.caveats.join(" ");
        assert!(
            caveats.contains("different GPUs (a.pickle GPU 0, b.pickle GPU 1)"),
            "{caveats}"
        );
        assert!(
            caveats.contains("b.pickle has no allocator trace"),
            "{caveats}"
        );
        assert!(caveats.contains("b.pickle recorded no stacks"), "{caveats}");
        // The sites still compare: the one in a only and the one in b only.
        assert!(!verdict.headline.is_empty());
    }

    #[test]
    fn identical_sides_say_no_difference() {
        let a = side("a.pickle", 0, 10, "t.py:1 f");
        let verdict = judge(&compare(vec![a.clone(), a]));
        assert!(
            verdict.headline.starts_with("No difference"),
            "{}",
            verdict.headline
        );
        assert!(verdict.caveats.is_empty());
    }
}
