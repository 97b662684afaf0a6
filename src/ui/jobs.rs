//! Work that takes longer than a frame (reading and preparing a capture, writing one) runs here,
//! off the UI thread; results come back through a channel and wake the UI with a repaint.

use std::path::PathBuf;
use std::sync::mpsc::{Receiver, Sender, channel};

use crate::formats::vramcap;

use super::session::PreparedCapture;

/// A finished background job.
pub enum JobResult {
    /// A file was read (or failed to be). Errors name the file and the problem.
    Opened {
        file_name: String,
        result: Result<Box<PreparedCapture>, String>,
    },
    /// A capture was written to `path` (or failed to be).
    Saved {
        path: PathBuf,
        result: Result<(), String>,
    },
}

/// Runs background jobs and collects their results.
pub struct Jobs {
    sender: Sender<JobResult>,
    receiver: Receiver<JobResult>,
    running: usize,
    ctx: egui::Context,
}

impl Jobs {
    /// Results wake `ctx` up (a repaint), so the UI needs no polling loop.
    pub fn new(ctx: egui::Context) -> Self {
        let (sender, receiver) = channel();
        Jobs {
            sender,
            receiver,
            running: 0,
            ctx,
        }
    }

    /// Number of jobs started and not yet collected by [`Jobs::poll`].
    pub fn running(&self) -> usize {
        self.running
    }

    /// Reads and prepares the capture at `path`.
    #[cfg(feature = "native")]
    pub fn open_path(&mut self, path: PathBuf) {
        let file_name = display_name(&path);
        self.spawn(move || JobResult::Opened {
            file_name,
            result: vramcap::read_file(&path)
                .map(|capture| Box::new(PreparedCapture::new(capture)))
                .map_err(|err| err.to_string()),
        });
    }

    /// Reads a dropped file: by path when it has one on disk, else through the handle's bytes.
    pub fn open_dropped(&mut self, file: egui::DroppedFileHandle) {
        let path = file.path().to_owned();
        #[cfg(feature = "native")]
        if path.is_file() {
            self.open_path(path);
            return;
        }
        let file_name = display_name(&path);
        #[cfg(not(target_arch = "wasm32"))]
        {
            self.spawn(move || {
                let result = file
                    .bytes()
                    .map_err(|err| format!("{file_name}: cannot read the dropped file: {err}"))
                    .and_then(|bytes| {
                        vramcap::read_bytes(&bytes, &file_name)
                            .map(|capture| Box::new(PreparedCapture::new(capture)))
                            .map_err(|err| err.to_string())
                    });
                JobResult::Opened { file_name, result }
            });
        }
        #[cfg(target_arch = "wasm32")]
        {
            let sender = self.sender.clone();
            let ctx = self.ctx.clone();
            self.running += 1;
            wasm_bindgen_futures::spawn_local(async move {
                let result = match file.bytes_async().await {
                    Ok(bytes) => vramcap::read_bytes(&bytes, &file_name)
                        .map(|capture| Box::new(PreparedCapture::new(capture)))
                        .map_err(|err| err.to_string()),
                    Err(err) => Err(format!("{file_name}: cannot read the dropped file: {err}")),
                };
                // The receiver lives as long as the app; if it is gone there is nobody to tell.
                let _ = sender.send(JobResult::Opened { file_name, result });
                ctx.request_repaint();
            });
        }
    }

    /// Writes `capture` to `path` as a `.vramcap` file.
    #[cfg(feature = "native")]
    pub fn save(&mut self, path: PathBuf, capture: crate::model::Capture) {
        self.spawn(move || {
            let result = vramcap::write_file(&path, &capture).map_err(|err| err.to_string());
            JobResult::Saved { path, result }
        });
    }

    /// Finished jobs since the last call. Never blocks.
    pub fn poll(&mut self) -> Vec<JobResult> {
        let results: Vec<JobResult> = self.receiver.try_iter().collect();
        self.running = self.running.saturating_sub(results.len());
        results
    }

    /// Runs `job` on a thread (inline on the web, which has no threads) and reports its result.
    fn spawn(&mut self, job: impl FnOnce() -> JobResult + Send + 'static) {
        self.running += 1;
        let sender = self.sender.clone();
        let ctx = self.ctx.clone();
        let deliver = move |result: JobResult| {
            // The receiver lives as long as the app; if it is gone there is nobody to tell.
            let _ = sender.send(result);
            ctx.request_repaint();
        };
        #[cfg(not(target_arch = "wasm32"))]
        {
            let spawned = std::thread::Builder::new()
                .name("vramscope-job".to_owned())
                .spawn(move || deliver(job()));
            if let Err(err) = spawned {
                log::error!("could not start a background thread: {err}");
                self.running -= 1;
            }
        }
        #[cfg(target_arch = "wasm32")]
        deliver(job());
    }
}

/// The file name part of a path, for messages and the top bar.
fn display_name(path: &std::path::Path) -> String {
    path.file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}
