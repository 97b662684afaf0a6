//! The job as a child process: its own process group (so that a signal reaches every process
//! it starts, `torchrun`'s workers too), its output read through pipes and passed on as it comes
//! (the last lines kept for the log), its input passed on, and the processes of its group
//! collected while it runs.

use std::collections::{BTreeSet, VecDeque};
use std::io::{BufRead as _, BufReader, Read, Write as _};
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use vramscope_core::model::run::RunExit;

use super::{LineSink, RunOptions};

/// The last signal vramscope received and has not forwarded yet (0: none). Written by the
/// signal handler, which may only do async-signal-safe work: one atomic store.
static PENDING_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(signal: libc::c_int) {
    PENDING_SIGNAL.store(signal, Ordering::SeqCst);
}

/// Passes the signals vramscope receives (SIGINT, SIGTERM, SIGHUP) to the job's process group
/// while a job runs; between jobs it only remembers that the user asked to stop.
#[derive(Clone, Debug, Default)]
pub struct Forwarder {
    /// The job's process group (its pid), 0 while none runs.
    group: Arc<AtomicI32>,
    interrupted: Arc<AtomicBool>,
}

impl Forwarder {
    /// Signals now go to `pid`'s process group.
    pub fn attach(&self, pid: u32) {
        self.group.store(pid as i32, Ordering::SeqCst);
    }

    /// No job runs.
    pub fn detach(&self) {
        self.group.store(0, Ordering::SeqCst);
    }

    /// Whether a signal came (the user pressed Ctrl+C or something asked vramscope to stop).
    pub fn interrupted(&self) -> bool {
        self.interrupted.load(Ordering::SeqCst)
    }

    /// The Stop button of the app: Ctrl+C for the job, as the terminal would send it (SIGINT to
    /// its process group), and no more candidates tried after it.
    pub fn interrupt(&self) {
        self.forward(libc::SIGINT);
    }

    /// For a job that ignores [`Self::interrupt`]: SIGKILL to its process group.
    pub fn kill(&self) {
        self.forward(libc::SIGKILL);
    }

    fn forward(&self, signal: i32) {
        self.interrupted.store(true, Ordering::SeqCst);
        let group = self.group.load(Ordering::SeqCst);
        if group > 0 {
            // SAFETY: kill has no memory-safety preconditions; a negative pid names the group.
            unsafe {
                libc::kill(-group, signal);
            }
        }
    }
}

/// Installs the handlers and the thread that forwards what they catch to `forwarder`'s job.
pub fn forward_signals_to(forwarder: &Forwarder) {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            libc::signal(signal, on_signal as *const () as libc::sighandler_t);
        }
    }
    let forwarder = forwarder.clone();
    let spawned = std::thread::Builder::new()
        .name("vramscope-run-signals".to_owned())
        .spawn(move || {
            loop {
                let signal = PENDING_SIGNAL.swap(0, Ordering::SeqCst);
                if signal != 0 {
                    forwarder.forward(signal);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
    if let Err(e) = spawned {
        log::error!("signals will not reach the job: {e}");
    }
}

/// The last lines of the job's output, both streams in the order they came.
struct Tail {
    lines: VecDeque<String>,
    capacity: usize,
}

impl Tail {
    fn push(&mut self, line: String) {
        if self.lines.len() == self.capacity {
            self.lines.pop_front();
        }
        self.lines.push_back(line);
    }
}

/// How a job ended.
pub(crate) struct Ended {
    pub exit: RunExit,
    pub tail: Vec<String>,
    pub pids: Vec<u32>,
    /// It was stopped at the budget.
    pub budget_hit: bool,
    /// It was stopped because the caller's condition held.
    pub stopped_early: bool,
}

/// A running job.
pub(crate) struct Job {
    child: Child,
    tail: Arc<Mutex<Tail>>,
    pumps: Vec<std::thread::JoinHandle<()>>,
    pids: Arc<Mutex<BTreeSet<u32>>>,
    watching: Arc<AtomicBool>,
}

/// Copies `from` to our stdout or stderr (when `echo`) as it comes, and its lines into `tail`
/// and to `output` (the app's run panel).
fn pump(
    from: impl Read + Send + 'static,
    to_stderr: bool,
    echo: bool,
    output: Option<LineSink>,
    tail: Arc<Mutex<Tail>>,
) -> Option<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("vramscope-run-output".to_owned())
        .spawn(move || {
            let mut reader = BufReader::new(from);
            let mut line = Vec::new();
            loop {
                line.clear();
                match reader.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                if echo {
                    // The job's output goes on even when ours is closed.
                    let _ = if to_stderr {
                        std::io::stderr().write_all(&line)
                    } else {
                        let mut out = std::io::stdout().lock();
                        out.write_all(&line).and_then(|()| out.flush())
                    };
                }
                let text = String::from_utf8_lossy(&line)
                    .trim_end_matches(['\n', '\r'])
                    .to_owned();
                if let Some(output) = &output {
                    output.send(&text);
                }
                if let Ok(mut tail) = tail.lock() {
                    tail.push(text);
                }
            }
        })
        .ok()
}

/// The process group of `pid`, from `/proc/PID/stat` (field 5).
fn process_group(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: read after its end.
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(2)?.parse().ok()
}

/// Every process whose group is `group`.
fn group_members(group: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| process_group(*pid) == Some(group))
        .collect()
}

impl Job {
    /// Starts `options.command` (`program`, then its arguments) in a process group of its own,
    /// in `options.working_dir`, with `env` added.
    pub fn spawn(
        program: &str,
        options: &RunOptions,
        env: &[(String, String)],
    ) -> std::io::Result<Job> {
        let echo = options.echo;
        let mut command = Command::new(program);
        command
            .args(options.command.iter().skip(1))
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(if echo { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        if let Some(dir) = &options.working_dir {
            command.current_dir(dir);
        }
        // A shell starts background commands with SIGINT ignored, and an ignored signal stays
        // ignored across exec: the job would never see the Ctrl+C that vramscope forwards (Stop
        // in the app, Ctrl+C in the terminal). The job has a process group of its own, so the
        // default disposition exposes it to nothing but what vramscope forwards.
        // SAFETY: only async-signal-safe calls may run between fork and exec; signal(2) is one.
        unsafe {
            command.pre_exec(|| {
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                Ok(())
            });
        }
        let mut child = command.spawn()?;
        let tail = Arc::new(Mutex::new(Tail {
            lines: VecDeque::new(),
            capacity: options.log_lines.max(1),
        }));
        let mut pumps = Vec::new();
        if let Some(out) = child.stdout.take() {
            let output = options.output.clone();
            pumps.extend(pump(out, false, echo, output, Arc::clone(&tail)));
        }
        if let Some(err) = child.stderr.take() {
            let output = options.output.clone();
            pumps.extend(pump(err, true, echo, output, Arc::clone(&tail)));
        }
        if let Some(mut input) = child.stdin.take() {
            // Not joined: it may wait on our stdin after the job ended; the process exits anyway.
            let _ = std::thread::Builder::new()
                .name("vramscope-run-input".to_owned())
                .spawn(move || {
                    let _ = std::io::copy(&mut std::io::stdin().lock(), &mut input);
                });
        }
        let group = child.id();
        let pids = Arc::new(Mutex::new(BTreeSet::from([group])));
        let watching = Arc::new(AtomicBool::new(true));
        let (thread_pids, thread_watching) = (Arc::clone(&pids), Arc::clone(&watching));
        let _ = std::thread::Builder::new()
            .name("vramscope-run-pids".to_owned())
            .spawn(move || {
                while thread_watching.load(Ordering::Relaxed) {
                    let members = group_members(group);
                    if let Ok(mut pids) = thread_pids.lock() {
                        pids.extend(members);
                    }
                    std::thread::sleep(Duration::from_millis(250));
                }
            });
        Ok(Job {
            child,
            tail,
            pumps,
            pids,
            watching,
        })
    }

    /// The job's pid (and process group).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` to the job's process group.
    fn signal_group(&self, signal: i32) {
        // SAFETY: kill has no memory-safety preconditions; a negative pid names the group.
        unsafe {
            libc::kill(-(self.child.id() as i32), signal);
        }
    }

    /// Waits for the job to end. After `budget` (from `started`), or as soon as `stop_now`
    /// says so, its group gets SIGTERM, then SIGKILL 5 s later.
    pub fn wait(
        mut self,
        budget: Option<Duration>,
        started: Instant,
        stop_now: &dyn Fn() -> bool,
    ) -> Ended {
        let mut budget_hit = false;
        let mut stopped_early = false;
        let mut terminated_at: Option<Instant> = None;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) => {}
                Err(_) => break None,
            }
            if terminated_at.is_none() {
                let over_budget = budget.is_some_and(|b| started.elapsed() >= b);
                let stop = !over_budget && stop_now();
                if over_budget || stop {
                    budget_hit = over_budget;
                    stopped_early = stop;
                    self.signal_group(libc::SIGTERM);
                    terminated_at = Some(Instant::now());
                }
            } else if terminated_at.is_some_and(|t| t.elapsed() >= Duration::from_secs(5)) {
                self.signal_group(libc::SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        self.watching.store(false, Ordering::Relaxed);
        if budget_hit || stopped_early {
            // What the job started may outlive it: the whole group goes.
            self.signal_group(libc::SIGKILL);
        }
        // The pipes close when every process holding them ended; one the job left running in
        // the background may hold them for ever, so wait a moment, not longer.
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.pumps.iter().any(|p| !p.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        for pump in self.pumps.drain(..).filter(|p| p.is_finished()) {
            let _ = pump.join();
        }
        let tail = self
            .tail
            .lock()
            .map(|t| t.lines.iter().cloned().collect())
            .unwrap_or_default();
        let pids = self
            .pids
            .lock()
            .map(|p| p.iter().copied().collect())
            .unwrap_or_default();
        let exit = match status {
            Some(status) => super::run_exit(status),
            None => RunExit {
                code: None,
                signal: None,
                status: 1,
            },
        };
        Ended {
            exit,
            tail,
            pids,
            budget_hit,
            stopped_early,
        }
    }
}
