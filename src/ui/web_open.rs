//! Opening a file dropped on the web page without freezing it (wasm32 only).
//!
//! The page has one thread, which also draws the app and answers input. A snapshot is read in
//! slices (`Blob.slice`, the next one read while the current one is decoded), each decoded as it
//! arrives, then analysed in steps that stop at a deadline ([`SnapshotOpening`], which gives
//! what the desktop gives); between slices and steps the browser draws the progress bar and
//! handles Cancel. The file is never held whole, so the memory needed is the model's, not the
//! file's plus the model's. Captures and logs are read whole, then as on the desktop.

use wasm_bindgen::{JsCast as _, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_time::Duration;

use super::jobs::{OpenOutcome, ReadProgress, read_bytes};
use super::snapshot_opening::SnapshotOpening;
use crate::analysis::deadline::{Deadline, Step};
use crate::formats::sniff::{Route, SNIFF_BYTES, route};

/// Bytes read and decoded per slice: decoding one takes a few tens of milliseconds, short enough
/// for the page to stay responsive, long enough that the reads cost little.
const SLICE_BYTES: u64 = 4 << 20;

/// How long one step of the analysis runs before the browser gets the thread back.
const STEP_TIME: Duration = Duration::from_millis(40);

/// The largest snapshot opened in a browser. A page's WebAssembly memory ends at 4 GiB, and a
/// snapshot's model, decoder state and analysis together take about as much memory as the
/// pickle's size (docs/benchmarks.md, "Web viewer"), with headroom for the allocator.
pub const MAX_SNAPSHOT_BYTES: u64 = 3 << 30;

/// The largest capture or log opened in a browser: both are read whole before they are parsed,
/// so the file and what is made of it must fit in the page's memory together.
pub const MAX_WHOLE_FILE_BYTES: u64 = 1 << 30;

/// Reads `file` (dropped as `file_name`) like the desktop app reads a file, without blocking
/// the page for long; `progress` shows how far it got and says when to stop.
pub(super) async fn open(
    file: web_sys::File,
    file_name: &str,
    progress: &ReadProgress,
) -> OpenOutcome {
    let started = web_time::Instant::now();
    let outcome = open_classified(&file, file_name, progress).await;
    if let OpenOutcome::Snapshot(_) | OpenOutcome::Capture { .. } | OpenOutcome::Log(_) = outcome {
        // For the developer console and the headless check (scripts/web/open_check.cjs).
        log::info!(
            "opened {file_name} ({:.1} MB) in {:.2} s",
            file.size() / 1e6,
            started.elapsed().as_secs_f64()
        );
    }
    outcome
}

async fn open_classified(
    file: &web_sys::File,
    file_name: &str,
    progress: &ReadProgress,
) -> OpenOutcome {
    let size_bytes = file.size() as u64;
    let head = match read_slice(file, 0, size_bytes.min(SNIFF_BYTES as u64)).await {
        Ok(head) => head,
        Err(err) => return cannot_read(file_name, &err),
    };
    match route(file_name, &head) {
        Route::Snapshot if size_bytes > MAX_SNAPSHOT_BYTES => {
            OpenOutcome::Failed(too_big(file_name, size_bytes, MAX_SNAPSHOT_BYTES))
        }
        Route::Snapshot => open_snapshot(file, file_name, size_bytes, progress).await,
        _ if size_bytes > MAX_WHOLE_FILE_BYTES => {
            OpenOutcome::Failed(too_big(file_name, size_bytes, MAX_WHOLE_FILE_BYTES))
        }
        _ => match read_slice(file, 0, size_bytes).await {
            Ok(bytes) => read_bytes(&bytes, file_name, progress),
            Err(err) => cannot_read(file_name, &err),
        },
    }
}

/// Streams a snapshot into the decoder slice by slice, then analyses it in steps.
async fn open_snapshot(
    file: &web_sys::File,
    file_name: &str,
    size_bytes: u64,
    progress: &ReadProgress,
) -> OpenOutcome {
    let mut opening = SnapshotOpening::new(file_name, size_bytes);
    let mut slice = Vec::new();
    let mut start = 0;
    let mut next = (size_bytes > 0).then(|| start_read(file, 0, size_bytes.min(SLICE_BYTES)));
    while let Some(reading) = next.take() {
        // A read that finished already resolves without letting the browser in between.
        next_tick().await;
        let end = (start + SLICE_BYTES).min(size_bytes);
        // Read the next slice while this one is decoded.
        if end < size_bytes {
            next = Some(start_read(file, end, (end + SLICE_BYTES).min(size_bytes)));
        }
        match reading.await {
            Ok(buffer) => copy_into(&buffer, &mut slice),
            Err(err) => return cannot_read(file_name, &err),
        }
        if let Err(outcome) = opening.push(&slice, progress) {
            return outcome;
        }
        start = end;
    }
    drop(slice);
    loop {
        next_tick().await;
        match opening.run(Deadline::after(STEP_TIME), progress) {
            Step::Done(outcome) => return outcome,
            Step::Pending(more) => opening = more,
        }
    }
}

fn cannot_read(file_name: &str, err: &JsValue) -> OpenOutcome {
    OpenOutcome::Failed(format!(
        "{file_name}: the browser could not read the dropped file: {}",
        js_error_text(err)
    ))
}

/// The message for a file the browser cannot hold, naming the desktop app, which can.
fn too_big(file_name: &str, size_bytes: u64, limit_bytes: u64) -> String {
    format!(
        "{file_name} is too big for the web viewer ({:.1} GB; it opens files of up to {:.1} GB, \
         because a browser page has at most 4 GB of memory). Open it in the vramscope desktop \
         app, which reads files of any size: `vramscope {file_name}`.",
        size_bytes as f64 / 1e9,
        limit_bytes as f64 / 1e9,
    )
}

/// Starts reading bytes `start..end` of `file` (the read runs while the page goes on).
fn start_read(file: &web_sys::File, start: u64, end: u64) -> JsFuture {
    match file.slice_with_f64_and_f64(start as f64, end as f64) {
        Ok(blob) => JsFuture::from(blob.array_buffer()),
        Err(err) => JsFuture::from(js_sys::Promise::reject(&err)),
    }
}

/// Bytes `start..end` of `file`.
async fn read_slice(file: &web_sys::File, start: u64, end: u64) -> Result<Vec<u8>, JsValue> {
    let buffer = start_read(file, start, end).await?;
    let mut bytes = Vec::new();
    copy_into(&buffer, &mut bytes);
    Ok(bytes)
}

/// Copies an `ArrayBuffer` into `bytes` (reusing its memory).
fn copy_into(buffer: &JsValue, bytes: &mut Vec<u8>) {
    let array = js_sys::Uint8Array::new(buffer);
    bytes.resize(array.length() as usize, 0);
    array.copy_to(bytes);
}

/// Lets the browser run whatever waits (drawing, input) before going on: a message to
/// ourselves, which, unlike `setTimeout(0)`, is not slowed to 4 ms when repeated.
async fn next_tick() {
    let promise = js_sys::Promise::new(&mut |resolve, _reject| {
        let posted = web_sys::MessageChannel::new().and_then(|channel| {
            channel.port1().set_onmessage(Some(&resolve));
            channel.port2().post_message(&JsValue::NULL)
        });
        if posted.is_err() {
            // No message channel: go on at once rather than never.
            let _ = resolve.call0(&JsValue::NULL);
        }
    });
    // The promise never rejects.
    let _ = JsFuture::from(promise).await;
}

/// Text of a JavaScript error value, for messages.
fn js_error_text(value: &JsValue) -> String {
    if let Some(text) = value.as_string() {
        return text;
    }
    match value.dyn_ref::<js_sys::Error>() {
        Some(error) => String::from(error.message()),
        None => format!("{value:?}"),
    }
}
