//! A line chart of one GPU's memory over time, drawn pixel by pixel with the `image` crate and
//! encoded as PNG, so reports can embed it without a plotting library or fonts. Labels (legend,
//! axis range) are written by the report around the image.

use std::io::Cursor;

use image::{ImageFormat, Rgb, RgbImage};

use super::{MarkerKind, NEAR_FULL_FRACTION, TimelinePanel};

/// Line colours, in series order (the first is the GPU's used memory, drawn as a tinted area
/// under a thin line; the others are processes, drawn on top). The HTML legend uses the same.
pub const SERIES_COLORS: [[u8; 3]; 7] = [
    [31, 78, 160],
    [40, 150, 60],
    [200, 40, 140],
    [20, 150, 160],
    [140, 90, 40],
    [120, 70, 200],
    [120, 130, 20],
];
/// The device capacity (horizontal, solid).
pub const CAPACITY_COLOR: [u8; 3] = [110, 110, 110];
/// The near-full threshold (horizontal, dashed) and its first crossing (vertical, dashed).
pub const THRESHOLD_COLOR: [u8; 3] = [225, 150, 0];
/// Out-of-memory events (vertical).
pub const OOM_COLOR: [u8; 3] = [210, 0, 0];
/// Xid events (vertical).
pub const XID_COLOR: [u8; 3] = [0, 0, 0];
const BACKGROUND: Rgb<u8> = Rgb([255, 255, 255]);
const GRID: Rgb<u8> = Rgb([225, 225, 225]);
/// How strongly the area under the used-memory line is tinted (0 = white, 1 = the line colour).
const USED_AREA_ALPHA: f64 = 0.18;
const MARGIN: u32 = 6;

/// The colour of series `i` as `#rrggbb`.
pub fn color_hex(i: usize) -> String {
    hex(SERIES_COLORS[i % SERIES_COLORS.len()])
}

/// A colour as `#rrggbb`.
pub fn hex([r, g, b]: [u8; 3]) -> String {
    format!("#{r:02x}{g:02x}{b:02x}")
}

/// The colour a marker is drawn in.
pub fn marker_color(kind: MarkerKind) -> [u8; 3] {
    match kind {
        MarkerKind::OutOfMemory => OOM_COLOR,
        MarkerKind::Xid => XID_COLOR,
        MarkerKind::NearFull => THRESHOLD_COLOR,
    }
}

/// The largest value the y axis shows: the device capacity, or the highest point if larger.
pub fn y_max(panel: &TimelinePanel) -> u64 {
    panel
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .max()
        .unwrap_or(0)
        .max(panel.total_bytes)
        .max(1)
}

/// Draws one GPU's panel over the shared time range `(t_min, t_max)`: grid lines at quarters of
/// the y range, the capacity and the near-full threshold, the used memory as a tinted area, the
/// processes on top of it, and a vertical line per marker. Returns PNG bytes.
pub fn render_png(
    panel: &TimelinePanel,
    (t_min, t_max): (i64, i64),
    width_px: u32,
    height_px: u32,
) -> Result<Vec<u8>, image::ImageError> {
    let width = width_px.max(2 * MARGIN + 2);
    let height = height_px.max(2 * MARGIN + 2);
    let mut img = RgbImage::from_pixel(width, height, BACKGROUND);
    let plot_w = (width - 2 * MARGIN - 1) as f64;
    let plot_h = (height - 2 * MARGIN - 1) as f64;
    let y_max = y_max(panel) as f64;
    let t_span = if t_max > t_min {
        (t_max - t_min) as f64
    } else {
        1.0
    };
    let x_px = |t: i64| (MARGIN as f64 + (t - t_min) as f64 / t_span * plot_w).round() as i64;
    let y_px = |bytes: u64| (MARGIN as f64 + plot_h - bytes as f64 / y_max * plot_h).round() as i64;
    let left = MARGIN as i64;
    let right = (width - MARGIN) as i64 - 1;
    let top = MARGIN as i64;
    let bottom = y_px(0);
    for quarter in 0..=4 {
        let y = (MARGIN as f64 + plot_h - plot_h * quarter as f64 / 4.0).round() as i64;
        line(&mut img, (left, y), (right, y), GRID, 1);
    }
    if panel.total_bytes > 0 {
        let capacity_y = y_px(panel.total_bytes);
        line(
            &mut img,
            (left, capacity_y),
            (right, capacity_y),
            Rgb(CAPACITY_COLOR),
            1,
        );
        let threshold_y = y_px((panel.total_bytes as f64 * NEAR_FULL_FRACTION) as u64);
        dashed(
            &mut img,
            (left, threshold_y),
            (right, threshold_y),
            Rgb(THRESHOLD_COLOR),
        );
    }
    // Used memory: a tinted area and a thin line, under everything else.
    if let Some(used) = panel.series.first() {
        let color = SERIES_COLORS[0];
        let tint =
            Rgb(color.map(|c| (255.0 - (255.0 - f64::from(c)) * USED_AREA_ALPHA).round() as u8));
        let points: Vec<(i64, i64)> = used
            .points
            .iter()
            .map(|&(t, b)| (x_px(t), y_px(b)))
            .collect();
        for pair in points.windows(2) {
            let ((x0, y0), (x1, y1)) = (pair[0], pair[1]);
            for x in x0..=x1 {
                let y = if x1 > x0 {
                    y0 + (y1 - y0) * (x - x0) / (x1 - x0)
                } else {
                    y1
                };
                for yy in (y + 1)..=bottom {
                    // Only the background: grid, capacity and threshold stay visible.
                    let background = u32::try_from(x)
                        .ok()
                        .zip(u32::try_from(yy).ok())
                        .and_then(|(px, py)| img.get_pixel_checked(px, py))
                        .is_some_and(|p| *p == BACKGROUND);
                    if background {
                        put(&mut img, x, yy, tint);
                    }
                }
            }
        }
        polyline(&mut img, &points, Rgb(color), 1);
    }
    // Processes on top, thicker, so one that holds all the memory is not hidden by the GPU line.
    for (i, series) in panel.series.iter().enumerate().skip(1) {
        let color = Rgb(SERIES_COLORS[i % SERIES_COLORS.len()]);
        let points: Vec<(i64, i64)> = series
            .points
            .iter()
            .map(|&(t, b)| (x_px(t), y_px(b)))
            .collect();
        polyline(&mut img, &points, color, 2);
    }
    for marker in &panel.markers {
        let x = x_px(marker.t_ms);
        let color = Rgb(marker_color(marker.kind));
        match marker.kind {
            MarkerKind::NearFull => dashed(&mut img, (x, top), (x, bottom), color),
            MarkerKind::OutOfMemory | MarkerKind::Xid => {
                line(&mut img, (x, top), (x, bottom), color, 1);
                line(&mut img, (x + 1, top), (x + 1, bottom), color, 1);
            }
        }
    }
    let mut bytes = Vec::new();
    img.write_to(&mut Cursor::new(&mut bytes), ImageFormat::Png)?;
    Ok(bytes)
}

/// Consecutive points joined by lines (repeated pixels skipped).
fn polyline(img: &mut RgbImage, points: &[(i64, i64)], color: Rgb<u8>, thickness: i64) {
    let mut previous: Option<(i64, i64)> = None;
    for &p in points {
        match previous {
            Some(prev) if prev == p => continue,
            Some(prev) => line(img, prev, p, color, thickness),
            None => line(img, p, p, color, thickness),
        }
        previous = Some(p);
    }
}

/// A horizontal or vertical line drawn 6 pixels on, 4 off.
fn dashed(img: &mut RgbImage, from: (i64, i64), to: (i64, i64), color: Rgb<u8>) {
    let steps = (to.0 - from.0).abs().max((to.1 - from.1).abs());
    for i in 0..=steps {
        if i % 10 < 6 {
            let x = from.0 + (to.0 - from.0).signum() * i;
            let y = from.1 + (to.1 - from.1).signum() * i;
            put(img, x, y, color);
        }
    }
}

/// Sets a pixel if it is inside the image.
fn put(img: &mut RgbImage, x: i64, y: i64, color: Rgb<u8>) {
    if x >= 0
        && y >= 0
        && (x as u64) < u64::from(img.width())
        && (y as u64) < u64::from(img.height())
    {
        img.put_pixel(x as u32, y as u32, color);
    }
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
            put(img, x, y + k, color);
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
    use crate::report::{TimelineMarker, TimelineSeries};

    fn decode(png: &[u8]) -> RgbImage {
        image::load_from_memory(png)
            .unwrap_or_else(|e| panic!("{e}"))
            .to_rgb8()
    }

    #[test]
    fn draws_the_line_where_the_data_is() {
        let panel = TimelinePanel {
            total_bytes: 100,
            series: vec![TimelineSeries {
                label: "used".into(),
                points: vec![(0, 0), (1000, 100)],
            }],
            ..Default::default()
        };
        let img =
            decode(&render_png(&panel, (0, 1000), 112, 112).unwrap_or_else(|e| panic!("{e}")));
        assert_eq!((img.width(), img.height()), (112, 112));
        let used = Rgb(SERIES_COLORS[0]);
        // bottom-left to top-right diagonal of the 100x100 plot area
        assert_eq!(*img.get_pixel(MARGIN, 111 - MARGIN), used);
        assert_eq!(*img.get_pixel(MARGIN + 50, 111 - MARGIN - 50), used);
        // Under the line: tinted, not the line colour; above it: white.
        let under = *img.get_pixel(MARGIN + 50, 111 - MARGIN - 10);
        assert!(under != used && under != BACKGROUND, "{under:?}");
        assert_eq!(*img.get_pixel(MARGIN + 20, 111 - MARGIN - 60), BACKGROUND);
        assert_eq!(color_hex(0), "#1f4ea0");
    }

    #[test]
    fn processes_are_drawn_over_the_gpu_line_and_markers_are_drawn() {
        // One process holding everything the GPU uses: its line must be the one visible.
        let flat = vec![(0, 50), (1000, 50)];
        let panel = TimelinePanel {
            total_bytes: 100,
            series: vec![
                TimelineSeries {
                    label: "GPU 0 used".into(),
                    points: flat.clone(),
                },
                TimelineSeries {
                    label: "PID 1".into(),
                    points: flat,
                },
            ],
            markers: vec![
                TimelineMarker {
                    t_ms: 250,
                    kind: MarkerKind::OutOfMemory,
                    label: "out of memory".into(),
                },
                TimelineMarker {
                    t_ms: 750,
                    kind: MarkerKind::Xid,
                    label: "Xid 79".into(),
                },
            ],
            ..Default::default()
        };
        let img =
            decode(&render_png(&panel, (0, 1000), 113, 113).unwrap_or_else(|e| panic!("{e}")));
        // 113 px: a 100 x 100 plot area from (MARGIN, MARGIN).
        assert_eq!(
            *img.get_pixel(MARGIN + 10, MARGIN + 50),
            Rgb(SERIES_COLORS[1])
        );
        assert_eq!(*img.get_pixel(MARGIN + 25, MARGIN + 5), Rgb(OOM_COLOR));
        assert_eq!(*img.get_pixel(MARGIN + 75, MARGIN + 5), Rgb(XID_COLOR));
        // The threshold at 90 %: dashed, amber, from the left edge; the capacity at the top.
        assert_eq!(*img.get_pixel(MARGIN, MARGIN + 10), Rgb(THRESHOLD_COLOR));
        assert_eq!(*img.get_pixel(MARGIN + 1, MARGIN), Rgb(CAPACITY_COLOR));
    }
}
