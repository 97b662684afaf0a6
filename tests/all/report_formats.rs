//! Report files are valid: the HTML parses as XML with balanced tags and carries a decodable PNG,
//! the JSON matches the documented schema, the Markdown is structurally sound; and strings from
//! logs (here a process name with markup in an Xid line) are escaped in every format.

use std::collections::BTreeSet;
use std::path::PathBuf;

use quick_xml::events::Event as XmlEvent;
use serde_json::Value;
use vramscope_core::diagnose::log::analyze_text;
use vramscope_core::diagnose::{DiagnosisInput, NamedCapture, diagnose};
use vramscope_core::model::{
    Capture, CaptureMeta, DeviceFacts, DeviceSample, GIB, MIB, MemoryReading, ProcessSample,
    SampleBatch,
};
use vramscope_core::report::{self, Report, ReportFormat, Timeline};

const HOSTILE: &str = "<script>alert('x')</script> | # **bold** [link](http://e.vil) `tick`";

fn sample_report() -> Report {
    let log_text = format!(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 139.80 GiB of which 9.47 GiB is free. Process 4242 has 80.02 GiB memory in use. Including non-PyTorch memory, this process has 50.31 GiB memory in use. Of the allocated memory 49.50 GiB is allocated by PyTorch, and 312.00 MiB is reserved by PyTorch but unallocated.\n\
         NVRM: Xid (PCI:0000:00:06): 31, pid=951, name={HOSTILE}, channel 0x0000000a\n"
    );
    let log = analyze_text(&log_text, "train <1>.log");
    let total = 140 * GIB;
    let mut capture = Capture::new(
        CaptureMeta::default(),
        vec![DeviceFacts {
            index: 0,
            memory_total_bytes: total,
            ..Default::default()
        }],
    );
    // 15 minutes at 30 s: long enough for the leak rule (at least 10 minutes of readings).
    for s in 0..30u64 {
        let used = 60 * GIB + s * 100 * MIB;
        capture.ingest(&SampleBatch {
            devices: vec![DeviceSample {
                t_ms: s as i64 * 30_000,
                device_index: 0,
                memory: Some(MemoryReading {
                    used_bytes: used,
                    reserved_bytes: 0,
                    free_bytes: total - used,
                    total_bytes: total,
                }),
                ..Default::default()
            }],
            processes: Some(vec![ProcessSample {
                t_ms: s as i64 * 30_000,
                device_index: 0,
                pid: 4242,
                name: HOSTILE.into(),
                used_bytes: Some(used),
                ..Default::default()
            }]),
            ..Default::default()
        });
    }
    let timeline = Timeline::from_capture("run.vramcap", &capture);
    let diagnosis = diagnose(&DiagnosisInput {
        logs: vec![log],
        captures: vec![NamedCapture {
            name: "run.vramcap".into(),
            capture,
        }],
        ..Default::default()
    });
    Report {
        title: "vramscope diagnosis".into(),
        generated_at_ms: 1_795_941_000_000,
        diagnosis,
        timeline,
    }
}

fn decode_base64(text: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            other => panic!("not base64: {other}"),
        }
    };
    let mut out = Vec::new();
    for chunk in text.as_bytes().chunks(4) {
        let pad = chunk.iter().filter(|&&c| c == b'=').count();
        let n = chunk
            .iter()
            .filter(|&&c| c != b'=')
            .fold(0u32, |acc, &c| (acc << 6) | value(c))
            << (6 * pad);
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    out
}

/// Panics, with where, unless `html` parses as XML with matching end tags.
fn assert_html_parses(html: &str) {
    let mut reader = quick_xml::Reader::from_str(html);
    reader.config_mut().check_end_names = true;
    loop {
        match reader.read_event() {
            Ok(XmlEvent::Eof) => break,
            Ok(_) => {}
            Err(e) => panic!("HTML does not parse at {}: {e}", reader.buffer_position()),
        }
    }
}

#[test]
fn html_is_well_formed_self_contained_and_escaped() {
    let html = report::render(&sample_report(), ReportFormat::Html);
    assert!(html.starts_with("<!DOCTYPE html>"));
    let mut reader = quick_xml::Reader::from_str(&html);
    reader.config_mut().check_end_names = true;
    let mut stack: Vec<String> = Vec::new();
    let mut elements = BTreeSet::new();
    let mut png_sources = Vec::new();
    loop {
        match reader.read_event() {
            Ok(XmlEvent::Start(e)) => {
                let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
                elements.insert(name.clone());
                stack.push(name);
            }
            Ok(XmlEvent::Empty(e)) => {
                let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
                for attr in e.attributes() {
                    let attr = attr.unwrap_or_else(|err| panic!("bad attribute: {err}"));
                    let value = String::from_utf8_lossy(&attr.value).into_owned();
                    if attr.key.as_ref() == b"src" {
                        png_sources.push(value.clone());
                    }
                    assert!(
                        !value.starts_with("http"),
                        "external resource in {name}: {value}"
                    );
                }
                elements.insert(name);
            }
            Ok(XmlEvent::End(e)) => {
                let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
                assert_eq!(stack.pop().as_deref(), Some(name.as_str()));
            }
            Ok(XmlEvent::Eof) => break,
            Ok(_) => {}
            Err(e) => panic!(
                "HTML does not parse at byte {}: {e}",
                reader.buffer_position()
            ),
        }
    }
    assert!(stack.is_empty(), "unclosed: {stack:?}");
    for required in [
        "html", "head", "style", "body", "h1", "section", "table", "img", "pre",
    ] {
        assert!(
            elements.contains(required),
            "no <{required}> in {elements:?}"
        );
    }
    assert!(
        !elements.contains("script"),
        "markup from a log became an element"
    );
    assert!(!elements.contains("link"));
    assert!(
        html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"),
        "the hostile name is shown, escaped"
    );
    assert_eq!(png_sources.len(), 1);
    let encoded = png_sources[0]
        .strip_prefix("data:image/png;base64,")
        .unwrap_or_else(|| panic!("not a data URL"));
    let png = image::load_from_memory(&decode_base64(encoded))
        .unwrap_or_else(|e| panic!("embedded PNG: {e}"));
    assert_eq!((png.width(), png.height()), (900, 260));
}

fn assert_type(value: &Value, path: &str, expected: &str) {
    let ok = match expected {
        "string" => value.is_string(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        "number|null" => value.is_number() || value.is_null(),
        "string|null" => value.is_string() || value.is_null(),
        "object|null" => value.is_object() || value.is_null(),
        other => panic!("unknown type {other}"),
    };
    assert!(ok, "{path} should be {expected}, is {value}");
}

fn field<'a>(object: &'a Value, path: &str, name: &str, expected: &str) -> &'a Value {
    let value = object
        .get(name)
        .unwrap_or_else(|| panic!("{path}.{name} missing in {object}"));
    assert_type(value, &format!("{path}.{name}"), expected);
    value
}

#[test]
fn json_matches_the_documented_schema() {
    let json = report::render(&sample_report(), ReportFormat::Json);
    let doc: Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(field(&doc, "$", "schema", "string"), "vramscope.report/1");
    field(&doc, "$", "generator", "string");
    assert_eq!(
        field(&doc, "$", "generated_at", "string"),
        "2026-11-29T08:30:00Z"
    );
    field(&doc, "$", "title", "string");
    field(&doc, "$", "simulated", "boolean");
    field(&doc, "$", "memory_categories", "array");
    for input in field(&doc, "$", "inputs", "array")
        .as_array()
        .into_iter()
        .flatten()
    {
        for f in ["kind", "name", "summary"] {
            field(input, "input", f, "string");
        }
    }
    let categories = [
        "other-process",
        "memory-cap",
        "capacity",
        "fragmentation",
        "leak",
        "driver-mismatch",
        "ecc",
        "row-remap",
        "xid",
        "thermal",
        "cuda-error",
        "library",
        "inconclusive",
        "healthy",
    ];
    let units = [
        "bytes",
        "bytes-per-second",
        "seconds",
        "percent",
        "celsius",
        "count",
        "code",
        "text",
    ];
    let findings = field(&doc, "$", "findings", "array")
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(!findings.is_empty());
    assert_eq!(findings[0]["category"], "other-process", "primary first");
    let mut source_kinds = BTreeSet::new();
    for f in &findings {
        let category = field(f, "finding", "category", "string")
            .as_str()
            .unwrap_or_default();
        assert!(categories.contains(&category), "{category}");
        let severity = field(f, "finding", "severity", "string")
            .as_str()
            .unwrap_or_default();
        assert!(["critical", "warning", "info"].contains(&severity));
        assert!(
            !field(f, "finding", "title", "string")
                .as_str()
                .unwrap_or_default()
                .is_empty()
        );
        field(f, "finding", "explanation", "string");
        field(f, "finding", "wizard", "string|null");
        for e in field(f, "finding", "evidence", "array")
            .as_array()
            .into_iter()
            .flatten()
        {
            field(e, "evidence", "label", "string");
            field(e, "evidence", "value", "number|null");
            assert!(
                units.contains(
                    &field(e, "evidence", "unit", "string")
                        .as_str()
                        .unwrap_or_default()
                )
            );
            field(e, "evidence", "display", "string");
            let source = field(e, "evidence", "source", "object");
            source_kinds.insert(
                field(source, "source", "kind", "string")
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            );
        }
        for r in field(f, "finding", "recommendations", "array")
            .as_array()
            .into_iter()
            .flatten()
        {
            for name in ["id", "title", "expected_effect", "action"] {
                field(r, "recommendation", name, "string");
            }
            field(r, "recommendation", "estimated_saving_bytes", "number|null");
            field(r, "recommendation", "verification", "object|null");
        }
    }
    assert!(
        source_kinds.contains("log-line") && source_kinds.contains("capture"),
        "{source_kinds:?}"
    );

    // Every key the writer emits is documented in docs/report-schema.md.
    let schema_doc = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/report-schema.md"),
    )
    .unwrap_or_else(|e| panic!("docs/report-schema.md: {e}"));
    let mut keys = BTreeSet::new();
    collect_keys(&doc, &mut keys);
    for key in keys {
        assert!(
            schema_doc.contains(&format!("`{key}`")),
            "key `{key}` is not documented in docs/report-schema.md"
        );
    }
}

fn collect_keys(value: &Value, keys: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                keys.insert(k.clone());
                collect_keys(v, keys);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_keys(v, keys)),
        _ => {}
    }
}

/// Counts table-cell separators that are not escaped.
fn unescaped_pipes(line: &str) -> usize {
    let bytes = line.as_bytes();
    (0..bytes.len())
        .filter(|&i| bytes[i] == b'|' && (i == 0 || bytes[i - 1] != b'\\'))
        .count()
}

/// The line with its inline code spans (a backtick run, up to the same run) and its escaped
/// backticks removed.
fn without_code_spans(line: &str) -> String {
    let line = line.replace("\\`", "");
    let mut out = String::new();
    let mut rest = line.as_str();
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let run = rest[start..].chars().take_while(|&c| c == '`').count();
        let fence = "`".repeat(run);
        let after = &rest[start + run..];
        match after.find(&fence) {
            Some(end) => rest = &after[end + run..],
            None => {
                out.push_str(&rest[start..]);
                return out;
            }
        }
    }
    out.push_str(rest);
    out
}

#[test]
fn markdown_is_structurally_sound_and_escaped() {
    let report = sample_report();
    let md = report::render(&report, ReportFormat::Markdown);
    let mut in_fence: Option<String> = None;
    let mut table_columns: Option<usize> = None;
    let mut headings = 0;
    for line in md.lines() {
        if let Some(fence) = &in_fence {
            if line == fence {
                in_fence = None;
            }
            continue;
        }
        if line.starts_with("```") {
            in_fence = Some(line.to_owned());
            continue;
        }
        if line.starts_with("### ") {
            headings += 1;
        }
        if line.starts_with('|') {
            let pipes = unescaped_pipes(line);
            match table_columns {
                None => table_columns = Some(pipes),
                Some(n) => assert_eq!(pipes, n, "ragged table row: {line}"),
            }
        } else {
            table_columns = None;
        }
        let text = without_code_spans(line);
        let bytes = text.as_bytes();
        let raw_angle =
            (0..bytes.len()).any(|i| bytes[i] == b'<' && (i == 0 || bytes[i - 1] != b'\\'));
        assert!(!raw_angle, "raw HTML outside code: {line}");
        for over_escaped in ["\\/", "\\,", "\\'", "\\:", "\\("] {
            assert!(
                !text.contains(over_escaped),
                "over-escaped {over_escaped}: {line}"
            );
        }
    }
    assert!(
        !md.contains("Continue in the"),
        "the wizard hint is the GUI's"
    );
    assert!(in_fence.is_none(), "unclosed code fence");
    assert_eq!(headings, report.diagnosis.findings.len());
    assert!(md.starts_with("# vramscope diagnosis\n"));
    assert!(
        md.contains("\\<script\\>"),
        "the hostile name is shown, escaped"
    );
}

#[test]
fn write_picks_the_format_from_the_extension_and_reports_errors() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let report = sample_report();
    for (name, start) in [
        ("r.html", "<!DOCTYPE html>"),
        ("r.md", "# "),
        ("r.json", "{"),
    ] {
        let path = dir.path().join(name);
        report::write(&report, &path).unwrap_or_else(|e| panic!("{e}"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(text.starts_with(start), "{name}");
    }
    let bad = report::write(&report, &dir.path().join("r.pdf"))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(bad.contains("r.pdf") && bad.contains(".html"), "{bad}");
    let missing = report::write(&report, &dir.path().join("no/such/dir/r.md"))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(missing.contains("no/such/dir/r.md"), "{missing}");
}

/// Every `data:image/png;base64,` image source of an HTML page, decoded.
fn embedded_pngs(html: &str) -> Vec<image::RgbImage> {
    const PREFIX: &str = "src=\"data:image/png;base64,";
    html.match_indices(PREFIX)
        .map(|(start, _)| {
            let rest = &html[start + PREFIX.len()..];
            let encoded = &rest[..rest.find('"').unwrap_or_else(|| panic!("unclosed src"))];
            image::load_from_memory(&decode_base64(encoded))
                .unwrap_or_else(|e| panic!("embedded PNG: {e}"))
                .to_rgb8()
        })
        .collect()
}

#[test]
fn html_of_a_snapshot_diagnosis_embeds_the_block_map() {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cases/fragmentation.pickle");
    let snapshot = std::sync::Arc::new(
        vramscope_core::formats::pytorch::read_file(&path, &|_| true)
            .unwrap_or_else(|e| panic!("{e}")),
    );
    let mut report = sample_report();
    report.diagnosis = diagnose(&DiagnosisInput {
        snapshots: vramscope_core::diagnose::snapshot::facts(&snapshot),
        ..Default::default()
    });
    assert_eq!(report.diagnosis.allocator_states.len(), 1);
    let html = report::render(&report, ReportFormat::Html);
    // Still well-formed with the new section.
    assert_html_parses(&html);
    let pngs = embedded_pngs(&html);
    assert_eq!(pngs.len(), 2, "timeline and block map");
    let block_map = &pngs[1];
    assert_eq!(block_map.width(), 900);
    let count = |color: [u8; 3]| block_map.pixels().filter(|p| p.0 == color).count();
    // The fragmentation case holds 69 GiB reserved but unallocated: much of the map is cached free.
    let free = count(report::blockmap::CACHED_FREE);
    let allocated = count(report::blockmap::ALLOCATED);
    assert!(free > 1000, "{free} cached-free pixels");
    assert!(allocated > 0, "{allocated} allocated pixels");
    assert!(html.contains("Allocator block map"));
    assert!(html.contains("large pool"));
    for (label, _) in report::blockmap::LEGEND {
        assert!(html.contains(label), "legend lists {label}");
    }
}

#[test]
fn html_timeline_has_one_chart_per_gpu_with_its_events_marked() {
    use vramscope_core::model::{Event, EventKind};
    let total = 80 * GIB;
    let mut capture = Capture::new(
        CaptureMeta::default(),
        (0..2)
            .map(|index| DeviceFacts {
                index,
                memory_total_bytes: total,
                ..Default::default()
            })
            .collect(),
    );
    // GPU 0 flat at 10 GiB; GPU 1 climbs 2 GiB a minute past 90 % (72 GiB) and runs out.
    for minute in 0..40u64 {
        let t_ms = minute as i64 * 60_000;
        let devices: Vec<DeviceSample> = [10 * GIB, (2 * minute * GIB).min(total)]
            .into_iter()
            .enumerate()
            .map(|(i, used)| DeviceSample {
                t_ms,
                device_index: i as u32,
                memory: Some(MemoryReading {
                    used_bytes: used,
                    reserved_bytes: 0,
                    free_bytes: total - used,
                    total_bytes: total,
                }),
                ..Default::default()
            })
            .collect();
        let used_1 = devices[1].memory.map(|m| m.used_bytes).unwrap_or(0);
        capture.ingest(&SampleBatch {
            devices,
            processes: Some(vec![ProcessSample {
                t_ms,
                device_index: 1,
                pid: 77,
                name: "train.py".into(),
                used_bytes: Some(used_1),
                ..Default::default()
            }]),
            ..Default::default()
        });
    }
    capture.ingest(&SampleBatch {
        events: vec![
            Event {
                t_ms: 39 * 60_000,
                device_index: Some(1),
                kind: EventKind::OutOfMemory {
                    pid: Some(77),
                    requested_bytes: None,
                    detail: String::new(),
                },
            },
            Event {
                t_ms: 30 * 60_000,
                device_index: Some(1),
                kind: EventKind::Xid {
                    code: 31,
                    mig_instance: None,
                },
            },
        ],
        ..Default::default()
    });
    let timeline = Timeline::from_capture("two.vramcap", &capture);
    let panels: Vec<(u32, usize)> = timeline
        .iter()
        .flat_map(|t| t.panels.iter())
        .map(|p| (p.device_index, p.markers.len()))
        .collect();
    assert_eq!(
        panels,
        [(0, 0), (1, 3)],
        "both GPUs; OOM, Xid and the 90 % crossing on GPU 1"
    );
    let report = Report {
        timeline,
        ..sample_report()
    };
    let html = report::render(&report, ReportFormat::Html);
    let pngs = embedded_pngs(&html);
    assert_eq!(pngs.len(), 2, "one chart per GPU");
    assert!(pngs.iter().all(|p| p.width() <= 1000 && p.height() <= 300));
    assert!(
        html.contains("<h3>GPU 1: peak 78.0 GiB of 80.0 GiB</h3>"),
        "{html}"
    );
    assert!(html.contains("out of memory (PID 77)"));
    assert!(html.contains("Xid 31"));
    // 2 GiB a minute: 72 GiB (90 %) at minute 36.
    assert!(html.contains("1970-01-01T00:36:00Z: used memory first reached 90% of 80.0 GiB"));
    // The process line is visible on GPU 1's chart (drawn over the GPU line).
    let process = vramscope_core::report::chart::SERIES_COLORS[1];
    assert!(pngs[1].pixels().any(|p| p.0 == process));
}

/// The real job that ran out inside Adam's foreach step (`tests/fixtures/run/hook_oom/`): every
/// format shows where its memory went, at the failure and at the peak, a bar per category in
/// the palette's colours (HTML), and the JSON entry follows `docs/report-schema.md`
/// (`MemoryCategories`): the categories add up to the total, the failing request was made
/// inside `optimizer.step()`.
#[test]
fn every_format_shows_where_the_memory_went() {
    use vramscope_core::analysis::categories::MemoryCategory;
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/run/hook_oom/snapshots/rank3-pid668-oom-1.pickle");
    let snapshot = std::sync::Arc::new(
        vramscope_core::formats::pytorch::read_file(&path, &|_| true)
            .unwrap_or_else(|e| panic!("{e}")),
    );
    let report = Report {
        title: "vramscope diagnosis".into(),
        diagnosis: diagnose(&DiagnosisInput {
            snapshots: vramscope_core::diagnose::snapshot::facts(&snapshot),
            ..Default::default()
        }),
        ..Default::default()
    };
    let markdown = report::render(&report, ReportFormat::Markdown);
    assert!(
        markdown.contains("## Where the memory went: `"),
        "{markdown}"
    );
    // The failure was the peak: one column.
    assert!(markdown.contains("| category | at the failure, its peak (event #2523) |\n"));
    assert!(
        markdown.contains("| optimizer state | 128 MiB (8 %) "),
        "{markdown}"
    );
    assert!(markdown.contains("inside optimizer.step()"));
    let html = report::render(&report, ReportFormat::Html);
    assert_html_parses(&html);
    let [r, g, b] = report::palette::category_rgb(MemoryCategory::OptimizerState);
    assert!(html.contains(&format!("background:#{r:02x}{g:02x}{b:02x}")));
    assert!(html.contains("<h2>Where the memory went: <code>"));
    let doc: Value = serde_json::from_str(&report::render(&report, ReportFormat::Json))
        .unwrap_or_else(|e| panic!("{e}"));
    let entries = field(&doc, "$", "memory_categories", "array");
    let entry = &entries[0];
    field(entry, "memory_categories[0]", "snapshot", "string");
    field(entry, "memory_categories[0]", "device", "number");
    field(
        entry,
        "memory_categories[0]",
        "largest_parameter_bytes",
        "number",
    );
    field(entry, "memory_categories[0]", "private_pools", "array");
    field(entry, "memory_categories[0]", "concatenating", "array");
    for moment in ["at_failure", "at_peak"] {
        let m = field(entry, "memory_categories[0]", moment, "object");
        assert_eq!(m["event"], 2523);
        for f in [
            "event",
            "total_bytes",
            "batch_independent_bytes",
            "optimizer_step_bytes",
        ] {
            field(m, moment, f, "number");
        }
        let categories = field(m, moment, "categories", "object");
        let keys: Vec<&str> = categories
            .as_object()
            .map(|o| o.keys().map(String::as_str).collect())
            .unwrap_or_default();
        assert_eq!(keys.len(), 9, "{keys:?}");
        let sum: u64 = categories
            .as_object()
            .into_iter()
            .flat_map(|o| o.values())
            .filter_map(Value::as_u64)
            .sum();
        assert_eq!(Some(sum), m["total_bytes"].as_u64());
    }
    let request = field(entry, "memory_categories[0]", "failing_request", "object");
    assert_eq!(request["category"], "temporaries");
    assert_eq!(request["in_optimizer_step"], true);
    assert_eq!(
        entry["at_failure"]["categories"]["optimizer_state"].as_u64(),
        entry["at_failure"]["categories"]["parameters"]
            .as_u64()
            .map(|p| 2 * p)
    );
}
