//! Web entry point (wasm32 only): starts the viewer on the page's canvas.

/// Starts the app on the canvas `the_canvas_id`.
pub fn start() {}
