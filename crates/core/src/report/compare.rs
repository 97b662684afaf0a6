//! A comparison of snapshots or captures as one report: the measurements of
//! `analysis::compare`, the judgement of `diagnose::compare`, rendered as terminal text,
//! Markdown, a self-contained HTML page (category bars side by side) and JSON
//! (`vramscope.compare/1`, docs/report-schema.md). `vramscope compare` and the app show it.

use std::fmt::Write as _;

use serde_json::{Value, json};

use super::{html, iso8601_utc, markdown};
use crate::analysis::categories::MemoryCategory;
use crate::analysis::compare::{
    CaptureSide, Comparison, Moment, RankRow, SiteGrowth, SnapshotSide, capture_side,
    category_rows, compare, growth, rank_table, side,
};
use crate::analysis::timetravel::TimeTravel;
use crate::diagnose::NamedCapture;
use crate::diagnose::compare::{CompareVerdict, judge, judge_growth, judge_ranks};
use crate::model::{UnixMs, format_bytes};

/// Version tag of the JSON; bump it when a field changes meaning or disappears.
pub const COMPARE_SCHEMA: &str = "vramscope.compare/1";

/// Rows of call sites and blocks a report lists at most.
const MAX_ROWS: usize = 40;

/// What the snapshots are to each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompareKind {
    /// Two snapshots (or any number, first against last): what differs.
    Pair,
    /// Snapshots of one process in time order: what grows from one to the next.
    Growth,
    /// One snapshot per rank of a job: the rank table.
    Ranks,
}

impl CompareKind {
    fn key(self) -> &'static str {
        match self {
            CompareKind::Pair => "pair",
            CompareKind::Growth => "growth",
            CompareKind::Ranks => "ranks",
        }
    }
}

/// One snapshot to compare: its name, its rank (for rank tables) and the time travel of the
/// device compared.
pub struct SnapshotInput {
    pub name: String,
    pub rank: u32,
    pub travel: TimeTravel,
}

/// Everything a comparison is made of.
pub struct CompareRequest {
    pub snapshots: Vec<SnapshotInput>,
    pub captures: Vec<NamedCapture>,
    pub moment: Moment,
    pub kind: CompareKind,
    /// The threshold of "time above", as a fraction of each GPU's memory.
    pub threshold_fraction: f64,
    /// Files that could not be read, each message naming its file.
    pub unreadable: Vec<String>,
    pub generated_at_ms: UnixMs,
}

/// A comparison, measured and judged.
#[derive(Clone, Debug, PartialEq)]
pub struct CompareReport {
    pub kind: CompareKind,
    pub moment: Moment,
    pub generated_at_ms: UnixMs,
    /// The snapshots side by side (first against last).
    pub snapshots: Option<Comparison>,
    pub growth: Vec<SiteGrowth>,
    pub ranks: Vec<RankRow>,
    pub captures: Vec<CaptureSide>,
    pub threshold_fraction: f64,
    pub verdict: CompareVerdict,
    pub unreadable: Vec<String>,
}

/// Measures and judges `request`.
pub fn build(request: CompareRequest) -> CompareReport {
    let CompareRequest {
        mut snapshots,
        captures,
        moment,
        kind,
        threshold_fraction,
        unreadable,
        generated_at_ms,
    } = request;
    if kind == CompareKind::Growth {
        // Time order: by the last event's time where the traces recorded times, else as given.
        snapshots.sort_by_key(|s| last_time_us(&s.travel).unwrap_or(i64::MIN));
    }
    let sides: Vec<SnapshotSide> = snapshots
        .iter()
        .map(|s| side(&s.travel, &s.name, moment))
        .collect();
    let mut verdict = CompareVerdict::default();
    let mut growth_rows = Vec::new();
    let mut rank_rows = Vec::new();
    match kind {
        CompareKind::Growth if sides.len() > 1 => {
            let end_sides: Vec<(SnapshotSide, &TimeTravel)> = snapshots
                .iter()
                .map(|s| (side(&s.travel, &s.name, Moment::End), &s.travel))
                .collect();
            growth_rows = growth(&end_sides);
            verdict = judge_growth(&growth_rows, end_sides.len());
        }
        CompareKind::Ranks if !sides.is_empty() => {
            let ranked: Vec<(u32, SnapshotSide)> = snapshots
                .iter()
                .zip(&sides)
                .map(|(s, side)| (s.rank, side.clone()))
                .collect();
            rank_rows = rank_table(&ranked);
            verdict = judge_ranks(&rank_rows);
        }
        _ => {}
    }
    let comparison = (sides.len() > 1).then(|| compare(sides));
    if let Some(comparison) = &comparison {
        let pair = judge(comparison);
        if kind == CompareKind::Pair {
            verdict = pair;
        } else {
            verdict.caveats.extend(pair.caveats);
        }
    }
    let capture_sides: Vec<CaptureSide> = captures
        .iter()
        .map(|c| capture_side(&c.capture, &c.name, threshold_fraction))
        .collect();
    if comparison.is_none() && capture_sides.len() > 1 {
        verdict.headline = capture_headline(&capture_sides);
    }
    if !capture_sides.is_empty() && comparison.is_some() {
        verdict.caveats.push(
            "Snapshots and captures were given together: each kind is compared with its own."
                .to_owned(),
        );
    }
    CompareReport {
        kind,
        moment,
        generated_at_ms,
        snapshots: comparison,
        growth: growth_rows,
        ranks: rank_rows,
        captures: capture_sides,
        threshold_fraction,
        verdict,
        unreadable,
    }
}

fn last_time_us(travel: &TimeTravel) -> Option<i64> {
    travel
        .trace()
        .times_us
        .iter()
        .rev()
        .copied()
        .find(|t| *t != crate::model::allocator::TIME_UNKNOWN_US)
}

/// The headline of a capture comparison: how the first GPU's peak moved.
fn capture_headline(sides: &[CaptureSide]) -> String {
    let (Some(first), Some(last)) = (sides.first(), sides.last()) else {
        return String::new();
    };
    let peak = |s: &CaptureSide| s.gpus.iter().map(|g| g.peak_bytes).max().unwrap_or(0);
    let (a, b) = (peak(first), peak(last));
    format!(
        "{}'s highest GPU peak is {} {} than {}'s ({} against {}).",
        last.name,
        format_bytes(a.abs_diff(b)),
        if b < a { "lower" } else { "higher" },
        first.name,
        format_bytes(b),
        format_bytes(a)
    )
}

fn signed(delta: i64) -> String {
    let sign = if delta < 0 { "−" } else { "+" };
    format!("{sign}{}", format_bytes(delta.unsigned_abs()))
}

/// The comparison as plain text for a terminal.
pub fn render_text(report: &CompareReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", report.verdict.headline);
    for line in &report.verdict.findings {
        let _ = writeln!(out, "  - {line}");
    }
    for line in &report.verdict.caveats {
        let _ = writeln!(out, "  ! {line}");
    }
    if let Some(comparison) = &report.snapshots {
        text_sides(&mut out, comparison);
    }
    if !report.growth.is_empty() {
        let _ = writeln!(
            out,
            "\nCall sites that grow from each snapshot to the next:"
        );
        for g in report.growth.iter().take(MAX_ROWS) {
            let rate = g.bytes_per_step.map_or_else(
                || format!("{}/interval", format_bytes(g.bytes_per_interval as u64)),
                |b| format!("{}/step", format_bytes(b.round() as u64)),
            );
            let bytes: Vec<String> = g.bytes.iter().map(|b| format_bytes(*b)).collect();
            let _ = writeln!(out, "  {rate:>14}  {}  ({})", g.site, bytes.join(" → "));
        }
    }
    if !report.ranks.is_empty() {
        let _ = writeln!(
            out,
            "\nRank  peak allocated  reserved     vs median  OOMs  file"
        );
        for r in &report.ranks {
            let _ = writeln!(
                out,
                "{:>4}  {:>14}  {:>10}  {:>+8.1} %  {:>4}  {}",
                r.rank,
                format_bytes(r.peak_allocated_bytes),
                format_bytes(r.peak_reserved_bytes),
                r.imbalance_percent,
                r.ooms,
                r.name
            );
        }
    }
    for c in &report.captures {
        let _ = writeln!(out, "\n{} ({} s)", c.name, c.duration_ms / 1000);
        for s in c.gpus.iter().chain(&c.processes) {
            let _ = writeln!(
                out,
                "  {:<40} peak {:>10}  floor {:>10}  growth {:>10}/min  above threshold {} s",
                s.label,
                format_bytes(s.peak_bytes),
                format_bytes(s.floor_bytes),
                signed(s.growth_bytes_per_min.round() as i64),
                s.above_threshold_ms / 1000
            );
        }
    }
    for message in &report.unreadable {
        let _ = writeln!(out, "\nnot compared: {message}");
    }
    out
}

fn text_sides(out: &mut String, comparison: &Comparison) {
    let sides = &comparison.sides;
    let _ = writeln!(out);
    for (i, s) in sides.iter().enumerate() {
        let _ = writeln!(
            out,
            "[{}] {} (GPU {}, at {}: event {} of {})",
            i + 1,
            s.name,
            s.device,
            s.moment,
            s.events_applied,
            s.trace_events
        );
    }
    let row = |out: &mut String, label: &str, values: Vec<u64>| {
        let cells: Vec<String> = values
            .iter()
            .map(|v| format!("{:>12}", format_bytes(*v)))
            .collect();
        let _ = writeln!(out, "  {label:<28}{}", cells.join(""));
    };
    row(
        out,
        "allocated",
        sides.iter().map(|s| s.allocated_bytes).collect(),
    );
    row(
        out,
        "reserved",
        sides.iter().map(|s| s.reserved_bytes).collect(),
    );
    row(
        out,
        "unused (reserved − allocated)",
        sides.iter().map(SnapshotSide::unused_bytes).collect(),
    );
    row(
        out,
        "largest free block",
        sides.iter().map(|s| s.largest_free_bytes).collect(),
    );
    let categories = category_rows(sides);
    if !categories.is_empty() {
        let _ = writeln!(out, "By category:");
        for (category, bytes) in categories {
            row(out, category.label(), bytes);
        }
    }
    let _ = writeln!(out, "Call sites by change in live bytes (first → last):");
    if comparison.sites.is_empty() {
        let _ = writeln!(out, "  (none changed)");
    }
    for d in comparison.sites.iter().take(MAX_ROWS) {
        let per: Vec<String> = d
            .per_side
            .iter()
            .map(|(blocks, bytes)| format!("{blocks}×/{}", format_bytes(*bytes)))
            .collect();
        let _ = writeln!(
            out,
            "  {:>12}  {}  [{}]",
            signed(d.delta_bytes),
            d.site,
            per.join(" → ")
        );
    }
}

/// The comparison as JSON (`vramscope.compare/1`).
pub fn render_json(report: &CompareReport) -> String {
    serde_json::to_string_pretty(&json_value(report))
        .unwrap_or_else(|e| format!("{{\"schema\":\"{COMPARE_SCHEMA}\",\"error\":\"{e}\"}}"))
}

fn categories_json(side: &SnapshotSide) -> Value {
    let map: serde_json::Map<String, Value> = MemoryCategory::ALL
        .into_iter()
        .map(|c| {
            let key = serde_json::to_value(c)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            (key, json!(side.categories.bytes(c)))
        })
        .collect();
    Value::Object(map)
}

fn json_value(report: &CompareReport) -> Value {
    let snapshots: Vec<Value> = report
        .snapshots
        .iter()
        .flat_map(|c| &c.sides)
        .map(|s| {
            json!({
                "name": s.name,
                "device": s.device,
                "moment": s.moment,
                "events_applied": s.events_applied,
                "trace_events": s.trace_events,
                "allocated_bytes": s.allocated_bytes,
                "reserved_bytes": s.reserved_bytes,
                "unused_bytes": s.unused_bytes(),
                "largest_free_bytes": s.largest_free_bytes,
                "ooms": s.ooms,
                "categories": categories_json(s),
                "pools": s.pools,
            })
        })
        .collect();
    let call_sites: Vec<Value> = report
        .snapshots
        .iter()
        .flat_map(|c| c.sites.iter().take(MAX_ROWS))
        .map(|d| {
            json!({
                "site": d.site,
                "delta_bytes": d.delta_bytes,
                "per_snapshot": d.per_side.iter().map(|(blocks, bytes)| json!({"blocks": blocks, "bytes": bytes})).collect::<Vec<_>>(),
                "stack": d.stack,
            })
        })
        .collect();
    let blocks: Vec<Value> = report
        .snapshots
        .iter()
        .flat_map(|c| c.blocks.iter().take(MAX_ROWS))
        .map(|b| serde_json::to_value(b).unwrap_or(Value::Null))
        .collect();
    json!({
        "schema": COMPARE_SCHEMA,
        "generated_at": iso8601_utc(report.generated_at_ms),
        "kind": report.kind.key(),
        "moment": report.moment.describe(),
        "verdict": report.verdict,
        "snapshots": snapshots,
        "call_sites": call_sites,
        "blocks": blocks,
        "growth": report.growth,
        "ranks": report.ranks,
        "captures": report.captures,
        "threshold_fraction": report.threshold_fraction,
        "unreadable": report.unreadable,
    })
}

/// The comparison as Markdown.
pub fn render_markdown(report: &CompareReport) -> String {
    let mut out = String::from("# vramscope comparison\n\n");
    let _ = writeln!(out, "Generated {}.\n", iso8601_utc(report.generated_at_ms));
    let _ = writeln!(out, "**{}**\n", markdown::escape(&report.verdict.headline));
    for line in &report.verdict.findings {
        let _ = writeln!(out, "- {}", markdown::escape(line));
    }
    for line in &report.verdict.caveats {
        let _ = writeln!(out, "- ⚠ {}", markdown::escape(line));
    }
    if let Some(c) = &report.snapshots {
        let header: Vec<String> = c.sides.iter().map(|s| markdown::escape(&s.name)).collect();
        let _ = writeln!(out, "\n## At {}\n", report.moment.describe());
        let _ = writeln!(out, "| | {} |", header.join(" | "));
        let _ = writeln!(out, "|---|{}|", vec!["---:"; c.sides.len()].join("|"));
        let mut row = |label: &str, values: Vec<u64>| {
            let cells: Vec<String> = values.iter().map(|v| format_bytes(*v)).collect();
            let _ = writeln!(out, "| {label} | {} |", cells.join(" | "));
        };
        row(
            "allocated",
            c.sides.iter().map(|s| s.allocated_bytes).collect(),
        );
        row(
            "reserved",
            c.sides.iter().map(|s| s.reserved_bytes).collect(),
        );
        row(
            "unused (reserved − allocated)",
            c.sides.iter().map(SnapshotSide::unused_bytes).collect(),
        );
        row(
            "largest free block",
            c.sides.iter().map(|s| s.largest_free_bytes).collect(),
        );
        for (category, bytes) in category_rows(&c.sides) {
            row(category.label(), bytes);
        }
        let _ = writeln!(out, "\n## Call sites by change in live bytes\n");
        let _ = writeln!(out, "| change | call site | {} |", header.join(" | "));
        let _ = writeln!(out, "|---:|---|{}|", vec!["---:"; c.sides.len()].join("|"));
        for d in c.sites.iter().take(MAX_ROWS) {
            let cells: Vec<String> = d
                .per_side
                .iter()
                .map(|(blocks, bytes)| format!("{blocks} blocks, {}", format_bytes(*bytes)))
                .collect();
            let _ = writeln!(
                out,
                "| {} | `{}` | {} |",
                signed(d.delta_bytes),
                markdown::escape(&d.site),
                cells.join(" | ")
            );
        }
    }
    if !report.growth.is_empty() {
        let _ = writeln!(
            out,
            "\n## Growth between snapshots\n\n| per step | call site | bytes |\n|---:|---|---|"
        );
        for g in report.growth.iter().take(MAX_ROWS) {
            let bytes: Vec<String> = g.bytes.iter().map(|b| format_bytes(*b)).collect();
            let _ = writeln!(
                out,
                "| {} | `{}` | {} |",
                g.bytes_per_step
                    .map_or("?".to_owned(), |b| format_bytes(b.round() as u64)),
                markdown::escape(&g.site),
                bytes.join(" → ")
            );
        }
    }
    if !report.ranks.is_empty() {
        let _ = writeln!(
            out,
            "\n## Ranks\n\n| rank | peak allocated | reserved | vs median | OOMs |\n|---:|---:|---:|---:|---:|"
        );
        for r in &report.ranks {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {:+.1} % | {} |",
                r.rank,
                format_bytes(r.peak_allocated_bytes),
                format_bytes(r.peak_reserved_bytes),
                r.imbalance_percent,
                r.ooms
            );
        }
    }
    for c in &report.captures {
        let _ = writeln!(
            out,
            "\n## {}\n\n| series | peak | floor | growth/min | above threshold |\n|---|---:|---:|---:|---:|",
            markdown::escape(&c.name)
        );
        for s in c.gpus.iter().chain(&c.processes) {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} s |",
                markdown::escape(&s.label),
                format_bytes(s.peak_bytes),
                format_bytes(s.floor_bytes),
                signed(s.growth_bytes_per_min.round() as i64),
                s.above_threshold_ms / 1000
            );
        }
    }
    out
}

/// The comparison as a self-contained HTML page, with the categories as bars side by side.
pub fn render_html(report: &CompareReport) -> String {
    let mut body = String::new();
    let _ = writeln!(
        body,
        "<h1>vramscope comparison</h1><p class=\"muted\">Generated {}</p>",
        iso8601_utc(report.generated_at_ms)
    );
    let _ = writeln!(
        body,
        "<p class=\"headline\">{}</p><ul>",
        html::escape(&report.verdict.headline)
    );
    for line in &report.verdict.findings {
        let _ = writeln!(body, "<li>{}</li>", html::escape(line));
    }
    for line in &report.verdict.caveats {
        let _ = writeln!(body, "<li class=\"caveat\">{}</li>", html::escape(line));
    }
    body.push_str("</ul>");
    if let Some(c) = &report.snapshots {
        let rows = category_rows(&c.sides);
        let largest = c
            .sides
            .iter()
            .map(|s| s.allocated_bytes)
            .max()
            .unwrap_or(0)
            .max(1);
        let _ = writeln!(
            body,
            "<h2>Where the memory is, at {}</h2><div class=\"bars\">",
            html::escape(&report.moment.describe())
        );
        for s in &c.sides {
            let _ = writeln!(
                body,
                "<div class=\"side\"><h3>{}</h3><p>{} allocated, {} reserved</p>",
                html::escape(&s.name),
                format_bytes(s.allocated_bytes),
                format_bytes(s.reserved_bytes)
            );
            for (category, _) in &rows {
                let bytes = s.categories.bytes(*category);
                let width = 100.0 * bytes as f64 / largest as f64;
                let _ = writeln!(
                    body,
                    "<div class=\"bar\"><span class=\"label\">{}</span><span class=\"fill cat-{}\" style=\"width:{width:.1}%\"></span><span class=\"value\">{}</span></div>",
                    html::escape(category.label()),
                    *category as u8,
                    format_bytes(bytes)
                );
            }
            body.push_str("</div>");
        }
        body.push_str("</div><h2>Call sites by change in live bytes</h2><table><tr><th>change</th><th>call site</th>");
        for s in &c.sides {
            let _ = write!(body, "<th>{}</th>", html::escape(&s.name));
        }
        body.push_str("</tr>");
        for d in c.sites.iter().take(MAX_ROWS) {
            let _ = write!(
                body,
                "<tr><td class=\"num\">{}</td><td><code title=\"{}\">{}</code></td>",
                signed(d.delta_bytes),
                html::escape(&d.stack.join("\n")),
                html::escape(&d.site)
            );
            for (blocks, bytes) in &d.per_side {
                let _ = write!(
                    body,
                    "<td class=\"num\">{blocks} × {}</td>",
                    format_bytes(*bytes)
                );
            }
            body.push_str("</tr>");
        }
        body.push_str("</table>");
    }
    if !report.growth.is_empty() {
        body.push_str("<h2>Growth between snapshots</h2><table><tr><th>per step</th><th>call site</th><th>bytes</th></tr>");
        for g in report.growth.iter().take(MAX_ROWS) {
            let bytes: Vec<String> = g.bytes.iter().map(|b| format_bytes(*b)).collect();
            let _ = write!(
                body,
                "<tr><td class=\"num\">{}</td><td><code>{}</code></td><td>{}</td></tr>",
                g.bytes_per_step
                    .map_or("?".to_owned(), |b| format_bytes(b.round() as u64)),
                html::escape(&g.site),
                html::escape(&bytes.join(" → "))
            );
        }
        body.push_str("</table>");
    }
    if !report.ranks.is_empty() {
        body.push_str("<h2>Ranks</h2><table><tr><th>rank</th><th>peak allocated</th><th>reserved</th><th>vs median</th><th>OOMs</th></tr>");
        for r in &report.ranks {
            let _ = write!(
                body,
                "<tr><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{:+.1} %</td><td class=\"num\">{}</td></tr>",
                r.rank,
                format_bytes(r.peak_allocated_bytes),
                format_bytes(r.peak_reserved_bytes),
                r.imbalance_percent,
                r.ooms
            );
        }
        body.push_str("</table>");
    }
    for c in &report.captures {
        let _ = write!(
            body,
            "<h2>{}</h2><table><tr><th>series</th><th>peak</th><th>floor</th><th>growth/min</th><th>above threshold</th></tr>",
            html::escape(&c.name)
        );
        for s in c.gpus.iter().chain(&c.processes) {
            let _ = write!(
                body,
                "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{} s</td></tr>",
                html::escape(&s.label),
                format_bytes(s.peak_bytes),
                format_bytes(s.floor_bytes),
                signed(s.growth_bytes_per_min.round() as i64),
                s.above_threshold_ms / 1000
            );
        }
        body.push_str("</table>");
    }
    let colors: String = MemoryCategory::ALL
        .into_iter()
        .enumerate()
        .map(|(i, category)| {
            let [r, g, b] = super::palette::category_rgb(category);
            format!(".cat-{i}{{background:rgb({r},{g},{b})}}")
        })
        .collect();
    format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>vramscope comparison</title><style>\
         body{{font-family:system-ui,sans-serif;margin:2em;color:#1d1d1f}}.muted{{color:#666}}\
         .headline{{font-weight:600;font-size:1.1em}}.caveat{{color:#8a5a00}}\
         .bars{{display:flex;gap:2em;flex-wrap:wrap}}.side{{flex:1;min-width:280px}}\
         .bar{{display:flex;align-items:center;gap:.5em;margin:.2em 0}}.label{{width:12em}}\
         .fill{{display:inline-block;height:1em;min-width:1px}}.value{{color:#444}}\
         table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #ddd;padding:.3em .6em}}\
         .num{{text-align:right;font-variant-numeric:tabular-nums}}{colors}</style></head><body>{body}</body></html>"
    )
}

/// Writes the comparison to `path` in the format its extension names.
#[cfg(feature = "native")]
pub fn write(report: &CompareReport, path: &std::path::Path) -> Result<(), super::ReportError> {
    use super::{ReportError, ReportFormat};
    let file = path.display().to_string();
    let format = ReportFormat::from_path(path)
        .ok_or_else(|| ReportError::UnknownFormat { file: file.clone() })?;
    let text = match format {
        ReportFormat::Markdown => render_markdown(report),
        ReportFormat::Html => render_html(report),
        ReportFormat::Json => render_json(report),
    };
    crate::formats::write_atomically(path, text.as_bytes())
        .map_err(|source| ReportError::Io { file, source })
}
