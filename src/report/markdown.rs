//! The Markdown report: headings per finding, an evidence table, ranked recommendations with
//! their code in fenced blocks. Text from files and logs is escaped so that it renders as text.

use std::fmt::Write as _;

use super::{Report, iso8601_utc};
use crate::diagnose::finding::Finding;

/// Escapes Markdown punctuation (CommonMark allows a backslash before any ASCII punctuation) and
/// folds line breaks, so a log line cannot open a heading, a link, HTML or break a table.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\r' | '\n' => out.push(' '),
            c if c.is_ascii_punctuation() => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

/// A fenced code block whose fence is longer than any backtick run inside it.
fn code_block(out: &mut String, code: &str) {
    let longest = code.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    let _ = writeln!(out, "{fence}\n{code}\n{fence}");
}

/// Renders the whole report.
pub fn render(report: &Report) -> String {
    let d = &report.diagnosis;
    let mut out = String::new();
    let _ = writeln!(out, "# {}\n", escape(&report.title));
    if d.simulated {
        let _ = writeln!(
            out,
            "> **SIMULATED DATA**: some evidence comes from vramscope's built-in demo machine, not a real GPU.\n"
        );
    }
    let _ = writeln!(
        out,
        "Generated {} by vramscope {}.\n",
        iso8601_utc(report.generated_at_ms),
        env!("CARGO_PKG_VERSION")
    );
    if let Some(primary) = d.primary() {
        let _ = writeln!(
            out,
            "**Primary finding:** {} ({}, {})\n",
            escape(&primary.title),
            primary.category.as_str(),
            primary.severity.as_str()
        );
    }
    if !d.inputs.is_empty() {
        let _ = writeln!(out, "## Evidence examined\n");
        for input in &d.inputs {
            let _ = writeln!(
                out,
                "- {} {}: {}",
                input.kind,
                escape(&input.name),
                escape(&input.summary)
            );
        }
        out.push('\n');
    }
    if let Some(timeline) = &report.timeline {
        let peak = timeline
            .series
            .first()
            .and_then(|s| s.points.iter().map(|p| p.1).max())
            .unwrap_or(0);
        let _ = writeln!(
            out,
            "Timeline ({}): peak {} of {} (see the HTML report for the chart).\n",
            escape(&timeline.caption),
            crate::model::format_bytes(peak),
            crate::model::format_bytes(timeline.total_bytes)
        );
    }
    let _ = writeln!(out, "## Findings\n");
    for (i, f) in d.findings.iter().enumerate() {
        finding(&mut out, i + 1, f);
    }
    out
}

fn finding(out: &mut String, number: usize, f: &Finding) {
    let _ = writeln!(
        out,
        "### {number}. {} [{}] {}\n",
        f.severity.as_str().to_uppercase(),
        f.category.as_str(),
        escape(&f.title)
    );
    let _ = writeln!(out, "{}\n", escape(&f.explanation));
    if let Some(w) = f.wizard {
        let _ = writeln!(out, "Continue in the *{}* wizard.\n", w.label());
    }
    if !f.evidence.is_empty() {
        let _ = writeln!(out, "| Evidence | Value | Source |\n| --- | --- | --- |");
        for e in &f.evidence {
            let _ = writeln!(
                out,
                "| {} | {} | {} |",
                escape(&e.label),
                escape(&e.display),
                escape(&e.source.describe())
            );
        }
        out.push('\n');
    }
    if !f.recommendations.is_empty() {
        let _ = writeln!(out, "Recommendations, in order:\n");
        for (i, r) in f.recommendations.iter().enumerate() {
            let _ = writeln!(
                out,
                "{}. **{}** — {}\n",
                i + 1,
                escape(&r.title),
                escape(&r.expected_effect)
            );
            code_block(out, &r.action);
            out.push('\n');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markdown_and_html_openers() {
        assert_eq!(escape("# <b>x|y</b>\nz"), "\\# \\<b\\>x\\|y\\<\\/b\\> z");
    }

    #[test]
    fn fences_outgrow_backticks_inside() {
        let mut out = String::new();
        code_block(&mut out, "a ```` b");
        assert!(out.starts_with("`````\n"), "{out}");
    }
}
