//! `vramscope info` end to end: the missing-driver error, and both output forms on the simulated
//! machine. This machine (and CI) has no NVIDIA driver; the no-driver test is skipped where one is.

use crate::support::cli::vramscope;

fn has_nvidia_driver() -> bool {
    std::path::Path::new("/dev/nvidiactl").exists()
}

#[test]
fn info_without_a_driver_fails_and_points_to_demo() {
    if has_nvidia_driver() {
        return crate::support::skip::skipped(
            "nvml_info::info_without_a_driver_fails_and_points_to_demo",
            "this machine has an NVIDIA driver",
        );
    }
    for args in [&["info"][..], &["info", "--json"][..]] {
        let out = vramscope(args);
        assert_eq!(out.status.code(), Some(1), "{args:?} must exit 1");
        assert!(out.stdout.is_empty(), "nothing on stdout for {args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.starts_with("vramscope: error: no NVIDIA driver found"),
            "{stderr}"
        );
        assert!(stderr.contains("libnvidia-ml.so.1"), "{stderr}");
        assert!(stderr.contains("vramscope info --demo"), "{stderr}");
    }
}

#[test]
fn info_demo_text_describes_the_simulated_gpus() {
    let out = vramscope(&["info", "--demo"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("SIMULATED: --demo was given"), "{text}");
    assert!(text.contains("GPU 0: "), "{text}");
    assert!(text.contains("GPU 1: "), "{text}");
    assert!(text.to_lowercase().contains("simulated"), "{text}");
    assert!(text.contains("  memory    used "), "{text}");
    assert!(text.contains("  ECC       "), "{text}");
    assert!(text.contains("  repair    remapped rows "), "{text}");
}

#[test]
fn info_demo_json_is_the_stable_schema() {
    let out = vramscope(&["info", "--demo", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("stdout is one JSON value");
    assert_eq!(json["schema"], "vramscope.info/1");
    assert_eq!(json["simulated"], true);
    let devices = json["devices"].as_array().expect("devices is an array");
    assert_eq!(devices.len(), 2, "the demo machine has two GPUs");
    for device in devices {
        assert_eq!(device["simulated"], true);
        let memory = &device["memory"];
        let field = |name: &str| {
            memory[name]
                .as_u64()
                .unwrap_or_else(|| panic!("memory.{name} in {device}"))
        };
        assert!(field("total_bytes") > 0);
        assert!(
            field("used_bytes") + field("reserved_bytes") + field("free_bytes")
                <= field("total_bytes"),
            "{memory}"
        );
        assert!(device["processes"].is_array());
        assert!(device["health"].is_object());
    }
}
