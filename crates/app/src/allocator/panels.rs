//! The side panels of the allocator view: fragmentation summary, OOM explanations, the event
//! list and the details of one block.

use egui::{Color32, RichText, Ui};

use vramscope_core::analysis::categories::{MemoryBreakdown, MemoryCategory};
use vramscope_core::analysis::fragmentation::{FragmentationMetrics, FragmentationReport};
use vramscope_core::analysis::frames::stack_lines;
use vramscope_core::analysis::oom::OomExplanation;
use vramscope_core::analysis::timetravel::{
    BlockOrigin, BlockStatus, StateBlock, StateSegment, TimeTravel,
};
use vramscope_core::diagnose::fragmentation::summarize;
use vramscope_core::diagnose::oom::{JudgedOom, OomCause};
use vramscope_core::model::allocator::{AllocatorSnapshot, StackId};
use vramscope_core::model::format_bytes;
use vramscope_core::report::categories::notes;
use vramscope_core::report::palette::category_rgb;

/// Height of one row of the event list, in points.
pub const EVENT_ROW_HEIGHT: f32 = 18.0;
/// Most stack lines a tooltip shows (the pinned panel shows all).
pub const TOOLTIP_STACK_LINES: usize = 14;

/// The fragmentation summary: the sentence, the device totals and one row per pool and stream.
pub fn fragmentation_ui(ui: &mut Ui, report: &FragmentationReport) {
    ui.label(RichText::new(summarize(&report.device)).strong());
    ui.add_space(6.0);
    egui::Grid::new("fragmentation_device")
        .num_columns(2)
        .striped(true)
        .show(ui, |ui| metrics_rows(ui, &report.device));
    ui.add_space(8.0);
    ui.label(RichText::new("Per pool and stream").strong());
    egui::Grid::new("fragmentation_streams")
        .num_columns(6)
        .striped(true)
        .show(ui, |ui| {
            for header in [
                "pool",
                "stream",
                "reserved",
                "allocated",
                "free",
                "largest free",
            ] {
                ui.label(RichText::new(header).weak());
            }
            ui.end_row();
            for (key, m) in &report.streams {
                let pool = if key.pool_id.is_default() {
                    key.pool.as_str().to_string()
                } else {
                    format!(
                        "{} ({}, {})",
                        key.pool.as_str(),
                        key.pool_id.0,
                        key.pool_id.1
                    )
                };
                ui.label(pool);
                ui.label(format!("{:#x}", key.stream));
                ui.label(format_bytes(m.reserved_bytes));
                ui.label(format_bytes(m.allocated_bytes));
                ui.label(format_bytes(m.free_bytes));
                ui.label(format_bytes(m.largest_free_bytes));
                ui.end_row();
            }
        });
}

fn metrics_rows(ui: &mut Ui, m: &FragmentationMetrics) {
    let rows = [
        (
            "Reserved",
            format!(
                "{} in {} segments",
                format_bytes(m.reserved_bytes),
                m.segment_count
            ),
        ),
        (
            "Allocated",
            format!(
                "{} in {} blocks",
                format_bytes(m.allocated_bytes),
                m.allocated_blocks
            ),
        ),
        ("Requested by tensors", format_bytes(m.requested_bytes)),
        (
            "Internal free (rounding)",
            format_bytes(m.rounding_waste_bytes),
        ),
        ("Pending free", format_bytes(m.pending_free_bytes)),
        (
            "External free (cached)",
            format!("{} in {} blocks", format_bytes(m.free_bytes), m.free_blocks),
        ),
        ("Largest free block", format_bytes(m.largest_free_bytes)),
        (
            "Stranded (partly used segments)",
            format_bytes(m.stranded_bytes),
        ),
        ("Releasable (empty_cache)", format_bytes(m.releasable_bytes)),
        (
            "Inactive split (non-releasable)",
            format!(
                "{} in {} blocks",
                format_bytes(m.inactive_split_bytes),
                m.inactive_split_blocks
            ),
        ),
    ];
    for (name, value) in rows {
        ui.label(name);
        ui.label(value);
        ui.end_row();
    }
    ui.label("Free outside the largest block")
        .on_hover_text(FRAGMENTATION_RATIO_HELP);
    ui.label(m.fragmentation_ratio_text())
        .on_hover_text(FRAGMENTATION_RATIO_HELP);
    ui.end_row();
}

/// What the fragmentation ratio row means, for its tooltip.
const FRAGMENTATION_RATIO_HELP: &str = "Fragmentation ratio: the share of the cached free memory \
     that lies outside the largest free block (1 - largest free block / free bytes). 0 means all \
     free memory is one block; near 1 means it is scattered in small pieces. It says nothing when \
     little memory is free, so it is not shown below 5% of reserved memory.";

/// The colour of a verdict's heading.
pub fn verdict_color(cause: OomCause) -> Color32 {
    match cause {
        OomCause::Fragmentation | OomCause::CapWithFragmentation => Color32::from_rgb(240, 170, 60),
        OomCause::Cap => Color32::from_rgb(180, 140, 250),
        OomCause::Capacity | OomCause::Growth => Color32::from_rgb(230, 90, 80),
        OomCause::OtherProcess => Color32::from_rgb(90, 170, 230),
    }
}

/// The verdict `diagnose` gives a failure, as a heading and its title (the Allocator tab shows
/// the diagnosis, never a judgement of its own).
pub fn verdict_ui(ui: &mut Ui, judged: &JudgedOom) {
    let color = verdict_color(judged.cause);
    ui.label(RichText::new(judged.heading).strong().color(color));
    ui.label(RichText::new(&judged.title).color(color));
    if let Some(warning) = &judged.reconstruction_warning {
        ui.label(RichText::new(warning).color(ui.visuals().warn_fg_color));
    }
}

/// The OOM explanations with the diagnosis's verdict on each, and under the last one (the
/// failure the diagnosis judges) where its memory went (`breakdown`); returns the event position
/// the user asked to see, if any.
pub fn oom_ui(
    ui: &mut Ui,
    explanations: &[OomExplanation],
    judged: &[JudgedOom],
    breakdown: Option<&MemoryBreakdown>,
) -> Option<usize> {
    if explanations.is_empty() {
        ui.label("No out-of-memory event in this device's trace.");
        return None;
    }
    let mut go_to = None;
    let last = explanations.len() - 1;
    for (n, (e, verdict)) in explanations.iter().zip(judged).enumerate() {
        ui.push_id(n, |ui| {
            ui.horizontal(|ui| {
                ui.label(RichText::new(format!("OOM at event #{}", e.event_index)).strong());
                if ui.button("Show in block map").clicked() {
                    go_to = Some(e.event_index);
                }
            });
            verdict_ui(ui, verdict);
            ui.label(&verdict.explanation);
            if let Some(breakdown) = breakdown.filter(|_| n == last) {
                category_bars_ui(ui, breakdown);
            }
            ui.label(RichText::new(e.facts_text()).weak());
            egui::Grid::new("oom_numbers")
                .num_columns(2)
                .striped(true)
                .show(ui, |ui| {
                    let device_free = e
                        .device_free_bytes
                        .map_or("not recorded".to_string(), format_bytes);
                    let rows = [
                        ("Request (rounded)", format_bytes(e.rounded_request_bytes)),
                        ("New segment tried", format_bytes(e.segment_request_bytes)),
                        (
                            "Pool needed",
                            format!("{} on stream {:#x}", e.pool.as_str(), e.stream),
                        ),
                        ("Device free (cudaMemGetInfo)", device_free),
                        ("Allocated by PyTorch", format_bytes(e.allocated_bytes)),
                        (
                            "Reserved but unallocated",
                            format_bytes(e.reserved_unallocated_bytes),
                        ),
                        (
                            "Cached free in that pool/stream",
                            format_bytes(e.usable_free_bytes),
                        ),
                        (
                            "Largest free block there",
                            format_bytes(e.usable_largest_free_bytes),
                        ),
                        (
                            "Releasable by empty_cache",
                            format_bytes(e.releasable_bytes),
                        ),
                        (
                            "Released while retrying",
                            format_bytes(e.released_before_oom_bytes),
                        ),
                    ];
                    for (name, value) in rows {
                        ui.label(name);
                        ui.label(value);
                        ui.end_row();
                    }
                });
            ui.label(RichText::new("Largest free blocks and why none fitted").weak());
            egui::Grid::new("oom_blocks")
                .num_columns(4)
                .striped(true)
                .show(ui, |ui| {
                    for fit in &e.largest_free_blocks {
                        ui.label(format!("{:#x}", fit.address));
                        ui.label(format_bytes(fit.size_bytes));
                        ui.label(format!("{} / {:#x}", fit.pool.as_str(), fit.stream));
                        ui.label(fit.failure.describe());
                        ui.end_row();
                    }
                });
        });
        ui.separator();
    }
    go_to
}

/// Width of the longest category bar, in points.
const CATEGORY_BAR_WIDTH: f32 = 110.0;

/// Where the live memory went at the failure and at the peak before it: a bar per category in
/// the reports' colours ([`vramscope_core::report::palette::category_rgb`]) with its bytes and
/// share, then what else the breakdown tells (the failing request, private pools, caches grown
/// by concatenation).
pub fn category_bars_ui(ui: &mut Ui, breakdown: &MemoryBreakdown) {
    ui.label(RichText::new("Where the memory went").strong());
    let mut moments = Vec::new();
    if let Some(failure) = &breakdown.at_failure {
        moments.push(("at the failure", failure));
    }
    if moments
        .first()
        .is_none_or(|(_, m)| m.position != breakdown.at_peak.position)
    {
        moments.push(("at the peak before it", &breakdown.at_peak));
    }
    let largest = moments
        .iter()
        .flat_map(|(_, m)| MemoryCategory::ALL.map(|c| m.totals.bytes(c)))
        .max()
        .unwrap_or(0)
        .max(1);
    egui::Grid::new("oom_categories")
        .num_columns(1 + moments.len())
        .spacing(egui::vec2(8.0, 3.0))
        .show(ui, |ui| {
            ui.label("");
            for (heading, m) in &moments {
                ui.label(RichText::new(format!("{heading} (event #{})", m.position)).weak());
            }
            ui.end_row();
            for category in MemoryCategory::ALL {
                if moments.iter().all(|(_, m)| m.totals.bytes(category) == 0) {
                    continue;
                }
                let [r, g, b] = category_rgb(category);
                let color = Color32::from_rgb(r, g, b);
                ui.label(category.label());
                for (_, m) in &moments {
                    let bytes = m.totals.bytes(category);
                    ui.horizontal(|ui| {
                        let (rect, _) = ui.allocate_exact_size(
                            egui::vec2(CATEGORY_BAR_WIDTH, 12.0),
                            egui::Sense::hover(),
                        );
                        let width = CATEGORY_BAR_WIDTH * bytes as f32 / largest as f32;
                        let bar = egui::Rect::from_min_size(
                            rect.min,
                            egui::vec2(width.max(if bytes > 0 { 1.0 } else { 0.0 }), 12.0),
                        );
                        ui.painter().rect_filled(bar, 1.0, color);
                        ui.label(format!(
                            "{} ({:.0} %)",
                            format_bytes(bytes),
                            bytes as f64 * 100.0 / m.totals.total_bytes().max(1) as f64
                        ));
                    });
                }
                ui.end_row();
            }
        });
    for note in notes(breakdown) {
        ui.label(RichText::new(note).weak());
    }
}

/// Short description of trace event `index`.
pub fn event_text(travel: &TimeTravel, index: usize) -> String {
    let trace = travel.trace();
    let action = trace.actions[index].name().unwrap_or("unknown");
    let size = trace.sizes_bytes.get(index).copied().unwrap_or(0);
    let address = trace.addresses.get(index).copied().unwrap_or(0);
    let stream = trace.streams.get(index).copied().unwrap_or(0);
    format!(
        "#{index} {action} {} at {address:#x} (stream {stream:#x})",
        format_bytes(size)
    )
}

/// The virtualised event list; returns the position (events applied) the user clicked.
///
/// `scroll_to` scrolls so that the given event row is visible (when time travel moved by other
/// means).
pub fn event_list_ui(
    ui: &mut Ui,
    travel: &TimeTravel,
    position: usize,
    scroll_to: Option<usize>,
) -> Option<usize> {
    let mut clicked = None;
    let mut area = egui::ScrollArea::vertical().auto_shrink([false, false]);
    if let Some(row) = scroll_to {
        let spacing = ui.spacing().item_spacing.y;
        area = area
            .vertical_scroll_offset((row as f32 * (EVENT_ROW_HEIGHT + spacing) - 100.0).max(0.0));
    }
    area.show_rows(ui, EVENT_ROW_HEIGHT, travel.len(), |ui, rows| {
        // One line per event: the virtualised list needs rows of equal height.
        ui.style_mut().wrap_mode = Some(egui::TextWrapMode::Truncate);
        for index in rows {
            // Position `index + 1` is the state right after this event.
            let selected = position == index + 1;
            if ui
                .selectable_label(selected, event_text(travel, index))
                .clicked()
            {
                clicked = Some(index + 1);
            }
        }
    });
    clicked
}

/// The stack that allocated a block and a note on where it comes from.
pub fn block_stack(
    snapshot: &AllocatorSnapshot,
    travel: &TimeTravel,
    block: &StateBlock,
) -> (StackId, String) {
    let trace = travel.trace();
    match block.origin {
        BlockOrigin::AllocEvent(event) => (
            trace
                .stacks
                .get(event as usize)
                .copied()
                .unwrap_or(StackId::EMPTY),
            format!("allocated by event #{event}"),
        ),
        BlockOrigin::SnapshotBlock(index) => (
            snapshot
                .blocks
                .get(index as usize)
                .map_or(StackId::EMPTY, |b| b.stack),
            "allocated before the trace began".to_string(),
        ),
        BlockOrigin::FreeEvent(event) => (
            trace
                .stacks
                .get(event as usize)
                .copied()
                .unwrap_or(StackId::EMPTY),
            format!("allocated before the trace began; stack of its free (event #{event})"),
        ),
        BlockOrigin::Unknown => (StackId::EMPTY, String::new()),
    }
}

/// Address, size, requested size, state, stream and filtered allocation stack of one block.
pub fn block_details_ui(
    ui: &mut Ui,
    snapshot: &AllocatorSnapshot,
    travel: &TimeTravel,
    segment: &StateSegment,
    block: &StateBlock,
    max_stack_lines: usize,
) {
    let status = match block.status {
        BlockStatus::Allocated => "allocated",
        BlockStatus::PendingFree => "pending free (waiting for other streams)",
        BlockStatus::Free => "cached free",
    };
    ui.label(RichText::new(format!("Block {:#x}", block.address)).strong());
    ui.label(format!("size {}", format_bytes(block.size_bytes)));
    if block.status != BlockStatus::Free {
        let waste = block.size_bytes.saturating_sub(block.requested_bytes);
        ui.label(format!(
            "requested {} (rounding waste {})",
            format_bytes(block.requested_bytes),
            format_bytes(waste)
        ));
    }
    ui.label(format!("state {status}"));
    ui.label(format!(
        "stream {:#x} · {} pool · segment {:#x}",
        segment.stream,
        segment.pool.as_str(),
        segment.address
    ));
    let (stack, note) = block_stack(snapshot, travel, block);
    if !note.is_empty() {
        ui.label(RichText::new(note).weak());
    }
    let lines = stack_lines(snapshot, stack);
    if lines.is_empty() {
        if block.status != BlockStatus::Free {
            ui.label(RichText::new("no stack recorded").weak());
        }
        return;
    }
    for line in lines.iter().take(max_stack_lines) {
        ui.label(RichText::new(line).monospace());
    }
    if lines.len() > max_stack_lines {
        ui.label(RichText::new(format!("… {} more frames", lines.len() - max_stack_lines)).weak());
    }
}
