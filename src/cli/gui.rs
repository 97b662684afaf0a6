//! Starting the GUI from the command line: `vramscope [FILES…] [--demo] [--demo-speed N]
//! [--watch DIR] [--prometheus URL]`.

use std::path::PathBuf;
use std::process::ExitCode;

use vramscope_app::app::LiveStart;
use vramscope_app::{AppOptions, VramscopeApp, dialogs};

/// Opens the window. With files, shows them (read in the background); without, samples the live
/// GPUs through NVML, or the simulated demo machine (with a visible notice saying why) when
/// `demo` is set or no NVIDIA driver can be loaded.
///
/// `demo_speed` plays the demo machine that many times faster than real time (and asks for the
/// demo). `watch` is a folder whose new allocator snapshots open as they are written.
///
/// `prometheus` (with `--prometheus URL`) shows a server's GPUs: the range is read before the
/// window opens (progress on stderr), then the window follows the server live.
pub fn run(
    files: Vec<PathBuf>,
    demo: bool,
    demo_speed: Option<u32>,
    watch: Option<PathBuf>,
    prometheus: super::prometheus::PrometheusArgs,
) -> ExitCode {
    let demo = demo || demo_speed.is_some();
    // A run folder (`vramscope run`) is given to the app as it is: it opens it as one session
    // (`VramscopeApp::open_path`), as it opens the folder of a run started from its File menu.
    if let Some(dir) = &watch
        && !dir.is_dir()
    {
        let why = if dir.exists() {
            "not a folder"
        } else {
            "no such folder"
        };
        return super::fail(format!("--watch {}: {why}", dir.display()));
    }
    let live = if prometheus.prometheus.is_some() {
        if demo {
            return super::fail("--prometheus and --demo: choose one source");
        }
        let (reader, range, history) = match prometheus.pull() {
            Ok(pulled) => pulled,
            Err(err) => return super::fail(err),
        };
        let source =
            vramscope_core::source::prometheus::PrometheusSource::new(reader, history, &range);
        Some(LiveStart {
            source: Box::new(source),
            demo_notice: None,
        })
    } else if files.is_empty() || demo {
        let (source, demo_notice) = vramscope_gpu::open_default(demo);
        if let (Some(speed), Some(pace)) = (demo_speed, source.demo_pace()) {
            pace.set_speed(speed);
        }
        Some(LiveStart {
            source,
            demo_notice,
        })
    } else {
        None
    };
    let title = match &live {
        Some(LiveStart {
            demo_notice: Some(_),
            ..
        }) => "vramscope — demo machine (simulated)",
        _ => "vramscope",
    };
    let native_options = eframe::NativeOptions {
        viewport: eframe::egui::ViewportBuilder::default()
            .with_title(title)
            .with_app_id("vramscope")
            .with_inner_size([1400.0, 900.0])
            .with_min_inner_size([640.0, 420.0])
            .with_drag_and_drop(true),
        persist_window: true,
        ..Default::default()
    };
    let options = AppOptions {
        files,
        live,
        dialogs: dialogs::default_dialogs(),
        recordings_dir: None,
    };
    let result = eframe::run_native(
        "vramscope",
        native_options,
        Box::new(|cc| {
            let mut app = VramscopeApp::new(cc, options);
            if let Some(dir) = watch {
                app.watch_folder(dir);
            }
            Ok(Box::new(app))
        }),
    );
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => super::fail(format!(
            "could not open the window: {err} (is a display available? for headless machines use `vramscope record`)"
        )),
    }
}
