//! `open_default`: the demo when asked for, and the demo with a reason when no GPU can be opened.

use vramscope_core::model::SourceKind;
use vramscope_gpu::open_default;

#[test]
fn forced_demo_says_why() {
    let (source, reason) = open_default(true);
    assert_eq!(source.describe().meta.source, SourceKind::Demo);
    let reason = reason.expect("a reason for the demo");
    assert!(
        reason.contains("--demo") && reason.contains("simulated"),
        "{reason}"
    );
}

#[test]
fn without_a_usable_gpu_falls_back_to_the_demo_and_says_so() {
    let (source, reason) = open_default(false);
    let meta = source.describe().meta;
    match reason {
        // CI and the development machines have no NVIDIA driver.
        Some(reason) => {
            assert_eq!(meta.source, SourceKind::Demo);
            assert!(
                reason.contains("NVIDIA") && reason.contains("simulated"),
                "{reason}"
            );
        }
        // On a GPU machine the real source is used, and it must not claim to be simulated.
        None => assert_eq!(meta.source, SourceKind::Live),
    }
}
