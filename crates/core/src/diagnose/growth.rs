//! Is a memory series growing, and how sure is that? One judgement for every series the doctor
//! sees: a process or a GPU in a capture (x in seconds), the figures a training log prints per step
//! (x in steps) and the live set of an allocator trace per iteration.
//!
//! The series is reduced to its *floor*: for each of up to [`MAX_WINDOWS`] equal stretches, the
//! lowest reading from that stretch on (the level the series never again falls below). A leak
//! raises the floor that training steps and request bursts fall back to; a sawtooth of steps,
//! however steep each tooth and however long each step, does not. The first [`WARM_UP_FRACTION`] of the
//! span (model load, the allocator filling its cache) is left out. Then:
//! - **too short** when the judged span is below the caller's minimum (60 s for captures), or there
//!   are too few readings: said so, never "healthy";
//! - **flat** when the floor's robust (Theil–Sen) line rises less than [`MIN_GROWTH_BYTES`] (an
//!   allocator trace's exact live set may also grow by less: a tenth of the job's peak, when
//!   its line fits with R² ≥ 0.95 and does not slow down; `trajectory`);
//! - **levelled off** (a warm-up: ramp then plateau) when the last third of the floor rises less
//!   than a quarter of what the whole line predicts for it;
//! - **growing** otherwise, when the line fits (R² ≥ [`MIN_R_SQUARED`]) and the floor rose in at
//!   least [`MIN_RISES`] separate stretches (one big allocation is a step, not growth);
//!   *decelerating* when the last third rises at less than [`DECELERATING_SHARE`] of the first
//!   third's rate.
//!
//! How sure a growth is ([`Confidence`]) follows from the fit, the length of the judged span and
//! whether the growth slows down; every finding prints it.
//!
//! A capture's series (a process, or a GPU's used memory from any source: a `.vramcap`,
//! nvidia-smi's `--query-gpu` log, a Prometheus range) is first cut into the stretches while a
//! job ran ([`job_runs`]), each judged by itself: the idle GPU before and between jobs is no
//! start-up, and the end of a job (memory falling as its processes exit) is no step falling back —
//! judged together with the job, either would flatten its floor.

use crate::analysis::trend::{RobustLine, theil_sen};
use crate::model::{GIB, MIB, format_bytes};

/// Growth below this over the judged span is noise, not growth.
pub const MIN_GROWTH_BYTES: u64 = GIB / 4;
/// Minimum goodness of fit of the floor's line for growth.
pub const MIN_R_SQUARED: f64 = 0.8;
/// Separate rises of the floor needed for growth.
pub const MIN_RISES: usize = 3;
/// Readings needed at least.
pub const MIN_POINTS: usize = 8;
/// Share of the span, from the first reading, left out as the start-up ramp.
pub const WARM_UP_FRACTION: f64 = 0.1;
/// Growth whose last third rises at less than this share of its first third's rate (or the
/// overall rate, when higher) is slowing down: it may level off.
pub const DECELERATING_SHARE: f64 = 0.6;
/// Floor windows at most.
pub const MAX_WINDOWS: usize = 64;
/// Floor windows at least (fewer readings than this many windows: one reading per window).
const MIN_WINDOWS: usize = 4;
/// The floor's rise between windows that counts as a rise (readings jitter by a few MiB).
pub const RISE_TOLERANCE_BYTES: f64 = MIB as f64;

/// The shortest capture (ms) whose growth is judged at all: below it, a start-up cannot be told
/// from anything else.
pub const CAPTURE_MIN_SPAN_MS: i64 = 60 * 1000;
/// Captures shorter than this (ms) are judged, but slow growth in them may still be a long
/// warm-up: the finding says so and the confidence stays low.
pub const CAPTURE_SURE_SPAN_MS: i64 = 10 * 60 * 1000;
/// Growth that fills the GPU within this many seconds is critical, however short the recording.
pub const FAST_FILL_SECONDS: f64 = 3600.0;
/// Readings a capture's stretch needs after its start-up ramp: one more than the rises growth
/// needs, so that a minute read every 15 s (a Prometheus range) is judged like a minute read
/// every 250 ms.
pub const CAPTURE_MIN_POINTS: usize = MIN_RISES + 1;
/// The most a GPU shows as used with no job on it: drivers report an idle GPU at 0 MiB (a few
/// dozen while a context starts), and a CUDA context alone takes hundreds, so a job's floor is
/// never this low however flat it is.
pub const IDLE_MAX_BYTES: u64 = 64 * MIB;
/// Memory that falls this far below every reading since a job's start-up ramp, and stays there,
/// ends what came before: the job ended, or some of its processes exited (a step falls back to
/// its floor and rises again).
pub const RELEASE_BYTES: u64 = MIN_GROWTH_BYTES;

/// How sure a growth judgement is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Confidence {
    Low,
    Medium,
    High,
}

impl Confidence {
    /// The word reports print.
    pub fn as_str(self) -> &'static str {
        match self {
            Confidence::Low => "low",
            Confidence::Medium => "medium",
            Confidence::High => "high",
        }
    }
}

/// What a series does.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Shape {
    /// Not enough to judge: `span` (x units) judged, `points` readings.
    TooShort { span: f64, points: usize },
    /// No growth worth the name.
    Flat,
    /// Rose, then stayed at about `plateau_bytes`: a warm-up, not a leak.
    LevelledOff { plateau_bytes: f64 },
    /// Still growing at the end.
    Growing(Growth),
}

/// A growth, measured on the series' floor after the start-up ramp.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Growth {
    /// Theil–Sen line through the floor (x in the caller's unit from the first judged reading).
    pub line: RobustLine,
    /// Bytes per x unit of the last third alone.
    pub recent_slope: f64,
    /// Windows whose floor rose above the window before.
    pub rises: usize,
    /// Windows judged.
    pub windows: usize,
    /// The last third grows clearly slower than the first: it may level off.
    pub decelerating: bool,
    /// `x` (caller's unit) of the first judged reading, from the series' first.
    pub judged_from: f64,
}

impl Growth {
    /// Bytes per x unit.
    pub fn slope(&self) -> f64 {
        self.line.slope
    }

    /// The line's rise over the judged span.
    pub fn growth_bytes(&self) -> f64 {
        self.line.rise()
    }

    /// The judged span, in x units.
    pub fn span(&self) -> f64 {
        self.line.x_last - self.line.x_first
    }

    /// How sure the growth is, given the span the caller considers sure (x units).
    pub fn confidence(&self, sure_span: f64) -> Confidence {
        if self.decelerating || self.line.r_squared < 0.9 || self.span() < sure_span {
            Confidence::Low
        } else if self.line.r_squared < 0.97 {
            Confidence::Medium
        } else {
            Confidence::High
        }
    }

    /// x units until `headroom_bytes` are used up at the current rate; `None` when not growing.
    pub fn until_full(&self, headroom_bytes: u64) -> Option<f64> {
        (self.slope() > 0.0).then(|| headroom_bytes as f64 / self.slope())
    }

    /// One sentence on how sure it is and why, for explanations.
    pub fn confidence_text(&self, sure_span: f64, x_unit: &str) -> String {
        let confidence = self.confidence(sure_span);
        let mut reasons = vec![format!("fit R² {:.2}", self.line.r_squared)];
        reasons.push(format!(
            "the floor rose in {} of {} stretches",
            self.rises,
            self.windows.saturating_sub(1)
        ));
        if self.decelerating {
            reasons.push(format!(
                "slowing down: {} per {x_unit} lately against {} overall",
                format_bytes(self.recent_slope.max(0.0) as u64),
                format_bytes(self.slope().max(0.0) as u64)
            ));
        }
        if self.span() < sure_span {
            reasons.push("a short span".to_owned());
        }
        format!(
            "Confidence {}: {}.",
            confidence.as_str(),
            reasons.join(", ")
        )
    }
}

/// Judges `points` (`(x, bytes)` in x order) by the rules of the module comment; `min_span` is
/// the shortest judged span (x units) below which the series is too short.
pub fn assess(points: &[(f64, f64)], min_span: f64) -> Shape {
    assess_with(points, min_span, MIN_POINTS, MIN_GROWTH_BYTES)
}

/// [`assess`] with a smaller number of readings allowed (a live set's floor per iteration is
/// one reading per iteration, already free of the noise that [`MIN_POINTS`] guards against) and
/// the least growth that counts (`min_growth_bytes`, [`MIN_GROWTH_BYTES`] for readings of a
/// whole GPU; an allocator trace's exact live set is judged against the job's own size).
pub fn assess_with(
    points: &[(f64, f64)],
    min_span: f64,
    min_points: usize,
    min_growth_bytes: u64,
) -> Shape {
    let (Some(first), Some(last)) = (points.first(), points.last()) else {
        return Shape::TooShort {
            span: 0.0,
            points: 0,
        };
    };
    let span = last.0 - first.0;
    let judged_from = first.0 + span * WARM_UP_FRACTION;
    let judged: Vec<(f64, f64)> = points
        .iter()
        .filter(|p| p.0 >= judged_from)
        .map(|p| (p.0 - first.0, p.1))
        .collect();
    if span < min_span || judged.len() < min_points {
        return Shape::TooShort {
            span,
            points: points.len(),
        };
    }
    let floors = floors(&judged);
    let Some(line) = theil_sen(&floors) else {
        return Shape::TooShort {
            span,
            points: points.len(),
        };
    };
    if line.rise() < min_growth_bytes as f64 {
        return Shape::Flat;
    }
    let last_third = &floors[floors.len() * 2 / 3..];
    let recent = theil_sen(last_third).map_or(line.slope, |l| l.slope);
    let early = theil_sen(&floors[..floors.len().div_ceil(3)]).map_or(line.slope, |l| l.slope);
    if recent < 0.25 * line.slope {
        let plateau = last_third.iter().map(|p| p.1).sum::<f64>() / last_third.len().max(1) as f64;
        return Shape::LevelledOff {
            plateau_bytes: plateau,
        };
    }
    let rises = floors
        .windows(2)
        .filter(|w| w[1].1 > w[0].1 + RISE_TOLERANCE_BYTES)
        .count();
    if line.r_squared < MIN_R_SQUARED || rises < MIN_RISES {
        return Shape::Flat;
    }
    Shape::Growing(Growth {
        line,
        recent_slope: recent,
        rises,
        windows: floors.len(),
        decelerating: recent < DECELERATING_SHARE * early.max(line.slope),
        judged_from: judged_from - first.0,
    })
}

/// For each of up to [`MAX_WINDOWS`] equal stretches of x, the lowest reading from that stretch
/// on, at the x of the stretch's own lowest reading; stretches without readings are left out.
fn floors(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let (Some(first), Some(last)) = (points.first(), points.last()) else {
        return Vec::new();
    };
    let windows = (points.len() / 4).clamp(MIN_WINDOWS, MAX_WINDOWS);
    let width = (last.0 - first.0) / windows as f64;
    if width <= 0.0 {
        return points.to_vec();
    }
    // The lowest reading of each stretch, where it was read.
    let mut lowest: Vec<Option<(f64, f64)>> = vec![None; windows];
    for p in points {
        let index = (((p.0 - first.0) / width) as usize).min(windows - 1);
        if lowest[index].is_none_or(|low| p.1 < low.1) {
            lowest[index] = Some(*p);
        }
    }
    // The level the series never again falls below: a stretch that missed the bottom of a
    // long step (its minimum is inside a tooth) takes the lower floor a later stretch shows.
    let mut later_low = f64::INFINITY;
    let mut floors: Vec<(f64, f64)> = Vec::with_capacity(windows);
    for (x, y) in lowest.iter().rev().flatten() {
        later_low = later_low.min(*y);
        floors.push((*x, later_low));
    }
    floors.reverse();
    floors
}

/// The stretches of a capture series' `(Unix ms, bytes)` readings (in time order) while a job
/// ran, to be judged one by one:
/// - readings of at most [`IDLE_MAX_BYTES`] are the idle GPU, between jobs or around one; a
///   stretch starts at the idle reading before a job (the job started after it);
/// - a stretch ends where memory falls [`RELEASE_BYTES`] below every reading since its start-up
///   ramp (the first [`WARM_UP_FRACTION`] of it) and never comes back up: the job ended or some
///   of its processes exited, and what follows is a stretch of its own.
///
/// The whole series is one stretch when it never rises [`MIN_GROWTH_BYTES`] above its lowest:
/// nothing grew, and a GPU that a job keeps busy at one level all along is no idle GPU.
pub fn job_runs(readings: &[(i64, u64)]) -> Vec<&[(i64, u64)]> {
    let (Some(lowest), Some(highest)) = (
        readings.iter().map(|r| r.1).min(),
        readings.iter().map(|r| r.1).max(),
    ) else {
        return Vec::new();
    };
    if highest < lowest.saturating_add(MIN_GROWTH_BYTES) {
        return vec![readings];
    }
    let idle = |r: &(i64, u64)| r.1 <= IDLE_MAX_BYTES;
    let mut runs = Vec::new();
    let mut start = 0;
    while let Some(offset) = readings[start..].iter().position(|r| !idle(r)) {
        let busy_from = start + offset;
        let busy_to = readings[busy_from..]
            .iter()
            .position(idle)
            .map_or(readings.len(), |o| busy_from + o);
        // The job started after the idle reading before it: that reading bounds its span (and
        // falls in the start-up ramp, never judged as growth).
        let busy = &readings[busy_from.saturating_sub(1)..busy_to];
        // The highest reading from each one on, to the stretch's end.
        let mut later_high: Vec<u64> = busy
            .iter()
            .rev()
            .scan(0, |high, r| {
                *high = r.1.max(*high);
                Some(*high)
            })
            .collect();
        later_high.reverse();
        let mut from = 0;
        while let Some(end) = release_in(&busy[from..], &later_high[from..]) {
            runs.push(&busy[from..from + end]);
            from += end;
        }
        runs.push(&busy[from..]);
        start = busy_to;
    }
    runs
}

/// The index of the first reading of `run` after its start-up ramp from which every reading
/// (`later_high`: the highest from each one on) stays [`RELEASE_BYTES`] below every reading since
/// the ramp; `None` when there is none. A step falls back and rises again; a job that ended, or
/// processes that exited, do not come back.
fn release_in(run: &[(i64, u64)], later_high: &[u64]) -> Option<usize> {
    let (first_ms, last_ms) = (run.first()?.0, run.last()?.0);
    let ramp_end_ms = first_ms + ((last_ms - first_ms) as f64 * WARM_UP_FRACTION) as i64;
    let from = run.partition_point(|r| r.0 < ramp_end_ms);
    let mut floor = run.get(from)?.1;
    for (index, (reading, high)) in run.iter().zip(later_high).enumerate().skip(from + 1) {
        if high.saturating_add(RELEASE_BYTES) < floor {
            return Some(index);
        }
        floor = floor.min(reading.1);
    }
    None
}

/// Seconds, minutes or hours for people.
pub fn duration_text(seconds: f64) -> String {
    if seconds < 120.0 {
        format!("{seconds:.0} s")
    } else if seconds < 7200.0 {
        format!("{:.0} min", seconds / 60.0)
    } else if seconds < 3.0 * 86400.0 {
        format!("{:.1} h", seconds / 3600.0)
    } else {
        format!("{:.0} days", seconds / 86400.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Readings every `step_s` seconds for `seconds`, of `bytes(t_s)`.
    fn series(seconds: f64, step_s: f64, bytes: impl Fn(f64) -> f64) -> Vec<(f64, f64)> {
        let n = (seconds / step_s) as usize;
        (0..=n)
            .map(|i| {
                let t = i as f64 * step_s;
                (t, bytes(t))
            })
            .collect()
    }

    const G: f64 = GIB as f64;
    const M: f64 = MIB as f64;

    fn growing(shape: Shape) -> Growth {
        match shape {
            Shape::Growing(g) => g,
            other => panic!("not growing: {other:?}"),
        }
    }

    #[test]
    fn a_fast_climb_in_four_minutes_is_growth() {
        // 256 MiB every second for 4 minutes, read every 250 ms.
        let g = growing(assess(&series(240.0, 0.25, |t| G + 256.0 * M * t), 60.0));
        assert!((g.slope() - 256.0 * M).abs() < M, "{}", g.slope());
        assert!(!g.decelerating);
        assert!(g.line.r_squared > 0.99);
        // Short, so never high confidence against a 10-minute sure span.
        assert_eq!(g.confidence(600.0), Confidence::Low);
        assert_eq!(g.confidence(60.0), Confidence::High);
    }

    #[test]
    fn under_a_minute_is_too_short_whatever_it_does() {
        let shape = assess(&series(45.0, 1.0, |t| G + G * t), 60.0);
        assert!(matches!(shape, Shape::TooShort { .. }), "{shape:?}");
        let shape = assess(&[(0.0, 1.0)], 60.0);
        assert!(matches!(shape, Shape::TooShort { .. }), "{shape:?}");
    }

    #[test]
    fn warm_up_then_plateau_levels_off() {
        // 10 GiB loaded over the first two minutes, then flat for eight.
        let shape = assess(
            &series(600.0, 1.0, |t| G + 10.0 * G * (t / 120.0).min(1.0)),
            60.0,
        );
        assert!(
            matches!(shape, Shape::Flat | Shape::LevelledOff { .. }),
            "{shape:?}"
        );
        // A short warm-up caught in a 90 s recording: ramp for 60 s, then flat.
        let shape = assess(
            &series(90.0, 0.5, |t| G + 6.0 * G * (t / 60.0).min(1.0)),
            60.0,
        );
        assert!(matches!(shape, Shape::LevelledOff { .. }), "{shape:?}");
    }

    #[test]
    fn one_jump_and_a_sawtooth_on_a_flat_floor_are_not_growth() {
        let jump = assess(
            &series(1200.0, 10.0, |t| if t < 600.0 { G } else { 5.0 * G }),
            60.0,
        );
        assert!(!matches!(jump, Shape::Growing(_)), "{jump:?}");
        // Steps every 60 s fall back to 10 GiB; the peaks grow, the floor not.
        let teeth = assess(
            &series(1800.0, 10.0, |t| {
                10.0 * G + (t % 60.0) * (t / 60.0).floor() * 20.0 * M
            }),
            60.0,
        );
        assert!(!matches!(teeth, Shape::Growing(_)), "{teeth:?}");
        // Small teeth on a floor that rises 50 MiB a step is growth.
        let leaking = assess(
            &series(1800.0, 10.0, |t| {
                10.0 * G + (t / 60.0).floor() * 50.0 * M + (t % 60.0) * 2.0 * M
            }),
            60.0,
        );
        growing(leaking);
    }

    #[test]
    fn slowing_growth_is_decelerating_and_low_confidence() {
        // sqrt-shaped growth: still rising at the end, at a fraction of the early rate.
        let g = growing(assess(
            &series(3600.0, 5.0, |t| G + 0.5 * G * t.sqrt()),
            60.0,
        ));
        assert!(g.decelerating, "{g:?}");
        assert_eq!(g.confidence(600.0), Confidence::Low);
        assert!(g.confidence_text(600.0, "s").contains("slowing down"));
    }

    #[test]
    fn small_growth_is_flat() {
        let shape = assess(&series(1200.0, 10.0, |t| G + t * 1024.0), 60.0);
        assert_eq!(shape, Shape::Flat);
    }

    /// `(t_ms, bytes)` every `step_ms` for `seconds`, of `bytes(t_s)`.
    fn readings(seconds: i64, step_ms: i64, bytes: impl Fn(f64) -> u64) -> Vec<(i64, u64)> {
        (0..=seconds * 1000 / step_ms)
            .map(|i| (i * step_ms, bytes((i * step_ms) as f64 / 1000.0)))
            .collect()
    }

    fn spans_s(runs: &[&[(i64, u64)]]) -> Vec<(i64, i64)> {
        runs.iter()
            .filter_map(|run| Some((run.first()?.0 / 1000, run.last()?.0 / 1000)))
            .collect()
    }

    #[test]
    fn a_job_between_idle_stretches_is_one_run_bounded_by_the_idle_reading_before_it() {
        // Idle for 60 s, a job from 60 s to 300 s, idle again.
        let gib = GIB;
        let series = readings(400, 1000, |t| {
            if (60.0..300.0).contains(&t) {
                10 * gib
            } else {
                0
            }
        });
        assert_eq!(spans_s(&job_runs(&series)), vec![(59, 299)]);
        // Two jobs: two runs.
        let two = readings(600, 1000, |t| {
            if (60.0..200.0).contains(&t) || (300.0..500.0).contains(&t) {
                10 * gib
            } else {
                0
            }
        });
        assert_eq!(spans_s(&job_runs(&two)), vec![(59, 199), (299, 499)]);
        // Busy all along at one level: one run, the whole series.
        let flat = readings(600, 1000, |_| 10 * gib);
        assert_eq!(job_runs(&flat).len(), 1);
        assert_eq!(job_runs(&flat)[0].len(), flat.len());
        assert!(job_runs(&[]).is_empty());
    }

    #[test]
    fn a_fall_below_the_jobs_floor_ends_a_run_and_a_step_falling_back_does_not() {
        // From an idle GPU, steps of 60 s falling back to a floor of 20 GiB; at 600 s one of two
        // processes exits (down to 12 GiB) and the other goes on alone.
        let gib = GIB;
        let series = readings(900, 1000, |t| {
            let tooth = (t % 60.0) as u64 * gib / 10;
            if t == 0.0 {
                0
            } else if t < 600.0 {
                20 * gib + tooth
            } else {
                12 * gib
            }
        });
        assert_eq!(spans_s(&job_runs(&series)), vec![(0, 599), (600, 900)]);
        // The same steps without the exit: one run.
        let steps = readings(900, 1000, |t| 20 * gib + (t % 60.0) as u64 * gib / 10);
        assert_eq!(job_runs(&steps).len(), 1);
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(duration_text(45.0), "45 s");
        assert_eq!(duration_text(600.0), "10 min");
        assert_eq!(duration_text(3.5 * 3600.0), "3.5 h");
        assert_eq!(duration_text(10.0 * 86400.0), "10 days");
    }
}
