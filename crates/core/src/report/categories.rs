//! Where the memory went, as the reports show it: per snapshot device, the live bytes of each
//! category (`analysis::categories`) at the failure and at the peak before it, drawn as bars in
//! the colours of [`super::palette::category_rgb`], with the failing request, the private pools
//! and the concatenating call sites in words. The Markdown, HTML and JSON reports share it.

use std::fmt::Write as _;

use serde_json::{Value, json};

use super::{html, markdown, palette};
use crate::analysis::categories::{
    CategoryMoment, CategoryTotals, MemoryBreakdown, MemoryCategory,
};
use crate::diagnose::finding::NamedBreakdown;
use crate::model::format_bytes;

/// Characters of the longest Markdown bar (the largest category of the table).
const MARKDOWN_BAR_CHARS: u64 = 24;
/// Pixels of the longest HTML bar.
const HTML_BAR_PX: u64 = 240;

/// The moments a breakdown shows, as column headings and totals: the failure (when there is
/// one), then the peak before it (one column when the failure was the peak).
fn moments(b: &MemoryBreakdown) -> Vec<(String, &CategoryMoment)> {
    let mut columns = Vec::new();
    if let Some(failure) = &b.at_failure {
        if failure.position == b.at_peak.position {
            columns.push((
                format!("at the failure, its peak (event #{})", failure.position),
                failure,
            ));
            return columns;
        }
        columns.push((
            format!("at the failure (event #{})", failure.position),
            failure,
        ));
        columns.push((
            format!("at the peak before it (event #{})", b.at_peak.position),
            &b.at_peak,
        ));
    } else {
        columns.push((
            format!("at the peak of the trace (event #{})", b.at_peak.position),
            &b.at_peak,
        ));
    }
    columns
}

/// The categories any moment holds, in report order.
fn shown_categories(b: &MemoryBreakdown) -> Vec<MemoryCategory> {
    MemoryCategory::ALL
        .into_iter()
        .filter(|c| moments(b).iter().any(|(_, m)| m.totals.bytes(*c) > 0))
        .collect()
}

/// The largest category's bytes over every moment: the scale of the bars.
fn scale_bytes(b: &MemoryBreakdown) -> u64 {
    moments(b)
        .iter()
        .flat_map(|(_, m)| MemoryCategory::ALL.map(|c| m.totals.bytes(c)))
        .max()
        .unwrap_or(0)
        .max(1)
}

/// "1.00 GiB (12 %)".
fn bytes_and_share(bytes: u64, totals: &CategoryTotals) -> String {
    format!(
        "{} ({:.0} %)",
        format_bytes(bytes),
        bytes as f64 * 100.0 / totals.total_bytes().max(1) as f64
    )
}

/// What a breakdown says beyond the table, in sentences: what the failing request was for, the
/// private pools, the concatenating call sites.
pub fn notes(b: &MemoryBreakdown) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(request) = &b.failing_request {
        notes.push(format!(
            "The failing request was made for {}{}.",
            request.category.label(),
            if request.in_optimizer_step {
                ", inside optimizer.step()"
            } else {
                ""
            }
        ));
    }
    let judged = &b.judged().totals;
    if judged.optimizer_step_bytes() > 0 {
        notes.push(format!(
            "Of the temporaries, {} were made by optimizer.step().",
            format_bytes(judged.optimizer_step_bytes())
        ));
    }
    for pool in &b.private_pools {
        notes.push(format!(
            "Private pool ({}, {}), {}: {} reserved, {} of it held by its tensors{}.",
            pool.pool_id.0,
            pool.pool_id.1,
            pool.owner(),
            format_bytes(pool.reserved_bytes),
            format_bytes(pool.allocated_bytes),
            if pool.serves_failing_request {
                "; the failing request was routed to it"
            } else {
                "; none of it could serve other work"
            }
        ));
    }
    for site in &b.concatenating {
        notes.push(format!(
            "Grown by concatenation: {}, {} reallocations, each larger ({} → {}).",
            site.site,
            site.reallocations,
            format_bytes(site.first_bytes),
            format_bytes(site.largest_bytes)
        ));
    }
    notes
}

/// The section of the Markdown report for one snapshot device.
pub fn markdown_section(out: &mut String, named: &NamedBreakdown) {
    let b = &named.breakdown;
    let _ = writeln!(
        out,
        "## Where the memory went: {}, GPU {}\n",
        markdown::code(&named.name),
        named.device_index
    );
    let columns = moments(b);
    let _ = writeln!(
        out,
        "Live memory by category, from each block's allocation stack and pool.\n"
    );
    let headings: Vec<String> = columns.iter().map(|(h, _)| h.clone()).collect();
    let _ = writeln!(
        out,
        "| category | {} |\n|---|{}",
        headings.join(" | "),
        "---|".repeat(columns.len())
    );
    let scale = scale_bytes(b);
    for category in shown_categories(b) {
        let cells: Vec<String> = columns
            .iter()
            .map(|(_, m)| {
                let bytes = m.totals.bytes(category);
                let bar = "█".repeat((bytes * MARKDOWN_BAR_CHARS).div_ceil(scale) as usize);
                format!("{} {bar}", bytes_and_share(bytes, &m.totals))
            })
            .collect();
        let _ = writeln!(out, "| {} | {} |", category.label(), cells.join(" | "));
    }
    let totals: Vec<String> = columns
        .iter()
        .map(|(_, m)| format_bytes(m.totals.total_bytes()))
        .collect();
    let _ = writeln!(out, "| total | {} |\n", totals.join(" | "));
    for note in notes(b) {
        let _ = writeln!(out, "- {}", markdown::escape(&note));
    }
    out.push('\n');
}

/// The section of the HTML report for one snapshot device: a bar per category and moment.
pub fn html_section(out: &mut String, named: &NamedBreakdown) {
    let b = &named.breakdown;
    let _ = writeln!(
        out,
        "<h2>Where the memory went: <code>{}</code>, GPU {}</h2>\n<p class=\"muted\">Live memory by category, from each block's allocation stack and pool.</p>",
        html::escape(&named.name),
        named.device_index
    );
    let columns = moments(b);
    out.push_str("<table>\n<tr><th>category</th>");
    for (heading, _) in &columns {
        let _ = write!(out, "<th>{}</th>", html::escape(heading));
    }
    out.push_str("</tr>\n");
    let scale = scale_bytes(b);
    for category in shown_categories(b) {
        let [r, g, bl] = palette::category_rgb(category);
        let _ = write!(
            out,
            "<tr><td><span class=\"swatch\" style=\"background:#{r:02x}{g:02x}{bl:02x}\"></span>{}</td>",
            html::escape(category.label())
        );
        for (_, m) in &columns {
            let bytes = m.totals.bytes(category);
            let width = (bytes * HTML_BAR_PX).div_ceil(scale);
            let _ = write!(
                out,
                "<td><span style=\"display:inline-block;height:.8rem;width:{width}px;background:#{r:02x}{g:02x}{bl:02x};vertical-align:middle;margin-right:.4rem\"></span>{}</td>",
                bytes_and_share(bytes, &m.totals)
            );
        }
        out.push_str("</tr>\n");
    }
    out.push_str("<tr><th>total</th>");
    for (_, m) in &columns {
        let _ = write!(out, "<th>{}</th>", format_bytes(m.totals.total_bytes()));
    }
    out.push_str("</tr>\n</table>\n");
    let notes = notes(b);
    if !notes.is_empty() {
        out.push_str("<ul>\n");
        for note in notes {
            let _ = writeln!(out, "<li>{}</li>", html::escape(&note));
        }
        out.push_str("</ul>\n");
    }
}

/// The JSON name of a category (`optimizer_state`).
fn key(category: MemoryCategory) -> String {
    serde_json::to_value(category)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn moment_json(m: &CategoryMoment) -> Value {
    let categories: serde_json::Map<String, Value> = MemoryCategory::ALL
        .into_iter()
        .map(|c| (key(c), json!(m.totals.bytes(c))))
        .collect();
    json!({
        "event": m.position,
        "total_bytes": m.totals.total_bytes(),
        "batch_independent_bytes": m.totals.batch_independent_bytes(),
        "optimizer_step_bytes": m.totals.optimizer_step_bytes(),
        "categories": categories,
    })
}

/// One entry of the JSON report's `memory_categories` (`docs/report-schema.md`).
pub fn json_entry(named: &NamedBreakdown) -> Value {
    let b = &named.breakdown;
    json!({
        "snapshot": named.name,
        "device": named.device_index,
        "at_failure": b.at_failure.as_ref().map(moment_json),
        "at_peak": moment_json(&b.at_peak),
        "failing_request": b.failing_request.map(|r| json!({
            "category": key(r.category),
            "in_optimizer_step": r.in_optimizer_step,
        })),
        "largest_parameter_bytes": b.largest_parameter_bytes,
        "private_pools": b.private_pools.iter().map(|p| json!({
            "pool_id": [p.pool_id.0, p.pool_id.1],
            "owner": p.owner(),
            "reserved_bytes": p.reserved_bytes,
            "allocated_bytes": p.allocated_bytes,
            "segments": p.segments,
            "serves_failing_request": p.serves_failing_request,
        })).collect::<Vec<_>>(),
        "concatenating": b.concatenating.iter().map(|s| json!({
            "site": s.site,
            "reallocations": s.reallocations,
            "first_bytes": s.first_bytes,
            "largest_bytes": s.largest_bytes,
        })).collect::<Vec<_>>(),
    })
}
