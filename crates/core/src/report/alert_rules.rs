//! Prometheus alerting rules (`vramscope alerts`): the alert conditions of
//! [`crate::diagnose::alerts`] written as PromQL for the metric names and labels of `vramscope
//! exporter`, dcgm-exporter or nvitop-exporter.
//!
//! Every flavour has the same groups, alert names, severities, `for:` and annotations; only
//! metric and label names differ, and rules whose signal an exporter does not export are left out
//! (the file's header says which and why). The committed `assets/prometheus/example-rules-*.yml`
//! are this module's output with the defaults, and `tests/alerts/*.test.yml` unit-test them with
//! promtool.
//!
//! Where an exporter has no time-to-full gauge, a recording rule computes it in PromQL from the
//! same ideas as [`crate::diagnose::growth`]: the floor (lowest reading of each
//! [`alerts::PEAK_WINDOW_SECONDS`]) over [`alerts::GROWTH_WINDOW_SECONDS`], its slope, at least
//! [`growth::MIN_RISES`] rises of more than [`growth::RISE_TOLERANCE_BYTES`], still rising, and the
//! headroom counted from the recent peak.

use std::fmt::Write as _;

use crate::diagnose::Severity;
use crate::diagnose::alerts::{self, AlertName, AlertRule, RULES};
use crate::diagnose::growth;
use crate::source::prometheus::exposition::names;

/// Whose metric names the rules are written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavour {
    /// `vramscope exporter` (`vramscope_gpu_*`, bytes).
    Vramscope,
    /// NVIDIA's dcgm-exporter (`DCGM_FI_DEV_*`, MiB).
    Dcgm,
    /// nvitop-exporter (`gpu_memory_*_MiB`).
    Nvitop,
}

impl Flavour {
    /// Every flavour, in the order `--metrics` lists them.
    pub const ALL: [Flavour; 3] = [Flavour::Vramscope, Flavour::Dcgm, Flavour::Nvitop];

    /// The `--metrics` value (and the `metrics` label of every alert).
    pub fn key(self) -> &'static str {
        match self {
            Flavour::Vramscope => "vramscope",
            Flavour::Dcgm => "dcgm",
            Flavour::Nvitop => "nvitop",
        }
    }

    /// The flavour of a `--metrics` value.
    pub fn from_key(key: &str) -> Option<Flavour> {
        Flavour::ALL.into_iter().find(|f| f.key() == key)
    }

    /// The exporter's name, for people.
    pub fn exporter(self) -> &'static str {
        match self {
            Flavour::Vramscope => "vramscope exporter",
            Flavour::Dcgm => "dcgm-exporter",
            Flavour::Nvitop => "nvitop-exporter",
        }
    }

    /// The metric of used memory: the one every flavour's GPU has (detection, absence).
    pub fn used_metric(self) -> &'static str {
        self.names().used
    }

    /// The flavours whose memory metric is among `metric_names` (what a server holds).
    pub fn detect<'a>(metric_names: impl IntoIterator<Item = &'a str> + Clone) -> Vec<Flavour> {
        Flavour::ALL
            .into_iter()
            .filter(|f| {
                metric_names
                    .clone()
                    .into_iter()
                    .any(|n| n == f.used_metric())
            })
            .collect()
    }

    fn names(self) -> FlavourNames {
        match self {
            Flavour::Vramscope => FlavourNames {
                used: names::MEMORY_USED_BYTES,
                free: names::MEMORY_FREE_BYTES,
                total: Some(names::MEMORY_TOTAL_BYTES),
                bytes_per_unit: 1.0,
                gpu_labels: "Hostname, gpu, UUID, modelName",
                gpu_key: "Hostname, gpu, UUID",
                host: "{{ $labels.Hostname }}",
                gpu: "{{ $labels.gpu }}",
                model: "{{ $labels.modelName }}",
                uuid_label: "UUID",
            },
            Flavour::Dcgm => FlavourNames {
                used: "DCGM_FI_DEV_FB_USED",
                free: "DCGM_FI_DEV_FB_FREE",
                total: None,
                bytes_per_unit: growth::RISE_TOLERANCE_BYTES,
                gpu_labels: "Hostname, hostname, gpu, UUID, GPU_I_ID, modelName",
                gpu_key: "Hostname, hostname, gpu, UUID, GPU_I_ID",
                host: "{{ or $labels.Hostname $labels.hostname }}",
                gpu: "{{ $labels.gpu }}",
                model: "{{ $labels.modelName }}",
                uuid_label: "UUID",
            },
            Flavour::Nvitop => FlavourNames {
                used: "gpu_memory_used_MiB",
                free: "gpu_memory_free_MiB",
                total: Some("gpu_memory_total_MiB"),
                bytes_per_unit: growth::RISE_TOLERANCE_BYTES,
                gpu_labels: "hostname, index, uuid, devicename",
                gpu_key: "hostname, index, uuid",
                host: "{{ $labels.hostname }}",
                gpu: "{{ $labels.index }}",
                model: "{{ $labels.devicename }}",
                uuid_label: "uuid",
            },
        }
    }

    /// Why a rule is not in this flavour's file, or `None` when it is.
    fn missing(self, name: AlertName) -> Option<&'static str> {
        match (self, name) {
            (Flavour::Nvitop, AlertName::GpuXidError) => {
                Some("nvitop-exporter exports no Xid errors.")
            }
            (Flavour::Nvitop, AlertName::GpuEccUncorrectable) => {
                Some("nvitop-exporter exports no ECC counters.")
            }
            (Flavour::Nvitop, AlertName::GpuRowRemapFailure | AlertName::GpuRowRemapPending) => {
                Some("nvitop-exporter exports no row-remapping state.")
            }
            (Flavour::Nvitop, AlertName::GpuThrottled) => {
                Some("nvitop-exporter exports clocks but no clock-event (throttle) reasons.")
            }
            _ => None,
        }
    }
}

/// Metric and label names of a flavour.
struct FlavourNames {
    used: &'static str,
    free: &'static str,
    total: Option<&'static str>,
    /// Bytes in the metrics' unit (1 MiB for MiB metrics): the rise tolerance is 1 MiB.
    bytes_per_unit: f64,
    /// The labels that name a GPU, for `by (…)` (the model included).
    gpu_labels: &'static str,
    /// The labels that identify a GPU, for `on (…)`.
    gpu_key: &'static str,
    host: &'static str,
    gpu: &'static str,
    model: &'static str,
    uuid_label: &'static str,
}

/// What `vramscope alerts` was asked for.
#[derive(Clone, Debug, PartialEq)]
pub struct RulesOptions {
    pub flavour: Flavour,
    /// The memory threshold, 0 to 1 (validated by [`alerts::threshold_fraction`]).
    pub threshold_fraction: f64,
    /// `up{job=~…}` of the exporter-down rule; default `.*<flavour>.*`.
    pub job_regex: Option<String>,
    /// Base of every `runbook_url` (`…#<alert name in lower case>` is appended).
    pub runbook_url: String,
    /// The Prometheus URL descriptions tell `vramscope diagnose --prometheus` to read; default
    /// Prometheus's own `{{ $externalURL }}`.
    pub prometheus_url: Option<String>,
    /// Every rule's `for:` replaced by this many seconds (pipelines' end-to-end tests).
    pub hold_override_seconds: Option<u32>,
}

/// The default base of `runbook_url`: a placeholder (`.example` is reserved), to be replaced
/// with `--runbook-url` by the documentation's real address.
pub const DEFAULT_RUNBOOK_URL: &str = "https://vramscope.example/docs/alerts";

impl RulesOptions {
    /// The defaults for `flavour` (what the committed example files hold).
    pub fn new(flavour: Flavour) -> Self {
        RulesOptions {
            flavour,
            threshold_fraction: alerts::DEFAULT_THRESHOLD_PCT / 100.0,
            job_regex: None,
            runbook_url: DEFAULT_RUNBOOK_URL.to_owned(),
            prometheus_url: None,
            hold_override_seconds: None,
        }
    }
}

/// A Prometheus duration (`0m`, `90s`, `5m`, `1h`, `24h`).
pub fn duration(seconds: u32) -> String {
    if seconds == 0 {
        "0m".to_owned()
    } else if seconds.is_multiple_of(3600) {
        format!("{}h", seconds / 3600)
    } else if seconds.is_multiple_of(60) {
        format!("{}m", seconds / 60)
    } else {
        format!("{seconds}s")
    }
}

/// A duration for people (`5 minutes`, `1 second`, `24 hours`).
fn duration_words(seconds: u32) -> String {
    let (n, unit) = if seconds >= 3600 && seconds.is_multiple_of(3600) {
        (seconds / 3600, "hour")
    } else if seconds >= 60 && seconds.is_multiple_of(60) {
        (seconds / 60, "minute")
    } else {
        (seconds, "second")
    };
    format!("{n} {unit}{}", if n == 1 { "" } else { "s" })
}

/// A number as PromQL and people read it: `0.9`, `3600`, `92.5`.
fn number(value: f64) -> String {
    let text = format!("{value:.6}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// How long a GPU silent now may have been seen before (GpuMetricsMissing's look-back), seconds.
const SEEN_WITHIN_SECONDS: u32 = 86_400;

/// Builds one flavour's expressions and annotation texts.
struct Writer<'a> {
    options: &'a RulesOptions,
    n: FlavourNames,
}

/// One alerting or recording rule, ready to write.
struct RuleText {
    alert: Option<AlertRule>,
    record: Option<String>,
    comment: Option<String>,
    expr: String,
    summary: String,
    description: String,
}

impl Writer<'_> {
    fn hold(&self, rule: &AlertRule) -> u32 {
        self.options
            .hold_override_seconds
            .unwrap_or(rule.hold_seconds)
    }

    fn window(seconds: f64) -> String {
        duration(seconds as u32)
    }

    fn url(&self) -> String {
        self.options
            .prometheus_url
            .clone()
            .unwrap_or_else(|| "{{ $externalURL }}".to_owned())
    }

    /// `vramscope diagnose --prometheus URL --match 'UUID="…"' --since LOOK_BACK`.
    fn diagnose(&self, rule: &AlertRule) -> String {
        let uuid = self.n.uuid_label;
        format!(
            "vramscope diagnose --prometheus {} --match '{uuid}=\"{{{{ $labels.{uuid} }}}}\"' --since {}",
            self.url(),
            rule.look_back
        )
    }

    /// `HOST GPU N (MODEL, UUID)`.
    fn gpu_words(&self) -> String {
        format!(
            "{} GPU {} ({}, {{{{ $labels.{} }}}})",
            self.n.host, self.n.gpu, self.n.model, self.n.uuid_label
        )
    }

    fn on_gpu(&self) -> String {
        format!("{} GPU {}", self.n.host, self.n.gpu)
    }

    fn threshold_pct(&self) -> String {
        number(self.options.threshold_fraction * 100.0)
    }

    fn in_use_expr(&self) -> (String, &'static str) {
        let n = &self.n;
        match n.total {
            Some(total) => (format!("1 - {} / {total}", n.free), "1 - free / total"),
            None => (
                format!("{used} / ({used} + {free})", used = n.used, free = n.free),
                "used / (used + free)",
            ),
        }
    }

    fn ttf_series(&self) -> String {
        match self.options.flavour {
            Flavour::Vramscope => names::MEMORY_TIME_TO_FULL_SECONDS.to_owned(),
            flavour => format!("gpu:{}_memory_time_to_full_seconds:deriv30m", flavour.key()),
        }
    }

    /// The recording rule that stands in for the exporter's time-to-full gauge.
    fn ttf_record(&self) -> RuleText {
        let (u, f) = (self.n.used, self.n.free);
        let peak = Self::window(alerts::PEAK_WINDOW_SECONDS);
        let growth_window = Self::window(alerts::GROWTH_WINDOW_SECONDS);
        let half = Self::window(alerts::GROWTH_WINDOW_SECONDS / 2.0);
        let tolerance = number(growth::RISE_TOLERANCE_BYTES / self.n.bytes_per_unit);
        let floor = format!("min_over_time({u}[{peak}])");
        let slope = format!("deriv({floor}[{growth_window}:1m])");
        let expr = format!(
            "(\n  clamp_min(({u} + {f}) - max_over_time({u}[{peak}]), 0)\n    / {slope}\n)\n\
             and {slope} > 0\n\
             and sum_over_time(({floor} - min_over_time({u}[{peak}] offset {peak}) > bool {tolerance})[{growth_window}:{peak}]) >= {rises}\n\
             and {floor} - min_over_time({u}[{peak}] offset {half}) > {tolerance}",
            rises = growth::MIN_RISES,
        );
        let comment = format!(
            "Seconds until the GPU is full at the growth of its floor (the lowest reading of each {peak_words}) over the last {growth_words}, counted from the peak of the last {peak_words}. Only while the floor grows: its line rises, the floor rose (by more than 1 MiB from one {peak_minute}-minute window to the next) at least {rises} times in the last {growth_words} (one big allocation is a step, not growth), and it is higher than {half_words} ago (a warm-up that levelled off is not growth). Stands in for {gauge} of `vramscope exporter`.",
            peak_words = duration_words(alerts::PEAK_WINDOW_SECONDS as u32),
            peak_minute = alerts::PEAK_WINDOW_SECONDS / 60.0,
            growth_words = duration_words(alerts::GROWTH_WINDOW_SECONDS as u32),
            half_words = duration_words((alerts::GROWTH_WINDOW_SECONDS / 2.0) as u32),
            rises = growth::MIN_RISES,
            gauge = names::MEMORY_TIME_TO_FULL_SECONDS,
        );
        RuleText {
            alert: None,
            record: Some(self.ttf_series()),
            comment: Some(comment),
            expr,
            summary: String::new(),
            description: String::new(),
        }
    }

    fn memory_high(&self, rule: &AlertRule) -> RuleText {
        let (expr, formula) = self.in_use_expr();
        let usable = if self.n.total.is_some() {
            ""
        } else {
            "usable "
        };
        RuleText {
            alert: Some(*rule),
            record: None,
            comment: None,
            expr: format!("{expr} > {}", number(self.options.threshold_fraction)),
            summary: format!(
                "GPU memory {{{{ $value | humanizePercentage }}}} full on {}",
                self.on_gpu()
            ),
            description: format!(
                "{} has used more than {}% of its {usable}memory ({formula}) for {}: the next large allocation may fail with out of memory. See which processes hold it and whether it grows: {}",
                self.gpu_words(),
                self.threshold_pct(),
                duration_words(self.hold(rule)),
                self.diagnose(rule)
            ),
        }
    }

    fn full_soon(&self, rule: &AlertRule) -> RuleText {
        RuleText {
            alert: Some(*rule),
            record: None,
            comment: None,
            expr: format!(
                "{} < {}",
                self.ttf_series(),
                number(alerts::full_horizon_seconds(rule.severity))
            ),
            summary: format!(
                "GPU memory on {} full in {{{{ $value | humanizeDuration }}}}",
                self.on_gpu()
            ),
            description: format!(
                "{} grows steadily and, at its rate of the last {}, runs out of memory in {{{{ $value | humanizeDuration }}}}. Find the growing process and its leak: {}",
                self.gpu_words(),
                duration_words(alerts::GROWTH_WINDOW_SECONDS as u32),
                self.diagnose(rule)
            ),
        }
    }

    fn xid_expr(&self, severity: Severity) -> String {
        let codes: Vec<String> = alerts::critical_xids().iter().map(u64::to_string).collect();
        let class = codes.join("|");
        let (op, window) = (
            if severity == Severity::Critical {
                "=~"
            } else {
                "!~"
            },
            Self::window(alerts::EVENT_WINDOW_SECONDS),
        );
        match self.options.flavour {
            Flavour::Vramscope => {
                let x = format!("{}{{xid{op}\"{class}\"}}", names::XID_ERRORS_TOTAL);
                format!(
                    "max by ({labels}, xid) (\n  increase({x}[{window}]) > 0\n  or\n  count_over_time({x}[{window}])\n    < on (job, instance, gpu) group_left\n  count_over_time({up}[{window}])\n)",
                    labels = self.n.gpu_labels,
                    up = names::UP
                )
            }
            _ => {
                let g = "DCGM_FI_DEV_XID_ERRORS";
                let any: Vec<String> = codes.iter().map(|c| format!("{g} == {c}")).collect();
                let any = any.join(" or ");
                let selected = if severity == Severity::Critical {
                    any
                } else {
                    format!("{g} > 0 unless ({any})")
                };
                format!(
                    "count_values without () (\"xid\",\n  max by ({labels}) ({selected})\n  and on ({key})\n  changes(max by ({key}) ({g})[{window}:1m]) > 0\n)\nor\nmax by ({labels}, xid) (max_over_time(DCGM_EXP_XID_ERRORS_COUNT{{xid{op}\"{class}\"}}[{window}])) > 0",
                    labels = self.n.gpu_labels,
                    key = self.n.gpu_key,
                )
            }
        }
    }

    fn xid(&self, rule: &AlertRule) -> RuleText {
        let what = if rule.severity == Severity::Critical {
            "a class the GPU does not recover from by itself (NVIDIA's catalog: reset the GPU or the node). Drain it, then read what happened around it:"
        } else {
            "(usually the application: a memory fault, a stopped channel). The GPU stays usable; see what ran and what the Xid means:"
        };
        let comma = if rule.severity == Severity::Critical {
            ","
        } else {
            ""
        };
        RuleText {
            alert: Some(*rule),
            record: None,
            comment: None,
            expr: self.xid_expr(rule.severity),
            summary: format!("Xid {{{{ $labels.xid }}}} on {}", self.on_gpu()),
            description: format!(
                "{} reported Xid {{{{ $labels.xid }}}}{comma} {what} {}",
                self.gpu_words(),
                self.diagnose(rule)
            ),
        }
    }

    fn health_expr(&self, name: AlertName) -> String {
        let window = Self::window(alerts::EVENT_WINDOW_SECONDS);
        let dcgm = self.options.flavour == Flavour::Dcgm;
        let (ecc, remapped, failure, pending) = if dcgm {
            (
                "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
                "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
                "DCGM_FI_DEV_ROW_REMAP_FAILURE",
                "DCGM_FI_DEV_ROW_REMAP_PENDING",
            )
        } else {
            (
                names::ECC_UNCORRECTED_VOLATILE_TOTAL,
                names::REMAPPED_ROWS_UNCORRECTABLE_TOTAL,
                names::REMAPPED_ROWS_FAILURE,
                names::REMAPPED_ROWS_PENDING,
            )
        };
        let (clock_events, events_label) = if dcgm {
            ("DCGM_EXP_CLOCK_EVENTS_COUNT", "clock_event")
        } else {
            (names::CLOCK_EVENT_ACTIVE, "clock_event")
        };
        let throttle: Vec<&str> = alerts::THROTTLE_ALERT_EVENTS.iter().map(|e| e.1).collect();
        match name {
            AlertName::GpuEccUncorrectable => {
                format!("increase({ecc}[{window}]) > 0\nor\nincrease({remapped}[{window}]) > 0")
            }
            AlertName::GpuRowRemapFailure => format!("{failure} > 0"),
            AlertName::GpuRowRemapPending => format!("{pending} > 0"),
            AlertName::GpuThrottled => format!(
                "max by ({}, {events_label}) ({clock_events}{{{events_label}=~\"{}\"}}) > 0",
                self.n.gpu_labels,
                throttle.join("|")
            ),
            _ => String::new(),
        }
    }

    fn lost_expr(&self) -> String {
        let seen = duration(SEEN_WITHIN_SECONDS);
        match self.options.flavour {
            Flavour::Vramscope => format!("{} == 0", names::UP),
            Flavour::Nvitop => format!("{u} != {u}", u = self.n.used),
            Flavour::Dcgm => format!(
                "(\n  (\n    group by ({labels}, job, instance) (last_over_time({u}[{seen}:5m]))\n    unless on ({key})\n    {u}\n  )\n  and on (job, instance)\n  up == 1\n)\nor\ngroup by ({labels}, job, instance) (DCGM_FI_DEV_XID_ERRORS == 79)",
                labels = self.n.gpu_labels,
                key = self.n.gpu_key,
                u = self.n.used
            ),
        }
    }

    fn health(&self, rule: &AlertRule) -> RuleText {
        let window_words = duration_words(alerts::EVENT_WINDOW_SECONDS as u32);
        let hold_words = duration_words(self.hold(rule));
        let diagnose = self.diagnose(rule);
        let gpu = self.gpu_words();
        let on = self.on_gpu();
        let (expr, summary, description) = match rule.name {
            AlertName::GpuEccUncorrectable => (
                self.health_expr(rule.name),
                format!("Uncorrectable ECC error on {on}"),
                format!(
                    "{gpu} had an uncorrectable memory error (ECC double-bit or a row remapped for one) in the last {window_words}: the job on it may have crashed. Drain the GPU and reset it; check it with {diagnose}"
                ),
            ),
            AlertName::GpuRowRemapFailure => (
                self.health_expr(rule.name),
                format!("Row remapping failed on {on}"),
                format!(
                    "{gpu} could not remap a failing memory row: it has no spare rows left and needs service (RMA candidate). Drain it; the evidence: {diagnose}"
                ),
            ),
            AlertName::GpuRowRemapPending => (
                self.health_expr(rule.name),
                format!("Row remap pending on {on}"),
                format!(
                    "{gpu} has a memory row remap waiting for the next GPU reset. Jobs may continue; reset the GPU when it is drained. {diagnose}"
                ),
            ),
            AlertName::GpuThrottled => (
                self.health_expr(rule.name),
                format!("GPU throttled ({{{{ $labels.clock_event }}}}) on {on}"),
                format!(
                    "{gpu} has slowed its clocks for {{{{ $labels.clock_event }}}} for {hold_words}: check cooling and power. {diagnose}"
                ),
            ),
            _ => (
                self.lost_expr(),
                format!("GPU lost on {on}"),
                format!(
                    "{gpu} stopped answering (lost, fallen off the bus, or its exporter cannot read it) while the exporter still runs. Reboot the node, then see what preceded it: {diagnose}"
                ),
            ),
        };
        RuleText {
            alert: Some(*rule),
            record: None,
            comment: None,
            expr,
            summary,
            description,
        }
    }

    fn exporter(&self, rule: &AlertRule) -> RuleText {
        let f = self.options.flavour;
        let u = self.n.used;
        let hold_words = duration_words(self.hold(rule));
        let (expr, summary, description) = match rule.name {
            AlertName::GpuExporterDown => {
                let job = self
                    .options
                    .job_regex
                    .clone()
                    .unwrap_or_else(|| format!(".*{}.*", f.key()));
                (
                    format!(
                        "up{{job=~\"{}\"}} == 0",
                        job.replace('\\', "\\\\").replace('"', "\\\"")
                    ),
                    "GPU exporter {{ $labels.instance }} ({{ $labels.job }}) is down".to_owned(),
                    format!(
                        "Prometheus cannot scrape {{{{ $labels.instance }}}} (job {{{{ $labels.job }}}}) for {hold_words}: the GPU memory alerts of its GPUs are blind. Check that {} runs and answers: curl http://{{{{ $labels.instance }}}}/metrics",
                        f.exporter()
                    ),
                )
            }
            AlertName::GpuExporterAbsent => (
                format!("absent({u})"),
                format!("No {u} series in Prometheus"),
                format!(
                    "No series of {u} for {hold_words}: no GPU memory alert of this file can fire. Check that {} runs and that Prometheus scrapes it (job name, relabelling), or generate the rules for the exporter you run: vramscope alerts --metrics vramscope|dcgm|nvitop",
                    f.exporter()
                ),
            ),
            _ => (
                format!(
                    "group by ({}) (last_over_time({u}[{}:5m]))\nunless on ({})\n{u}",
                    self.n.gpu_labels,
                    duration(SEEN_WITHIN_SECONDS),
                    self.n.gpu_key
                ),
                format!("No memory readings from {}", self.on_gpu()),
                format!(
                    "{} reported its memory within the last {} but has not for {hold_words} (its exporter, node or GPU is gone, or the target left service discovery). Until it reports again its memory is not watched. {}",
                    self.gpu_words(),
                    duration_words(SEEN_WITHIN_SECONDS),
                    self.diagnose(rule)
                ),
            ),
        };
        RuleText {
            alert: Some(*rule),
            record: None,
            comment: None,
            expr,
            summary,
            description,
        }
    }

    fn rule_text(&self, rule: &AlertRule) -> RuleText {
        match rule.name {
            AlertName::GpuMemoryHigh => self.memory_high(rule),
            AlertName::GpuMemoryFullSoon => self.full_soon(rule),
            AlertName::GpuXidError => self.xid(rule),
            AlertName::GpuExporterDown
            | AlertName::GpuExporterAbsent
            | AlertName::GpuMetricsMissing => self.exporter(rule),
            _ => self.health(rule),
        }
    }

    fn group_of(name: AlertName) -> &'static str {
        match name {
            AlertName::GpuMemoryHigh | AlertName::GpuMemoryFullSoon => "memory",
            AlertName::GpuExporterDown
            | AlertName::GpuExporterAbsent
            | AlertName::GpuMetricsMissing => "exporter",
            _ => "health",
        }
    }
}

/// The rule file for `options`: YAML with `groups:`, for Prometheus's `rule_files`.
pub fn render(options: &RulesOptions) -> String {
    render_all(std::slice::from_ref(options))
}

/// One rule file for several exporters at once (a server that scrapes more than one): each
/// flavour's header, then every flavour's groups (their names differ, their series too).
pub fn render_all(all: &[RulesOptions]) -> String {
    let mut out = String::new();
    for options in all {
        header(&mut out, options);
    }
    out.push_str("groups:\n");
    for options in all {
        groups(&mut out, options);
    }
    out
}

fn groups(out: &mut String, options: &RulesOptions) {
    let flavour = options.flavour;
    let writer = Writer {
        options,
        n: flavour.names(),
    };
    for group in ["memory", "health", "exporter"] {
        let _ = writeln!(
            out,
            "  - name: vramscope.{}.{group}\n    rules:",
            flavour.key()
        );
        if group == "memory" {
            if flavour == Flavour::Vramscope {
                comment(
                    out,
                    &format!(
                        "GpuMemoryFullSoon reads the exporter's own estimate, {} (absent while memory does not grow).",
                        names::MEMORY_TIME_TO_FULL_SECONDS
                    ),
                );
            } else {
                write_rule(
                    out,
                    flavour,
                    &writer.ttf_record(),
                    &options.runbook_url,
                    None,
                );
            }
        }
        for rule in RULES
            .iter()
            .filter(|r| Writer::group_of(r.name) == group && flavour.missing(r.name).is_none())
        {
            let hold = writer.hold(rule);
            write_rule(
                out,
                flavour,
                &writer.rule_text(rule),
                &options.runbook_url,
                Some(hold),
            );
        }
    }
}

fn header(out: &mut String, options: &RulesOptions) {
    let flavour = options.flavour;
    let _ = writeln!(
        out,
        "# Alerts before the OOM: rules for the metrics of {}.",
        flavour.exporter()
    );
    let _ = writeln!(
        out,
        "# Written by `vramscope alerts --metrics {}` (threshold {} %, time to full {} / {}, events kept {}).",
        flavour.key(),
        number(options.threshold_fraction * 100.0),
        duration(alerts::FULL_WARNING_SECONDS as u32),
        duration(alerts::FULL_CRITICAL_SECONDS as u32),
        duration(alerts::EVENT_WINDOW_SECONDS as u32),
    );
    out.push_str(
        "# Every flavour has the same groups, alert names, severities, `for:` and annotations; only\n\
         # metric and label names differ, and rules whose signal this exporter does not export are\n\
         # left out (listed below). Check: promtool check rules FILE; unit tests: tests/alerts/run.sh\n",
    );
    match flavour {
        Flavour::Dcgm => out.push_str(
            "# Signals that need fields dcgm-exporter does not collect by default (add them to its\n\
             # counters CSV, `-f`); without them those parts never fire:\n\
             #   DCGM_EXP_XID_ERRORS_COUNT (every Xid, not only the last), DCGM_FI_DEV_ECC_DBE_VOL_TOTAL,\n\
             #   DCGM_FI_DEV_ROW_REMAP_PENDING (GpuRowRemapPending), DCGM_EXP_CLOCK_EVENTS_COUNT (GpuThrottled).\n",
        ),
        _ => {
            let missing: Vec<(AlertName, &str)> = RULES
                .iter()
                .filter_map(|r| flavour.missing(r.name).map(|why| (r.name, why)))
                .collect();
            if !missing.is_empty() {
                out.push_str("# Not in this file (the exporter has no such signal):\n");
                let mut last = "";
                for (name, why) in missing {
                    if why != last {
                        let _ = writeln!(out, "#   {}: {why}", name.as_str());
                        last = why;
                    }
                }
            }
        }
    }
}

/// A `#` comment in a rules list, wrapped.
fn comment(out: &mut String, text: &str) {
    for line in wrap(text, 84) {
        let _ = writeln!(out, "      # {line}");
    }
}

fn write_rule(
    out: &mut String,
    flavour: Flavour,
    rule: &RuleText,
    runbook: &str,
    hold: Option<u32>,
) {
    if let Some(text) = &rule.comment {
        comment(out, text);
    }
    match (&rule.record, &rule.alert) {
        (Some(record), _) => {
            let _ = writeln!(out, "      - record: {record}");
        }
        (None, Some(alert)) => {
            let _ = writeln!(out, "      - alert: {}", alert.name.as_str());
        }
        (None, None) => return,
    }
    out.push_str("        expr: |-\n");
    for line in rule.expr.lines() {
        let _ = writeln!(out, "          {line}");
    }
    let Some(alert) = rule.alert else {
        return;
    };
    let _ = writeln!(
        out,
        "        for: {}",
        duration(hold.unwrap_or(alert.hold_seconds))
    );
    let _ = writeln!(
        out,
        "        labels:\n          severity: {}\n          metrics: {}",
        alert.severity.as_str(),
        flavour.key()
    );
    out.push_str("        annotations:\n");
    let _ = writeln!(
        out,
        "          summary: '{}'",
        rule.summary.replace('\'', "''")
    );
    out.push_str("          description: >-\n");
    for line in wrap(&rule.description, 88) {
        let _ = writeln!(out, "            {line}");
    }
    let _ = writeln!(
        out,
        "          runbook_url: {}#{}",
        runbook,
        alert.name.as_str().to_lowercase()
    );
}

/// Words of `text` in lines of at most `width` characters (longer words alone on a line); a
/// `{{ … }}` template is one word, so that folding the lines back gives the text unchanged.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    let mut in_template = false;
    for word in text.split(' ') {
        if in_template {
            if let Some(last) = words.last_mut() {
                last.push(' ');
                last.push_str(word);
            }
        } else {
            words.push(word.to_owned());
        }
        let opened = word.matches("{{").count();
        let closed = word.matches("}}").count();
        if opened > closed {
            in_template = true;
        } else if closed > opened {
            in_template = false;
        }
    }
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in words {
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// The committed example file of a flavour, relative to the repository root.
pub fn example_file(flavour: Flavour) -> String {
    format!("assets/prometheus/example-rules-{}.yml", flavour.key())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_are_never_split_and_lines_fold_back_to_the_text() {
        let text = "{{ or $labels.Hostname $labels.hostname }} GPU {{ $labels.gpu }} reported Xid {{ $labels.xid }}, a class of its own";
        let lines = wrap(text, 20);
        assert_eq!(lines.join(" "), text);
        assert!(lines.contains(&"{{ or $labels.Hostname $labels.hostname }}".to_owned()));
    }

    #[test]
    fn durations_and_numbers_are_prometheus_spelling() {
        assert_eq!(duration(0), "0m");
        assert_eq!(duration(90), "90s");
        assert_eq!(duration(300), "5m");
        assert_eq!(duration(86_400), "24h");
        assert_eq!(number(0.9), "0.9");
        assert_eq!(number(3600.0), "3600");
        assert_eq!(number(92.5), "92.5");
        assert_eq!(duration_words(60), "1 minute");
        assert_eq!(duration_words(1), "1 second");
    }

    #[test]
    fn the_threshold_and_the_hold_reach_the_rules() {
        let mut options = RulesOptions::new(Flavour::Vramscope);
        options.threshold_fraction = 0.85;
        options.hold_override_seconds = Some(1);
        let text = render(&options);
        assert!(
            text.contains("vramscope_gpu_memory_total_bytes > 0.85\n"),
            "{text}"
        );
        assert!(text.contains("more than 85% of its memory"));
        assert!(!text.contains("for: 5m"));
        assert!(text.contains("for: 1s"));
    }

    #[test]
    fn flavours_are_detected_from_the_names_a_server_holds() {
        let held = ["up", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"];
        assert_eq!(Flavour::detect(held.iter().copied()), [Flavour::Dcgm]);
        assert!(Flavour::detect(["up"].iter().copied()).is_empty());
    }
}
