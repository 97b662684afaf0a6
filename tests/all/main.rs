//! Every integration test of vramscope, in one test binary: one module per area (each was a
//! test binary of its own, `tests/NAME.rs`, until CI spent most of its time linking 46 of
//! them against the whole dependency tree). Run one area with `cargo test --test all NAME::`,
//! one test with `cargo test --test all NAME::TEST`.
//!
//! Tests here run in parallel threads of one process: a test must not change process-wide
//! state (the current directory, environment variables) that another could read, and what
//! one measures of the process (`reader_memory_bounds` counts allocations) counts only its own
//! thread.
#![allow(
    clippy::unwrap_used,
    clippy::too_many_lines,
    reason = "test and bench code: a panic is the failure report, and a test reads best as one story"
)]

// Helpers shared by the modules below (and, file by file, by benches and the fuzz target).
#[path = "../support/mod.rs"]
mod support;
#[path = "../validation/mod.rs"]
mod validation;

mod alerts;
mod allocator_capture_helper;
mod allocator_fixtures;
mod allocator_timetravel;
mod analysis_steps;
mod bench_common;
mod capture_format;
mod cli_check;
mod cli_pipe;
mod cli_record_inspect;
mod compare_cli;
mod compare_fixtures;
mod cuda_checks;
mod cuda_hardware_panel;
mod demo_open_default;
mod demo_source;
mod diagnose_cases;
mod diagnose_cli;
mod diagnose_gpu_leak;
mod diagnose_live_leak;
mod diagnose_log;
mod diagnose_real_cases;
mod diagnosis_validation;
mod export_cli;
mod faults_injected;
mod formats_nvidia_smi;
mod nvidia_smi_join;
mod nvml_info;
mod nvml_open;
mod one_verdict;
mod prometheus_fleet;
mod reader_fuzz_regressions;
mod reader_memory_bounds;
mod record_faults;
mod report_formats;
mod report_whatif;
mod run_cli;
mod run_validation;
mod sampler_thread;
mod snapshot_cli;
mod snapshot_fixtures;
mod snapshot_malformed;
mod snapshot_stream;
mod ui_app;
mod ui_blockmap;
mod ui_commands;
mod ui_compare;
mod ui_export;
mod ui_fleet;
mod ui_integration;
mod ui_paint_cost;
mod ui_run_command;
mod ui_whatif;
mod ui_wizard;
mod whatif_cli;
mod whatif_replay;
mod whatif_validation;
