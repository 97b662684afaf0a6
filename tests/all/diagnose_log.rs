//! The log analyzer on verbatim messages (`tests/fixtures/logs/`) and the frag_oom fixture: every line is
//! recognised with its line number, meaning, wizard and numbers.

use std::path::PathBuf;

use vramscope_core::diagnose::log::{
    Framework, LineKind, LogAnalysis, OtherProcess, analyze_file, analyze_text,
};
use vramscope_core::diagnose::{Category, Wizard};
use vramscope_core::model::{GIB, MIB};

fn fixture(name: &str) -> LogAnalysis {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/logs")
        .join(name);
    analyze_file(&path).unwrap_or_else(|e| panic!("{e}"))
}

fn gib(x: f64) -> u64 {
    (x * GIB as f64).round() as u64
}

fn mib(x: f64) -> u64 {
    (x * MIB as f64).round() as u64
}

#[test]
fn pytorch_2_11_oom_numbers_become_evidence() {
    let log = fixture("pytorch_capacity_h200.log");
    assert_eq!(log.lines_read, 6);
    assert_eq!(log.matches.len(), 1, "{:#?}", log.matches);
    let m = &log.matches[0];
    assert_eq!(m.line, 6);
    assert_eq!(m.wizard, Wizard::OutOfMemory);
    let (_, n, framework) = log.best_oom().unwrap_or_else(|| panic!("no OOM"));
    assert_eq!(framework, Framework::PyTorch);
    assert_eq!(n.device_index, Some(0));
    assert_eq!(n.requested_bytes, Some(gib(27.86)));
    assert_eq!(n.total_bytes, Some(gib(139.80)));
    assert_eq!(n.free_bytes, Some(gib(13.93)));
    assert_eq!(n.this_process_bytes, Some(gib(125.87)));
    assert_eq!(n.allocated_bytes, Some(gib(125.36)));
    assert_eq!(n.reserved_unallocated_bytes, Some(mib(1.79)));
    assert_eq!(n.allowed_bytes, None);
    assert!(n.other_processes.is_empty());
    assert!(m.meaning.contains("27.9 GiB"), "{}", m.meaning);
}

#[test]
fn frag_oom_fixture_reads_the_cap() {
    let log = fixture("pytorch_frag_under_cap.log");
    let (m, n, _) = log.best_oom().unwrap_or_else(|| panic!("no OOM"));
    assert_eq!(m.line, 5);
    assert_eq!(n.requested_bytes, Some(32 * MIB));
    assert_eq!(n.allowed_bytes, Some(4 * GIB));
    assert_eq!(n.free_bytes, Some(gib(135.31)));
    assert_eq!(n.this_process_bytes, Some(gib(4.48)));
    assert_eq!(n.allocated_bytes, Some(gib(3.60)));
    assert_eq!(n.reserved_unallocated_bytes, Some(382 * MIB));
    assert_eq!(n.reserved_bytes, Some(gib(3.60) + 382 * MIB));
}

#[test]
fn other_processes_are_listed_with_their_pids() {
    let log = fixture("pytorch_other_process.log");
    let (_, n, _) = log.best_oom().unwrap_or_else(|| panic!("no OOM"));
    assert_eq!(
        n.other_processes,
        vec![OtherProcess {
            pid: 2417585,
            used_bytes: gib(80.02)
        }]
    );
    assert_eq!(n.this_process_bytes, Some(gib(50.31)));
}

#[test]
fn every_older_pytorch_wording_is_recognised() {
    let log = fixture("pytorch_old_wordings.log");
    let ooms: Vec<_> = log.ooms().collect();
    assert_eq!(ooms.len(), 6, "{:#?}", log.matches);
    // ~2.1 with the "capacty" typo
    assert_eq!(ooms[0].1.total_bytes, Some(6 * GIB));
    assert_eq!(ooms[0].1.free_bytes, Some(0));
    assert_eq!(ooms[0].1.reserved_unallocated_bytes, Some(gib(2.30)));
    // ~1.10–2.0: reserved in total, unallocated derived
    assert_eq!(ooms[1].1.requested_bytes, Some(gib(1.39)));
    assert_eq!(ooms[1].1.free_bytes, Some(478 * MIB));
    assert_eq!(ooms[1].1.reserved_bytes, Some(gib(4.15)));
    assert_eq!(
        ooms[1].1.reserved_unallocated_bytes,
        Some(gib(4.15) - gib(4.04))
    );
    // ~1.5–1.9 without advice
    assert_eq!(ooms[2].1.reserved_bytes, Some(gib(13.71)));
    // <= 1.4 "cached"
    assert_eq!(ooms[3].1.reserved_bytes, Some(mib(4.68)));
    assert_eq!(ooms[3].1.allocated_bytes, Some(mib(8.57)));
    // allowed cap in the old parenthesis, on GPU 1
    assert_eq!(ooms[4].1.allowed_bytes, Some(6 * GIB));
    assert_eq!(ooms[4].1.device_index, Some(1));
    // more than 1 EB
    assert_eq!(ooms[5].1.requested_bytes, None);
    assert_eq!(ooms[5].0.line, 6);
}

#[test]
fn cuda_malloc_async_detail_lines_fold_into_one_match() {
    let log = fixture("pytorch_async_backend.log");
    assert_eq!(log.matches.len(), 1, "{:#?}", log.matches);
    let (m, n, _) = log.best_oom().unwrap_or_else(|| panic!("no OOM"));
    assert_eq!(m.line, 3);
    assert_eq!(n.allocated_bytes, Some(gib(125.30)));
    assert_eq!(n.requested_bytes, Some(gib(27.84)));
    assert_eq!(n.total_bytes, Some(gib(139.80)));
    assert_eq!(n.free_bytes, Some(mib(31.12)));
    assert_eq!(
        n.allowed_bytes, None,
        "an unset fraction prints an absurd limit, not a cap"
    );
}

#[test]
fn tensorflow_ooms_with_sizes_from_shapes() {
    let log = fixture("tensorflow.log");
    assert_eq!(log.matches.len(), 4, "{:#?}", log.matches);
    let fatal: Vec<_> = log.ooms().collect();
    assert_eq!(fatal.len(), 3, "the 'not a failure' warning is not an OOM");
    assert_eq!(fatal[0].1.requested_bytes, Some(33_554_432));
    assert_eq!(fatal[1].1.requested_bytes, Some(128 * 768 * 4));
    assert_eq!(fatal[1].1.device_index, Some(0));
    assert_eq!(fatal[2].1.requested_bytes, Some(128 * 128 * 109 * 109 * 4));
    assert_eq!(fatal[2].1.device_index, Some(1));
    assert!(matches!(
        log.matches[1].kind,
        LineKind::OutOfMemory {
            non_fatal: true,
            ..
        }
    ));
    assert!(fatal.iter().all(|(_, _, f)| *f == Framework::TensorFlow));
}

#[test]
fn jax_and_xla_ooms_including_host_memory() {
    let log = fixture("jax.log");
    let kinds: Vec<_> = log.matches.iter().map(|m| m.line).collect();
    assert_eq!(kinds, vec![1, 3, 4, 5, 6], "{:#?}", log.matches);
    let ooms: Vec<_> = log.ooms().collect();
    assert_eq!(ooms.len(), 4, "host-memory OOM is not a GPU OOM");
    assert_eq!(
        ooms[0].1.requested_bytes,
        Some(4_398_046_511_104),
        "BFC rounded size"
    );
    assert_eq!(ooms[1].1.requested_bytes, Some(4 * 1024 * GIB));
    assert_eq!(ooms[1].1.device_index, Some(0));
    assert_eq!(ooms[2].1.requested_bytes, Some(3_743_729_664));
    assert_eq!(ooms[3].1.requested_bytes, Some(24));
    assert!(matches!(
        log.matches[4].kind,
        LineKind::OutOfMemory {
            host_memory: true,
            ..
        }
    ));
}

#[test]
fn xid_lines_are_decoded_with_pid_and_process() {
    let log = fixture("dmesg_xid.log");
    let xids: Vec<_> = log
        .matches
        .iter()
        .filter_map(|m| match &m.kind {
            LineKind::Xid {
                code,
                pid,
                process,
                pci,
                ..
            } => Some((m.line, *code, *pid, process.clone(), pci.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        xids,
        vec![
            (
                2,
                31,
                Some(951),
                Some("python3".to_owned()),
                "0000:00:06".to_owned()
            ),
            (
                3,
                43,
                Some(1196),
                Some("python3".to_owned()),
                "0000:00:06".to_owned()
            ),
            (4, 63, None, None, "0000:10:1c".to_owned()),
            (5, 94, None, None, "0000:01:00".to_owned()),
            (6, 79, Some(0), None, "0000:01:00".to_owned()),
            (8, 32, None, None, "0000:01:00".to_owned()),
        ]
    );
    let by_line = |line| {
        log.matches
            .iter()
            .find(|m| m.line == line)
            .map(|m| m.category)
    };
    assert_eq!(by_line(4), Some(Category::RowRemap));
    assert_eq!(by_line(5), Some(Category::Ecc));
    assert_eq!(by_line(7), Some(Category::Xid), "fallen off the bus");
    assert!(
        log.matches
            .iter()
            .all(|m| m.wizard == Wizard::HardwareAndDriver)
    );
}

#[test]
fn cuda_errors_by_message_name_and_library() {
    let log = fixture("cuda_errors.log");
    let summary: Vec<(usize, String)> = log
        .matches
        .iter()
        .map(|m| {
            let what = match &m.kind {
                LineKind::CudaError { code, name } => format!("cuda {} {name}", code.unwrap_or(0)),
                LineKind::Cudnn { status } => format!("cudnn {status}"),
                LineKind::Cublas { status } => format!("cublas {status}"),
                LineKind::OutOfMemory { framework, .. } => format!("oom {framework:?}"),
                other => format!("{other:?}"),
            };
            (m.line, what)
        })
        .collect();
    let expected: Vec<(usize, String)> = vec![
        (3, "cuda 700 cudaErrorIllegalAddress".into()),
        (9, "cuda 710 cudaErrorAssert".into()),
        (10, "cuda 700 cudaErrorIllegalAddress".into()),
        (11, "cuda 214 cudaErrorECCUncorrectable".into()),
        (12, "cudnn CUDNN_STATUS_NOT_INITIALIZED".into()),
        (13, "cublas CUBLAS_STATUS_ALLOC_FAILED".into()),
        (14, "oom Cuda".into()),
        (15, "cuda 35 cudaErrorInsufficientDriver".into()),
    ];
    assert_eq!(summary, expected);
    let category = |line| {
        log.matches
            .iter()
            .find(|m| m.line == line)
            .map(|m| m.category)
    };
    assert_eq!(category(11), Some(Category::Ecc));
    assert_eq!(category(13), Some(Category::Capacity));
    assert_eq!(category(15), Some(Category::DriverMismatch));
}

#[test]
fn versions_found_in_logs() {
    let log = analyze_text(
        "| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2 |\ntorch 2.5.1+cu124 on Python 3.11\n",
        "env.txt",
    );
    assert_eq!(
        log.versions.driver_version,
        Some(("535.104.05".to_owned(), 1))
    );
    assert_eq!(log.versions.framework_cuda, Some(((12, 4), 2)));
}

#[test]
fn binary_garbage_and_empty_input_are_harmless() {
    // Text first: bytes that are not UTF-8 later on cost nothing and hide no line.
    let mut bytes: Vec<u8> = b"epoch 1\n".repeat(1000);
    bytes.extend((1..=255u8).cycle().take(100_000));
    bytes.extend_from_slice(b"\nCUDA_ERROR_LAUNCH_FAILED\n");
    let log = vramscope_core::diagnose::log::analyze_reader(bytes.as_slice(), "garbage.txt")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(log.matches.len(), 1);
    // Binary from the first byte is refused, not read as an empty (healthy) log.
    let binary: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
    let refused = vramscope_core::diagnose::log::analyze_reader(binary.as_slice(), "garbage.bin");
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::InvalidData),
        "{refused:?}"
    );
    assert_eq!(analyze_text("", "empty").lines_read, 0);
    let missing = analyze_file(std::path::Path::new("/nonexistent/dir/train.log"));
    let message = missing.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("/nonexistent/dir/train.log"), "{message}");
}

#[test]
fn colour_codes_are_stripped_before_matching() {
    let log = analyze_text(
        "\u{1b}[31mRuntimeError: CUDA error: device-side assert triggered\u{1b}[0m\n",
        "coloured.log",
    );
    assert_eq!(log.matches.len(), 1);
    assert_eq!(
        log.matches[0].text,
        "RuntimeError: CUDA error: device-side assert triggered"
    );
}

#[test]
fn numeric_cuda_error_codes_are_looked_up() {
    let log = analyze_text(
        "kernel.cu:42: CUDA error 700 at cudaMemcpy\nCUDA Error: code 2\n",
        "numbers.log",
    );
    assert_eq!(log.matches.len(), 2, "{:#?}", log.matches);
    assert!(matches!(
        &log.matches[0].kind,
        LineKind::CudaError {
            code: Some(700),
            ..
        }
    ));
    assert_eq!(log.matches[0].category, Category::CudaError);
    assert!(matches!(
        &log.matches[1].kind,
        LineKind::OutOfMemory {
            framework: Framework::Cuda,
            ..
        }
    ));
}

#[test]
fn nvidia_smi_q_of_a_healthy_h200_has_nothing_to_report_but_its_driver() {
    let log = fixture("nvidia_smi_q_h200.txt");
    assert!(log.matches.is_empty(), "{:#?}", log.matches);
    assert_eq!(
        log.versions.driver_version.as_ref().map(|v| v.0.as_str()),
        Some("580.159.04")
    );
}

#[test]
fn nvidia_smi_q_uncorrectable_counts_and_remap_flags_are_recognised() {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/logs/nvidia_smi_q_h200.txt");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{e}"));
    let sick = text
        .replacen(
            "DRAM Uncorrectable                         : 0",
            "DRAM Uncorrectable                         : 2",
            1,
        )
        .replace(
            "Remapping Failure Occurred                     : No",
            "Remapping Failure Occurred                     : Yes",
        );
    assert_ne!(sick, text, "the fixture has the lines this test edits");
    let log = analyze_text(&sick, "smi.txt");
    let kinds: Vec<(usize, Category)> = log.matches.iter().map(|m| (m.line, m.category)).collect();
    assert_eq!(
        kinds,
        vec![(152, Category::Ecc), (179, Category::RowRemap)],
        "{:#?}",
        log.matches
    );
    assert!(matches!(
        log.matches[1].kind,
        LineKind::RowRemap { failed: true }
    ));
}

#[test]
fn per_step_figures_stay_bounded_and_cover_the_whole_log() {
    use vramscope_core::diagnose::log::MAX_STEP_POINTS;
    let steps = MAX_STEP_POINTS as u64 + 100_000;
    let mut text = String::new();
    for step in 0..steps {
        text.push_str(&format!(
            "step {step} allocated {} MiB\n",
            1000 + step / 100
        ));
    }
    let log = analyze_text(&text, "long.log");
    let series = &log.step_series;
    assert_eq!(series.len(), 1);
    let points = &series[0].points;
    assert!(
        points.len() <= MAX_STEP_POINTS && points.len() >= MAX_STEP_POINTS / 4,
        "{}",
        points.len()
    );
    assert_eq!(points[0].step, 0);
    assert!(
        points.last().is_some_and(|p| p.step >= steps - 10),
        "sampled to the end"
    );
    assert!(points.windows(2).all(|w| w[1].step > w[0].step));
}

#[test]
fn binary_files_given_as_logs_are_refused_saying_what_they_are() {
    use vramscope_core::diagnose::log::{LogError, analyze_bytes, sniff_not_text};
    use vramscope_core::formats::sniff::FileKind as NotTextKind;
    let cases: [(&[u8], NotTextKind); 7] = [
        (b"\x80\x04\x95\x10\x00\x00\x00", NotTextKind::Pickle),
        (b"\x80\x02}q\x00", NotTextKind::Pickle),
        (b"VRAMCAP\x1a\x01\x00", NotTextKind::Vramcap),
        (b"\x89PNG\r\n\x1a\n\x00\x00", NotTextKind::Png),
        (b"\x1f\x8b\x08\x00", NotTextKind::Gzip),
        (b"PK\x03\x04\x14\x00", NotTextKind::Zip),
        (b"\xff\xfes\x00t\x00", NotTextKind::Utf16),
    ];
    for (head, kind) in cases {
        assert_eq!(sniff_not_text(head), Some(kind), "{head:?}");
        let error = analyze_bytes(head, "x.log").err();
        assert!(
            matches!(error, Some(LogError::NotText { kind: k, .. }) if k == kind),
            "{error:?}"
        );
    }
    assert_eq!(
        sniff_not_text(b"step 1\x00 allocated"),
        Some(NotTextKind::Binary)
    );
    assert_eq!(
        sniff_not_text("step 1 allocated 2 GiB \u{2192} ok\n".as_bytes()),
        None
    );
    assert_eq!(sniff_not_text(b""), None);

    // The pickle of a real case, given as a log: an error naming the file, what it is and the flag.
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cases/leak.pickle");
    let message = analyze_file(&path)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(message.contains("leak.pickle"), "{message}");
    assert!(message.contains("pickle"), "{message}");
    assert!(message.contains("--snapshot"), "{message}");
}

#[test]
fn per_step_memory_lines_count_as_recognised() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cases/leak.log");
    let log = analyze_file(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(log.lines_read, 42);
    assert!(log.matches.is_empty());
    assert_eq!(log.recognised_lines(), 40);
    assert_eq!(log.recognised_summary(), "40 recognised lines of 42");

    let one = analyze_text("hello\nstep 3 allocated 2.5 GiB\n", "one.log");
    assert_eq!(one.recognised_summary(), "1 recognised line of 2");
    // A line that is both an OOM and a step figure counts once.
    let both = analyze_text(
        "step 7 memory 3 GiB RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n",
        "both.log",
    );
    assert_eq!(both.matches.len(), 1);
    assert_eq!(both.recognised_lines(), 1);
}
