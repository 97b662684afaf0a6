//! Comparisons of allocator snapshots: what each holds at a chosen moment (per pool and stream,
//! per category, per call site), what differs between them, which call sites grow from one
//! snapshot of a run to the next, and how ranks of one job differ. Pure functions over opened
//! snapshots; which difference matters is `diagnose::compare`'s to judge, the command line, the
//! reports and the app only show it.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::categories::{CategoryTotals, MemoryCategory, attribute, block_stack};
use super::frames::{stack_lines, user_call_site};
use super::timetravel::{AllocatorState, BlockStatus, TimeTravel};
use crate::model::allocator::{PoolKind, StackId, TraceAction};

/// Which moment of a snapshot is compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Moment {
    /// The event after which the most memory was allocated.
    Peak,
    /// Right before the last out-of-memory error (the end when there was none).
    Oom,
    /// The final state.
    End,
    /// After this many trace events.
    Event(usize),
}

impl Moment {
    /// Reads `peak`, `oom`, `end` or an event number.
    pub fn parse(text: &str) -> Result<Moment, String> {
        match text.trim() {
            "peak" => Ok(Moment::Peak),
            "oom" => Ok(Moment::Oom),
            "end" => Ok(Moment::End),
            other => other.parse().map(Moment::Event).map_err(|_| {
                format!("'{text}' is not a moment: use peak, oom, end or an event number")
            }),
        }
    }

    /// The number of events applied at this moment of `travel`.
    pub fn events_applied(self, travel: &TimeTravel) -> usize {
        match self {
            Moment::End => travel.len(),
            Moment::Event(n) => n.min(travel.len()),
            Moment::Peak => {
                let series = travel.allocated_series();
                // The first index of the largest value: the state right after the peak event.
                series
                    .iter()
                    .enumerate()
                    .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(&a.0)))
                    .map_or(travel.len(), |(i, _)| i)
            }
            Moment::Oom => travel
                .trace()
                .actions
                .iter()
                .rposition(|a| *a == TraceAction::Oom)
                .unwrap_or(travel.len()),
        }
    }

    /// Words for the moment of a snapshot ("its peak", "event 1200").
    pub fn describe(self) -> String {
        match self {
            Moment::Peak => "peak".to_owned(),
            Moment::Oom => "the last OOM".to_owned(),
            Moment::End => "end".to_owned(),
            Moment::Event(n) => format!("event {n}"),
        }
    }
}

/// Live blocks of one call site at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SiteTotals {
    pub blocks: u64,
    pub bytes: u64,
    /// The stack of one of its blocks, innermost first, as the stack views show it.
    pub stack: Vec<String>,
    /// Block sizes and how many of each, largest first.
    pub sizes: Vec<(u64, u64)>,
}

/// Allocated bytes of one pool and stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PoolTotals {
    /// "large pool, stream 0", "private pool (1, 2), stream 7".
    pub label: String,
    pub allocated_bytes: u64,
    pub reserved_bytes: u64,
}

/// What one snapshot holds at its chosen moment.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SnapshotSide {
    pub name: String,
    pub device: u32,
    pub moment: String,
    /// Trace events applied at the moment (of `trace_events`).
    pub events_applied: usize,
    pub trace_events: usize,
    /// Microseconds since the Unix epoch of the moment's event, when the trace recorded times.
    pub time_us: Option<i64>,
    pub allocated_bytes: u64,
    pub reserved_bytes: u64,
    /// The largest free block: the largest request the cache could serve without the driver.
    pub largest_free_bytes: u64,
    pub pools: Vec<PoolTotals>,
    #[serde(skip)]
    pub categories: CategoryTotals,
    /// Per call site (the allocation's innermost frame of user code).
    pub sites: BTreeMap<String, SiteTotals>,
    /// Out-of-memory errors in the trace up to the moment.
    pub ooms: usize,
    /// Microseconds since the Unix epoch of the first OOM, when the trace recorded one and its
    /// time.
    pub first_oom_us: Option<i64>,
}

impl SnapshotSide {
    /// Reserved memory no tensor uses (reserved − allocated).
    pub fn unused_bytes(&self) -> u64 {
        self.reserved_bytes.saturating_sub(self.allocated_bytes)
    }
}

/// The call site of a block's stack, cached per stack.
struct Sites<'a> {
    travel: &'a TimeTravel,
    by_stack: HashMap<StackId, String>,
}

impl Sites<'_> {
    fn of(&mut self, stack: StackId) -> String {
        let travel = self.travel;
        self.by_stack
            .entry(stack)
            .or_insert_with(|| user_call_site(travel.snapshot(), stack))
            .clone()
    }
}

fn pool_label(pool: PoolKind, pool_id: crate::model::allocator::PoolId, stream: u64) -> String {
    let kind = match pool {
        PoolKind::Large => "large pool",
        PoolKind::Small => "small pool",
    };
    if pool_id.is_default() {
        format!("{kind}, stream {stream:#x}")
    } else {
        format!(
            "private pool ({}, {}), stream {stream:#x}",
            pool_id.0, pool_id.1
        )
    }
}

/// What `travel`'s snapshot (named `name`) holds at `moment`.
pub fn side(travel: &TimeTravel, name: &str, moment: Moment) -> SnapshotSide {
    let applied = moment.events_applied(travel);
    let state = travel.state_at(applied);
    side_of_state(travel, name, moment, applied, &state)
}

fn side_of_state(
    travel: &TimeTravel,
    name: &str,
    moment: Moment,
    applied: usize,
    state: &AllocatorState,
) -> SnapshotSide {
    let (categorized, categories) = attribute(travel, state);
    let mut sites = Sites {
        travel,
        by_stack: HashMap::new(),
    };
    let mut by_site: BTreeMap<String, SiteTotals> = BTreeMap::new();
    let mut sizes: HashMap<(String, u64), u64> = HashMap::new();
    for ((s, b), _) in &categorized {
        let block = &state.segments[*s].blocks[*b];
        let stack = block_stack(travel, block);
        let site = sites.of(stack);
        let totals = by_site.entry(site.clone()).or_default();
        totals.blocks += 1;
        totals.bytes += block.size_bytes;
        if totals.stack.is_empty() {
            totals.stack = stack_lines(travel.snapshot(), stack);
        }
        *sizes.entry((site, block.size_bytes)).or_default() += 1;
    }
    for ((site, size), count) in sizes {
        if let Some(totals) = by_site.get_mut(&site) {
            totals.sizes.push((size, count));
        }
    }
    for totals in by_site.values_mut() {
        totals
            .sizes
            .sort_by_key(|&(size, _)| std::cmp::Reverse(size));
    }
    let mut pools: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut largest_free_bytes = 0;
    for segment in &state.segments {
        let entry = pools
            .entry(pool_label(segment.pool, segment.pool_id, segment.stream))
            .or_default();
        entry.1 += segment.size_bytes;
        for block in &segment.blocks {
            match block.status {
                BlockStatus::Allocated => entry.0 += block.size_bytes,
                BlockStatus::Free => largest_free_bytes = largest_free_bytes.max(block.size_bytes),
                BlockStatus::PendingFree => {}
            }
        }
    }
    let trace = travel.trace();
    let oom_events: Vec<usize> = trace.actions[..applied.min(trace.len())]
        .iter()
        .enumerate()
        .filter(|(_, a)| **a == TraceAction::Oom)
        .map(|(i, _)| i)
        .collect();
    let known_time = |i: usize| {
        trace
            .times_us
            .get(i)
            .copied()
            .filter(|t| *t != crate::model::allocator::TIME_UNKNOWN_US)
    };
    SnapshotSide {
        name: name.to_owned(),
        device: travel.device(),
        moment: moment.describe(),
        events_applied: applied,
        trace_events: travel.len(),
        time_us: applied.checked_sub(1).and_then(known_time),
        allocated_bytes: state.allocated_bytes,
        reserved_bytes: state.reserved_bytes,
        largest_free_bytes,
        pools: pools
            .into_iter()
            .map(|(label, (allocated_bytes, reserved_bytes))| PoolTotals {
                label,
                allocated_bytes,
                reserved_bytes,
            })
            .collect(),
        categories,
        sites: by_site,
        ooms: oom_events.len(),
        first_oom_us: oom_events.first().copied().and_then(known_time),
    }
}

/// One call site across the compared snapshots.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SiteDelta {
    pub site: String,
    /// `(blocks, bytes)` in each snapshot, in the order compared.
    pub per_side: Vec<(u64, u64)>,
    /// Bytes in the last snapshot minus bytes in the first.
    pub delta_bytes: i64,
    pub stack: Vec<String>,
}

/// Blocks of one call site and size whose number differs between the first and the last
/// snapshot: present in one and not (as often) in the other.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BlockDifference {
    pub site: String,
    pub size_bytes: u64,
    pub first_count: u64,
    pub last_count: u64,
}

/// Two or more snapshots side by side.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    pub sides: Vec<SnapshotSide>,
    /// Call sites ranked by the size of their change in live bytes (first to last), largest
    /// first; sites equal everywhere are left out.
    pub sites: Vec<SiteDelta>,
    pub blocks: Vec<BlockDifference>,
}

/// Compares `sides` (two or more; the first is the baseline, the last the other end).
pub fn compare(sides: Vec<SnapshotSide>) -> Comparison {
    let mut names: Vec<&String> = sides.iter().flat_map(|s| s.sites.keys()).collect();
    names.sort();
    names.dedup();
    let mut deltas: Vec<SiteDelta> = names
        .into_iter()
        .filter_map(|site| {
            let per_side: Vec<(u64, u64)> = sides
                .iter()
                .map(|s| s.sites.get(site).map_or((0, 0), |t| (t.blocks, t.bytes)))
                .collect();
            if per_side.windows(2).all(|w| w[0] == w[1]) {
                return None;
            }
            let first = per_side.first().map_or(0, |p| p.1) as i64;
            let last = per_side.last().map_or(0, |p| p.1) as i64;
            let stack = sides
                .iter()
                .find_map(|s| s.sites.get(site).map(|t| t.stack.clone()))
                .unwrap_or_default();
            Some(SiteDelta {
                site: site.clone(),
                per_side,
                delta_bytes: last - first,
                stack,
            })
        })
        .collect();
    deltas.sort_by(|a, b| {
        b.delta_bytes
            .unsigned_abs()
            .cmp(&a.delta_bytes.unsigned_abs())
            .then(a.site.cmp(&b.site))
    });
    let blocks = match (sides.first(), sides.last()) {
        (Some(first), Some(last)) if sides.len() > 1 => block_differences(first, last),
        _ => Vec::new(),
    };
    Comparison {
        sides,
        sites: deltas,
        blocks,
    }
}

fn block_differences(first: &SnapshotSide, last: &SnapshotSide) -> Vec<BlockDifference> {
    let counts = |side: &SnapshotSide| {
        let mut counts: BTreeMap<(String, u64), u64> = BTreeMap::new();
        for (site, totals) in &side.sites {
            for (size, count) in &totals.sizes {
                *counts.entry((site.clone(), *size)).or_default() += count;
            }
        }
        counts
    };
    let (a, b) = (counts(first), counts(last));
    let mut keys: Vec<&(String, u64)> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut out: Vec<BlockDifference> = keys
        .into_iter()
        .filter_map(|key| {
            let (first_count, last_count) = (
                a.get(key).copied().unwrap_or(0),
                b.get(key).copied().unwrap_or(0),
            );
            (first_count != last_count).then(|| BlockDifference {
                site: key.0.clone(),
                size_bytes: key.1,
                first_count,
                last_count,
            })
        })
        .collect();
    out.sort_by(|x, y| {
        let bytes = |d: &BlockDifference| d.size_bytes * d.first_count.abs_diff(d.last_count);
        bytes(y).cmp(&bytes(x)).then(x.site.cmp(&y.site))
    });
    out
}

/// A call site whose live bytes grow from each snapshot of one run to the next.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SiteGrowth {
    pub site: String,
    /// Live bytes of the site in each snapshot, in time order.
    pub bytes: Vec<u64>,
    /// Steps between consecutive snapshots (counted from the later snapshot's trace).
    pub steps: Vec<Option<u64>>,
    /// Growth per step, averaged over the intervals whose steps are known (per snapshot
    /// interval where none is).
    pub bytes_per_step: Option<f64>,
    pub bytes_per_interval: f64,
    pub stack: Vec<String>,
}

/// Steps of a training loop between events `from` and `to` of `travel`: how many times the
/// loop's most regular allocation site allocated in between. Each step allocates at the same
/// places, so the site allocated by the step's first line recurs once a step; over the sites of
/// the interval the count seen most often is the number of steps (`None` when the interval has
/// too few allocations to tell).
pub fn steps_between(travel: &TimeTravel, from: usize, to: usize) -> Option<u64> {
    let trace = travel.trace();
    let to = to.min(trace.len());
    let mut sites = Sites {
        travel,
        by_stack: HashMap::new(),
    };
    let mut per_site: HashMap<String, u64> = HashMap::new();
    for i in from.min(to)..to {
        if trace.actions[i] == TraceAction::Alloc {
            let stack = trace.stacks[i];
            if stack == StackId::EMPTY {
                continue;
            }
            *per_site.entry(sites.of(stack)).or_default() += 1;
        }
    }
    let mut histogram: BTreeMap<u64, u64> = BTreeMap::new();
    for count in per_site.values() {
        *histogram.entry(*count).or_default() += 1;
    }
    // The most common count; among equally common counts the smallest (a site that allocates
    // twice a step is rarer than one that allocates once).
    let (steps, sites_with_it) = histogram
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))?;
    (*sites_with_it >= 2 && *steps >= 1).then_some(*steps)
}

/// Call sites whose live bytes grow from each snapshot to the next of one process's snapshots
/// in time order (`sides`, with the time travel each came from), largest growth first.
pub fn growth(sides: &[(SnapshotSide, &TimeTravel)]) -> Vec<SiteGrowth> {
    if sides.len() < 2 {
        return Vec::new();
    }
    // Steps between snapshot i and i+1, counted in the later snapshot's trace from the event
    // at the earlier one's time.
    let steps: Vec<Option<u64>> = sides
        .windows(2)
        .map(|pair| {
            let (earlier, later) = (&pair[0].0, &pair[1]);
            let travel = later.1;
            let start = earlier.time_us.and_then(|t| {
                travel
                    .trace()
                    .times_us
                    .iter()
                    .position(|u| *u > t && *u != crate::model::allocator::TIME_UNKNOWN_US)
            })?;
            steps_between(travel, start, later.0.events_applied)
        })
        .collect();
    let mut names: Vec<&String> = sides.iter().flat_map(|s| s.0.sites.keys()).collect();
    names.sort();
    names.dedup();
    let mut grown: Vec<SiteGrowth> = names
        .into_iter()
        .filter_map(|site| {
            let bytes: Vec<u64> = sides
                .iter()
                .map(|s| s.0.sites.get(site).map_or(0, |t| t.bytes))
                .collect();
            if !bytes.windows(2).all(|w| w[1] > w[0]) {
                return None;
            }
            let rises: Vec<u64> = bytes.windows(2).map(|w| w[1] - w[0]).collect();
            let bytes_per_interval = rises.iter().sum::<u64>() as f64 / rises.len() as f64;
            let known: Vec<(u64, u64)> = rises
                .iter()
                .zip(&steps)
                .filter_map(|(rise, steps)| steps.map(|s| (*rise, s)))
                .collect();
            let bytes_per_step = (!known.is_empty()).then(|| {
                known.iter().map(|(rise, _)| *rise).sum::<u64>() as f64
                    / known.iter().map(|(_, steps)| *steps).sum::<u64>() as f64
            });
            let stack = sides
                .iter()
                .rev()
                .find_map(|s| s.0.sites.get(site).map(|t| t.stack.clone()))
                .unwrap_or_default();
            Some(SiteGrowth {
                site: site.clone(),
                bytes,
                steps: steps.clone(),
                bytes_per_step,
                bytes_per_interval,
                stack,
            })
        })
        .collect();
    grown.sort_by(|a, b| {
        b.bytes_per_interval
            .total_cmp(&a.bytes_per_interval)
            .then(a.site.cmp(&b.site))
    });
    grown
}

/// Bytes of each category in each side, for tables and bars.
pub fn category_rows(sides: &[SnapshotSide]) -> Vec<(MemoryCategory, Vec<u64>)> {
    MemoryCategory::ALL
        .into_iter()
        .map(|c| (c, sides.iter().map(|s| s.categories.bytes(c)).collect()))
        .filter(|(_, bytes): &(MemoryCategory, Vec<u64>)| bytes.iter().any(|b| *b > 0))
        .collect()
}

/// One rank of a job in the rank table.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RankRow {
    /// The rank's number when known (file name `rank3…`, `RANK` in a run manifest), else its
    /// position among the files.
    pub rank: u32,
    pub name: String,
    /// Allocated bytes at the rank's peak.
    pub peak_allocated_bytes: u64,
    pub peak_reserved_bytes: u64,
    /// Peak allocated bytes minus the median rank's, in % of the median.
    pub imbalance_percent: f64,
    /// Call sites whose bytes at the peak differ most from the median rank's, largest first:
    /// `(site, this rank's bytes, the median of all ranks' bytes)`.
    pub site_differences: Vec<(String, u64, u64)>,
    pub ooms: usize,
    pub first_oom_us: Option<i64>,
}

/// The median of `values` (the lower middle for an even count).
fn median_u64(values: &mut [u64]) -> u64 {
    values.sort_unstable();
    values
        .get(values.len().saturating_sub(1) / 2)
        .copied()
        .unwrap_or(0)
}

/// The rank table of a job: one side per rank, each at its peak, in `(rank, side)` pairs.
pub fn rank_table(ranks: &[(u32, SnapshotSide)]) -> Vec<RankRow> {
    let mut peaks: Vec<u64> = ranks.iter().map(|(_, s)| s.allocated_bytes).collect();
    let median_peak = median_u64(&mut peaks);
    let mut sites: Vec<&String> = ranks.iter().flat_map(|(_, s)| s.sites.keys()).collect();
    sites.sort();
    sites.dedup();
    let site_medians: BTreeMap<&String, u64> = sites
        .into_iter()
        .map(|site| {
            let mut bytes: Vec<u64> = ranks
                .iter()
                .map(|(_, s)| s.sites.get(site).map_or(0, |t| t.bytes))
                .collect();
            (site, median_u64(&mut bytes))
        })
        .collect();
    ranks
        .iter()
        .map(|(rank, side)| {
            let mut site_differences: Vec<(String, u64, u64)> = site_medians
                .iter()
                .map(|(site, median)| {
                    let bytes = side.sites.get(*site).map_or(0, |t| t.bytes);
                    ((*site).clone(), bytes, *median)
                })
                .filter(|(_, bytes, median)| bytes != median)
                .collect();
            site_differences.sort_by(|a, b| {
                b.1.abs_diff(b.2)
                    .cmp(&a.1.abs_diff(a.2))
                    .then(a.0.cmp(&b.0))
            });
            site_differences.truncate(5);
            RankRow {
                rank: *rank,
                name: side.name.clone(),
                peak_allocated_bytes: side.allocated_bytes,
                peak_reserved_bytes: side.reserved_bytes,
                imbalance_percent: if median_peak == 0 {
                    0.0
                } else {
                    100.0 * (side.allocated_bytes as f64 - median_peak as f64) / median_peak as f64
                },
                site_differences,
                ooms: side.ooms,
                first_oom_us: side.first_oom_us,
            }
        })
        .collect()
}

/// The rank of a snapshot from its file name: the number after `rank` (`rank3.pickle`,
/// `rank03-pid7-oom-1.pickle`), if there is one.
pub fn rank_from_name(name: &str) -> Option<u32> {
    let file = name
        .rsplit(['/', '\\'])
        .next()
        .unwrap_or(name)
        .to_ascii_lowercase();
    let at = file.find("rank")? + "rank".len();
    let digits: String = file[at..]
        .trim_start_matches(['_', '-'])
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// One memory series of a capture (a GPU's used memory or a process's), summarised.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SeriesSummary {
    /// "GPU 0 (NVIDIA H200)", "pid 1234 python on GPU 0".
    pub label: String,
    pub peak_bytes: u64,
    /// The level the readings fall back to: their 5th percentile.
    pub floor_bytes: u64,
    /// Robust growth (Theil–Sen slope) in bytes per minute.
    pub growth_bytes_per_min: f64,
    /// Time at or above the threshold (GPUs only; 0 for processes).
    pub above_threshold_ms: i64,
}

/// What a capture holds, summarised per GPU and per process for a side-by-side comparison.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CaptureSide {
    pub name: String,
    pub duration_ms: i64,
    pub gpus: Vec<SeriesSummary>,
    pub processes: Vec<SeriesSummary>,
}

/// Summarises one series of `(t_ms, bytes)` readings.
fn summarize_readings(
    label: String,
    readings: &[(i64, u64)],
    above_threshold_ms: i64,
) -> SeriesSummary {
    let mut values: Vec<u64> = readings.iter().map(|r| r.1).collect();
    values.sort_unstable();
    let floor_bytes = values.get(values.len() / 20).copied().unwrap_or(0);
    let points: Vec<(f64, f64)> = readings
        .iter()
        .map(|(t, b)| (*t as f64 / 60_000.0, *b as f64))
        .collect();
    SeriesSummary {
        label,
        peak_bytes: values.last().copied().unwrap_or(0),
        floor_bytes,
        growth_bytes_per_min: super::trend::theil_sen(&points).map_or(0.0, |line| line.slope),
        above_threshold_ms,
    }
}

/// Summarises `capture` (named `name`) per GPU and per process; time above `threshold_fraction`
/// of each GPU's memory counts as the timeline draws it.
pub fn capture_side(
    capture: &crate::model::Capture,
    name: &str,
    threshold_fraction: f64,
) -> CaptureSide {
    let gpus = capture
        .series
        .iter()
        .map(|series| {
            let readings: Vec<(i64, u64)> = series
                .iter()
                .filter_map(|s| s.memory.map(|m| (s.t_ms, m.used_bytes)))
                .collect();
            let above = super::threshold::time_at_or_above_ms(
                super::threshold::occupancy(series.iter()),
                threshold_fraction,
            );
            summarize_readings(capture.gpu_label(series.device_index), &readings, above)
        })
        .collect();
    let processes = capture
        .processes
        .iter()
        .map(|track| {
            let readings: Vec<(i64, u64)> = track
                .t_ms
                .iter()
                .zip(&track.used_bytes)
                .filter_map(|(t, b)| b.map(|b| (*t, b)))
                .collect();
            let label = format!(
                "pid {} {} on GPU {}",
                track.pid, track.name, track.device_index
            );
            summarize_readings(label, &readings, 0)
        })
        .collect();
    CaptureSide {
        name: name.to_owned(),
        duration_ms: capture.time_span_ms().map_or(0, |(a, b)| b - a),
        gpus,
        processes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moments_parse_and_say_what_they_are() {
        assert_eq!(Moment::parse("peak"), Ok(Moment::Peak));
        assert_eq!(Moment::parse(" oom "), Ok(Moment::Oom));
        assert_eq!(Moment::parse("1200"), Ok(Moment::Event(1200)));
        assert!(Moment::parse("middle").is_err());
        assert_eq!(Moment::Event(7).describe(), "event 7");
    }

    #[test]
    fn ranks_are_read_from_file_names() {
        assert_eq!(rank_from_name("runs/x/rank3.pickle"), Some(3));
        assert_eq!(rank_from_name("rank03-pid7-oom-1.pickle"), Some(3));
        assert_eq!(rank_from_name("snapshot_rank_12.pickle"), Some(12));
        assert_eq!(rank_from_name("train.pickle"), None);
    }

    fn side_with(name: &str, allocated: u64, sites: &[(&str, u64)]) -> SnapshotSide {
        SnapshotSide {
            name: name.to_owned(),
            device: 0,
            moment: "peak".to_owned(),
            events_applied: 0,
            trace_events: 0,
            time_us: None,
            allocated_bytes: allocated,
            reserved_bytes: allocated,
            largest_free_bytes: 0,
            pools: Vec::new(),
            categories: CategoryTotals::default(),
            sites: sites
                .iter()
                .map(|(site, bytes)| {
                    (
                        (*site).to_owned(),
                        SiteTotals {
                            blocks: 1,
                            bytes: *bytes,
                            stack: vec![(*site).to_owned()],
                            sizes: vec![(*bytes, 1)],
                        },
                    )
                })
                .collect(),
            ooms: 0,
            first_oom_us: None,
        }
    }

    #[test]
    fn the_site_that_changed_most_comes_first_and_equal_sites_are_left_out() {
        let a = side_with(
            "a",
            100,
            &[("a.py:1 f", 10), ("a.py:2 g", 50), ("a.py:3 h", 7)],
        );
        let b = side_with(
            "b",
            200,
            &[("a.py:1 f", 110), ("a.py:2 g", 40), ("a.py:3 h", 7)],
        );
        let comparison = compare(vec![a.clone(), b]);
        let sites: Vec<(&str, i64)> = comparison
            .sites
            .iter()
            .map(|d| (d.site.as_str(), d.delta_bytes))
            .collect();
        assert_eq!(sites, [("a.py:1 f", 100), ("a.py:2 g", -10)]);
        assert_eq!(comparison.blocks.len(), 4, "{:?}", comparison.blocks);
        // A file compared with itself differs nowhere.
        let same = compare(vec![a.clone(), a]);
        assert!(same.sites.is_empty() && same.blocks.is_empty());
    }

    #[test]
    fn the_rank_table_measures_each_rank_against_the_median() {
        let ranks = vec![
            (0, side_with("rank0", 100, &[("t.py:5 step", 60)])),
            (1, side_with("rank1", 300, &[("t.py:5 step", 260)])),
            (2, side_with("rank2", 200, &[("t.py:5 step", 160)])),
        ];
        let table = rank_table(&ranks);
        assert_eq!(table[1].imbalance_percent, 50.0);
        assert_eq!(table[0].imbalance_percent, -50.0);
        assert_eq!(table[2].imbalance_percent, 0.0);
        assert_eq!(
            table[1].site_differences,
            [("t.py:5 step".to_owned(), 260, 160)]
        );
        assert!(table[2].site_differences.is_empty());
    }
}
