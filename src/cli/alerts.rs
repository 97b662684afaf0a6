//! `vramscope alerts`: writes Prometheus alerting rules for the metrics of `vramscope exporter`,
//! dcgm-exporter or nvitop-exporter; and the `--alert-exec`/`--alert-webhook` options that
//! `record` and `exporter` share (the same conditions, evaluated live on the sampler's readings).

use std::path::PathBuf;
use std::process::ExitCode;

use vramscope_core::diagnose::alerts::{
    self, AlertChange, AlertState, LiveAlertSettings, LiveAlerts,
};
use vramscope_core::model::{DeviceFacts, SampleBatch, now_unix_ms};
use vramscope_core::report::alert_rules::{self, Flavour, RulesOptions};
use vramscope_core::source::prometheus::api::RangeApi;
use vramscope_gpu::alert_hooks::{AlertHooks, HookTargets};

#[derive(Debug, clap::Args)]
pub struct AlertsArgs {
    /// Whose metric names to write the rules for: vramscope (vramscope exporter), dcgm
    /// (dcgm-exporter) or nvitop (nvitop-exporter). Default: detected from --prometheus, else
    /// vramscope.
    #[arg(long, value_name = "NAME", value_parser = ["vramscope", "dcgm", "nvitop"])]
    pub metrics: Option<String>,
    /// Memory threshold of GpuMemoryHigh, in percent of the GPU's memory (1 to 100).
    #[arg(long, value_name = "PCT", default_value_t = alerts::DEFAULT_THRESHOLD_PCT, value_parser = parse_threshold_pct)]
    pub threshold: f64,
    /// Write the rules to this file instead of standard output.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Replace FILE if it already exists.
    #[arg(long)]
    pub force: bool,
    /// The exporter's Prometheus job, as a regular expression, for GpuExporterDown [default:
    /// .*<metrics>.*].
    #[arg(long, value_name = "REGEX")]
    pub job: Option<String>,
    /// Base URL of the runbook links (`#<alert name>` is appended).
    #[arg(long, value_name = "URL", default_value = alert_rules::DEFAULT_RUNBOOK_URL)]
    pub runbook_url: String,
    /// Every rule's `for:` replaced by this duration in whole seconds (e.g. 0s: for testing a
    /// pipeline end to end).
    #[arg(long = "for", value_name = "DUR", value_parser = parse_hold)]
    pub hold: Option<u32>,
    /// Detect the exporters from this server's metric names (and how to reach it).
    #[command(flatten)]
    pub prometheus: super::prometheus::PrometheusArgs,
}

/// `--threshold`/`--alert-threshold`: a percentage from 1 to 100, refused with the range.
pub fn parse_threshold_pct(text: &str) -> Result<f64, String> {
    let percent: f64 = text
        .trim()
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("'{text}' is not a percentage (give 1 to 100)"))?;
    alerts::threshold_fraction(percent)?;
    Ok(percent)
}

/// `--for`: `0s` or a duration (`30s`, `5m`), in whole seconds.
fn parse_hold(text: &str) -> Result<u32, String> {
    if matches!(text.trim(), "0" | "0s" | "0m") {
        return Ok(0);
    }
    let ms = super::prometheus::parse_duration_ms(text)?;
    u32::try_from(ms / 1000).map_err(|_| format!("'{text}' is too long"))
}

pub fn run(args: AlertsArgs) -> ExitCode {
    if let Some(out) = &args.out
        && let Some(refused) = super::refuse_output(out, args.force, "vramscope-rules.yml")
    {
        return refused;
    }
    let flavours = match flavours(&args) {
        Ok(flavours) => flavours,
        Err(err) => return super::fail(err),
    };
    let all: Vec<RulesOptions> = flavours
        .iter()
        .map(|&flavour| RulesOptions {
            flavour,
            threshold_fraction: args.threshold / 100.0,
            job_regex: args.job.clone(),
            runbook_url: args.runbook_url.trim_end_matches('/').to_owned(),
            prometheus_url: None,
            hold_override_seconds: args.hold,
        })
        .collect();
    let text = alert_rules::render_all(&all);
    match &args.out {
        Some(out) => {
            if let Err(err) = std::fs::write(out, text) {
                return super::fail(format!("cannot write {}: {err}", out.display()));
            }
            let names: Vec<&str> = flavours.iter().map(|f| f.exporter()).collect();
            eprintln!(
                "vramscope: wrote alerting rules for {} to {} (check: promtool check rules {})",
                names.join(" and "),
                out.display(),
                out.display()
            );
        }
        None => print!("{text}"),
    }
    ExitCode::SUCCESS
}

/// The flavours asked for: `--metrics`, else those whose metrics the `--prometheus` server holds
/// (the last day), else `vramscope`.
fn flavours(args: &AlertsArgs) -> Result<Vec<Flavour>, String> {
    if let Some(key) = &args.metrics {
        return Flavour::from_key(key)
            .map(|f| vec![f])
            .ok_or_else(|| format!("--metrics {key}: give vramscope, dcgm or nvitop"));
    }
    let Some(url) = &args.prometheus.prometheus else {
        return Ok(vec![Flavour::Vramscope]);
    };
    let client = args.prometheus.client()?;
    let now = now_unix_ms();
    let held = client
        .metric_names(now - 86_400_000, now, None)
        .map_err(|err| err.to_string())?;
    let found = Flavour::detect(held.iter().map(String::as_str));
    if found.is_empty() {
        return Err(format!(
            "{url} holds none of {} (no GPU exporter scraped in the last day); give --metrics vramscope|dcgm|nvitop",
            Flavour::ALL.map(|f| f.used_metric()).join(", ")
        ));
    }
    Ok(found)
}

/// `--alert-exec`, `--alert-webhook` and `--alert-threshold` of `record` and `exporter`.
#[derive(Debug, Clone, clap::Args)]
pub struct AlertHookArgs {
    /// Run this shell command for every alert that fires or resolves (memory above the
    /// threshold, full within the hour, Xid, ECC, row remap, lost GPU, throttling): the alert is
    /// JSON on its standard input and VRAMSCOPE_ALERT_* variables.
    #[arg(long, value_name = "CMD")]
    pub alert_exec: Option<String>,
    /// POST every alert as JSON (with a `text` field, as Slack and Teams webhooks expect) to URL.
    #[arg(long, value_name = "URL")]
    pub alert_webhook: Option<String>,
    /// Memory threshold of the alerts, in percent of the GPU's memory (1 to 100).
    #[arg(long, value_name = "PCT", default_value_t = alerts::DEFAULT_THRESHOLD_PCT, value_parser = parse_threshold_pct)]
    pub alert_threshold: f64,
}

impl Default for AlertHookArgs {
    fn default() -> Self {
        AlertHookArgs {
            alert_exec: None,
            alert_webhook: None,
            alert_threshold: alerts::DEFAULT_THRESHOLD_PCT,
        }
    }
}

/// The live alert conditions of a headless command, and where they go.
pub struct LiveHooks {
    alerts: LiveAlerts,
    hooks: Option<AlertHooks>,
}

impl LiveHooks {
    /// Watches `devices` of `host`; with neither --alert-exec nor --alert-webhook the conditions
    /// are still evaluated (the exporter's time-to-full gauge needs them) but nothing is sent.
    pub fn new(
        args: &AlertHookArgs,
        host: &str,
        devices: &[DeviceFacts],
        diagnose_hint: &str,
    ) -> Result<Self, String> {
        if let Some(url) = &args.alert_webhook
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(format!(
                "--alert-webhook {url}: give an http:// or https:// URL"
            ));
        }
        let targets = HookTargets {
            exec: args.alert_exec.clone(),
            webhook: args.alert_webhook.clone(),
        };
        let hooks = if targets.is_empty() {
            None
        } else {
            let report = Box::new(|line: String| eprintln!("vramscope: alert: {line}"));
            Some(
                AlertHooks::spawn(targets, report)
                    .map_err(|err| format!("cannot start alert delivery: {err}"))?,
            )
        };
        let settings = LiveAlertSettings {
            threshold_fraction: args.alert_threshold / 100.0,
            diagnose_hint: diagnose_hint.to_owned(),
        };
        Ok(LiveHooks {
            alerts: LiveAlerts::new(settings, host, devices),
            hooks,
        })
    }

    /// Evaluates a batch; alerts that fire or resolve are printed and delivered.
    pub fn apply(&mut self, batch: &SampleBatch) -> Vec<AlertChange> {
        let changes = self.alerts.apply(batch);
        if let Some(hooks) = &self.hooks
            && !changes.is_empty()
        {
            for change in &changes {
                let word = match change.state {
                    AlertState::Firing => change.key.severity.as_str(),
                    AlertState::Resolved => "resolved",
                };
                eprintln!("vramscope: alert {word}: {}", change.summary);
            }
            hooks.send(&changes);
        }
        changes
    }

    /// The conditions' state (the time to full per GPU).
    pub fn alerts(&self) -> &LiveAlerts {
        &self.alerts
    }
}
