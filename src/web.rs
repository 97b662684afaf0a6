//! Web entry point (wasm32 only): the viewer of saved captures and snapshots on the page's canvas.
//!
//! There is no NVML, CUDA or file system in a browser, so the app starts with no source; files
//! arrive by drag and drop (read with `DroppedFile::bytes_async`).

use eframe::wasm_bindgen::JsCast as _;

use crate::ui::{AppOptions, VramscopeApp, dialogs};

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
        let options = AppOptions {
            files: Vec::new(),
            dialogs: dialogs::default_dialogs(),
        };
        let result = eframe::WebRunner::new()
            .start(
                canvas,
                eframe::WebOptions::default(),
                Box::new(|cc| Ok(Box::new(VramscopeApp::new(cc, options)))),
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
