//! Fleet tests against a real Prometheus server (Debian's `prometheus` package, which `.ci/run`
//! installs): the server runs on loopback with a temporary configuration and storage, scrapes
//! `vramscope exporter --demo` and an endpoint in dcgm-exporter's format served by the test, and
//! `vramscope pull` / `diagnose --prometheus` read it back. A second test loads 1,000 GPU series.
//! The client's authentication and error messages are checked against a fake API served here.

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::support::cli::vramscope;
use vramscope_core::formats::vramcap;
use vramscope_core::model::{Capture, EventKind, MIB};
use vramscope_core::source::demo::scenario;

const VRAMSCOPE: &str = env!("CARGO_BIN_EXE_vramscope");

/// A child process killed when the test ends, however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
    listener.local_addr().expect("its address").port()
}

/// Serves `page()` at every path on a loopback port, like an exporter's /metrics.
fn serve_metrics(
    page: impl Fn() -> String + Send + Sync + 'static,
) -> (u16, Arc<tiny_http::Server>) {
    let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("a loopback endpoint"));
    let port = server.server_addr().to_ip().expect("an IP endpoint").port();
    let worker = Arc::clone(&server);
    std::thread::spawn(move || {
        while let Ok(request) = worker.recv() {
            let _ = request.respond(tiny_http::Response::from_string(page()));
        }
    });
    (port, server)
}

fn http_get(url: &str) -> Option<String> {
    let mut response = ureq::get(url).call().ok()?;
    response.body_mut().read_to_string().ok()
}

/// The Prometheus binary: Debian installs it as `prometheus` on the PATH.
fn prometheus_binary() -> PathBuf {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join("prometheus"))
        .find(|path| path.is_file());
    found.unwrap_or_else(|| {
        panic!(
            "these tests need a Prometheus server: `apt-get install prometheus` (Debian's package; \
             .ci/run installs it)"
        )
    })
}

/// Starts Prometheus on loopback scraping `targets` (job name, port) every second.
fn start_prometheus(dir: &Path, targets: &[(&str, u16)]) -> (Running, String) {
    let (running, port) = spawn_prometheus(dir, targets, None);
    let url = format!("http://127.0.0.1:{port}");
    wait_until(Duration::from_secs(60), "Prometheus to be ready", || {
        http_get(&format!("{url}/-/ready")).is_some()
    });
    (running, url)
}

/// Starts Prometheus (with a web configuration: TLS, users) and returns it with its port.
fn spawn_prometheus(
    dir: &Path,
    targets: &[(&str, u16)],
    web_config: Option<&Path>,
) -> (Running, u16) {
    let mut config =
        String::from("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n");
    for (job, port) in targets {
        config.push_str(&format!(
            "  - job_name: {job}\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
        ));
    }
    let config_path = dir.join("prometheus.yml");
    std::fs::write(&config_path, config).expect("write the Prometheus configuration");
    let port = free_port();
    let mut command = Command::new(prometheus_binary());
    command
        .arg(format!("--config.file={}", config_path.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"));
    if let Some(web_config) = web_config {
        command.arg(format!("--web.config.file={}", web_config.display()));
    }
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start prometheus");
    (Running(child), port)
}

fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "waited {limit:?} for {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The value of an instant query that returns one number (0 when it returns nothing yet).
fn instant_value(url: &str, query: &str) -> f64 {
    let body = ureq::get(&format!("{url}/api/v1/query"))
        .query("query", query)
        .call()
        .ok()
        .and_then(|mut r| r.body_mut().read_to_string().ok());
    let Some(body) = body else { return 0.0 };
    let json: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    json["data"]["result"][0]["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// How many samples of `metric` Prometheus holds over the last minute (summed over series).
fn samples_held(url: &str, metric: &str) -> usize {
    instant_value(url, &format!("sum(count_over_time({metric}[1m]))")) as usize
}

fn pull(url: &str, out: &Path, extra: &[&str]) -> Capture {
    let mut args = vec![
        "pull",
        "--prometheus",
        url,
        "--out",
        out.to_str().expect("utf-8 path"),
    ];
    args.extend_from_slice(extra);
    let output = vramscope(&args);
    assert!(
        output.status.success(),
        "pull failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    vramcap::read_file(out).expect("the pulled capture opens")
}

/// One GPU of the dcgm-exporter endpoint: host, index, MiB used, MiB reserved, MiB total.
struct DcgmGpu {
    host: &'static str,
    gpu: u32,
    used_mib: u64,
    total_mib: u64,
}

const RESERVED_MIB: u64 = 616;

fn dcgm_page(gpus: &[DcgmGpu], xid_on_last: u64, remapped_on_last: u64) -> String {
    let mut page = String::new();
    for (name, kind) in [
        ("DCGM_FI_DEV_FB_FREE", "gauge"),
        ("DCGM_FI_DEV_FB_USED", "gauge"),
        ("DCGM_FI_DEV_FB_RESERVED", "gauge"),
        ("DCGM_FI_DEV_XID_ERRORS", "gauge"),
        ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter"),
        ("DCGM_FI_DEV_GPU_TEMP", "gauge"),
    ] {
        page.push_str(&format!("# HELP {name} test\n# TYPE {name} {kind}\n"));
        for (i, gpu) in gpus.iter().enumerate() {
            let last = i + 1 == gpus.len();
            let value = match name {
                "DCGM_FI_DEV_FB_FREE" => gpu.total_mib - gpu.used_mib - RESERVED_MIB,
                "DCGM_FI_DEV_FB_USED" => gpu.used_mib,
                "DCGM_FI_DEV_FB_RESERVED" => RESERVED_MIB,
                "DCGM_FI_DEV_XID_ERRORS" => {
                    if last {
                        xid_on_last
                    } else {
                        0
                    }
                }
                "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS" => {
                    if last {
                        remapped_on_last
                    } else {
                        0
                    }
                }
                _ => 40 + u64::from(gpu.gpu),
            };
            page.push_str(&format!(
                "{name}{{gpu=\"{g}\",UUID=\"GPU-{h}-{g}\",pci_bus_id=\"00000000:{g:02X}:00.0\",device=\"nvidia{g}\",modelName=\"NVIDIA H200\",Hostname=\"{h}\",container=\"trainer\",namespace=\"ml\",pod=\"train-{h}-{g}\"}} {value}\n",
                g = gpu.gpu,
                h = gpu.host,
            ));
        }
    }
    page
}

#[test]
fn pull_and_diagnose_a_real_prometheus_scraping_vramscope_and_dcgm_exporter() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let gpus = [
        DcgmGpu {
            host: "node-a",
            gpu: 0,
            used_mib: 10_000,
            total_mib: 143_771,
        },
        DcgmGpu {
            host: "node-a",
            gpu: 1,
            used_mib: 137_000,
            total_mib: 143_771,
        },
        DcgmGpu {
            host: "node-b",
            gpu: 0,
            used_mib: 20_000,
            total_mib: 143_771,
        },
    ];
    // After the switch, node-b's GPU logs Xid 79 and remaps two rows.
    let switched = Arc::new(AtomicBool::new(false));
    let page_switched = Arc::clone(&switched);
    let (dcgm_port, _dcgm) = serve_metrics(move || {
        if page_switched.load(Ordering::SeqCst) {
            dcgm_page(&gpus, 79, 2)
        } else {
            dcgm_page(&gpus, 0, 0)
        }
    });
    let exporter_port = free_port();
    let exporter = Running(
        Command::new(VRAMSCOPE)
            .args(["exporter", "--demo", "--interval-ms", "250", "--listen"])
            .arg(format!("127.0.0.1:{exporter_port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start vramscope exporter --demo"),
    );
    let (_prometheus, url) = start_prometheus(
        dir.path(),
        &[("dcgm", dcgm_port), ("vramscope", exporter_port)],
    );

    // The exporter serves the simulated machine, saying so.
    let metrics_url = format!("http://127.0.0.1:{exporter_port}/metrics");
    wait_until(
        Duration::from_secs(30),
        "the exporter's first sample",
        || http_get(&metrics_url).is_some_and(|p| p.contains("vramscope_gpu_memory_used_bytes{")),
    );
    let page = http_get(&metrics_url).unwrap_or_default();
    assert!(
        page.contains("modelName=\"NVIDIA H200 (simulated)\""),
        "{page}"
    );
    assert!(page.contains("simulated=\"true\""));

    wait_until(
        Duration::from_secs(60),
        "six scrapes of both endpoints",
        || {
            samples_held(&url, "DCGM_FI_DEV_FB_USED") >= 18
                && samples_held(&url, "vramscope_gpu_memory_used_bytes") >= 12
        },
    );
    switched.store(true, Ordering::SeqCst);
    wait_until(Duration::from_secs(30), "scrapes after the Xid", || {
        instant_value(&url, "sum(sum_over_time(DCGM_FI_DEV_XID_ERRORS[1m]))") >= 3.0 * 79.0
    });

    // A second exporter on the same port, and one on a bad address: clear errors, exit 1.
    let in_use = vramscope(&[
        "exporter",
        "--demo",
        "--listen",
        &format!("127.0.0.1:{exporter_port}"),
    ]);
    assert_eq!(in_use.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&in_use.stderr).contains("already in use"),
        "{:?}",
        in_use
    );
    let bad = vramscope(&["exporter", "--demo", "--listen", "localhost"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not an address to listen on"));
    drop(exporter);

    let out = dir.path().join("fleet.vramcap");
    let capture = pull(&url, &out, &["--since", "3m", "--step", "1s"]);
    let labels: Vec<String> = capture.devices.iter().map(|d| d.label()).collect();
    assert_eq!(
        labels,
        [
            "demo (simulated) GPU 0",
            "demo (simulated) GPU 1",
            "node-a GPU 0",
            "node-a GPU 1",
            "node-b GPU 0"
        ]
    );
    assert!(
        capture.is_simulated(),
        "the demo exporter's GPUs are simulated"
    );
    let node_a0 = &capture.devices[2];
    assert!(!node_a0.simulated);
    assert_eq!(node_a0.name, "NVIDIA H200");
    assert_eq!(node_a0.uuid, "GPU-node-a-0");
    assert_eq!(node_a0.pci_bus_id, "00000000:00:00.0");
    assert_eq!(node_a0.memory_total_bytes, 143_771 * MIB);
    for (key, value) in [
        ("pod", "train-node-a-0"),
        ("namespace", "ml"),
        ("modelName", "NVIDIA H200"),
        ("Hostname", "node-a"),
        ("gpu", "0"),
        ("job", "dcgm"),
    ] {
        assert_eq!(
            node_a0.labels.get(key).map(String::as_str),
            Some(value),
            "label {key}"
        );
    }
    // Every sample of the dcgm GPUs carries exactly the MiB the endpoint served, in bytes.
    for (device, used_mib, temperature_c) in [(2, 10_000, 40), (3, 137_000, 41), (4, 20_000, 40)] {
        let series = capture.series(device).expect("a series per GPU");
        assert!(series.len() >= 6, "GPU {device}: {} samples", series.len());
        for sample in series.iter() {
            let memory = sample.memory.expect("memory in every sample");
            assert_eq!(memory.used_bytes, used_mib * MIB);
            assert_eq!(memory.reserved_bytes, RESERVED_MIB * MIB);
            assert_eq!(memory.total_bytes, 143_771 * MIB);
            assert_eq!(memory.free_bytes, (143_771 - used_mib - RESERVED_MIB) * MIB);
            assert_eq!(sample.temperature_c, Some(temperature_c));
        }
    }
    let xids: Vec<(Option<u32>, u64)> = capture
        .events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Xid { code, .. } => Some((e.device_index, code)),
            _ => None,
        })
        .collect();
    assert!(xids.contains(&(Some(4), 79)), "{xids:?}");
    assert_eq!(
        xids.iter().filter(|x| x.0 == Some(4)).count(),
        1,
        "one change of dcgm's last-Xid gauge: one event"
    );
    let last_remap = capture
        .health
        .iter()
        .filter(|h| h.device_index == 4)
        .filter_map(|h| h.remapped_rows_uncorrectable)
        .next_back();
    assert_eq!(last_remap, Some(2));
    // The demo GPUs: exact sizes and the driver's reserve of the simulated H200, and processes.
    for device in [0, 1] {
        let facts = &capture.devices[device as usize];
        assert!(facts.simulated);
        assert_eq!(facts.name, "NVIDIA H200 (simulated)");
        assert_eq!(facts.memory_total_bytes, scenario::TOTAL_BYTES);
        let series = capture.series(device).expect("demo series");
        assert!(!series.is_empty());
        for sample in series.iter() {
            let memory = sample.memory.expect("memory");
            assert_eq!(
                (memory.total_bytes, memory.reserved_bytes),
                (scenario::TOTAL_BYTES, scenario::RESERVED_BYTES)
            );
            assert!(
                memory.used_bytes + memory.reserved_bytes + memory.free_bytes == memory.total_bytes
            );
        }
    }
    assert!(
        capture
            .processes
            .iter()
            .any(|p| p.device_index <= 1 && p.name.contains("(simulated)")),
        "the demo's processes come through vramscope_gpu_process_memory_used_bytes"
    );

    // The capture opens in every other command.
    let inspect = vramscope(&["inspect", out.to_str().unwrap_or_default(), "--json"]);
    assert!(inspect.status.success());
    let inspected: serde_json::Value =
        serde_json::from_slice(&inspect.stdout).expect("inspect --json");
    assert_eq!(inspected["source"], "prometheus");
    assert_eq!(inspected["devices"][4]["host"], "node-b");

    // Diagnose the fleet straight from the server: every problem names its host and GPU.
    let diagnose = vramscope(&[
        "diagnose",
        "--prometheus",
        &url,
        "--since",
        "3m",
        "--step",
        "1s",
        "--json",
    ]);
    assert!(
        diagnose.status.success(),
        "{}",
        String::from_utf8_lossy(&diagnose.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&diagnose.stdout).expect("diagnose --json");
    let titles: Vec<&str> = report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter_map(|f| f["title"].as_str())
        .collect();
    for expected in [
        "node-a GPU 1 ran near full",
        "Xid 79 on node-b GPU 0",
        "node-b GPU 0: 2 memory row(s) remapped",
    ] {
        assert!(
            titles
                .iter()
                .any(|t| t.starts_with(expected) || t.contains(expected)),
            "no {expected:?} in {titles:#?}"
        );
    }
    assert!(
        !titles.iter().any(|t| t.contains("node-a GPU 0")),
        "node-a GPU 0 is healthy: {titles:#?}"
    );

    // A selector the server refuses is shown with the query, also over a range that holds no
    // GPU series at all (an hour before the server started): the refusal is not lost behind
    // "no GPU series".
    let an_hour_ago_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() - 3_600)
        .unwrap_or_default();
    let refused = vramscope(&[
        "pull",
        "--prometheus",
        &url,
        "--match",
        "Hostname=~\"(\"",
        "--start",
        &(an_hour_ago_s - 60).to_string(),
        "--end",
        &an_hour_ago_s.to_string(),
        "--out",
        dir.path().join("x.vramcap").to_str().unwrap_or_default(),
    ]);
    assert_eq!(refused.status.code(), Some(1));
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(
        message.contains("refused the query `") && message.contains("Hostname=~\"(\""),
        "{message}"
    );
}

#[test]
fn a_thousand_gpus_pull_exactly() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let hosts: Vec<&'static str> = (0..125)
        .map(|h| &*Box::leak(format!("gpu-node-{h:03}").into_boxed_str()))
        .collect();
    let gpus: Vec<DcgmGpu> = hosts
        .iter()
        .flat_map(|&host| {
            (0..8).map(move |gpu| DcgmGpu {
                host,
                gpu,
                used_mib: 1_000 + 7 * u64::from(gpu) + host.len() as u64,
                total_mib: 81_559,
            })
        })
        .collect();
    let expected: Vec<(String, u64)> = gpus
        .iter()
        .map(|g| (format!("{} GPU {}", g.host, g.gpu), g.used_mib))
        .collect();
    let page = Arc::new(Mutex::new(dcgm_page(&gpus, 0, 0)));
    let served = Arc::clone(&page);
    let (port, _server) =
        serve_metrics(move || served.lock().map(|p| p.clone()).unwrap_or_default());
    let (_prometheus, url) = start_prometheus(dir.path(), &[("dcgm", port)]);
    wait_until(
        Duration::from_secs(90),
        "five scrapes of 1,000 GPUs",
        || samples_held(&url, "DCGM_FI_DEV_FB_USED") >= 5_000,
    );
    let out = dir.path().join("thousand.vramcap");
    let started = Instant::now();
    let capture = pull(&url, &out, &["--since", "2m", "--step", "1s"]);
    eprintln!(
        "pulled 1,000 GPUs in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let labels: Vec<(String, u64)> = capture
        .devices
        .iter()
        .map(|d| {
            let series = capture.series(d.index).expect("a series per GPU");
            let used: Vec<u64> = series
                .iter()
                .filter_map(|s| s.memory.map(|m| m.used_bytes / MIB))
                .collect();
            assert!(used.len() >= 4, "{}: {} samples", d.label(), used.len());
            assert!(
                used.iter().all(|&u| u == used[0]),
                "{}: {used:?}",
                d.label()
            );
            (d.label(), used[0])
        })
        .collect();
    let mut expected_sorted = expected;
    expected_sorted.sort();
    assert_eq!(labels, expected_sorted);
    assert!(
        capture
            .devices
            .iter()
            .all(|d| d.memory_total_bytes == 81_559 * MIB)
    );
}

/// A fake Prometheus API that wants a bearer token (or basic user) and refuses one query.
fn fake_api(expected_authorization: &'static str) -> String {
    let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("a loopback endpoint"));
    let port = server.server_addr().to_ip().expect("an IP endpoint").port();
    std::thread::spawn(move || {
        while let Ok(request) = server.recv() {
            let authorized = request.headers().iter().any(|h| {
                h.field.equiv("Authorization") && h.value.as_str() == expected_authorization
            });
            let url = request.url().to_owned();
            let (status, body) = if !authorized {
                (401, "Unauthorized".to_owned())
            } else if url.starts_with("/api/v1/label/__name__/values") {
                (
                    200,
                    r#"{"status":"success","data":["DCGM_FI_DEV_FB_USED","DCGM_FI_DEV_FB_FREE"]}"#
                        .to_owned(),
                )
            } else if url.contains("FB_FREE") {
                (422, r#"{"status":"error","errorType":"execution","error":"query processing would load too many samples into memory"}"#.to_owned())
            } else {
                (200, r#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"Hostname":"n","gpu":"0"},"values":[[1000,"5"]]}]}}"#.to_owned())
            };
            let _ =
                request.respond(tiny_http::Response::from_string(body).with_status_code(status));
        }
    });
    format!("http://127.0.0.1:{port}")
}

#[test]
fn tokens_and_users_are_sent_and_refusals_name_the_query() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let out = dir.path().join("x.vramcap");
    let out = out.to_str().unwrap_or_default();
    let url = fake_api("Bearer s3cret");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret\n").expect("write the token");
    let denied = vramscope(&["pull", "--prometheus", &url, "--since", "1m", "--out", out]);
    assert_eq!(denied.status.code(), Some(1));
    let message = String::from_utf8_lossy(&denied.stderr);
    assert!(
        message.contains("answered 401") && message.contains("--bearer-token-file"),
        "{message}"
    );
    let refused = vramscope(&[
        "pull",
        "--prometheus",
        &url,
        "--since",
        "1m",
        "--out",
        out,
        "--bearer-token-file",
        token_file.to_str().unwrap_or_default(),
    ]);
    let message = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{message}");
    assert!(
        message.contains("refused the query `DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE` (422 execution): query processing would load too many samples"),
        "{message}"
    );
    let basic = fake_api("Basic dXNlcjpwYXNz");
    let with_user = vramscope(&[
        "pull",
        "--prometheus",
        &basic,
        "--since",
        "1m",
        "--out",
        out,
        "--user",
        "user:pass",
    ]);
    assert!(
        String::from_utf8_lossy(&with_user.stderr).contains("refused the query"),
        "authenticated, then refused: {with_user:?}"
    );
    let unreachable = vramscope(&[
        "pull",
        "--prometheus",
        &format!("http://127.0.0.1:{}", free_port()),
        "--out",
        out,
    ]);
    assert_eq!(unreachable.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&unreachable.stderr)
            .contains("cannot reach Prometheus at http://127.0.0.1:")
    );
}

#[test]
fn the_exporter_serves_and_stops_on_sigterm() {
    let port = free_port();
    let mut exporter = Command::new(VRAMSCOPE)
        .args(["exporter", "--demo", "--interval-ms", "100", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the exporter");
    let url = format!("http://127.0.0.1:{port}");
    wait_until(Duration::from_secs(30), "a sample on /metrics", || {
        http_get(&format!("{url}/metrics")).is_some_and(|p| p.contains("vramscope_gpu_up{"))
    });
    let page = http_get(&format!("{url}/metrics")).unwrap_or_default();
    for expected in [
        "# TYPE vramscope_gpu_memory_used_bytes gauge",
        "# TYPE vramscope_gpu_xid_errors_total counter",
        "Hostname=\"demo (simulated)\"",
        "vramscope_gpu_process_memory_used_bytes{gpu=\"0\"",
        "vramscope_gpu_temperature_celsius{",
    ] {
        assert!(page.contains(expected), "missing {expected:?}");
    }
    let missing = ureq::get(&format!("{url}/nothing")).call();
    assert!(
        matches!(missing, Err(ureq::Error::StatusCode(404))),
        "{missing:?}"
    );
    // SAFETY: sends SIGTERM to the child we started.
    unsafe {
        libc::kill(exporter.id() as i32, libc::SIGTERM);
    }
    let status = exporter.wait().expect("the exporter ends");
    assert!(status.success(), "{status:?}");
    let mut stderr = String::new();
    exporter
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("stderr text");
    assert!(
        stderr.contains("SIMULATED") && stderr.contains("exporter stopped"),
        "{stderr}"
    );
}

/// bcrypt of "s3cret-pass" (generated once with crypt(3)), for Prometheus's basic_auth_users.
const PASSWORD_HASH: &str = "$2b$10$abcdefghijklmnopqrstuuf8IDzradNoVu7dQxKrv4wH5ASwrrEI6";

#[test]
fn https_with_a_private_ca_and_basic_auth() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    // A private CA and a server certificate it signed, as a company's internal PKI would issue.
    let path = |name: &str| dir.path().join(name);
    let (ca, cert, key) = (path("ca.pem"), path("cert.pem"), path("key.pem"));
    std::fs::write(
        path("ext.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n",
    )
    .expect("write the certificate extensions");
    let openssl = |args: &[&str]| {
        let made = Command::new("openssl")
            .current_dir(dir.path())
            .args(args)
            .output()
            .expect("openssl makes the test certificates (apt-get install openssl)");
        assert!(
            made.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&made.stderr)
        );
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=vramscope test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        "key.pem",
        "-out",
        "server.csr",
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
        "-out",
        "cert.pem",
    ]);
    let web_config = dir.path().join("web.yml");
    std::fs::write(
        &web_config,
        format!(
            "tls_server_config:\n  cert_file: {}\n  key_file: {}\nbasic_auth_users:\n  vramscope: {PASSWORD_HASH}\n",
            cert.display(),
            key.display()
        ),
    )
    .expect("write the web configuration");
    let gpus = [DcgmGpu {
        host: "node-tls",
        gpu: 0,
        used_mib: 4_242,
        total_mib: 81_559,
    }];
    let (dcgm_port, _dcgm) = serve_metrics(move || dcgm_page(&gpus, 0, 0));
    let (_prometheus, port) =
        spawn_prometheus(dir.path(), &[("dcgm", dcgm_port)], Some(&web_config));
    let url = format!("https://127.0.0.1:{port}");
    let out = dir.path().join("tls.vramcap");
    let out_text = out.to_str().unwrap_or_default().to_owned();
    let ca_text = ca.to_str().unwrap_or_default().to_owned();
    let args = |extra: &[&str]| {
        let mut args = vec![
            "pull",
            "--prometheus",
            url.as_str(),
            "--since",
            "1m",
            "--step",
            "1s",
            "--force",
            "--out",
            out_text.as_str(),
        ];
        args.extend_from_slice(extra);
        vramscope(&args)
    };
    // The server starts, then scrapes: wait until a pull finds the GPU with a few samples.
    wait_until(
        Duration::from_secs(60),
        "an authenticated HTTPS pull with samples",
        || {
            let output = args(&["--ca-cert", &ca_text, "--user", "vramscope:s3cret-pass"]);
            output.status.success() && vramcap::read_file(&out).is_ok_and(|c| c.sample_count() >= 3)
        },
    );
    let capture = vramcap::read_file(&out).expect("the pulled capture");
    assert_eq!(capture.devices.len(), 1);
    assert_eq!(capture.devices[0].label(), "node-tls GPU 0");
    assert!(
        capture.series[0]
            .iter()
            .all(|s| s.memory.map(|m| m.used_bytes) == Some(4_242 * MIB))
    );
    let untrusted = args(&["--user", "vramscope:s3cret-pass"]);
    assert_eq!(untrusted.status.code(), Some(1));
    let message = String::from_utf8_lossy(&untrusted.stderr);
    assert!(
        message.contains("cannot reach Prometheus at https://127.0.0.1:")
            && message.to_lowercase().contains("certificate"),
        "{message}"
    );
    let wrong_password = args(&["--ca-cert", &ca_text, "--user", "vramscope:wrong"]);
    assert_eq!(wrong_password.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&wrong_password.stderr).contains("answered 401"),
        "{wrong_password:?}"
    );
}
