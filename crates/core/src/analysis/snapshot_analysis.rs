//! The analyses every opened allocator snapshot gets, per device: time travel over its trace and
//! an explanation of each OOM. The allocator view shows them and the doctor's snapshot facts are
//! taken from them, so they are computed once; [`SnapshotAnalysisBuild`] computes them in steps
//! that stop at a deadline, for the web viewer's single thread.

use std::sync::Arc;

use super::deadline::{Deadline, Step};
use super::oom::{self, OomExplanation};
use super::timetravel::{TimeTravel, TimeTravelBuild};
use crate::model::allocator::AllocatorSnapshot;

/// The analysis of one device of a snapshot.
pub struct DeviceAnalysis {
    pub travel: TimeTravel,
    /// One per `oom` event of the trace, in trace order.
    pub ooms: Vec<OomExplanation>,
}

/// The devices of a snapshot (with segments or a trace), ascending.
pub fn snapshot_devices(snapshot: &AllocatorSnapshot) -> Vec<u32> {
    let mut devices: Vec<u32> = snapshot.devices.iter().map(|d| d.device).collect();
    devices.extend(snapshot.traces.iter().map(|t| t.device));
    devices.sort_unstable();
    devices.dedup();
    devices
}

/// Analyses every device of `snapshot` in one go, in [`snapshot_devices`] order.
pub fn analyze(snapshot: &Arc<AllocatorSnapshot>) -> Vec<DeviceAnalysis> {
    let mut build = SnapshotAnalysisBuild::new(Arc::clone(snapshot));
    loop {
        match build.run(Deadline::NEVER) {
            Step::Done(devices) => return devices,
            Step::Pending(more) => build = more,
        }
    }
}

/// [`analyze`] in steps: [`SnapshotAnalysisBuild::run`] works until a deadline and hands
/// itself back until every device is analysed.
pub struct SnapshotAnalysisBuild {
    snapshot: Arc<AllocatorSnapshot>,
    /// Devices not started yet, in reverse order (the next is last).
    waiting: Vec<u32>,
    done: Vec<DeviceAnalysis>,
    current: Current,
}

enum Current {
    Idle,
    Travel(Box<TimeTravelBuild>),
    /// Finding the OOM events: a scan of the whole trace, a step of its own (at 13 M events it
    /// made the time travel's last step a 71-87 ms task in a browser).
    FindOoms(Box<TimeTravel>),
    /// Explaining the OOM events `oom_events[ooms.len()..]`.
    Ooms {
        travel: Box<TimeTravel>,
        oom_events: Vec<usize>,
        ooms: Vec<OomExplanation>,
    },
}

impl SnapshotAnalysisBuild {
    /// Starts analysing `snapshot`.
    pub fn new(snapshot: Arc<AllocatorSnapshot>) -> Self {
        let mut waiting = snapshot_devices(&snapshot);
        waiting.reverse();
        SnapshotAnalysisBuild {
            snapshot,
            waiting,
            done: Vec::new(),
            current: Current::Idle,
        }
    }

    /// Devices analysed so far and in all, for progress.
    pub fn devices_done(&self) -> (usize, usize) {
        let busy = usize::from(!matches!(self.current, Current::Idle));
        let done = self.done.len();
        (done, done + busy + self.waiting.len())
    }

    /// The devices analysed completely so far (for work stopped early: a cancelled analysis
    /// shows what it has).
    pub fn into_done(self) -> Vec<DeviceAnalysis> {
        self.done
    }

    /// Works until `deadline` or the end: every device's analysis, or this build to run again.
    pub fn run(mut self, deadline: Deadline) -> Step<Vec<DeviceAnalysis>, Self> {
        loop {
            self.current = match std::mem::replace(&mut self.current, Current::Idle) {
                Current::Idle => match self.waiting.pop() {
                    Some(device) => Current::Travel(Box::new(TimeTravelBuild::new(
                        Arc::clone(&self.snapshot),
                        device,
                    ))),
                    None => return Step::Done(self.done),
                },
                Current::Travel(build) => match build.run(deadline) {
                    Step::Pending(build) => Current::Travel(Box::new(build)),
                    Step::Done(travel) => Current::FindOoms(Box::new(travel)),
                },
                Current::FindOoms(travel) => Current::Ooms {
                    oom_events: oom::oom_events(travel.trace()),
                    travel,
                    ooms: Vec::new(),
                },
                Current::Ooms {
                    travel,
                    oom_events,
                    mut ooms,
                } => match oom_events.get(ooms.len()) {
                    Some(&event) => {
                        ooms.push(oom::explain(&travel, event));
                        Current::Ooms {
                            travel,
                            oom_events,
                            ooms,
                        }
                    }
                    None => {
                        self.done.push(DeviceAnalysis {
                            travel: *travel,
                            ooms,
                        });
                        Current::Idle
                    }
                },
            };
            if deadline.passed() {
                return Step::Pending(self);
            }
        }
    }
}
