//! The Fragmentation wizard's evidence from snapshots: for each snapshot device, the allocator at
//! the end of its trace (the failure, when the trace ends in an OOM) as the fragmentation summary,
//! the metrics table of the Allocator tab and the block map the HTML report embeds.
//!
//! Analysing a state and drawing its block map are done once per state (the diagnosis is
//! recomputed on every evidence change but hands the same `Arc`s back); the PNG is decoded into a
//! texture on first display and kept.

use std::sync::Arc;

use egui::{Color32, RichText};

use crate::allocator::panels::fragmentation_ui;
use crate::nav::AllocatorTabRequest;
use vramscope_core::analysis::fragmentation::{self, FragmentationReport};
use vramscope_core::analysis::timetravel::AllocatorState;
use vramscope_core::diagnose::leak::SnapshotFacts;
use vramscope_core::model::format_bytes;
use vramscope_core::report::blockmap::{self, BlockMapImage};

/// Width the block map is drawn at, in pixels; it is shown scaled to the panel's width.
const BLOCK_MAP_WIDTH_PX: u32 = 1000;

/// A drawn block map, decoded for egui.
struct DecodedMap {
    drawn: BlockMapImage,
    image: egui::ColorImage,
    /// Uploaded on first display.
    texture: Option<egui::TextureHandle>,
}

/// One snapshot device's final allocator state, analysed and drawn.
struct StateFigure {
    name: String,
    state: Arc<AllocatorState>,
    /// The snapshot's trace ends in an out-of-memory error, so its final state is the failure's.
    ended_in_oom: bool,
    report: FragmentationReport,
    /// `None` when the allocator held no segments; an error text when drawing or decoding failed.
    map: Option<Result<DecodedMap, String>>,
}

impl StateFigure {
    fn new(name: &str, state: &Arc<AllocatorState>, ended_in_oom: bool) -> Self {
        let map = blockmap::render_png(state, BLOCK_MAP_WIDTH_PX).map(|drawn| {
            let drawn = drawn.map_err(|e| format!("the block map could not be drawn: {e}"))?;
            let decoded = image::load_from_memory_with_format(&drawn.png, image::ImageFormat::Png)
                .map_err(|e| format!("the block map could not be decoded: {e}"))?
                .to_rgb8();
            let size = [decoded.width() as usize, decoded.height() as usize];
            Ok(DecodedMap {
                image: egui::ColorImage::from_rgb(size, decoded.as_raw()),
                drawn,
                texture: None,
            })
        });
        StateFigure {
            name: name.to_owned(),
            state: Arc::clone(state),
            ended_in_oom,
            report: fragmentation::analyze(state),
            map,
        }
    }

    fn is_of(&self, name: &str, state: &Arc<AllocatorState>) -> bool {
        self.name == name && Arc::ptr_eq(&self.state, state)
    }
}

/// The allocator figures of every snapshot given to the wizard.
#[derive(Default)]
pub struct AllocatorFigures {
    figures: Vec<StateFigure>,
}

impl AllocatorFigures {
    /// Keeps the figures of the snapshots' final states already computed, computes the new ones
    /// and drops those no longer in the evidence. Snapshots without a final state are skipped.
    pub fn sync<'a>(&mut self, snapshots: impl IntoIterator<Item = &'a SnapshotFacts>) {
        let states: Vec<(&SnapshotFacts, &Arc<AllocatorState>)> = snapshots
            .into_iter()
            .filter_map(|facts| facts.final_state.as_ref().map(|state| (facts, state)))
            .collect();
        let unchanged = self.figures.len() == states.len()
            && self
                .figures
                .iter()
                .zip(&states)
                .all(|(f, (facts, state))| f.is_of(&facts.name, state));
        if unchanged {
            return;
        }
        let mut old = std::mem::take(&mut self.figures);
        self.figures = states
            .into_iter()
            .map(
                |(facts, state)| match old.iter().position(|f| f.is_of(&facts.name, state)) {
                    Some(i) => old.swap_remove(i),
                    None => StateFigure::new(&facts.name, state, facts.oom.is_some()),
                },
            )
            .collect();
    }

    /// Draws each state: the heading, the summary and metrics, and the block map with its legend.
    /// With `offer_allocator_tab`, each has an "Open in Allocator tab" button; returns the one
    /// clicked.
    pub fn ui(
        &mut self,
        ui: &mut egui::Ui,
        offer_allocator_tab: bool,
    ) -> Option<AllocatorTabRequest> {
        let mut request = None;
        for (index, figure) in self.figures.iter_mut().enumerate() {
            ui.push_id(("allocator_figure", index), |ui| {
                if let Some(clicked) = figure_ui(ui, figure, offer_allocator_tab) {
                    request = Some(clicked);
                }
            });
        }
        request
    }
}

/// Draws one state; the request when "Open in Allocator tab" was clicked.
fn figure_ui(
    ui: &mut egui::Ui,
    figure: &mut StateFigure,
    offer_allocator_tab: bool,
) -> Option<AllocatorTabRequest> {
    let mut open_clicked = None;
    let title = format!(
        "Allocator at the {}: {}, GPU {}",
        if figure.ended_in_oom {
            "failure"
        } else {
            "end of the snapshot"
        },
        file_name(&figure.name),
        figure.state.device
    );
    egui::Frame::group(ui.style()).show(ui, |ui| {
        ui.set_width(ui.available_width());
        ui.horizontal_wrapped(|ui| {
            ui.label(RichText::new(&title).heading())
                .on_hover_text(&figure.name);
            if offer_allocator_tab {
                let request = AllocatorTabRequest {
                    snapshot_name: figure.name.clone(),
                    device: figure.state.device,
                };
                if ui
                    .button(AllocatorTabRequest::LABEL)
                    .on_hover_text(AllocatorTabRequest::TOOLTIP)
                    .clicked()
                {
                    open_clicked = Some(request);
                }
            }
        });
        fragmentation_ui(ui, &figure.report);
        ui.add_space(8.0);
        ui.label(RichText::new("Block map").strong());
        match &mut figure.map {
            None => {
                ui.label("The allocator held no segments at the end of the snapshot.");
            }
            Some(Err(e)) => {
                ui.colored_label(ui.visuals().error_fg_color, e.as_str());
            }
            Some(Ok(map)) => block_map_ui(ui, &title, map),
        }
    });
    ui.add_space(8.0);
    open_clicked
}

/// The last component of a snapshot's path (the whole name when it has none).
fn file_name(name: &str) -> &str {
    std::path::Path::new(name)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(name)
}

fn block_map_ui(ui: &mut egui::Ui, title: &str, map: &mut DecodedMap) {
    let texture = map.texture.get_or_insert_with(|| {
        ui.ctx().load_texture(
            format!("wizard block map: {title}"),
            map.image.clone(),
            // Crisp pixels when enlarged, averaged when the panel is narrower than the map.
            egui::TextureOptions {
                magnification: egui::TextureFilter::Nearest,
                ..egui::TextureOptions::LINEAR
            },
        )
    });
    let width = ui.available_width().min(map.drawn.width as f32);
    let size = egui::vec2(
        width,
        width * map.drawn.height as f32 / map.drawn.width.max(1) as f32,
    );
    ui.add(
        egui::Image::new((texture.id(), size))
            .alt_text(format!("Block map of {title}"))
            .fit_to_exact_size(size),
    );
    ui.horizontal_wrapped(|ui| {
        for (label, [r, g, b]) in blockmap::LEGEND {
            let (rect, _) = ui.allocate_exact_size(egui::vec2(12.0, 12.0), egui::Sense::hover());
            ui.painter()
                .rect_filled(rect, 2.0, Color32::from_rgb(r, g, b));
            ui.label(label);
        }
    });
    let groups: Vec<String> = map
        .drawn
        .groups
        .iter()
        .map(|g| {
            format!(
                "{} ({} segment(s), {} reserved)",
                g.label,
                g.segment_count,
                format_bytes(g.reserved_bytes)
            )
        })
        .collect();
    let mut note = format!(
        "Segments in address order, one band per pool, top to bottom: {}. One pixel is {}; segments are at least {} pixels wide and separated by a dark line.",
        groups.join("; "),
        format_bytes(map.drawn.bytes_per_px),
        blockmap::MIN_SEGMENT_PX
    );
    if map.drawn.segments_drawn < map.drawn.segments_total {
        note.push_str(&format!(
            " Only the first {} of {} segments are drawn.",
            map.drawn.segments_drawn, map.drawn.segments_total
        ));
    }
    ui.label(RichText::new(note).weak());
}
