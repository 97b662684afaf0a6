//! The Markdown report: headings per finding, an evidence table, ranked recommendations with
//! their code in fenced blocks. Text from files and logs is escaped so that it renders as text.

use std::fmt::Write as _;

use super::{Report, iso8601_utc, whatif};
use crate::diagnose::finding::{EvidenceSource, Finding, NamedWhatIf};
use crate::model::format_bytes;

/// Escapes what Markdown would otherwise interpret in running text, and nothing more, so the raw
/// file stays readable: backslash, backtick, `*`, `[`, `]`, `<`, `>`, `|` and `~` everywhere; `_`
/// only at a word edge (inside a word it never emphasises); `&` before a possible entity; `#`,
/// `+`, `-`, `=` and `1.`-style numbers only at the start, where they would open a block. Line breaks are
/// folded, so a log line cannot open a heading or break a table.
pub fn escape(text: &str) -> String {
    let chars: Vec<char> = text
        .chars()
        .map(|c| if c == '\r' || c == '\n' { ' ' } else { c })
        .collect();
    let mut out = String::with_capacity(text.len());
    let word = |i: Option<usize>| {
        i.and_then(|i| chars.get(i))
            .is_some_and(|c| c.is_alphanumeric())
    };
    // Where the text starts a block: the first non-blank character, or the punctuation after a
    // leading number ("1." / "2)").
    let first = chars.iter().position(|c| *c != ' ');
    let number_end = first.and_then(|f| {
        let digits = chars[f..].iter().take_while(|c| c.is_ascii_digit()).count();
        (digits > 0).then_some(f + digits)
    });
    // A block marker counts only when a space (or the end) follows it.
    let marker_at = |i: usize| matches!(chars.get(i + 1), None | Some(' '));
    for (i, &c) in chars.iter().enumerate() {
        let escape = match c {
            '\\' | '`' | '*' | '[' | ']' | '<' | '>' | '|' | '~' => true,
            '_' => !word(i.checked_sub(1)) || !word(Some(i + 1)),
            '&' => chars
                .get(i + 1)
                .is_some_and(|n| n.is_ascii_alphanumeric() || *n == '#'),
            '#' | '+' | '-' => Some(i) == first && (marker_at(i) || chars[i + 1] == c),
            '=' => Some(i) == first,
            '.' | ')' => Some(i) == number_end && marker_at(i),
            _ => false,
        };
        if escape {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// An inline code span (for file names and paths): nothing inside needs escaping, the fence is
/// longer than any backtick run inside, and line breaks are folded.
pub fn code(text: &str) -> String {
    let text: String = text
        .chars()
        .map(|c| if c == '\r' || c == '\n' { ' ' } else { c })
        .collect();
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    let pad = if text.starts_with('`') || text.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{text}{pad}{fence}")
}

/// A fenced code block whose fence is longer than any backtick run inside it.
fn code_block(out: &mut String, code: &str) {
    let longest = code.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    let _ = writeln!(out, "{fence}\n{code}\n{fence}");
}

/// A snapshot's what-if replay: the self-check and one table row per setting, marked as
/// predictions.
fn what_if_section(out: &mut String, named: &NamedWhatIf) {
    let report = &named.report;
    let _ = writeln!(
        out,
        "## What-if replay (predictions): {}, GPU {}\n",
        code(&named.name),
        report.device
    );
    let _ = writeln!(out, "{}\n", escape(whatif::PREDICTION_NOTE));
    let _ = writeln!(
        out,
        "{}\n",
        escape(&whatif::self_check_line(&report.self_check))
    );
    let _ = writeln!(
        out,
        "| setting | predicted peak reserved | predicted outcome | where it runs out |\n|---|---|---|---|"
    );
    for row in whatif::table_rows(report, &named.snapshot) {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            code(&row.setting),
            format_bytes(row.peak_reserved_bytes),
            escape(&row.outcome),
            escape(&row.fails_at)
        );
    }
    for note in &report.notes {
        let _ = writeln!(out, "\n{}", escape(&format!("Note: {note}")));
    }
    out.push('\n');
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
                code(&input.name),
                escape(&input.summary)
            );
        }
        out.push('\n');
    }
    for named in &d.memory_categories {
        super::categories::markdown_section(&mut out, named);
    }
    for named in &d.what_if {
        what_if_section(&mut out, named);
    }
    if let Some(timeline) = &report.timeline {
        let _ = writeln!(
            out,
            "Timeline of {} (see the HTML report for the charts):\n",
            code(&timeline.caption)
        );
        for panel in &timeline.panels {
            let _ = writeln!(
                out,
                "- {}: peak {} of {}",
                escape(&panel.gpu_label),
                crate::model::format_bytes(panel.peak_bytes()),
                crate::model::format_bytes(panel.total_bytes)
            );
            for marker in &panel.markers {
                let _ = writeln!(
                    out,
                    "  - {}: {}",
                    super::iso8601_utc(marker.t_ms),
                    escape(&marker.label)
                );
            }
        }
        out.push('\n');
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
    if !f.evidence.is_empty() {
        let _ = writeln!(out, "| Evidence | Value | Source |\n| --- | --- | --- |");
        for e in &f.evidence {
            let _ = writeln!(
                out,
                "| {} | {} | {} |",
                escape(&e.label),
                escape(&e.display),
                source_cell(&e.source)
            );
        }
        out.push('\n');
    }
    if !f.recommendations.is_empty() {
        let _ = writeln!(out, "Recommendations, in order:\n");
        for (i, r) in f.recommendations.iter().enumerate() {
            let _ = writeln!(
                out,
                "{}. **{}**{} — {}\n",
                i + 1,
                escape(&r.title),
                r.verification_label()
                    .map(|l| format!(" ({l})"))
                    .unwrap_or_default(),
                escape(&r.expected_effect)
            );
            if let Some(detail) = r.unverified_detail() {
                let _ = writeln!(out, "   _{}_\n", escape(detail));
            }
            code_block(out, &r.action);
            out.push('\n');
        }
    }
}

/// Where evidence comes from, for a table cell: the file as a code span (a `|` in it escaped, as
/// tables need even inside code), then the line or device.
fn source_cell(source: &EvidenceSource) -> String {
    let file = match source {
        EvidenceSource::LogLine { file, .. }
        | EvidenceSource::Capture { file, .. }
        | EvidenceSource::Snapshot { file, .. } => file,
        EvidenceSource::User { .. } | EvidenceSource::Derived => {
            return escape(&source.describe());
        }
    };
    let described = source.describe();
    let rest = described.strip_prefix(file.as_str()).unwrap_or(&described);
    format!("{}{}", code(file), escape(rest)).replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markdown_and_html_openers() {
        assert_eq!(escape("# <b>x|y</b>\nz"), "\\# \\<b\\>x\\|y\\</b\\> z");
        assert_eq!(escape("1. not a list"), "1\\. not a list");
        assert_eq!(escape("- x"), "\\- x");
        assert_eq!(escape("1.50 GiB - -5 MiB"), "1.50 GiB - -5 MiB");
        assert_eq!(
            escape("*bold* _em_ [link](u) `c` a&amp;b"),
            "\\*bold\\* \\_em\\_ \\[link\\](u) \\`c\\` a\\&amp;b"
        );
    }

    #[test]
    fn leaves_ordinary_punctuation_alone() {
        let text = "tests/fixtures/cases/leak.log: 1.50 GiB, the GPU's max_split_size_mb (e.g. 1024) - done! A & B";
        assert_eq!(escape(text), text);
    }

    #[test]
    fn paths_are_code_spans() {
        assert_eq!(code("tests/fixtures/a_b.log"), "`tests/fixtures/a_b.log`");
        assert_eq!(code("a`b"), "``a`b``");
        assert_eq!(code("`x"), "`` `x ``");
        let cell = source_cell(&EvidenceSource::LogLine {
            file: "runs/a|b.log".into(),
            line: 8,
        });
        assert_eq!(cell, "`runs/a\\|b.log` line 8");
    }

    #[test]
    fn fences_outgrow_backticks_inside() {
        let mut out = String::new();
        code_block(&mut out, "a ```` b");
        assert!(out.starts_with("`````\n"), "{out}");
    }
}
