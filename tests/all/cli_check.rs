//! `vramscope check` as a user runs it. On a machine without an NVIDIA driver (CI) it must say
//! so plainly and exit non-zero; on a GPU machine it must produce a report.

use crate::support::cli::{text, vramscope};

#[test]
fn check_without_a_driver_says_so_and_fails() {
    let output = vramscope(&["check"]);
    let stderr = text(&output.stderr);
    if vramscope_gpu::cuda::driver_library_present() {
        // A GPU machine: the check runs; 0 = fine, 3 = problem found.
        assert!(matches!(output.status.code(), Some(0 | 3)), "{stderr}");
        assert!(text(&output.stdout).contains("Largest allocatable block"));
        return;
    }
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("vramscope: error: check: no NVIDIA driver found"),
        "{stderr}"
    );
    assert!(stderr.contains("libcuda.so.1"), "{stderr}");
    assert!(output.stdout.is_empty(), "nothing on stdout without --json");
}

#[test]
fn check_json_without_a_driver_is_a_machine_readable_error() {
    let output = vramscope(&["check", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|error| panic!("stdout is not JSON ({error}): {}", text(&output.stdout)));
    assert_eq!(json["schema"], "vramscope.check/1");
    if vramscope_gpu::cuda::driver_library_present() {
        assert!(
            json["devices"]
                .as_array()
                .is_some_and(|devices| !devices.is_empty())
        );
        return;
    }
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(json["error"]["kind"], "no_driver");
    assert!(
        json["message"]
            .as_str()
            .is_some_and(|message| message.starts_with("no NVIDIA driver found"))
    );
}

#[test]
fn check_rejects_bad_options_before_touching_the_gpu() {
    for args in [
        &["check", "--memtest", "0"][..],
        &["check", "--memtest", "101"],
        &["check", "--plant-fault", "5"],
        &["check", "--device", "-1"],
    ] {
        let output = vramscope(args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&output.stderr)
        );
    }
}

#[test]
fn check_help_lists_the_options() {
    let output = vramscope(&["check", "--help"]);
    let help = text(&output.stdout);
    for option in ["--device", "--memtest", "--json", "--plant-fault", "--seed"] {
        assert!(help.contains(option), "{option} missing from:\n{help}");
    }
}
