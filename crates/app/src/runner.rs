//! The one way the UI runs work that takes longer than a frame: reading and writing files, the
//! allocator analysis of a snapshot, the GPU checks, report writes.
//!
//! [`Runner::spawn`] runs a function on its own thread; [`Runner::spawn_stepped`] runs work that
//! is cut into steps (on a thread natively; in the web viewer, which has no threads, a few
//! milliseconds of steps at a time in browser tasks between frames, so the page draws and answers
//! input in between and no frame waits for the work). Either way the UI holds a [`Job`]: it polls
//! it once per frame for the result, and shows its [`Progress`] (a fraction, a stage, the time so
//! far) with a Cancel button ([`job_progress_ui`]).
//!
//! Waking the UI: a finished job repaints at once; progress repaints at most every
//! [`PROGRESS_REPAINT_INTERVAL`], so a job that reports thousands of steps a second costs a few
//! frames a second, and a job that reports nothing costs nothing (no spinner animating at the
//! display's rate while work runs).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use web_time::Instant;

/// Progress repaints the UI at most this often.
#[cfg(not(target_arch = "wasm32"))]
pub const PROGRESS_REPAINT_INTERVAL: Duration = Duration::from_millis(250);
/// Progress repaints the UI at most this often. In the web viewer a frame is dear: drawing it
/// takes the page's one thread (which also reads and decodes the file) for about 250-500 ms with
/// software WebGL even when the app itself needs under a millisecond of it (measured idle and
/// while opening: docs/benchmarks.md, "Web viewer"), so progress shows once a second there.
#[cfg(target_arch = "wasm32")]
pub const PROGRESS_REPAINT_INTERVAL: Duration = Duration::from_secs(1);

/// What stepped work must be to run on the [`Runner`]: `Send` natively, where it runs on a thread
/// of its own; anything in the web viewer, where it runs on the page's one thread and may hold
/// browser objects (a dropped `File`, a read in flight), which are not `Send`.
#[cfg(not(target_arch = "wasm32"))]
pub trait StepSend: Send {}
#[cfg(not(target_arch = "wasm32"))]
impl<T: Send> StepSend for T {}
/// What stepped work must be to run on the [`Runner`]: `Send` natively, where it runs on a thread
/// of its own; anything in the web viewer, where it runs on the page's one thread and may hold
/// browser objects (a dropped `File`, a read in flight), which are not `Send`.
#[cfg(target_arch = "wasm32")]
pub trait StepSend {}
#[cfg(target_arch = "wasm32")]
impl<T> StepSend for T {}

/// What a job has done so far, shared between the job (which writes it) and the UI (which shows
/// it and may ask the job to stop).
pub struct Progress {
    /// Fraction done as `f32` bits; NaN while the job cannot say.
    fraction_bits: AtomicU32,
    /// What the job is doing now ("comparing CUDA and NVML", "Testing memory: …").
    stage: Mutex<String>,
    cancelled: AtomicBool,
    started: Instant,
    ctx: egui::Context,
}

impl Progress {
    /// Progress that wakes `ctx`; jobs get theirs from the [`Runner`] (and tests of work that
    /// reports progress make one here).
    pub(super) fn new(ctx: egui::Context) -> Self {
        Progress {
            fraction_bits: AtomicU32::new(f32::NAN.to_bits()),
            stage: Mutex::new(String::new()),
            cancelled: AtomicBool::new(false),
            started: Instant::now(),
            ctx,
        }
    }

    /// Records the fraction done (0 to 1) and wakes the UI soon. Returns whether to go on (false
    /// once cancel was asked for), so it can be a reader's progress callback as it is.
    pub fn set_fraction(&self, fraction: f32) -> bool {
        self.fraction_bits
            .store(fraction.clamp(0.0, 1.0).to_bits(), Ordering::Relaxed);
        self.wake_soon();
        !self.is_cancelled()
    }

    /// Records what the job is doing now and wakes the UI soon.
    pub fn set_stage(&self, stage: impl Into<String>) {
        if let Ok(mut current) = self.stage.lock() {
            *current = stage.into();
        }
        self.wake_soon();
    }

    /// Fraction done (0 to 1), when the job reports it.
    pub fn fraction(&self) -> Option<f32> {
        let fraction = f32::from_bits(self.fraction_bits.load(Ordering::Relaxed));
        fraction.is_finite().then_some(fraction)
    }

    /// What the job is doing now (empty when it does not say).
    pub fn stage(&self) -> String {
        self.stage
            .lock()
            .map(|stage| stage.clone())
            .unwrap_or_default()
    }

    /// Asks the job to stop; the job sees it through [`Self::is_cancelled`] and ends early.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::Relaxed);
        self.ctx.request_repaint();
    }

    /// Whether cancel was asked for.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }

    /// The cancel flag itself, for work that polls a flag of its own (the GPU checks).
    pub fn cancel_flag(&self) -> &AtomicBool {
        &self.cancelled
    }

    /// Time since the job started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// A repaint within [`PROGRESS_REPAINT_INTERVAL`]: egui keeps the earliest requested time, so
    /// however often this is called, progress repaints at most that often.
    fn wake_soon(&self) {
        self.ctx.request_repaint_after(PROGRESS_REPAINT_INTERVAL);
    }
}

/// One step of a stepped job: not done yet (also when it waits for something, such as a
/// browser read: in the web viewer every step is followed by the page's turn), or done with
/// its result.
pub enum Step<T> {
    Pending,
    Done(T),
}

/// A stepped job's next step.
#[cfg(not(target_arch = "wasm32"))]
type StepFn<T> = Box<dyn FnMut(&Progress) -> Step<T> + Send>;
/// A stepped job's next step.
#[cfg(target_arch = "wasm32")]
type StepFn<T> = Box<dyn FnMut(&Progress) -> Step<T>>;

/// Where a job's result comes from.
enum Source<T> {
    /// Work running elsewhere (a thread, browser tasks) sends its result here.
    Channel(Receiver<T>),
    /// Stepped here, by [`Job::poll`] (a machine that could not start a thread).
    #[cfg(not(target_arch = "wasm32"))]
    Stepped(StepFn<T>),
    /// The result was handed out.
    Collected,
}

/// What [`Job::poll`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Poll<T> {
    /// Still running.
    Running,
    /// Finished with this result (handed out once).
    Done(T),
    /// The work ended without a result (its thread panicked or could not start); the message
    /// says which job.
    Lost(String),
}

/// Work in progress: its progress and, once finished, its result. Dropping a job asks its work
/// to stop.
pub struct Job<T> {
    name: String,
    progress: Arc<Progress>,
    source: Source<T>,
}

impl<T> Job<T> {
    /// What the job does ("reading run.vramcap"), for messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The job's progress, to show and to cancel.
    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    /// Whether the result was not handed out yet.
    pub fn is_running(&self) -> bool {
        !matches!(self.source, Source::Collected)
    }

    /// The result once the work has finished. Never blocks, except for a stepped job that could
    /// not get a thread: it runs to the end here rather than stall.
    pub fn poll(&mut self) -> Poll<T> {
        match &mut self.source {
            Source::Collected => Poll::Running,
            Source::Channel(receiver) => match receiver.try_recv() {
                Ok(result) => {
                    self.source = Source::Collected;
                    Poll::Done(result)
                }
                Err(TryRecvError::Empty) => Poll::Running,
                Err(TryRecvError::Disconnected) => {
                    self.source = Source::Collected;
                    Poll::Lost(format!("{} stopped without a result", self.name))
                }
            },
            #[cfg(not(target_arch = "wasm32"))]
            Source::Stepped(step) => loop {
                if let Step::Done(result) = step(&self.progress) {
                    self.source = Source::Collected;
                    return Poll::Done(result);
                }
            },
        }
    }
}

impl<T> Drop for Job<T> {
    fn drop(&mut self) {
        if self.is_running() {
            self.progress.cancelled.store(true, Ordering::Relaxed);
        }
    }
}

/// Starts jobs that wake one UI (its egui context) when they progress or finish.
#[derive(Clone)]
pub struct Runner {
    ctx: egui::Context,
}

impl Runner {
    /// A runner whose jobs wake `ctx`.
    pub fn new(ctx: egui::Context) -> Self {
        Runner { ctx }
    }

    /// The UI's context, which jobs wake.
    pub fn ctx(&self) -> &egui::Context {
        &self.ctx
    }

    fn new_progress(&self) -> Arc<Progress> {
        Arc::new(Progress::new(self.ctx.clone()))
    }

    /// Runs `work` on its own thread (inline on the web, which has no threads); `name` says what
    /// it does, for messages and the thread's name.
    pub fn spawn<T: Send + 'static>(
        &self,
        name: &str,
        work: impl FnOnce(&Progress) -> T + Send + 'static,
    ) -> Job<T> {
        let progress = self.new_progress();
        let (sender, receiver) = channel();
        let job = Job {
            name: name.to_owned(),
            progress: Arc::clone(&progress),
            source: Source::Channel(receiver),
        };
        let run = move || {
            let result = work(&progress);
            // The job may have been dropped; then nobody wants the result.
            let _ = sender.send(result);
            progress.ctx.request_repaint();
        };
        #[cfg(not(target_arch = "wasm32"))]
        if let Err(err) = std::thread::Builder::new()
            .name(thread_name(name))
            .spawn(run)
        {
            // The closure is gone with the failed spawn: the job reports itself lost.
            log::error!("could not start a background thread for {name}: {err}");
        }
        #[cfg(target_arch = "wasm32")]
        run();
        job
    }

    /// Runs work cut into steps: `step` is called until it returns [`Step::Done`]. Natively the
    /// steps run on a thread; in the web viewer they run in browser tasks, one step a task with
    /// the page let in between, so long work never freezes the page and needs no
    /// repaints to go on (its progress repaints at most every [`PROGRESS_REPAINT_INTERVAL`]).
    /// A step should take at most some tens of milliseconds; one that waits for something (a
    /// browser read) returns [`Step::Pending`] until it is there.
    pub fn spawn_stepped<T: StepSend + 'static>(
        &self,
        name: &str,
        step: impl FnMut(&Progress) -> Step<T> + StepSend + 'static,
    ) -> Job<T> {
        let progress = self.new_progress();
        let step: StepFn<T> = Box::new(step);
        #[cfg(not(target_arch = "wasm32"))]
        let source = steps_on_a_thread(name, step, &progress);
        #[cfg(target_arch = "wasm32")]
        let source = steps_in_browser_tasks(step, &progress);
        Job {
            name: name.to_owned(),
            progress,
            source,
        }
    }
}

/// Runs `step` until done on a thread of its own. The steps go to the thread through a slot, so
/// that if no thread can start they are still here, to be stepped by [`Job::poll`].
#[cfg(not(target_arch = "wasm32"))]
fn steps_on_a_thread<T: Send + 'static>(
    name: &str,
    step: StepFn<T>,
    progress: &Arc<Progress>,
) -> Source<T> {
    let (sender, receiver) = channel();
    let slot = Arc::new(Mutex::new(Some(step)));
    let thread_slot = Arc::clone(&slot);
    let thread_progress = Arc::clone(progress);
    let spawned = std::thread::Builder::new()
        .name(thread_name(name))
        .spawn(move || {
            let taken = thread_slot.lock().ok().and_then(|mut slot| slot.take());
            let Some(mut step) = taken else {
                return;
            };
            let result = loop {
                if let Step::Done(result) = step(&thread_progress) {
                    break result;
                }
            };
            // The job may have been dropped; then nobody wants the result.
            let _ = sender.send(result);
            thread_progress.ctx.request_repaint();
        });
    match spawned {
        Ok(_) => Source::Channel(receiver),
        Err(err) => {
            log::warn!("no thread for {name} ({err}): running it on the UI thread");
            match slot.lock().ok().and_then(|mut slot| slot.take()) {
                Some(step) => Source::Stepped(step),
                None => Source::Channel(receiver),
            }
        }
    }
}

/// Runs `step` until done in browser tasks: one step, then the page's turn (drawing, input,
/// finished reads), then the next. One step per task, because steps are sized to take tens of
/// milliseconds already, and two in one task added up: a short step and a what-if replay made
/// one 90-110 ms task. The UI is woken only by progress (at most every
/// [`PROGRESS_REPAINT_INTERVAL`]) and by the result.
#[cfg(target_arch = "wasm32")]
fn steps_in_browser_tasks<T: 'static>(mut step: StepFn<T>, progress: &Arc<Progress>) -> Source<T> {
    let (sender, receiver) = channel();
    let progress = Arc::clone(progress);
    wasm_bindgen_futures::spawn_local(async move {
        loop {
            next_tick().await;
            if let Step::Done(result) = step(&progress) {
                // The job may have been dropped; then nobody wants the result.
                let _ = sender.send(result);
                progress.ctx.request_repaint();
                return;
            }
        }
    });
    Source::Channel(receiver)
}

/// Lets the browser run whatever waits (drawing, input, finished reads) before going on: a
/// message to ourselves, which, unlike `setTimeout(0)`, is not slowed to 4 ms when repeated.
#[cfg(target_arch = "wasm32")]
async fn next_tick() {
    use wasm_bindgen::JsValue;
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
    let _ = wasm_bindgen_futures::JsFuture::from(promise).await;
}

/// `vramscope: <name>`, cut to what Linux shows of a thread's name.
#[cfg(not(target_arch = "wasm32"))]
fn thread_name(name: &str) -> String {
    format!("vramscope: {name}").chars().take(40).collect()
}

/// A running job's line: what it does, a bar when it knows how far it got (else how long it has
/// run), and Cancel. Repaints come from the job's progress, not from an animation.
pub fn job_progress_ui(ui: &mut egui::Ui, title: &str, progress: &Progress) {
    ui.horizontal(|ui| {
        ui.label(title);
        let stage = progress.stage();
        if !stage.is_empty() {
            ui.label(egui::RichText::new(stage).weak());
        }
        if progress.is_cancelled() {
            ui.label("cancelling…");
            return;
        }
        let elapsed = format!("{:.0} s", progress.elapsed().as_secs_f32());
        match progress.fraction() {
            Some(fraction) => {
                ui.add(
                    egui::ProgressBar::new(fraction)
                        .desired_width(240.0)
                        .show_percentage(),
                );
            }
            None => {
                ui.label(egui::RichText::new(format!("working… {elapsed}")).weak());
            }
        }
        if ui.button("Cancel").clicked() {
            progress.cancel();
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Polls until the job finishes (jobs run on threads here).
    fn wait<T>(job: &mut Job<T>) -> Poll<T> {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            match job.poll() {
                Poll::Running => {
                    assert!(std::time::Instant::now() < deadline, "job did not finish");
                    std::thread::sleep(Duration::from_millis(2));
                }
                done => return done,
            }
        }
    }

    #[test]
    fn a_spawned_job_hands_out_its_result_once() {
        let runner = Runner::new(egui::Context::default());
        let mut job = runner.spawn("adding", |progress| {
            progress.set_stage("adding");
            progress.set_fraction(0.5);
            2 + 2
        });
        assert_eq!(wait(&mut job), Poll::Done(4));
        assert!(!job.is_running());
        assert_eq!(job.poll(), Poll::Running, "the result is handed out once");
        assert_eq!(job.progress().fraction(), Some(0.5));
        assert_eq!(job.progress().stage(), "adding");
    }

    #[test]
    fn a_stepped_job_runs_until_done_and_sees_cancel() {
        let runner = Runner::new(egui::Context::default());
        let mut count = 0u32;
        let mut job = runner.spawn_stepped("counting", move |progress| {
            count += 1;
            progress.set_fraction(count as f32 / 100.0);
            if count == 100 {
                Step::Done(count)
            } else {
                Step::Pending
            }
        });
        assert_eq!(wait(&mut job), Poll::Done(100));

        let (release, released) = channel::<()>();
        let mut endless = runner.spawn_stepped("waiting for cancel", move |progress| {
            let _ = released.recv_timeout(Duration::from_millis(1));
            if progress.is_cancelled() {
                Step::Done("stopped")
            } else {
                Step::Pending
            }
        });
        assert_eq!(endless.poll(), Poll::Running);
        endless.progress().cancel();
        assert_eq!(wait(&mut endless), Poll::Done("stopped"));
        drop(release);
    }

    #[test]
    fn a_job_whose_thread_panics_is_reported_lost() {
        let runner = Runner::new(egui::Context::default());
        let mut job = runner.spawn("panicking on purpose", |_| -> u32 {
            panic!("the work failed");
        });
        match wait(&mut job) {
            Poll::Lost(message) => assert!(message.contains("panicking on purpose"), "{message}"),
            other => panic!("expected a lost job, got {other:?}"),
        }
    }

    #[test]
    fn dropping_a_job_asks_its_work_to_stop() {
        let runner = Runner::new(egui::Context::default());
        let (sender, stopped) = channel();
        let job = runner.spawn_stepped("until dropped", move |progress| {
            std::thread::sleep(Duration::from_millis(1));
            if progress.is_cancelled() {
                let _ = sender.send(());
                Step::Done(())
            } else {
                Step::Pending
            }
        });
        drop(job);
        assert!(stopped.recv_timeout(Duration::from_secs(10)).is_ok());
    }

    #[test]
    fn progress_wakes_the_ui_later_and_a_result_at_once() {
        let ctx = egui::Context::default();
        let delays: Arc<Mutex<Vec<Duration>>> = Arc::default();
        let seen = Arc::clone(&delays);
        ctx.set_request_repaint_callback(move |info| {
            if let Ok(mut seen) = seen.lock() {
                seen.push(info.delay);
            }
        });
        let progress = Progress::new(ctx.clone());
        for i in 0..1000 {
            progress.set_fraction(i as f32 / 1000.0);
        }
        let after_progress = delays.lock().map(|d| d.clone()).unwrap_or_default();
        assert!(!after_progress.is_empty(), "progress wakes the UI");
        assert!(
            after_progress
                .iter()
                .all(|delay| *delay >= PROGRESS_REPAINT_INTERVAL),
            "progress never asks for an immediate repaint: {after_progress:?}"
        );
        let runner = Runner::new(ctx);
        let mut job = runner.spawn("done", |_| ());
        assert_eq!(wait(&mut job), Poll::Done(()));
        let all = delays.lock().map(|d| d.clone()).unwrap_or_default();
        assert_eq!(
            all.last(),
            Some(&Duration::ZERO),
            "a result repaints at once"
        );
    }
}
