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
//! - **flat** when the floor's robust (Theil–Sen) line rises less than [`MIN_GROWTH_BYTES`];
//! - **levelled off** (a warm-up: ramp then plateau) when the last third of the floor rises less
//!   than a quarter of what the whole line predicts for it;
//! - **growing** otherwise, when the line fits (R² ≥ [`MIN_R_SQUARED`]) and the floor rose in at
//!   least [`MIN_RISES`] separate stretches (one big allocation is a step, not growth);
//!   *decelerating* when the last third rises at less than [`DECELERATING_SHARE`] of the first
//!   third's rate.
//!
//! How sure a growth is ([`Confidence`]) follows from the fit, the length of the judged span and
//! whether the growth slows down; every finding prints it.

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
    assess_with(points, min_span, MIN_POINTS)
}

/// [`assess`] with a smaller number of readings allowed: a live set's floor per iteration is
/// one reading per iteration, already free of the noise that [`MIN_POINTS`] guards against.
pub fn assess_with(points: &[(f64, f64)], min_span: f64, min_points: usize) -> Shape {
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
    if line.rise() < MIN_GROWTH_BYTES as f64 {
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

    #[test]
    fn durations_read_naturally() {
        assert_eq!(duration_text(45.0), "45 s");
        assert_eq!(duration_text(600.0), "10 min");
        assert_eq!(duration_text(3.5 * 3600.0), "3.5 h");
        assert_eq!(duration_text(10.0 * 86400.0), "10 days");
    }
}
