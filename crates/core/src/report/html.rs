//! The HTML report: one self-contained page (inline CSS, the timeline and block maps as `data:` PNGs, no
//! scripts, no external resources), written as well-formed XHTML-compatible markup so that it
//! opens offline in any browser and parses as XML. Every text is HTML-escaped.

use std::fmt::Write as _;

use super::{Report, blockmap, chart, iso8601_utc, whatif};
use crate::diagnose::finding::{Finding, NamedAllocatorState, NamedWhatIf, Severity};
use crate::model::format_bytes;

/// Chart size in pixels.
const CHART_WIDTH_PX: u32 = 900;
const CHART_HEIGHT_PX: u32 = 260;
/// Height of each GPU's chart when there are several (8 GPUs stay under 1.3k pixels).
const CHART_PANEL_HEIGHT_PX: u32 = 190;
/// Block map width in pixels (its height follows from the segments).
const BLOCK_MAP_WIDTH_PX: u32 = 900;
/// Block maps drawn at most (one per snapshot and device), to keep the page small.
const MAX_BLOCK_MAPS: usize = 4;

const CSS: &str = "body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#1d1d1f;line-height:1.45}\
h1{font-size:1.6rem}h2{font-size:1.25rem;margin-top:2rem}h3{font-size:1.05rem;margin:0 0 .4rem}\
.finding{border:1px solid #d0d0d5;border-left-width:6px;border-radius:6px;padding:.8rem 1rem;margin:1rem 0}\
.critical{border-left-color:#c62828}.warning{border-left-color:#ef8f00}.info{border-left-color:#2e7d32}\
.badge{display:inline-block;font-size:.75rem;font-weight:600;padding:.05rem .45rem;border-radius:4px;color:#fff;margin-right:.4rem}\
.badge.critical{background:#c62828}.badge.warning{background:#ef8f00}.badge.info{background:#2e7d32}.cat{color:#555;font-family:monospace}\
table{border-collapse:collapse;width:100%;font-size:.9rem;margin:.5rem 0}td,th{border:1px solid #e0e0e5;padding:.25rem .45rem;text-align:left;vertical-align:top}\
th{background:#f5f5f7}pre{background:#f5f5f7;padding:.6rem;border-radius:4px;overflow-x:auto;font-size:.85rem}\
.simulated{background:#fff3cd;border:1px solid #e0c060;padding:.6rem 1rem;border-radius:6px;font-weight:600}\
.legend span{display:inline-block;margin-right:1rem;font-size:.85rem}.swatch{display:inline-block;width:.9rem;height:.9rem;vertical-align:middle;margin-right:.3rem;border-radius:2px}\
img.chart{max-width:100%;border:1px solid #e0e0e5}.muted{color:#666;font-size:.85rem}";

/// Escapes `& < > " '` so that text can go into element content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Control characters other than tab/newline are not allowed in XML.
            c if c.is_control() && c != '\n' && c != '\t' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// Standard base64 with padding (RFC 4648), for the `data:` URLs of the images.
fn base64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn severity_class(s: Severity) -> &'static str {
    s.as_str()
}

/// Renders the whole page.
pub fn render(report: &Report) -> String {
    let d = &report.diagnosis;
    let mut out = String::new();
    let title = escape(&report.title);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\n<title>{title}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<h1>{title}</h1>\n"
    );
    if d.simulated {
        out.push_str("<p class=\"simulated\">SIMULATED DATA: some evidence comes from vramscope's built-in demo machine, not a real GPU.</p>\n");
    }
    let _ = writeln!(
        out,
        "<p class=\"muted\">Generated {} by vramscope {}.</p>",
        iso8601_utc(report.generated_at_ms),
        env!("CARGO_PKG_VERSION")
    );
    if let Some(primary) = d.primary() {
        let _ = writeln!(
            out,
            "<p><strong>Primary finding:</strong> {} <span class=\"cat\">({})</span></p>",
            escape(&primary.title),
            primary.category.as_str()
        );
    }
    if !d.inputs.is_empty() {
        out.push_str("<h2>Evidence examined</h2>\n<ul>\n");
        for input in &d.inputs {
            let _ = writeln!(
                out,
                "<li>{} <code>{}</code>: {}</li>",
                escape(&input.kind),
                escape(&input.name),
                escape(&input.summary)
            );
        }
        out.push_str("</ul>\n");
    }
    if let Some(timeline) = &report.timeline {
        timeline_section(&mut out, timeline);
    }
    for named in &d.memory_categories {
        super::categories::html_section(&mut out, named);
    }
    for named in d.allocator_states.iter().take(MAX_BLOCK_MAPS) {
        block_map_section(&mut out, named);
    }
    if d.allocator_states.len() > MAX_BLOCK_MAPS {
        let _ = writeln!(
            out,
            "<p class=\"muted\">Block maps of {} more snapshot device(s) are left out; open the snapshots in vramscope to see them.</p>",
            d.allocator_states.len() - MAX_BLOCK_MAPS
        );
    }
    for named in &d.what_if {
        what_if_section(&mut out, named);
    }
    out.push_str("<h2>Findings</h2>\n");
    for (i, f) in d.findings.iter().enumerate() {
        finding(&mut out, i + 1, f);
    }
    out.push_str("</body>\n</html>\n");
    out
}

/// One chart per GPU on a shared time axis (small multiples), each with its legend and the
/// events marked on it.
fn timeline_section(out: &mut String, timeline: &super::Timeline) {
    out.push_str("<h2>Memory timeline</h2>\n");
    let Some((t_min, t_max)) = timeline.time_range() else {
        return;
    };
    let span_s = (t_max - t_min) as f64 / 1000.0;
    let _ = writeln!(
        out,
        "<p class=\"muted\">{}: {} GPU(s) on one time axis, {span_s:.0} s from {}; times are UTC. The grey line is each GPU's capacity, the dashed amber line {:.0}% of it.</p>",
        escape(&timeline.caption),
        timeline.panels.len(),
        iso8601_utc(t_min),
        timeline.threshold_fraction * 100.0
    );
    let height_px = if timeline.panels.len() > 1 {
        CHART_PANEL_HEIGHT_PX
    } else {
        CHART_HEIGHT_PX
    };
    for panel in &timeline.panels {
        timeline_panel(
            out,
            panel,
            (t_min, t_max),
            timeline.threshold_fraction,
            height_px,
        );
    }
    if timeline.panels_left_out > 0 {
        let _ = writeln!(
            out,
            "<p class=\"muted\">{} more GPU(s) are left out; open the capture in vramscope to see them.</p>",
            timeline.panels_left_out
        );
    }
}

fn timeline_panel(
    out: &mut String,
    panel: &super::TimelinePanel,
    time_range: (i64, i64),
    threshold_fraction: f64,
    height_px: u32,
) {
    let _ = writeln!(
        out,
        "<h3>{}: peak {} of {}</h3>",
        escape(&panel.gpu_label),
        format_bytes(panel.peak_bytes()),
        format_bytes(panel.total_bytes)
    );
    let size = (CHART_WIDTH_PX as f32, height_px as f32);
    match chart::render_png(panel, time_range, threshold_fraction, size, 1.0) {
        Ok(png) => {
            let _ = writeln!(
                out,
                "<img class=\"chart\" width=\"{CHART_WIDTH_PX}\" height=\"{height_px}\" alt=\"Memory over time on {}\" src=\"data:image/png;base64,{}\"/>",
                escape(&panel.gpu_label),
                base64(&png)
            );
        }
        Err(e) => {
            let _ = writeln!(
                out,
                "<p class=\"muted\">The chart could not be drawn: {}</p>",
                escape(&e.to_string())
            );
        }
    }
    out.push_str("<p class=\"legend\">");
    for (i, s) in panel.series.iter().enumerate() {
        let peak = s.points.iter().map(|p| p.1).max().unwrap_or(0);
        let _ = write!(
            out,
            "<span><span class=\"swatch\" style=\"background:{}\"></span>{} (peak {})</span>",
            chart::color_hex(i),
            escape(&s.label),
            format_bytes(peak)
        );
    }
    out.push_str("</p>\n");
    if !panel.markers.is_empty() {
        out.push_str("<ul class=\"markers\">\n");
        for marker in &panel.markers {
            let _ = writeln!(
                out,
                "<li><span class=\"swatch\" style=\"background:{}\"></span>{}: {}</li>",
                chart::hex(chart::marker_color(marker.kind)),
                iso8601_utc(marker.t_ms),
                escape(&marker.label)
            );
        }
        out.push_str("</ul>\n");
    }
}

/// The block map of one snapshot device's final allocator state, with its pool groups and legend.
/// A snapshot's what-if replay: the self-check and one table row per setting, marked as
/// predictions.
fn what_if_section(out: &mut String, named: &NamedWhatIf) {
    let report = &named.report;
    let _ = writeln!(
        out,
        "<h2>What-if replay (predictions): <code>{}</code>, GPU {}</h2>\n<p class=\"muted\">{}</p>",
        escape(&named.name),
        report.device,
        escape(whatif::PREDICTION_NOTE)
    );
    let class = if report.self_check.reliable {
        "muted"
    } else {
        "simulated"
    };
    let _ = writeln!(
        out,
        "<p class=\"{class}\">{}</p>",
        escape(&whatif::self_check_line(&report.self_check))
    );
    out.push_str("<table>\n<tr><th>setting</th><th>predicted peak reserved</th><th>predicted outcome</th><th>where it runs out</th></tr>\n");
    for row in whatif::table_rows(report, &named.snapshot) {
        let _ = writeln!(
            out,
            "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&row.setting),
            format_bytes(row.peak_reserved_bytes),
            escape(&row.outcome),
            escape(&row.fails_at)
        );
    }
    out.push_str("</table>\n");
    for note in &report.notes {
        let _ = writeln!(out, "<p class=\"muted\">Note: {}</p>", escape(note));
    }
}

fn block_map_section(out: &mut String, named: &NamedAllocatorState) {
    let state = &named.state;
    let _ = writeln!(
        out,
        "<h2>Allocator block map: <code>{}</code>, GPU {}</h2>",
        escape(&named.name),
        state.device
    );
    let drawn = match blockmap::render_png(state, BLOCK_MAP_WIDTH_PX) {
        None => {
            out.push_str("<p class=\"muted\">The allocator held no segments at the end of the snapshot.</p>\n");
            return;
        }
        Some(Err(e)) => {
            let _ = writeln!(
                out,
                "<p class=\"muted\">The block map could not be drawn: {}</p>",
                escape(&e.to_string())
            );
            return;
        }
        Some(Ok(drawn)) => drawn,
    };
    let _ = writeln!(
        out,
        "<img class=\"chart\" width=\"{}\" height=\"{}\" alt=\"Allocator block map of {}, GPU {}\" src=\"data:image/png;base64,{}\"/>",
        drawn.width,
        drawn.height,
        escape(&named.name),
        state.device,
        base64(&drawn.png)
    );
    let groups: Vec<String> = drawn
        .groups
        .iter()
        .map(|g| {
            format!(
                "{} ({} segment(s), {} reserved)",
                escape(&g.label),
                g.segment_count,
                format_bytes(g.reserved_bytes)
            )
        })
        .collect();
    let _ = writeln!(
        out,
        "<p class=\"muted\">Segments in address order, one band per pool, top to bottom: {}. One pixel is {}; segments are at least {} pixels wide and separated by a dark line.{}</p>",
        groups.join("; "),
        format_bytes(drawn.bytes_per_px),
        blockmap::MIN_SEGMENT_PX,
        if drawn.segments_drawn < drawn.segments_total {
            format!(
                " Only the first {} of {} segments are drawn.",
                drawn.segments_drawn, drawn.segments_total
            )
        } else {
            String::new()
        }
    );
    out.push_str("<p class=\"legend\">");
    for (label, [r, g, b]) in blockmap::LEGEND {
        let _ = write!(
            out,
            "<span><span class=\"swatch\" style=\"background:#{r:02x}{g:02x}{b:02x}\"></span>{label}</span>"
        );
    }
    out.push_str("</p>\n");
}

fn finding(out: &mut String, number: usize, f: &Finding) {
    let class = severity_class(f.severity);
    let _ = writeln!(
        out,
        "<section class=\"finding {class}\">\n<h3>{number}. <span class=\"badge {class}\">{}</span><span class=\"cat\">{}</span> {}</h3>",
        f.severity.as_str().to_uppercase(),
        f.category.as_str(),
        escape(&f.title)
    );
    let _ = writeln!(out, "<p>{}</p>", escape(&f.explanation));
    if !f.evidence.is_empty() {
        out.push_str("<table>\n<tr><th>Evidence</th><th>Value</th><th>Source</th></tr>\n");
        for e in &f.evidence {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(&e.label),
                escape(&e.display),
                escape(&e.source.describe())
            );
        }
        out.push_str("</table>\n");
    }
    if !f.recommendations.is_empty() {
        out.push_str("<ol>\n");
        for r in &f.recommendations {
            let _ = writeln!(
                out,
                "<li><strong>{}</strong>{}: {}{}<pre><code>{}</code></pre></li>",
                escape(&r.title),
                r.verification_label()
                    .map(|l| format!(" <em>({l})</em>"))
                    .unwrap_or_default(),
                escape(&r.expected_effect),
                r.unverified_detail()
                    .map(|d| format!("<br/><small>{}</small>", escape(d)))
                    .unwrap_or_default(),
                escape(&r.action)
            );
        }
        out.push_str("</ol>\n");
    }
    out.push_str("</section>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc_4648_vectors() {
        let cases = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (input, expected) in cases {
            assert_eq!(base64(input.as_bytes()), expected);
        }
    }

    #[test]
    fn escapes_markup_and_control_characters() {
        assert_eq!(
            escape("<a href='x'>&\"\u{1b}"),
            "&lt;a href=&#39;x&#39;&gt;&amp;&quot;\u{FFFD}"
        );
    }
}
