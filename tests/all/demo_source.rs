//! The demo source: deterministic, labelled simulated everywhere, and containing every scripted
//! incident within one cycle, found from the data it produces.

use vramscope_core::analysis::threshold::crossings;
use vramscope_core::model::{EventKind, FieldState, GIB, SampleBatch, SourceKind};
use vramscope_core::source::demo::scenario::SCENARIO_CYCLE_MS;
use vramscope_core::source::demo::{DemoConfig, DemoSource, generate_capture};
use vramscope_core::source::{Source, Tiers};

const START_MS: i64 = 1_780_000_000_000;
const BOTH: Tiers = Tiers {
    fast: true,
    slow: true,
};

fn poll_series(source: &mut DemoSource, times: impl IntoIterator<Item = i64>) -> Vec<SampleBatch> {
    times.into_iter().map(|t| source.poll(t, BOTH)).collect()
}

#[test]
fn same_start_gives_identical_batches() {
    let times = (0..400).map(|i| START_MS + i * 2_347);
    let a = poll_series(&mut DemoSource::new(START_MS), times.clone());
    let b = poll_series(&mut DemoSource::new(START_MS), times);
    assert_eq!(a, b);
    assert!(
        a.iter().any(|batch| !batch.events.is_empty()),
        "the window holds events"
    );
    assert_eq!(
        DemoSource::new(START_MS).describe(),
        DemoSource::new(START_MS).describe()
    );
}

#[test]
fn samples_do_not_depend_on_poll_history() {
    let t = START_MS + 123_456;
    let mut fresh = DemoSource::new(START_MS);
    let mut busy = DemoSource::new(START_MS);
    poll_series(&mut busy, (0..50).map(|i| START_MS + i * 1_000));
    let (a, b) = (fresh.poll(t, BOTH), busy.poll(t, BOTH));
    assert_eq!(a.devices, b.devices);
    assert_eq!(a.processes, b.processes);
    assert_eq!(a.health, b.health);
}

#[test]
fn a_later_start_shifts_the_same_data_in_time() {
    let shift_ms = 61_000;
    let mut early = DemoSource::new(START_MS);
    let mut late = DemoSource::new(START_MS + shift_ms);
    for i in 0..200 {
        let t = START_MS + i * 3_001;
        let a = early.poll(t, BOTH);
        let b = late.poll(t + shift_ms, BOTH);
        let used = |batch: &SampleBatch| -> Vec<u64> {
            batch
                .devices
                .iter()
                .map(|d| d.memory.map_or(0, |m| m.used_bytes))
                .collect()
        };
        assert_eq!(used(&a), used(&b), "tick {i}");
        assert_eq!(a.devices[0].temperature_c, b.devices[0].temperature_c);
    }
    // At the same wall time, the two differ.
    let t = START_MS + shift_ms + 30_000;
    assert_ne!(
        DemoSource::new(START_MS).poll(t, BOTH).devices,
        DemoSource::new(START_MS + shift_ms).poll(t, BOTH).devices
    );
}

#[test]
fn tiers_decide_what_a_batch_holds() {
    let mut source = DemoSource::new(START_MS);
    let fast = source.poll(
        START_MS + 1_000,
        Tiers {
            fast: true,
            slow: false,
        },
    );
    assert_eq!(fast.devices.len(), 2);
    assert!(fast.processes.is_some() && fast.health.is_empty());
    let slow = source.poll(
        START_MS + 2_000,
        Tiers {
            fast: false,
            slow: true,
        },
    );
    assert!(slow.devices.is_empty() && slow.processes.is_none());
    assert_eq!(slow.health.len(), 2);
}

#[test]
fn one_cycle_contains_load_oom_xid_ecc_bump_and_a_ninety_percent_crossing() {
    let capture = generate_capture(
        &DemoConfig::default(),
        START_MS,
        SCENARIO_CYCLE_MS as u64,
        250,
    );
    assert_eq!(
        capture.sample_count(),
        2 * (SCENARIO_CYCLE_MS as usize / 250)
    );

    // The first minute already shows a model load on GPU 0 reaching ~60 GiB.
    let gpu0: Vec<_> = capture.series[0].iter().collect();
    let first_minute_peak = gpu0
        .iter()
        .filter(|s| s.t_ms < START_MS + 60_000)
        .filter_map(|s| s.memory.map(|m| m.used_bytes))
        .max()
        .unwrap_or(0);
    assert!(
        first_minute_peak >= 55 * GIB,
        "first-minute peak {first_minute_peak}"
    );

    // A 90% crossing on GPU 0.
    let rising: Vec<_> = crossings(&gpu0, 0.9)
        .into_iter()
        .filter(|c| c.rising)
        .collect();
    assert!(!rising.is_empty(), "GPU 0 must cross 90%");

    // The OOM: with a pid that was using GPU 0 and a request larger than what was free.
    let (event, pid, requested, detail) = capture
        .events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::OutOfMemory {
                pid,
                requested_bytes,
                detail,
            } => Some((e, *pid, *requested_bytes, detail)),
            _ => None,
        })
        .expect("an OOM event");
    assert_eq!(event.device_index, Some(0));
    assert!(detail.contains("simulated"));
    assert!(
        rising[0].t_ms < event.t_ms,
        "the crossing comes before the OOM"
    );
    let pid = pid.expect("OOM pid");
    let track = capture
        .processes
        .iter()
        .find(|p| p.pid == pid && p.device_index == 0)
        .expect("the OOMing process was listed on GPU 0");
    let before = gpu0
        .iter()
        .rev()
        .find(|s| s.t_ms <= event.t_ms)
        .and_then(|s| s.memory)
        .expect("sample before OOM");
    assert!(requested.expect("requested bytes") > before.free_bytes);
    // It drops its memory and restarts under a new pid.
    let last_seen = track.last_seen_ms().expect("seen");
    assert!(last_seen >= event.t_ms && last_seen < event.t_ms + 10_000);
    let after_exit = gpu0
        .iter()
        .find(|s| s.t_ms > last_seen)
        .and_then(|s| s.memory)
        .expect("sample after exit");
    assert_eq!(after_exit.used_bytes, 0);
    assert!(
        capture
            .processes
            .iter()
            .any(|p| p.device_index == 0 && p.pid != pid && p.first_seen_ms() > Some(last_seen))
    );

    // GPU 1 leaks: its server holds much more at the end than after loading.
    let server = capture
        .processes
        .iter()
        .find(|p| p.device_index == 1 && p.name.contains("serve"))
        .expect("server on GPU 1");
    let after_load = server.used_bytes[server.used_bytes.len() / 10].unwrap_or(0);
    let at_end = server.used_bytes[server.used_bytes.len() - 2].unwrap_or(0);
    assert!(
        at_end > after_load + 40 * GIB,
        "leak {after_load} -> {at_end}"
    );

    // Xid 31 on GPU 1.
    assert!(
        capture
            .events
            .iter()
            .any(|e| e.device_index == Some(1) && matches!(e.kind, EventKind::Xid { code: 31, .. }))
    );

    // The ECC bump: an event, and both the volatile and aggregate counters step up.
    let ecc = capture
        .events
        .iter()
        .find(|e| matches!(e.kind, EventKind::EccIncrease { corrected_delta, .. } if corrected_delta > 0))
        .expect("ECC event");
    let device = ecc.device_index.expect("ECC device") as usize;
    let volatile: Vec<u64> = capture.series[device]
        .iter()
        .filter_map(|s| s.ecc_corrected_volatile)
        .collect();
    assert!(volatile.first() < volatile.last(), "volatile ECC steps up");
    let aggregate: Vec<u64> = capture
        .health
        .iter()
        .filter(|h| h.device_index as usize == device)
        .filter_map(|h| h.ecc_corrected_aggregate)
        .collect();
    assert!(
        aggregate.first() < aggregate.last(),
        "aggregate ECC steps up"
    );

    // Power capping shows up as a throttle reason (SW power cap) during peaks.
    assert!(gpu0.iter().any(|s| s.throttle_reasons == Some(0x4)));
}

#[test]
fn every_event_is_reported_exactly_once_whatever_the_poll_interval() {
    let count_events = |interval_ms: u32| {
        let capture = generate_capture(
            &DemoConfig::default(),
            START_MS,
            2 * SCENARIO_CYCLE_MS as u64,
            interval_ms,
        );
        let mut keys: Vec<_> = capture
            .events
            .iter()
            .map(|e| (e.t_ms, e.device_index))
            .collect();
        let total = keys.len();
        keys.dedup();
        assert_eq!(keys.len(), total, "no duplicates at {interval_ms} ms");
        total
    };
    let at_250 = count_events(250);
    assert_eq!(at_250, 6, "OOM, Xid and ECC bump in each of two cycles");
    assert_eq!(count_events(7_000), at_250);
}

#[test]
fn everything_says_simulated() {
    let capture = generate_capture(&DemoConfig::default(), START_MS, 60_000, 1_000);
    assert_eq!(capture.meta.source, SourceKind::Demo);
    assert!(capture.is_simulated());
    assert!(capture.meta.host.contains("simulated"));
    assert_eq!(capture.devices.len(), 2);
    for device in &capture.devices {
        assert!(device.simulated);
        assert!(device.name.contains("simulated"), "{}", device.name);
        assert!(device.uuid.contains("demo"), "{}", device.uuid);
        assert_eq!(device.memory_total_bytes, 143_771 << 20);
    }
    assert!(!capture.processes.is_empty());
    for process in &capture.processes {
        assert!(process.name.contains("(simulated)"), "{}", process.name);
    }
    assert!(!capture.field_status.is_empty());
    assert!(
        capture
            .field_status
            .iter()
            .all(|f| f.field == "retired_pages" && f.state == FieldState::NotSupported)
    );
}

#[test]
fn every_field_is_filled() {
    let capture = generate_capture(&DemoConfig::default(), START_MS, 30_000, 250);
    for sample in capture.series.iter().flat_map(|s| s.iter()) {
        let memory = sample.memory.expect("memory");
        assert_eq!(
            memory.used_bytes + memory.reserved_bytes + memory.free_bytes,
            memory.total_bytes
        );
        assert!(memory.reserved_bytes > 500 << 20 && memory.reserved_bytes < 700 << 20);
        for field in [
            sample.gpu_util_pct,
            sample.mem_util_pct,
            sample.temperature_c,
            sample.power_mw,
            sample.sm_clock_mhz,
            sample.mem_clock_mhz,
        ] {
            assert!(field.is_some(), "{sample:?}");
        }
        assert!(sample.throttle_reasons.is_some() && sample.ecc_uncorrected_volatile.is_some());
    }
    assert_eq!(
        capture.health.len(),
        2 * 6,
        "slow tier every 5 s over 30 s, 2 GPUs"
    );
    for health in &capture.health {
        assert_eq!(health.remapped_rows_correctable, Some(0));
        assert_eq!(health.remapped_rows_pending, Some(false));
        assert!(health.bar1_used_bytes.is_some() && health.pcie_replay_count.is_some());
        assert_eq!(health.persistence_mode, Some(true));
    }
    assert_eq!(
        capture.process_poll_ms.len(),
        120,
        "processes polled every fast tick"
    );
}

#[test]
fn eight_gpus_do_not_move_in_lockstep() {
    let config = DemoConfig {
        device_count: 8,
        ..Default::default()
    };
    let mut source = DemoSource::with_config(START_MS, config);
    assert_eq!(source.describe().devices.len(), 8);
    let batch = source.poll(START_MS + 200_000, BOTH);
    assert_eq!(batch.devices.len(), 8);
    let used = |i: usize| batch.devices[i].memory.map(|m| m.used_bytes);
    assert_ne!(used(0), used(2));
    assert_ne!(used(1), used(3));
    let uuids: std::collections::BTreeSet<_> = source
        .describe()
        .devices
        .into_iter()
        .map(|d| d.uuid)
        .collect();
    assert_eq!(uuids.len(), 8);

    let absurd = DemoConfig {
        device_count: 100_000,
        ..Default::default()
    };
    let devices = DemoSource::with_config(START_MS, absurd)
        .describe()
        .devices
        .len();
    assert_eq!(
        devices,
        vramscope_core::source::demo::MAX_DEMO_DEVICES as usize
    );
}

#[test]
fn scenario_offset_starts_later_in_the_script() {
    let config = DemoConfig {
        scenario_offset_ms: 400_000,
        ..Default::default()
    };
    let mut offset = DemoSource::with_config(START_MS, config);
    let mut plain = DemoSource::new(START_MS - 400_000);
    assert_eq!(
        offset.poll(START_MS + 5_000, BOTH).devices,
        plain.poll(START_MS + 5_000, BOTH).devices
    );
}

#[test]
fn the_reading_just_before_the_oom_shows_the_card_too_full_for_the_request() {
    // Whatever the interval (up to the 1.5 s the failing step holds its peak), the last reading
    // before the OOM must explain it, not fall into a trough between two samples.
    for interval_ms in [250, 333, 700, 1000, 1400] {
        let capture = generate_capture(&DemoConfig::default(), START_MS, 510_000, interval_ms);
        let (oom_ms, requested) = capture
            .events
            .iter()
            .find_map(|e| match &e.kind {
                EventKind::OutOfMemory {
                    requested_bytes, ..
                } => Some((e.t_ms, requested_bytes.expect("requested bytes"))),
                _ => None,
            })
            .expect("an OOM event");
        let before = capture.series[0]
            .iter()
            .rev()
            .find(|s| s.t_ms <= oom_ms)
            .and_then(|s| s.memory)
            .expect("a reading before the OOM");
        assert!(
            before.free_bytes < requested,
            "{interval_ms} ms: {} free, {requested} requested",
            before.free_bytes
        );
    }
}

/// Used bytes of each GPU in a batch.
fn used(batch: &SampleBatch) -> Vec<u64> {
    batch
        .devices
        .iter()
        .filter_map(|d| d.memory.map(|m| m.used_bytes))
        .collect()
}

#[test]
fn a_faster_pace_plays_the_same_day_sooner() {
    use vramscope_core::source::demo::scenario::OOM_AT_MS;
    let speed = 60;
    let fast = DemoConfig {
        speed,
        ..Default::default()
    };
    let mut real_time = DemoSource::new(START_MS);
    let mut sped_up = DemoSource::with_config(START_MS, fast.clone());
    for i in 0..300 {
        let wall_ms = i * 1_000;
        let a = real_time.poll(START_MS + wall_ms * i64::from(speed), BOTH);
        let b = sped_up.poll(START_MS + wall_ms, BOTH);
        assert_eq!(used(&a), used(&b), "{wall_ms} ms in");
    }
    // The OOM that comes about 8 minutes into the real-time day comes after 8 seconds at 60×,
    // at the first whole millisecond of the scenario's moment; deterministically so.
    let day_at_60 = generate_capture(&fast, START_MS, 15_000, 250);
    let ooms: Vec<i64> = day_at_60
        .events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::OutOfMemory { .. }))
        .map(|e| e.t_ms)
        .collect();
    let speed = i64::from(speed);
    let expected = START_MS + (OOM_AT_MS + speed - 1) / speed;
    assert_eq!(ooms, vec![expected]);
    assert_eq!(day_at_60, generate_capture(&fast, START_MS, 15_000, 250));
}

#[test]
fn changing_the_pace_while_running_neither_repeats_nor_loses_events() {
    let mut source = DemoSource::new(START_MS);
    let pace = source.pace();
    let mut events = Vec::new();
    let mut t = START_MS;
    // 100 s at real time, then the rest of two cycles at 50×, polled every 200 ms.
    while t < START_MS + 100_000 {
        events.extend(source.poll(t, BOTH).events);
        t += 1_000;
    }
    let changed_at = t - 1_000;
    let before_change = used(&source.poll(
        changed_at,
        Tiers {
            fast: true,
            slow: false,
        },
    ));
    pace.set_speed(50);
    let continued = used(&source.poll(
        changed_at,
        Tiers {
            fast: true,
            slow: false,
        },
    ));
    assert_eq!(
        continued, before_change,
        "the scenario continues where it was"
    );
    let remaining_wall_ms = (2 * SCENARIO_CYCLE_MS - 100_000) / 50 + 1_000;
    while t < changed_at + remaining_wall_ms {
        events.extend(source.poll(t, BOTH).events);
        t += 200;
    }
    // Two whole cycles passed: every scripted event of each GPU came exactly twice, in order.
    let once = generate_capture(
        &DemoConfig::default(),
        START_MS,
        SCENARIO_CYCLE_MS as u64,
        1_000,
    );
    assert!(!once.events.is_empty());
    assert_eq!(events.len(), 2 * once.events.len(), "{events:#?}");
    assert!(events.windows(2).all(|w| w[0].t_ms <= w[1].t_ms));
    // The same position 10 s of wall time after the change is 500 s into the scenario.
    let mut reference = DemoSource::new(START_MS);
    let later = changed_at + 10_000;
    assert_eq!(
        used(&source.poll(later, BOTH)),
        used(&reference.poll(changed_at + 10_000 * 50, BOTH))
    );
    pace.set_speed(0);
    assert_eq!(pace.speed(), 1, "the pace is at least real time");
}
