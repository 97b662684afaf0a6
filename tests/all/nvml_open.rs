//! Opening the default source on a machine without an NVIDIA driver falls back to the simulated
//! machine and says why.

use vramscope_core::model::SourceKind;
use vramscope_gpu::open_default;

#[test]
fn without_a_driver_the_default_source_is_the_demo_with_a_reason() {
    if std::path::Path::new("/dev/nvidiactl").exists() {
        return crate::support::skip::skipped(
            "nvml_open::without_a_driver_the_default_source_is_the_demo_with_a_reason",
            "this machine has an NVIDIA driver",
        );
    }
    let (source, reason) = open_default(false);
    let reason = reason.expect("falling back to the demo must give a reason");
    assert!(reason.contains("no NVIDIA driver found"), "{reason}");
    assert!(reason.contains("simulated"), "{reason}");
    let description = source.describe();
    assert_eq!(description.meta.source, SourceKind::Demo);
    assert!(!description.devices.is_empty());
    assert!(description.devices.iter().all(|d| d.simulated));
}

#[test]
fn forcing_the_demo_says_so() {
    let (source, reason) = open_default(true);
    assert_eq!(
        reason.as_deref(),
        Some("--demo was given: showing a simulated machine")
    );
    assert_eq!(source.describe().meta.source, SourceKind::Demo);
}
