//! Delivering live alerts from headless commands (`vramscope record`/`exporter` with
//! `--alert-exec CMD` and `--alert-webhook URL`): each [`AlertChange`] of
//! [`vramscope_core::diagnose::alerts::LiveAlerts`] runs the command and/or is POSTed as JSON.
//!
//! Delivery runs on its own thread and never holds up sampling or recording: the caller's
//! [`AlertHooks::send`] only queues (a full queue drops, and says so). A webhook that cannot be
//! reached or a command that fails is reported and retried with back-off ([`RETRY_DELAYS`]),
//! then given up; [`MAX_PER_MINUTE`] caps what a storm of alerts can send.
//!
//! The webhook body is one JSON object with a `text` field (what Slack's and Microsoft Teams'
//! incoming webhooks show) and the alert's fields; the command gets the same JSON on standard
//! input and the fields as `VRAMSCOPE_ALERT_*` environment variables.

use std::collections::VecDeque;
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vramscope_core::diagnose::alerts::{AlertChange, AlertState};

/// Waits before the retries of a failed delivery; after the last, it is given up.
pub const RETRY_DELAYS: [Duration; 5] = [
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(5),
    Duration::from_secs(15),
    Duration::from_secs(60),
];
/// Deliveries per minute at most (each alert is already told once per episode).
pub const MAX_PER_MINUTE: usize = 30;
/// How long a webhook request or a command may take.
pub const DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);
/// Alerts queued at most while delivery is behind.
const QUEUE: usize = 256;

/// Where alerts go.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HookTargets {
    /// A shell command (`sh -c`), run once per alert.
    pub exec: Option<String>,
    /// A URL that gets a JSON POST per alert.
    pub webhook: Option<String>,
}

impl HookTargets {
    /// Whether there is anywhere to deliver to.
    pub fn is_empty(&self) -> bool {
        self.exec.is_none() && self.webhook.is_none()
    }
}

/// What happened to deliveries, for the caller's messages and tests.
pub type Report = Box<dyn Fn(String) + Send>;

/// The delivery thread; dropping it delivers what is due and stops.
pub struct AlertHooks {
    queue: Option<SyncSender<AlertChange>>,
    worker: Option<JoinHandle<()>>,
    report: std::sync::Arc<std::sync::Mutex<Report>>,
}

impl AlertHooks {
    /// Starts delivering to `targets`; problems are told to `report` (a line each).
    pub fn spawn(targets: HookTargets, report: Report) -> std::io::Result<Self> {
        let (queue, incoming) = mpsc::sync_channel(QUEUE);
        let report = std::sync::Arc::new(std::sync::Mutex::new(report));
        let worker_report = std::sync::Arc::clone(&report);
        let worker = std::thread::Builder::new()
            .name("vramscope-alert-hooks".to_owned())
            .spawn(move || {
                let tell = |line: String| {
                    if let Ok(report) = worker_report.lock() {
                        report(line);
                    }
                };
                deliver_loop(&targets, &incoming, &tell);
            })?;
        Ok(AlertHooks {
            queue: Some(queue),
            worker: Some(worker),
            report,
        })
    }

    /// Queues alerts for delivery; never waits.
    pub fn send(&self, changes: &[AlertChange]) {
        let Some(queue) = &self.queue else {
            return;
        };
        for change in changes {
            match queue.try_send(change.clone()) {
                Ok(()) => {}
                Err(TrySendError::Full(dropped)) => {
                    if let Ok(report) = self.report.lock() {
                        report(format!(
                            "alert not delivered (delivery is behind, {QUEUE} waiting): {}",
                            dropped.summary
                        ));
                    }
                }
                Err(TrySendError::Disconnected(_)) => {}
            }
        }
    }
}

impl Drop for AlertHooks {
    fn drop(&mut self) {
        self.queue = None;
        if let Some(worker) = self.worker.take()
            && worker.join().is_err()
        {
            log::error!("the alert delivery thread panicked");
        }
    }
}

/// One delivery to one target, with its attempts so far.
struct Pending {
    change: AlertChange,
    to_exec: bool,
    attempts: usize,
    due: Instant,
}

fn deliver_loop(targets: &HookTargets, incoming: &Receiver<AlertChange>, tell: &dyn Fn(String)) {
    let mut pending: VecDeque<Pending> = VecDeque::new();
    let mut sent: VecDeque<Instant> = VecDeque::new();
    let mut open = true;
    while open || !pending.is_empty() {
        let now = Instant::now();
        let wait = pending
            .iter()
            .map(|p| p.due.saturating_duration_since(now))
            .min()
            .unwrap_or(Duration::from_secs(3600));
        if open {
            match incoming.recv_timeout(wait) {
                Ok(change) => {
                    for to_exec in [true, false] {
                        let wanted = if to_exec {
                            &targets.exec
                        } else {
                            &targets.webhook
                        };
                        if wanted.is_some() {
                            pending.push_back(Pending {
                                change: change.clone(),
                                to_exec,
                                attempts: 0,
                                due: Instant::now(),
                            });
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    open = false;
                    // Stopping: what waits for a retry is given up, what is due now goes out.
                    pending.retain(|p| p.attempts == 0);
                }
            }
        }
        let now = Instant::now();
        let Some(index) = pending.iter().position(|p| p.due <= now) else {
            continue;
        };
        let Some(mut item) = pending.remove(index) else {
            continue;
        };
        while sent
            .front()
            .is_some_and(|t| now.duration_since(*t) > Duration::from_secs(60))
        {
            sent.pop_front();
        }
        if sent.len() >= MAX_PER_MINUTE {
            tell(format!(
                "alert not delivered (more than {MAX_PER_MINUTE} a minute): {}",
                item.change.summary
            ));
            continue;
        }
        sent.push_back(now);
        let result = if item.to_exec {
            targets
                .exec
                .as_deref()
                .map(|cmd| run_command(cmd, &item.change))
        } else {
            targets
                .webhook
                .as_deref()
                .map(|url| post(url, &item.change))
        };
        if let Some(Err(problem)) = result {
            item.attempts += 1;
            let target = if item.to_exec {
                "--alert-exec"
            } else {
                "--alert-webhook"
            };
            match RETRY_DELAYS.get(item.attempts - 1) {
                Some(delay) if open => {
                    tell(format!(
                        "{target}: {problem}; retrying in {} s ({})",
                        delay.as_secs(),
                        item.change.summary
                    ));
                    item.due = Instant::now() + *delay;
                    pending.push_back(item);
                }
                _ => tell(format!(
                    "{target}: {problem}; given up after {} attempts ({})",
                    item.attempts, item.change.summary
                )),
            }
        }
    }
}

/// The JSON of an alert: `text` for chat webhooks, then its fields.
pub fn alert_json(change: &AlertChange) -> serde_json::Value {
    let state = change.state.as_str();
    let icon = match (change.state, change.key.severity) {
        (AlertState::Resolved, _) => "resolved",
        (_, severity) => severity.as_str(),
    };
    serde_json::json!({
        "text": format!("[{icon}] {}: {}", change.summary, change.description),
        "status": state,
        "alertname": change.key.name.as_str(),
        "severity": change.key.severity.as_str(),
        "host": change.host,
        "gpu": change.key.device_index,
        "uuid": change.uuid,
        "model": change.model,
        "detail": change.key.detail,
        "summary": change.summary,
        "description": change.description,
        "value": change.value,
        "started_at_ms": change.started_ms,
        "at_ms": change.t_ms,
    })
}

fn post(url: &str, change: &AlertChange) -> Result<(), String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(DELIVERY_TIMEOUT))
        .http_status_as_error(false)
        .user_agent(format!("vramscope/{}", env!("CARGO_PKG_VERSION")))
        .build()
        .into();
    let body = alert_json(change).to_string();
    match agent
        .post(url)
        .header("Content-Type", "application/json")
        .send(body.as_bytes())
    {
        Ok(response) if response.status().is_success() => Ok(()),
        Ok(response) => Err(format!("{url} answered HTTP {}", response.status())),
        Err(err) => Err(format!("{url}: {err}")),
    }
}

fn run_command(command: &str, change: &AlertChange) -> Result<(), String> {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .envs(environment(change))
        .spawn()
        .map_err(|err| format!("cannot start `sh -c {command}`: {err}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A command that does not read its input is fine.
        let _ = stdin.write_all(alert_json(change).to_string().as_bytes());
    }
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(status)) => return Err(format!("`{command}` failed ({status})")),
            Ok(None) if started.elapsed() > DELIVERY_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "`{command}` took more than {} s and was stopped",
                    DELIVERY_TIMEOUT.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(err) => return Err(format!("`{command}`: {err}")),
        }
    }
}

/// `VRAMSCOPE_ALERT_*` variables of an alert.
fn environment(change: &AlertChange) -> Vec<(&'static str, String)> {
    vec![
        ("VRAMSCOPE_ALERT_NAME", change.key.name.as_str().to_owned()),
        ("VRAMSCOPE_ALERT_STATE", change.state.as_str().to_owned()),
        (
            "VRAMSCOPE_ALERT_SEVERITY",
            change.key.severity.as_str().to_owned(),
        ),
        ("VRAMSCOPE_ALERT_HOST", change.host.clone()),
        ("VRAMSCOPE_ALERT_GPU", change.key.device_index.to_string()),
        ("VRAMSCOPE_ALERT_UUID", change.uuid.clone()),
        ("VRAMSCOPE_ALERT_SUMMARY", change.summary.clone()),
        ("VRAMSCOPE_ALERT_DESCRIPTION", change.description.clone()),
        (
            "VRAMSCOPE_ALERT_VALUE",
            change.value.map(|v| v.to_string()).unwrap_or_default(),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use vramscope_core::diagnose::Severity;
    use vramscope_core::diagnose::alerts::{AlertKey, AlertName};

    fn change(state: AlertState) -> AlertChange {
        AlertChange {
            key: AlertKey {
                name: AlertName::GpuMemoryHigh,
                severity: Severity::Warning,
                device_index: 0,
                detail: None,
            },
            state,
            t_ms: 1,
            started_ms: 1,
            host: "node-a".into(),
            uuid: "GPU-1".into(),
            model: "NVIDIA H200".into(),
            summary: "GPU memory 95% full on node-a GPU 0".into(),
            description: "More than 90%.".into(),
            value: Some(0.95),
        }
    }

    fn lines() -> (Arc<Mutex<Vec<String>>>, Report) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        (
            seen,
            Box::new(move |line| {
                if let Ok(mut lines) = sink.lock() {
                    lines.push(line);
                }
            }),
        )
    }

    #[test]
    fn the_command_gets_the_alert_in_its_environment_and_on_stdin() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let out = dir.path().join("got");
        let (problems, report) = lines();
        let hooks = AlertHooks::spawn(
            HookTargets {
                exec: Some(format!(
                    "{{ echo \"$VRAMSCOPE_ALERT_NAME $VRAMSCOPE_ALERT_STATE $VRAMSCOPE_ALERT_GPU\"; cat; }} >> '{}'",
                    out.display()
                )),
                webhook: None,
            },
            report,
        )
        .expect("thread");
        hooks.send(&[change(AlertState::Firing), change(AlertState::Resolved)]);
        drop(hooks);
        let got = std::fs::read_to_string(&out).expect("the command ran");
        assert!(got.starts_with("GpuMemoryHigh firing 0\n{"), "{got}");
        assert!(got.contains("GpuMemoryHigh resolved 0"), "{got}");
        assert!(
            got.contains("\"text\":\"[warning] GPU memory 95% full on node-a GPU 0"),
            "{got}"
        );
        assert!(problems.lock().expect("lock").is_empty());
    }

    #[test]
    fn a_failing_command_and_an_unreachable_webhook_are_reported_not_fatal() {
        let (problems, report) = lines();
        // A port nothing listens on: bind one and let it go.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let hooks = AlertHooks::spawn(
            HookTargets {
                exec: Some("exit 3".into()),
                webhook: Some(format!("http://127.0.0.1:{port}/hook")),
            },
            report,
        )
        .expect("thread");
        hooks.send(&[change(AlertState::Firing)]);
        let deadline = Instant::now() + Duration::from_secs(10);
        while problems.lock().expect("lock").len() < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let got = problems.lock().expect("lock").clone();
        assert!(
            got.iter()
                .any(|l| l.starts_with("--alert-exec: `exit 3` failed")
                    && l.contains("retrying in 1 s")),
            "{got:?}"
        );
        assert!(
            got.iter()
                .any(|l| l.starts_with("--alert-webhook: http://127.0.0.1:")
                    && l.contains("retrying")),
            "{got:?}"
        );
        drop(hooks);
    }
}
