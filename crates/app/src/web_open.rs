//! Opening a file dropped on the web page without freezing it (wasm32 only), as a stepped job
//! on the app's [`Runner`] like every other long piece of work.
//!
//! The page has one thread, which also draws the app and answers input. A snapshot is read in
//! slices (`Blob.slice`, the next one read by the browser while the current one is decoded), each
//! decoded as it arrives, then analysed in steps that stop at a deadline ([`SnapshotOpening`],
//! which gives what the desktop gives); between steps the runner lets the browser draw the
//! progress bar and handle Cancel. The file is never held whole, so the memory needed is the
//! model's, not the file's plus the model's. Captures and logs are read whole, then as on the
//! desktop.

use std::cell::RefCell;
use std::rc::Rc;

use wasm_bindgen::{JsCast as _, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_time::{Duration, Instant};

use super::jobs::{OpenOutcome, read_bytes};
use super::runner::{Job, Progress, Runner, Step};
use super::snapshot_opening::SnapshotOpening;
use vramscope_core::analysis::deadline::{self, Deadline};
use vramscope_core::formats::sniff::{Route, SNIFF_BYTES, route};

/// Bytes read and decoded per slice: decoding one takes 20-40 ms on a busy 2-core machine
/// (4 MiB took 50-85 ms, over the 50 ms a task may take before the browser calls it long), short
/// enough for the page to stay responsive, long enough that the reads cost little.
const SLICE_BYTES: u64 = 2 << 20;

/// Bytes of a read slice decoded in one step: about 10 ms of decoding once the browser has
/// optimised the decoder, 20-40 ms before (a whole 2 MiB slice in one step held the page's
/// thread for 80-150 ms right after the drop, when the decoder's code had just been compiled).
const DECODE_BYTES: usize = 512 << 10;

/// How long one step of the analysis runs before the browser gets the thread back.
const STEP_TIME: Duration = Duration::from_millis(40);

/// The largest snapshot opened in a browser. A page's WebAssembly memory ends at 4 GiB, and a
/// snapshot's model, decoder state and analysis together take about as much memory as the
/// pickle's size (docs/benchmarks.md, "Web viewer"), with headroom for the allocator.
pub const MAX_SNAPSHOT_BYTES: u64 = 3 << 30;

/// The largest capture or log opened in a browser: both are read whole before they are parsed,
/// so the file and what is made of it must fit in the page's memory together.
pub const MAX_WHOLE_FILE_BYTES: u64 = 1 << 30;

/// Starts reading `file` (dropped as `file_name`) like the desktop app reads a file, as a
/// stepped job on `runner` titled `title`: no step blocks the page for long, and the job's
/// progress shows how far it got and says when to stop.
pub(super) fn open_job(
    runner: &Runner,
    title: &str,
    file: web_sys::File,
    file_name: String,
) -> Job<OpenOutcome> {
    let head = BrowserRead::start(&file, 0, (file.size() as u64).min(SNIFF_BYTES as u64));
    let mut open = WebOpen {
        size_bytes: file.size() as u64,
        file,
        file_name,
        started: Instant::now(),
        stage: Some(WebStage::Sniffing(head)),
    };
    runner.spawn_stepped(title, move |progress| open.step(progress))
}

/// A dropped file being opened.
struct WebOpen {
    file: web_sys::File,
    file_name: String,
    size_bytes: u64,
    started: Instant,
    /// `None` only while a step works on it.
    stage: Option<WebStage>,
}

enum WebStage {
    /// Reading the first bytes, to tell what the file is.
    Sniffing(BrowserRead),
    /// Reading a capture or a log whole.
    Whole(BrowserRead),
    /// Decoding a snapshot slice by slice, a part of a slice per step.
    Slices {
        opening: SnapshotOpening,
        /// The slice being decoded and how many of its bytes were decoded.
        decoding: Option<(Vec<u8>, usize)>,
        /// The next slice, which the browser reads meanwhile, and where it ends; `None` once
        /// the last slice was read.
        reading: Option<(BrowserRead, u64)>,
    },
    /// Every slice decoded: analysing.
    Analysing(SnapshotOpening),
}

impl WebOpen {
    /// One step: a part of a slice decoded, a deadline's worth of analysis, or nothing while the
    /// browser has not read what is needed yet.
    fn step(&mut self, progress: &Progress) -> Step<OpenOutcome> {
        let Some(stage) = self.stage.take() else {
            return Step::Done(OpenOutcome::Cancelled);
        };
        match self.next(stage, progress) {
            Ok(stage) => {
                self.stage = Some(stage);
                Step::Pending
            }
            Err(outcome) => {
                if let OpenOutcome::Snapshot(_)
                | OpenOutcome::Capture { .. }
                | OpenOutcome::Log(_) = outcome
                {
                    // For the developer console and the headless check (scripts/web/open_check.cjs).
                    log::info!(
                        "opened {} ({:.1} MB) in {:.2} s",
                        self.file_name,
                        self.size_bytes as f64 / 1e6,
                        self.started.elapsed().as_secs_f64()
                    );
                }
                Step::Done(outcome)
            }
        }
    }

    /// The stage after `stage`, or the outcome to end with.
    fn next(&self, stage: WebStage, progress: &Progress) -> Result<WebStage, OpenOutcome> {
        if progress.is_cancelled() {
            return Err(OpenOutcome::Cancelled);
        }
        let file_name = self.file_name.as_str();
        let size_bytes = self.size_bytes;
        match stage {
            WebStage::Sniffing(read) => {
                let Some(head) = read.take() else {
                    return Ok(WebStage::Sniffing(read));
                };
                let head = head.map_err(|err| cannot_read(file_name, &err))?;
                match route(file_name, &head) {
                    Route::Snapshot if size_bytes > MAX_SNAPSHOT_BYTES => Err(OpenOutcome::Failed(
                        too_big(file_name, size_bytes, MAX_SNAPSHOT_BYTES),
                    )),
                    Route::Snapshot => {
                        // The browser's last-modified time of the file, as the desktop reads it.
                        let modified_ms = Some(self.file.last_modified() as i64);
                        let opening = SnapshotOpening::new(file_name, size_bytes, modified_ms);
                        if size_bytes == 0 {
                            return Ok(WebStage::Analysing(opening));
                        }
                        let end = size_bytes.min(SLICE_BYTES);
                        Ok(WebStage::Slices {
                            opening,
                            decoding: None,
                            reading: Some((BrowserRead::start(&self.file, 0, end), end)),
                        })
                    }
                    _ if size_bytes > MAX_WHOLE_FILE_BYTES => Err(OpenOutcome::Failed(too_big(
                        file_name,
                        size_bytes,
                        MAX_WHOLE_FILE_BYTES,
                    ))),
                    _ => Ok(WebStage::Whole(BrowserRead::start(
                        &self.file, 0, size_bytes,
                    ))),
                }
            }
            WebStage::Whole(read) => match read.take() {
                None => Ok(WebStage::Whole(read)),
                Some(Ok(bytes)) => Err(read_bytes(&bytes, file_name, progress)),
                Some(Err(err)) => Err(cannot_read(file_name, &err)),
            },
            WebStage::Slices {
                mut opening,
                decoding,
                reading,
            } => {
                let (slice, decoded, reading) = match decoding {
                    Some((slice, decoded)) => (slice, decoded, reading),
                    None => {
                        let Some((read, end)) = reading else {
                            return Ok(WebStage::Analysing(opening));
                        };
                        let Some(slice) = read.take() else {
                            return Ok(WebStage::Slices {
                                opening,
                                decoding: None,
                                reading: Some((read, end)),
                            });
                        };
                        let slice = slice.map_err(|err| cannot_read(file_name, &err))?;
                        // Read the next slice while this one is decoded.
                        let next = (end < size_bytes).then(|| {
                            let next_end = (end + SLICE_BYTES).min(size_bytes);
                            (BrowserRead::start(&self.file, end, next_end), next_end)
                        });
                        (slice, 0, next)
                    }
                };
                let until = (decoded + DECODE_BYTES).min(slice.len());
                opening.push(&slice[decoded..until], progress)?;
                let decoding = (until < slice.len()).then_some((slice, until));
                if decoding.is_none() && reading.is_none() {
                    return Ok(WebStage::Analysing(opening));
                }
                Ok(WebStage::Slices {
                    opening,
                    decoding,
                    reading,
                })
            }
            WebStage::Analysing(opening) => {
                match opening.run(Deadline::after(STEP_TIME), progress) {
                    deadline::Step::Done(outcome) => Err(outcome),
                    deadline::Step::Pending(more) => Ok(WebStage::Analysing(more)),
                }
            }
        }
    }
}

/// Bytes of the dropped file that the browser reads while the page goes on; [`Self::take`]
/// gives them once they are there.
struct BrowserRead(Rc<RefCell<Option<ReadResult>>>);

/// What the browser gave for a read: the bytes, or its error.
type ReadResult = Result<Vec<u8>, JsValue>;

impl BrowserRead {
    /// Starts reading bytes `start..end` of `file`.
    fn start(file: &web_sys::File, start: u64, end: u64) -> Self {
        let slot = Rc::new(RefCell::new(None));
        let filled = Rc::clone(&slot);
        let read = start_read(file, start, end);
        wasm_bindgen_futures::spawn_local(async move {
            let bytes = read.await.map(|buffer| {
                let mut bytes = Vec::new();
                copy_into(&buffer, &mut bytes);
                bytes
            });
            *filled.borrow_mut() = Some(bytes);
        });
        BrowserRead(slot)
    }

    /// The bytes (or the browser's error) once read; `None` while the read runs.
    fn take(&self) -> Option<ReadResult> {
        self.0.borrow_mut().take()
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

/// Copies an `ArrayBuffer` into `bytes`.
fn copy_into(buffer: &JsValue, bytes: &mut Vec<u8>) {
    let array = js_sys::Uint8Array::new(buffer);
    bytes.resize(array.length() as usize, 0);
    array.copy_to(bytes);
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
