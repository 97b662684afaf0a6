//! Robust trend lines through memory readings: the Theil–Sen estimator (the median of the slopes
//! between every pair of points), which one spike, one freed buffer or a few missed samples cannot
//! tilt the way they tilt a least-squares line.
//!
//! Memory series come from captures (a reading per process every few hundred milliseconds for
//! hours), from logs (one figure per training step) and from allocator traces (the live set at
//! every iteration). The estimator is quadratic in the number of points, so long series are first
//! reduced to [`MAX_POINTS`] evenly spaced points (each the median of its stretch): the slope of a
//! day of readings does not need every sample, and the cost stays bounded whatever the length.

/// Points the estimator looks at, at most: `MAX_POINTS²/2` slopes (about 33 000) per fit.
pub const MAX_POINTS: usize = 256;

/// A straight line fitted through `(x, y)` points.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RobustLine {
    /// Change of `y` per unit of `x` (bytes per second, bytes per step, ...).
    pub slope: f64,
    /// `y` of the line at `x = 0`.
    pub intercept: f64,
    /// How much of the points' variance the line explains, 0 to 1 (1 − residual / total sum of
    /// squares around the mean): near 1 for steady growth, low for noise or steps.
    pub r_squared: f64,
    /// First and last `x` of the points.
    pub x_first: f64,
    pub x_last: f64,
    /// Points the line was fitted through (after reduction).
    pub points: usize,
}

impl RobustLine {
    /// The line's value at `x`.
    pub fn at(&self, x: f64) -> f64 {
        self.intercept + self.slope * x
    }

    /// The line's rise over the span of its points.
    pub fn rise(&self) -> f64 {
        self.slope * (self.x_last - self.x_first)
    }
}

/// The Theil–Sen line through `points` (in `x` order); `None` with fewer than two distinct `x`.
pub fn theil_sen(points: &[(f64, f64)]) -> Option<RobustLine> {
    let reduced = reduce(points, MAX_POINTS);
    let points = reduced.as_slice();
    let mut slopes = Vec::with_capacity(points.len() * points.len().saturating_sub(1) / 2);
    for (i, a) in points.iter().enumerate() {
        for b in &points[i + 1..] {
            let dx = b.0 - a.0;
            if dx > 0.0 {
                slopes.push((b.1 - a.1) / dx);
            }
        }
    }
    let slope = median(&mut slopes)?;
    let mut offsets: Vec<f64> = points.iter().map(|p| p.1 - slope * p.0).collect();
    let intercept = median(&mut offsets)?;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / points.len() as f64;
    let total: f64 = points.iter().map(|p| (p.1 - mean_y).powi(2)).sum();
    let residual: f64 = points
        .iter()
        .map(|p| (p.1 - intercept - slope * p.0).powi(2))
        .sum();
    let r_squared = if total > 0.0 {
        (1.0 - residual / total).clamp(0.0, 1.0)
    } else {
        // A flat series: a flat line explains it completely.
        1.0
    };
    Some(RobustLine {
        slope,
        intercept,
        r_squared,
        x_first: points.first()?.0,
        x_last: points.last()?.0,
        points: points.len(),
    })
}

/// The median of `values` (reordered); `None` when empty or not comparable.
pub fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() || values.iter().any(|v| v.is_nan()) {
        return None;
    }
    let middle = values.len() / 2;
    let (_, upper, _) = values.select_nth_unstable_by(middle, f64::total_cmp);
    let upper = *upper;
    if values.len() % 2 == 1 {
        return Some(upper);
    }
    let lower = values[..middle]
        .iter()
        .copied()
        .max_by(f64::total_cmp)
        .unwrap_or(upper);
    Some((lower + upper) / 2.0)
}

/// `points` cut into at most `max_points` stretches of equal count, each replaced by its middle
/// `x` and its median `y`; unchanged when short enough.
fn reduce(points: &[(f64, f64)], max_points: usize) -> Vec<(f64, f64)> {
    if points.len() <= max_points {
        return points.to_vec();
    }
    let chunk = points.len().div_ceil(max_points);
    points
        .chunks(chunk)
        .filter_map(|stretch| {
            let x = stretch.get(stretch.len() / 2)?.0;
            let mut ys: Vec<f64> = stretch.iter().map(|p| p.1).collect();
            Some((x, median(&mut ys)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_straight_line_is_found_exactly() {
        let points: Vec<(f64, f64)> = (0..50).map(|i| (i as f64, 3.0 + 2.0 * i as f64)).collect();
        let line = theil_sen(&points).unwrap_or_else(|| panic!("no line"));
        assert!((line.slope - 2.0).abs() < 1e-9);
        assert!((line.intercept - 3.0).abs() < 1e-9);
        assert!((line.r_squared - 1.0).abs() < 1e-9);
        assert!((line.rise() - 98.0).abs() < 1e-9);
        assert!((line.at(10.0) - 23.0).abs() < 1e-9);
    }

    #[test]
    fn outliers_do_not_tilt_the_line() {
        // Growth of 1 per x with three huge spikes: least squares would follow the spikes.
        let mut points: Vec<(f64, f64)> = (0..40).map(|i| (i as f64, i as f64)).collect();
        for i in [5, 20, 35] {
            points[i].1 += 1000.0;
        }
        let line = theil_sen(&points).unwrap_or_else(|| panic!("no line"));
        assert!((line.slope - 1.0).abs() < 1e-9, "{}", line.slope);
    }

    #[test]
    fn long_series_are_reduced_and_keep_their_slope() {
        let points: Vec<(f64, f64)> = (0..100_000)
            .map(|i| (i as f64 * 0.25, 5.0 * i as f64 * 0.25 + (i % 7) as f64))
            .collect();
        let line = theil_sen(&points).unwrap_or_else(|| panic!("no line"));
        assert!(line.points <= MAX_POINTS);
        assert!((line.slope - 5.0).abs() < 0.01, "{}", line.slope);
        assert!(line.r_squared > 0.99);
    }

    #[test]
    fn degenerate_input_has_no_line() {
        assert!(theil_sen(&[]).is_none());
        assert!(theil_sen(&[(1.0, 1.0)]).is_none());
        assert!(theil_sen(&[(1.0, 1.0), (1.0, 5.0)]).is_none());
        let flat = theil_sen(&[(0.0, 7.0), (1.0, 7.0), (2.0, 7.0)]);
        assert_eq!(flat.map(|l| (l.slope, l.r_squared)), Some((0.0, 1.0)));
    }

    #[test]
    fn median_of_even_and_odd_counts() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&mut []), None);
        assert_eq!(median(&mut [1.0, f64::NAN]), None);
    }
}
