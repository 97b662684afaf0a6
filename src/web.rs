//! Web entry point (wasm32 only): the viewer of saved captures and snapshots on the page's canvas.
//!
//! There is no NVML, CUDA or file system in a browser, so the app starts with no source; files
//! arrive by drag and drop (read with `DroppedFile::bytes_async`).
//!
//! It paints with glow into a WebGL context without multisampling. Where WebGL runs on the CPU
//! (SwiftShader: no GPU, or a blocked driver) the page's thread waits for every frame to be drawn,
//! and a 4× multisampled canvas (WebGL's default, and what wgpu's WebGL backend asked for) made
//! each repaint of a 1280×720 page a 110–190 ms task even with nothing on it; without
//! multisampling it is under 10 ms (`docs/benchmarks.md`, issue 14). egui anti-aliases its shapes
//! itself (feathered edges), so the picture does not need the browser's multisampling.

use eframe::wasm_bindgen::JsCast as _;

use vramscope_app::{AppOptions, VramscopeApp, dialogs};

/// Creates the canvas's WebGL context with the attributes the viewer wants (no multisampling, no
/// depth buffer: egui uses neither) before eframe asks for one: a canvas hands out its first
/// context again to every later `getContext` of that kind, so eframe's glow painter draws into
/// this one. WebGL2 first, WebGL1 where there is no WebGL2, like eframe; with neither, eframe
/// says so itself.
fn create_gl_context(canvas: &web_sys::HtmlCanvasElement) {
    let attributes = js_sys::Object::new();
    for (name, value) in [("antialias", false), ("depth", false)] {
        // Setting a plain property on a fresh object cannot fail.
        let _ = js_sys::Reflect::set(&attributes, &name.into(), &value.into());
    }
    for kind in ["webgl2", "webgl"] {
        if let Ok(Some(_)) = canvas.get_context_with_context_options(kind, &attributes) {
            return;
        }
    }
    log::warn!("vramscope: no WebGL context without multisampling; eframe picks its own");
}

/// Starts the app on the canvas `the_canvas_id` of `index.html`, and replaces the "Loading…" text
/// with the error if the app cannot start (no WebGL/WebGPU, for example).
pub fn start() {
    eframe::WebLogger::init(log::LevelFilter::Info).ok();
    wasm_bindgen_futures::spawn_local(async {
        let Some(document) = web_sys::window().and_then(|window| window.document()) else {
            log::error!("vramscope: no document to draw in");
            return;
        };
        let Some(canvas) = document
            .get_element_by_id("the_canvas_id")
            .and_then(|element| element.dyn_into::<web_sys::HtmlCanvasElement>().ok())
        else {
            log::error!("vramscope: the page has no <canvas id=\"the_canvas_id\">");
            return;
        };
        create_gl_context(&canvas);
        let options = AppOptions {
            files: Vec::new(),
            dialogs: dialogs::default_dialogs(),
        };
        let result = eframe::WebRunner::new()
            .start(
                canvas,
                eframe::WebOptions {
                    renderer: eframe::Renderer::Glow,
                    // Dithering adds noise math to every pixel's shader and changes nothing in
                    // this UI's flat colours; with software WebGL (SwiftShader) it was ~10 % of
                    // each frame (docs/benchmarks.md, issue 14).
                    dithering: false,
                    ..eframe::WebOptions::default()
                },
                Box::new(|cc| {
                    // One bitmap per glyph and size instead of up to four (one per quarter-pixel
                    // offset): a big snapshot's first view rasterised ~12 ms of glyphs in one
                    // frame on the CPU. Text is placed on whole pixels, as sharp as before.
                    cc.egui_ctx.all_styles_mut(|style| {
                        style.visuals.text_options.subpixel_binning = false;
                    });
                    Ok(Box::new(VramscopeApp::new(cc, options)))
                }),
            )
            .await;
        if let Some(loading) = document.get_element_by_id("loading_text") {
            match result {
                Ok(()) => loading.remove(),
                Err(err) => loading.set_text_content(Some(&format!(
                    "vramscope could not start in this browser: {err:?}"
                ))),
            }
        }
    });
}
