//! `vramscope exporter`: serves the GPUs' memory, processes, Xid errors, ECC and row-remap
//! counters, temperature, power and utilization at `/metrics` for Prometheus to scrape.
//!
//! The sampler polls NVML (or the simulated machine) on its own thread; this thread folds each
//! batch into the exporter's state and renders the page once; the HTTP workers only hand out the
//! last rendered page.

use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::alerts::LiveHooks;
use vramscope_core::source::prometheus::exposition::ExporterState;
use vramscope_gpu::open_real_or_demo;
use vramscope_gpu::prometheus::exporter::{
    DEFAULT_PORT, MetricsPage, MetricsServer, resolve_listen_address,
};
use vramscope_gpu::sampler::{MAX_FAST_INTERVAL_MS, MIN_FAST_INTERVAL_MS, Sampler, SamplerConfig};

#[derive(Debug, clap::Args)]
pub struct ExporterArgs {
    /// Address to serve /metrics on: HOST:PORT, or :PORT for every interface.
    #[arg(long, value_name = "ADDR", default_value_t = format!("0.0.0.0:{DEFAULT_PORT}"))]
    pub listen: String,
    /// How often the GPUs are read, in milliseconds (20 to 60000); a scrape returns the latest reading.
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 1000,
        value_parser = clap::value_parser!(u32).range(i64::from(MIN_FAST_INTERVAL_MS)..=i64::from(MAX_FAST_INTERVAL_MS)),
    )]
    pub interval_ms: u32,
    /// Export the built-in simulated machine instead of real GPUs (its model and host names say
    /// "(simulated)", and vramscope_exporter_info has simulated="true").
    #[arg(long)]
    pub demo: bool,
    /// Play the simulated machine N times faster than real time (1 to 3600; implies --demo):
    /// its memory crosses 90 % and its leak fills the GPU within seconds, for testing alerts.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(vramscope_core::source::demo::MAX_DEMO_PACE)))]
    pub demo_speed: Option<u32>,
    #[command(flatten)]
    pub alerts: super::alerts::AlertHookArgs,
}

pub fn run(args: ExporterArgs) -> ExitCode {
    let address = match resolve_listen_address(&args.listen) {
        Ok(address) => address,
        Err(err) => return super::fail(err),
    };
    let stop_requested = match super::stop_on_ctrl_c() {
        Ok(flag) => flag,
        Err(code) => return code,
    };
    let (source, demo_reason) = match open_real_or_demo(args.demo || args.demo_speed.is_some()) {
        Ok(opened) => opened,
        Err(err) => {
            return super::fail(format_args!(
                "{err}; nothing is exported (pass --demo to export the simulated machine)"
            ));
        }
    };
    if let (Some(speed), Some(pace)) = (args.demo_speed, source.demo_pace()) {
        pace.set_speed(speed);
    }
    let description = source.describe();
    let mut state = ExporterState::new(description.meta.clone(), description.devices.clone());
    let mut hooks = match LiveHooks::new(
        &args.alerts,
        &description.meta.host,
        &description.devices,
        "vramscope diagnose --live (on this host)",
    ) {
        Ok(hooks) => hooks,
        Err(err) => return super::fail(err),
    };
    let page = MetricsPage::default();
    page.set(state.render());
    // Listen before sampling, so that a port in use fails at once and touches no GPU.
    let server = match MetricsServer::start(address, page.clone()) {
        Ok(server) => server,
        Err(err) => return super::fail(err),
    };
    let config = SamplerConfig {
        fast_interval_ms: args.interval_ms,
        ..SamplerConfig::default()
    };
    let sampler = Sampler::spawn(source, config, Box::new(|| {}));
    eprintln!(
        "vramscope: exporting {} GPU(s){} at http://{}/metrics, read every {} ms; Ctrl+C to stop",
        description.devices.len(),
        if demo_reason.is_some() {
            " of the SIMULATED demo machine"
        } else {
            ""
        },
        server.address(),
        args.interval_ms
    );
    while !stop_requested.load(Ordering::SeqCst) {
        match sampler.recv_timeout(Duration::from_millis(200)) {
            Some(batch) => {
                state.apply(&batch);
                hooks.apply(&batch);
                // Later batches already queued replace this page at once: render the newest.
                for queued in sampler.drain() {
                    state.apply(&queued);
                    hooks.apply(&queued);
                }
                for device in &description.devices {
                    state.set_time_to_full(
                        device.index,
                        hooks.alerts().time_to_full_seconds(device.index),
                    );
                }
                page.set(state.render());
            }
            None if !sampler.is_running() => {
                return super::fail(
                    "sampling stopped unexpectedly (the GPU source failed; see the message above)",
                );
            }
            None => {}
        }
    }
    sampler.stop();
    drop(server);
    eprintln!("vramscope: exporter stopped");
    ExitCode::SUCCESS
}
