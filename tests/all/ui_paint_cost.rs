//! What a frame of the app costs a software rasteriser. The web viewer in a browser without a
//! GPU (SwiftShader: headless Chromium, a blocked driver) makes the page's thread wait while the
//! CPU fills every triangle of the frame, about 18 ms per screenful of pixels on the 2-core
//! machine (docs/benchmarks.md, issue 14). So the pixels a frame fills, counted over all its
//! triangles, are the cost to keep down: a panel painted over another panel of the same colour
//! costs a screenful and shows nothing.

use std::path::PathBuf;
use std::sync::Arc;

use egui::epaint::{ClippedPrimitive, Primitive};
use egui::{Pos2, Rect, Shape, Vec2};
use egui_kittest::Harness;
use vramscope_app::VramscopeApp;
use vramscope_app::allocator::AllocatorView;
use vramscope_app::allocator::tabs::AllocatorTabs;
use vramscope_app::dialogs::NoDialogs;
use vramscope_app::views::View;

use crate::support::ui::{app_harness, frag_oom_view_harness, step_until};

/// One edge of a clip rectangle: whether a point is on its inner side, and where the segment
/// between two points crosses it.
type ClipEdge<'a> = (&'a dyn Fn(Pos2) -> bool, &'a dyn Fn(Pos2, Pos2) -> Pos2);

/// The area of the triangle `a b c` inside `clip`, in square points (the triangle cut to the
/// rectangle edge by edge, then the shoelace formula).
fn clipped_triangle_area(a: Pos2, b: Pos2, c: Pos2, clip: Rect) -> f64 {
    let mut polygon = vec![a, b, c];
    let edges: [ClipEdge; 4] = [
        (&|p| p.x >= clip.min.x, &|p, q| at_x(p, q, clip.min.x)),
        (&|p| p.x <= clip.max.x, &|p, q| at_x(p, q, clip.max.x)),
        (&|p| p.y >= clip.min.y, &|p, q| at_y(p, q, clip.min.y)),
        (&|p| p.y <= clip.max.y, &|p, q| at_y(p, q, clip.max.y)),
    ];
    for (inside, crossing) in edges {
        let mut kept = Vec::with_capacity(polygon.len() + 2);
        for (i, &p) in polygon.iter().enumerate() {
            let q = polygon[(i + 1) % polygon.len()];
            match (inside(p), inside(q)) {
                (true, true) => kept.push(q),
                (true, false) => kept.push(crossing(p, q)),
                (false, true) => {
                    kept.push(crossing(p, q));
                    kept.push(q);
                }
                (false, false) => {}
            }
        }
        polygon = kept;
        if polygon.is_empty() {
            return 0.0;
        }
    }
    let twice_area: f64 = (0..polygon.len())
        .map(|i| {
            let (p, q) = (polygon[i], polygon[(i + 1) % polygon.len()]);
            f64::from(p.x) * f64::from(q.y) - f64::from(q.x) * f64::from(p.y)
        })
        .sum();
    twice_area.abs() / 2.0
}

fn at_x(p: Pos2, q: Pos2, x: f32) -> Pos2 {
    let t = (x - p.x) / (q.x - p.x);
    Pos2::new(x, p.y + t * (q.y - p.y))
}

fn at_y(p: Pos2, q: Pos2, y: f32) -> Pos2 {
    let t = (y - p.y) / (q.y - p.y);
    Pos2::new(p.x + t * (q.x - p.x), y)
}

/// The pixels the triangles of `primitives` fill, each cut to its clip rectangle and the
/// screen, in screenfuls (1.0: every pixel of `screen` once).
fn filled_screens(primitives: &[ClippedPrimitive], screen: Rect) -> f64 {
    let mut area = 0.0;
    for clipped in primitives {
        let Primitive::Mesh(mesh) = &clipped.primitive else {
            continue;
        };
        let clip = clipped.clip_rect.intersect(screen);
        if !clip.is_positive() {
            continue;
        }
        for triangle in mesh.indices.chunks_exact(3) {
            let [a, b, c] = [0, 1, 2].map(|i| mesh.vertices[triangle[i] as usize].pos);
            area += clipped_triangle_area(a, b, c, clip);
        }
    }
    area / f64::from(screen.area())
}

/// The screenfuls the app's last frame fills.
fn last_frame_screens(harness: &Harness<'static, VramscopeApp>) -> f64 {
    let output = harness.output();
    let primitives = harness
        .ctx
        .tessellate(output.shapes.clone(), output.pixels_per_point);
    filled_screens(&primitives, harness.ctx.content_rect())
}

#[test]
fn the_area_of_a_clipped_triangle_is_measured() {
    let clip = Rect::from_min_max(Pos2::new(0.0, 0.0), Pos2::new(10.0, 10.0));
    let (a, b, c) = (
        Pos2::new(0.0, 0.0),
        Pos2::new(10.0, 0.0),
        Pos2::new(0.0, 10.0),
    );
    assert!((clipped_triangle_area(a, b, c, clip) - 50.0).abs() < 1e-6);
    // Moved 5 left, only the corner (0,0) (5,0) (0,5) stays inside.
    let shifted = [a, b, c].map(|p| p - egui::vec2(5.0, 0.0));
    let area = clipped_triangle_area(shifted[0], shifted[1], shifted[2], clip);
    assert!((area - 12.5).abs() < 1e-4, "{area}");
    // Wholly outside.
    let outside = [a, b, c].map(|p| p + egui::vec2(20.0, 0.0));
    assert_eq!(
        clipped_triangle_area(outside[0], outside[1], outside[2], clip),
        0.0
    );
}

/// The Allocator view of a snapshot fills each pixel about once for its panels, plus what its
/// block map, timeline and text add: no panel is painted under another one of the same colour.
#[test]
fn the_allocator_view_paints_each_pixel_of_its_panels_once() {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pytorch/frag_oom.pickle");
    let mut harness = app_harness(Box::new(NoDialogs), vec![path], None, 1.0 / 60.0);
    step_until(&mut harness, "the snapshot's view", |app| {
        app.view() == View::Allocator && app.active_allocator_view().is_some_and(|v| v.is_ready())
    });
    let screens = last_frame_screens(&harness);
    eprintln!("the Allocator view's frame fills {screens:.2} screens");
    assert!(screens > 1.0, "{screens:.2}: the frame covers the window");
    assert!(screens < 2.0, "{screens:.2} screens filled");
}

/// The texts `shape` draws, nested shapes included.
fn texts_of(shape: &Shape, texts: &mut Vec<String>) {
    match shape {
        Shape::Text(text) => texts.push(text.galley.text().to_owned()),
        Shape::Vec(shapes) => shapes.iter().for_each(|s| texts_of(s, texts)),
        _ => {}
    }
}

/// The texts the last frame of `harness` drew.
fn drawn_texts<T>(harness: &Harness<'static, T>) -> Vec<String> {
    let mut texts = Vec::new();
    for clipped in &harness.output().shapes {
        texts_of(&clipped.shape, &mut texts);
    }
    texts
}

/// frag_oom's view with its analysis done, ready to show.
fn ready_frag_oom_view() -> AllocatorView {
    let mut harness = frag_oom_view_harness(Vec2::new(1000.0, 700.0));
    let placeholder = AllocatorView::new(
        Arc::clone(harness.state().snapshot()),
        "placeholder".to_owned(),
    );
    std::mem::replace(harness.state_mut(), placeholder)
}

/// With an unseen first frame (the web viewer's default), a newly opened view is laid out but
/// not painted in its first frames, a part per frame, which show only "Drawing the view…", and
/// painted in the frame after; without (the desktop's default), it is painted at once.
#[test]
fn a_new_view_can_be_drawn_unseen_for_its_first_frames() {
    for unseen in [true, false] {
        let mut tabs = AllocatorTabs::default();
        // The desktop's default (these tests run natively) shows a view at once.
        if unseen {
            tabs.set_unseen_first_frame(true);
        }
        let mut harness = Harness::builder()
            .with_size(Vec2::new(1000.0, 700.0))
            .build_ui_state(|ui, tabs: &mut AllocatorTabs| tabs.ui(ui), tabs);
        harness.run_steps(2);
        harness.state_mut().open(ready_frag_oom_view());
        let shows_view = |texts: &[String]| texts.iter().any(|t| t == "frag_oom.pickle");
        let drawing = |texts: &[String]| texts.iter().any(|t| t == "Drawing the view…");
        // The header and timeline, the side panel, the block map.
        let unseen_frames = if unseen { 3 } else { 0 };
        for frame in 1..=unseen_frames {
            harness.step();
            let texts = drawn_texts(&harness);
            assert!(!shows_view(&texts), "frame {frame}: {texts:?}");
            assert!(drawing(&texts), "frame {frame}: {texts:?}");
        }
        harness.step();
        let shown = drawn_texts(&harness);
        assert!(shows_view(&shown), "frame {}: {shown:?}", unseen_frames + 1);
        assert!(!drawing(&shown), "frame {}: {shown:?}", unseen_frames + 1);
    }
}
