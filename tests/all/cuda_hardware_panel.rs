//! The Hardware checks panel, driven through egui_kittest like a user would. On a machine with
//! no NVIDIA driver (CI) it must say so up front, and clicking "Run checks" must end in the
//! no-driver message, not a panic or an endless spinner.

use std::time::{Duration, Instant};

use egui_kittest::Harness;
use egui_kittest::kittest::{NodeT, Queryable};
use vramscope_app::hardware::HardwarePanel;

fn panel_harness() -> Harness<'static, HardwarePanel> {
    Harness::builder()
        .with_size(egui::vec2(800.0, 600.0))
        .build_ui_state(
            |ui, panel: &mut HardwarePanel| panel.ui(ui),
            HardwarePanel::new(),
        )
}

/// Steps the UI until the background check finished (bounded, so a hang fails the test).
fn wait_until_finished(harness: &mut Harness<'static, HardwarePanel>) {
    let deadline = Instant::now() + Duration::from_secs(120);
    harness.step();
    while harness.state().is_running() {
        assert!(Instant::now() < deadline, "the check did not finish");
        std::thread::sleep(Duration::from_millis(20));
        harness.step();
    }
    harness.run_steps(2);
}

#[test]
fn without_a_driver_the_panel_says_so_before_and_after_running() {
    let mut harness = panel_harness();
    harness.run_steps(2);
    if vramscope_gpu::cuda::driver_library_present() {
        assert!(
            harness
                .query_by_label_contains("No NVIDIA driver found")
                .is_none()
        );
        return crate::support::skip::skipped(
            "cuda_hardware_panel::without_a_driver_the_panel_says_so_before_and_after_running",
            "this machine has an NVIDIA driver: the no-driver messages cannot show",
        );
    }
    harness.get_by_label_contains("No NVIDIA driver found on this machine");

    harness.get_by_label("Run checks").click();
    wait_until_finished(&mut harness);
    harness.get_by_label_contains(
        "no NVIDIA driver found: the CUDA driver library (libcuda.so.1) could not be loaded",
    );

    // Looking again keeps telling the truth.
    harness.get_by_label("Look for the driver again").click();
    harness.run_steps(2);
    harness.get_by_label_contains("No NVIDIA driver found on this machine");
}

#[test]
fn memory_test_options_are_offered() {
    let mut harness = panel_harness();
    harness.run_steps(2);
    let share_is_disabled = |harness: &Harness<'static, HardwarePanel>| {
        harness
            .get_by_role_and_label(egui::accesskit::Role::Slider, "% of free memory")
            .accesskit_node()
            .is_disabled()
    };
    assert!(
        share_is_disabled(&harness),
        "the share only matters with the memory test on"
    );
    harness.get_by_label("Test memory").click();
    harness.run_steps(2);
    assert!(!share_is_disabled(&harness));
    harness.get_by_label("Device");
}
