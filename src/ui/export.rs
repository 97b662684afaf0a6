//! Exports from the main view: the timeline as a PNG image cut out of a screenshot of the window
//! (what users paste into reviews), written off the UI thread by [`super::jobs::Jobs`].

use std::io::Cursor;
use std::path::Path;

use egui::{ColorImage, Rect};
use image::{ImageFormat, RgbaImage};

/// Cuts `rect` (in points) out of `screenshot` (in pixels), clamped to the image. Errors when
/// nothing of the rect is inside the image.
pub fn crop_to_rect(
    screenshot: &ColorImage,
    rect: Rect,
    pixels_per_point: f32,
) -> Result<ColorImage, String> {
    let [width, height] = screenshot.size;
    // Rounded, then clamped: a rect a fraction of a pixel past the edge must not panic.
    let to_px =
        |v: f32, limit: usize| ((v * pixels_per_point).round().max(0.0) as usize).min(limit);
    let (min_x, max_x) = (to_px(rect.min.x, width), to_px(rect.max.x, width));
    let (min_y, max_y) = (to_px(rect.min.y, height), to_px(rect.max.y, height));
    if min_x >= max_x || min_y >= max_y {
        return Err(format!(
            "the timeline area {rect:?} is outside the {width}×{height} screenshot"
        ));
    }
    Ok(screenshot.region_by_pixels([min_x, min_y], [max_x - min_x, max_y - min_y]))
}

/// Encodes `image` as an RGBA PNG.
pub fn encode_png(image: &ColorImage) -> Result<Vec<u8>, String> {
    let [width, height] = image.size;
    let bytes: Vec<u8> = image
        .pixels
        .iter()
        .flat_map(|c| c.to_srgba_unmultiplied())
        .collect();
    let too_large = || format!("a {width}×{height} image is too large to encode");
    let rgba = RgbaImage::from_raw(
        u32::try_from(width).map_err(|_| too_large())?,
        u32::try_from(height).map_err(|_| too_large())?,
        bytes,
    )
    .ok_or_else(too_large)?;
    let mut png = Vec::new();
    rgba.write_to(&mut Cursor::new(&mut png), ImageFormat::Png)
        .map_err(|err| format!("cannot encode the PNG: {err}"))?;
    Ok(png)
}

/// Crops the screenshot to the timeline, encodes it and writes it to `path` (through a temporary
/// file and a rename, so a failed write never leaves half an image). The error names the file.
pub fn write_timeline_png(
    path: &Path,
    screenshot: &ColorImage,
    rect: Rect,
    pixels_per_point: f32,
) -> Result<(), String> {
    let file = path.display();
    let png = crop_to_rect(screenshot, rect, pixels_per_point)
        .and_then(|cropped| encode_png(&cropped))
        .map_err(|err| format!("{file}: {err}"))?;
    let tmp = path.with_extension("png.tmp");
    std::fs::write(&tmp, png)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|err| {
            let _ = std::fs::remove_file(&tmp);
            format!("{file}: cannot write the image: {err}")
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use egui::{Color32, pos2};

    /// 10×6 pixels, each pixel's red channel its x and green channel its y.
    fn gradient() -> ColorImage {
        let pixels = (0u8..6)
            .flat_map(|y| (0u8..10).map(move |x| Color32::from_rgb(x, y, 200)))
            .collect();
        ColorImage::new([10, 6], pixels)
    }

    #[test]
    fn crop_takes_the_rect_in_pixels() {
        let rect = Rect::from_min_max(pos2(1.0, 1.0), pos2(4.0, 2.5));
        let cropped = crop_to_rect(&gradient(), rect, 2.0).expect("inside");
        assert_eq!(cropped.size, [6, 3]);
        assert_eq!(cropped.pixels[0], Color32::from_rgb(2, 2, 200));
        assert_eq!(cropped.pixels[6 * 3 - 1], Color32::from_rgb(7, 4, 200));
    }

    #[test]
    fn crop_is_clamped_to_the_image_and_rejects_a_rect_outside() {
        let past_edge = Rect::from_min_max(pos2(8.0, 4.0), pos2(12.5, 9.0));
        assert_eq!(
            crop_to_rect(&gradient(), past_edge, 1.0)
                .expect("partly inside")
                .size,
            [2, 2]
        );
        let outside = Rect::from_min_max(pos2(20.0, 0.0), pos2(30.0, 5.0));
        let err = crop_to_rect(&gradient(), outside, 1.0).expect_err("outside");
        assert!(err.contains("outside the 10×6 screenshot"), "{err}");
    }

    #[test]
    fn png_round_trips() {
        let png = encode_png(&gradient()).expect("encodes");
        let decoded = image::load_from_memory_with_format(&png, ImageFormat::Png)
            .expect("decodes")
            .to_rgba8();
        assert_eq!(decoded.dimensions(), (10, 6));
        assert_eq!(decoded.get_pixel(3, 5).0, [3, 5, 200, 255]);
    }

    #[test]
    fn write_errors_name_the_file() {
        let dir = std::env::temp_dir().join("vramscope-no-such-dir-for-png-export");
        let path = dir.join("timeline.png");
        let rect = Rect::from_min_max(pos2(0.0, 0.0), pos2(4.0, 4.0));
        let err = write_timeline_png(&path, &gradient(), rect, 1.0).expect_err("no directory");
        assert!(
            err.contains("timeline.png") && err.contains("cannot write"),
            "{err}"
        );
        assert!(!path.exists());
    }
}
