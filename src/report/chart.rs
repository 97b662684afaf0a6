//! A simple line chart of memory over time, drawn pixel by pixel with the `image` crate and
//! encoded as PNG, so reports can embed it without a plotting library or fonts. Labels (legend,
//! axis range) are written by the report around the image.

use std::io::Cursor;

use image::{ImageFormat, Rgb, RgbImage};

use super::Timeline;

/// Line colours, in series order (the first is the device total). The HTML legend uses the same.
pub const SERIES_COLORS: [[u8; 3]; 7] = [
    [31, 78, 160],
    [230, 120, 20],
    [40, 150, 60],
    [150, 60, 170],
    [200, 40, 90],
    [20, 150, 160],
    [120, 100, 40],
];
const BACKGROUND: Rgb<u8> = Rgb([255, 255, 255]);
const GRID: Rgb<u8> = Rgb([220, 220, 220]);
const CAPACITY: Rgb<u8> = Rgb([200, 0, 0]);
const MARGIN: u32 = 6;

/// The colour of series `i` as `#rrggbb`.
pub fn color_hex(i: usize) -> String {
    let [r, g, b] = SERIES_COLORS[i % SERIES_COLORS.len()];
    format!("#{r:02x}{g:02x}{b:02x}")
}

/// The largest value the y axis shows: the device capacity, or the highest point if larger.
pub fn y_max(timeline: &Timeline) -> u64 {
    timeline
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .max()
        .unwrap_or(0)
        .max(timeline.total_bytes)
        .max(1)
}

/// Draws the timeline: grid lines at quarters of the y range, the capacity in red, one line per
/// series. Returns PNG bytes.
pub fn render_png(
    timeline: &Timeline,
    width_px: u32,
    height_px: u32,
) -> Result<Vec<u8>, image::ImageError> {
    let width = width_px.max(2 * MARGIN + 2);
    let height = height_px.max(2 * MARGIN + 2);
    let mut img = RgbImage::from_pixel(width, height, BACKGROUND);
    let plot_w = (width - 2 * MARGIN - 1) as f64;
    let plot_h = (height - 2 * MARGIN - 1) as f64;
    let y_max = y_max(timeline) as f64;
    let (t_min, t_max) = timeline
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .fold((i64::MAX, i64::MIN), |(lo, hi), t| (lo.min(t), hi.max(t)));
    let t_span = if t_max > t_min {
        (t_max - t_min) as f64
    } else {
        1.0
    };
    let to_px = |t: i64, bytes: u64| -> (i64, i64) {
        let x = MARGIN as f64 + (t - t_min) as f64 / t_span * plot_w;
        let y = MARGIN as f64 + plot_h - bytes as f64 / y_max * plot_h;
        (x.round() as i64, y.round() as i64)
    };
    for quarter in 0..=4 {
        let y = (MARGIN as f64 + plot_h - plot_h * quarter as f64 / 4.0).round() as i64;
        line(
            &mut img,
            (MARGIN as i64, y),
            ((width - MARGIN) as i64 - 1, y),
            GRID,
            1,
        );
    }
    if timeline.total_bytes > 0 {
        let (_, y) = to_px(t_min, timeline.total_bytes);
        line(
            &mut img,
            (MARGIN as i64, y),
            ((width - MARGIN) as i64 - 1, y),
            CAPACITY,
            1,
        );
    }
    // Draw the device line last so it stays on top.
    for (i, series) in timeline.series.iter().enumerate().rev() {
        let color = Rgb(SERIES_COLORS[i % SERIES_COLORS.len()]);
        let thickness = if i == 0 { 2 } else { 1 };
        let mut previous: Option<(i64, i64)> = None;
        for &(t, bytes) in &series.points {
            let p = to_px(t, bytes);
            match previous {
                Some(prev) if prev == p => continue,
                Some(prev) => line(&mut img, prev, p, color, thickness),
                None => line(&mut img, p, p, color, thickness),
            }
            previous = Some(p);
        }
    }
    let mut bytes = Vec::new();
    img.write_to(&mut Cursor::new(&mut bytes), ImageFormat::Png)?;
    Ok(bytes)
}

/// Bresenham's line, `thickness` pixels tall, clipped to the image.
fn line(img: &mut RgbImage, from: (i64, i64), to: (i64, i64), color: Rgb<u8>, thickness: i64) {
    let (mut x, mut y) = from;
    let dx = (to.0 - x).abs();
    let dy = -(to.1 - y).abs();
    let sx = if x < to.0 { 1 } else { -1 };
    let sy = if y < to.1 { 1 } else { -1 };
    let mut err = dx + dy;
    loop {
        for k in 0..thickness {
            let yy = y + k;
            if x >= 0
                && yy >= 0
                && (x as u64) < u64::from(img.width())
                && (yy as u64) < u64::from(img.height())
            {
                img.put_pixel(x as u32, yy as u32, color);
            }
        }
        if (x, y) == to {
            break;
        }
        let e2 = 2 * err;
        if e2 >= dy {
            err += dy;
            x += sx;
        }
        if e2 <= dx {
            err += dx;
            y += sy;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::TimelineSeries;

    #[test]
    fn draws_the_line_where_the_data_is() {
        let timeline = Timeline {
            caption: "test".into(),
            total_bytes: 100,
            series: vec![TimelineSeries {
                label: "used".into(),
                points: vec![(0, 0), (1000, 100)],
            }],
        };
        let png = render_png(&timeline, 112, 112).unwrap_or_else(|e| panic!("{e}"));
        let img = image::load_from_memory(&png)
            .unwrap_or_else(|e| panic!("{e}"))
            .to_rgb8();
        assert_eq!((img.width(), img.height()), (112, 112));
        let used = Rgb(SERIES_COLORS[0]);
        // bottom-left to top-right diagonal of the 100x100 plot area
        assert_eq!(*img.get_pixel(MARGIN, 111 - MARGIN), used);
        assert_eq!(*img.get_pixel(MARGIN + 50, 111 - MARGIN - 50), used);
        assert_eq!(*img.get_pixel(MARGIN + 50, 111 - MARGIN - 10), BACKGROUND);
        assert_eq!(color_hex(0), "#1f4ea0");
    }
}
