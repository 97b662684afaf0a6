//! Frame timing shared by the UI benchmarks (`timeline`, `fleet`): headless egui frames at
//! 1600×900, CPU time per frame on this thread, and the vertices egui tessellates. A bench that
//! includes this file also includes `common/mod.rs` as `mod common` (the medians and CPU clock).
#![allow(
    dead_code,
    reason = "each benchmark uses a different part of this module"
)]

use std::time::{Duration, Instant};

use egui::{Pos2, RawInput, Rect, vec2};

use crate::common;

/// Input of frame number `frame` of a 1600×900 window at 60 fps.
pub fn raw_input(frame: usize) -> RawInput {
    RawInput {
        screen_rect: Some(Rect::from_min_size(Pos2::ZERO, vec2(1600.0, 900.0))),
        time: Some(frame as f64 / 60.0),
        ..Default::default()
    }
}

/// Per-frame CPU time (median, worst), wall time (median), and the last frame's vertex count.
pub struct FrameStats {
    pub cpu_median: Duration,
    pub cpu_worst: Duration,
    pub wall_median: Duration,
    pub vertices: usize,
}

/// Runs `frame` `frames` times (it returns the frame's vertex count) and times each run.
pub fn time_frames(frames: usize, mut frame: impl FnMut(usize) -> usize) -> FrameStats {
    let mut cpu = Vec::with_capacity(frames);
    let mut wall = Vec::with_capacity(frames);
    let mut vertices = 0;
    for i in 0..frames {
        let (wall_start, cpu_start) = (Instant::now(), common::thread_cpu_time());
        vertices = frame(i);
        cpu.push(common::thread_cpu_time().saturating_sub(cpu_start));
        wall.push(wall_start.elapsed());
    }
    let cpu = common::Samples::from_durations(cpu);
    let wall = common::Samples::from_durations(wall);
    FrameStats {
        cpu_median: cpu.median(),
        cpu_worst: cpu.max(),
        wall_median: wall.median(),
        vertices,
    }
}

/// Vertices of the meshes egui tessellates from one frame's output.
pub fn vertex_count(ctx: &egui::Context, mut output: egui::FullOutput) -> usize {
    // A renderer would upload the font atlas here; this benchmark has none.
    output.textures_delta.clear();
    ctx.tessellate(output.shapes, output.pixels_per_point)
        .iter()
        .map(|m| match &m.primitive {
            egui::epaint::Primitive::Mesh(mesh) => mesh.vertices.len(),
            egui::epaint::Primitive::Callback(_) => 0,
        })
        .sum()
}

/// One Markdown table row: the view's name, CPU per frame (median, worst), wall median, vertices.
pub fn print_row(name: &str, stats: &FrameStats) {
    println!(
        "| {name} | {:.2} ms | {:.2} ms | {:.2} ms | {} |",
        common::ms(stats.cpu_median),
        common::ms(stats.cpu_worst),
        common::ms(stats.wall_median),
        stats.vertices
    );
}
