//! A small drawing surface for report images: anti-aliased lines, areas and text on a white
//! pixmap, encoded as PNG. Coordinates are in points; `scale` is the pixel density (2 for
//! images that stay sharp on high-density screens and when zoomed in a review).
//!
//! Text uses the Ubuntu font that egui ships (so images match the app), drawn from its glyph
//! outlines; a light stroke around each glyph gives the regular and bold weights the light cut
//! lacks, which keeps small labels readable at 100 % zoom.

use std::io::Cursor;

use tiny_skia::{
    FillRule, LineCap, LineJoin, Mask, Paint, PathBuilder, Pixmap, Rect, Stroke, StrokeDash,
    Transform,
};

pub use super::palette::Rgb;

/// Text weight (the font's light cut, emboldened by a stroke).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weight {
    Regular,
    Bold,
}

impl Weight {
    /// Width of the stroke around each glyph, as a fraction of the font size.
    fn stroke_em(self) -> f32 {
        match self {
            Weight::Regular => 0.028,
            Weight::Bold => 0.065,
        }
    }
}

/// Where a text's anchor point is, horizontally.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    Center,
    Right,
}

/// A point-space rectangle.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Area {
    pub x: f32,
    pub y: f32,
    pub width: f32,
    pub height: f32,
}

impl Area {
    pub fn right(&self) -> f32 {
        self.x + self.width
    }
    pub fn bottom(&self) -> f32 {
        self.y + self.height
    }
}

/// Why an image could not be made.
#[derive(Debug, thiserror::Error)]
pub enum FigureError {
    #[error("a {width}×{height} pixel image is too large or empty")]
    Size { width: u32, height: u32 },
    #[error("the built-in font could not be read: {0}")]
    Font(String),
    #[error("cannot encode the PNG: {0}")]
    Encode(String),
}

/// The drawing surface.
pub struct Canvas {
    pixmap: Pixmap,
    scale: f32,
    font: ttf_parser::Face<'static>,
}

/// Largest image side in pixels (a 2× image of 8 GPUs stays far below).
const MAX_SIDE_PX: u32 = 16_384;

impl Canvas {
    /// A white canvas of `width` × `height` points at `scale` pixels per point.
    pub fn new(width: f32, height: f32, scale: f32) -> Result<Canvas, FigureError> {
        let width_px = (width * scale).ceil().max(0.0) as u32;
        let height_px = (height * scale).ceil().max(0.0) as u32;
        let too_large = FigureError::Size {
            width: width_px,
            height: height_px,
        };
        if width_px > MAX_SIDE_PX || height_px > MAX_SIDE_PX {
            return Err(too_large);
        }
        let mut pixmap = Pixmap::new(width_px, height_px).ok_or(too_large)?;
        pixmap.fill(tiny_skia::Color::WHITE);
        let font = ttf_parser::Face::parse(epaint_default_fonts::UBUNTU_LIGHT, 0)
            .map_err(|e| FigureError::Font(e.to_string()))?;
        Ok(Canvas {
            pixmap,
            scale,
            font,
        })
    }

    /// Pixels per point.
    pub fn scale(&self) -> f32 {
        self.scale
    }

    fn transform(&self) -> Transform {
        Transform::from_scale(self.scale, self.scale)
    }

    fn paint(color: Rgb, alpha: f32) -> Paint<'static> {
        let mut paint = Paint::default();
        paint.set_color_rgba8(
            color[0],
            color[1],
            color[2],
            (alpha.clamp(0.0, 1.0) * 255.0).round() as u8,
        );
        paint.anti_alias = true;
        paint
    }

    /// A mask that lets drawing through only inside `area` (in points).
    pub fn clip_mask(&self, area: Area) -> Option<Mask> {
        let mut mask = Mask::new(self.pixmap.width(), self.pixmap.height())?;
        let rect = Rect::from_xywh(area.x, area.y, area.width, area.height)?;
        mask.fill_path(
            &PathBuilder::from_rect(rect),
            FillRule::Winding,
            false,
            self.transform(),
        );
        Some(mask)
    }

    /// Fills a rectangle.
    pub fn fill_rect(&mut self, area: Area, color: Rgb, alpha: f32) {
        if let Some(rect) = Rect::from_xywh(area.x, area.y, area.width, area.height) {
            let transform = self.transform();
            self.pixmap
                .fill_rect(rect, &Self::paint(color, alpha), transform, None);
        }
    }

    /// A polyline through `points`, `width` points wide, dashed when `dash` gives on/off
    /// lengths (in points), clipped by `mask`.
    pub fn polyline(
        &mut self,
        points: &[(f32, f32)],
        color: Rgb,
        width: f32,
        dash: Option<[f32; 2]>,
        mask: Option<&Mask>,
    ) {
        let Some(path) = path_through(points, false) else {
            return;
        };
        let stroke = Stroke {
            width,
            line_cap: if dash.is_some() {
                LineCap::Butt
            } else {
                LineCap::Round
            },
            line_join: LineJoin::Round,
            dash: dash.and_then(|[on, off]| StrokeDash::new(vec![on, off], 0.0)),
            ..Stroke::default()
        };
        let transform = self.transform();
        self.pixmap
            .stroke_path(&path, &Self::paint(color, 1.0), &stroke, transform, mask);
    }

    /// Fills the polygon through `points`.
    pub fn fill_polygon(
        &mut self,
        points: &[(f32, f32)],
        color: Rgb,
        alpha: f32,
        mask: Option<&Mask>,
    ) {
        if let Some(path) = path_through(points, true) {
            let transform = self.transform();
            self.pixmap.fill_path(
                &path,
                &Self::paint(color, alpha),
                FillRule::Winding,
                transform,
                mask,
            );
        }
    }

    /// Width of `text` at `size` points.
    pub fn text_width(&self, text: &str, size: f32) -> f32 {
        let per_unit = size / f32::from(self.font.units_per_em());
        text.chars()
            .map(|c| {
                self.font
                    .glyph_index(c)
                    .or_else(|| self.font.glyph_index('?'))
                    .and_then(|g| self.font.glyph_hor_advance(g))
                    .map_or(0.0, |advance| f32::from(advance) * per_unit)
            })
            .sum()
    }

    /// Draws `text` with its baseline at `y`, anchored at `x` as `align` says. Returns its width.
    pub fn text(
        &mut self,
        text: &str,
        (x, y): (f32, f32),
        size: f32,
        color: Rgb,
        weight: Weight,
        align: Align,
    ) -> f32 {
        let width = self.text_width(text, size);
        let start = match align {
            Align::Left => x,
            Align::Center => x - width / 2.0,
            Align::Right => x - width,
        };
        let per_unit = size / f32::from(self.font.units_per_em());
        let mut outline = GlyphPath {
            builder: PathBuilder::new(),
            origin: (start, y),
            per_unit,
        };
        for c in text.chars() {
            let Some(glyph) = self
                .font
                .glyph_index(c)
                .or_else(|| self.font.glyph_index('?'))
            else {
                continue;
            };
            self.font.outline_glyph(glyph, &mut outline);
            let advance = self.font.glyph_hor_advance(glyph).unwrap_or(0);
            outline.origin.0 += f32::from(advance) * per_unit;
        }
        if let Some(path) = outline.builder.finish() {
            let transform = self.transform();
            let paint = Self::paint(color, 1.0);
            self.pixmap
                .fill_path(&path, &paint, FillRule::Winding, transform, None);
            let stroke = Stroke {
                width: size * weight.stroke_em(),
                line_join: LineJoin::Round,
                ..Stroke::default()
            };
            self.pixmap
                .stroke_path(&path, &paint, &stroke, transform, None);
        }
        width
    }

    /// The image's size in pixels.
    pub fn size_px(&self) -> (u32, u32) {
        (self.pixmap.width(), self.pixmap.height())
    }

    /// The pixel at (`x`, `y`) in pixels, for tests.
    pub fn pixel(&self, x: u32, y: u32) -> Option<Rgb> {
        self.pixmap
            .pixel(x, y)
            .map(|p| p.demultiply())
            .map(|c| [c.red(), c.green(), c.blue()])
    }

    /// Encodes the image as an RGB PNG (the background is opaque white).
    pub fn encode_png(&self) -> Result<Vec<u8>, FigureError> {
        let (width, height) = self.size_px();
        let rgb: Vec<u8> = self
            .pixmap
            .pixels()
            .iter()
            .flat_map(|p| {
                let c = p.demultiply();
                [c.red(), c.green(), c.blue()]
            })
            .collect();
        let image = image::RgbImage::from_raw(width, height, rgb)
            .ok_or_else(|| FigureError::Encode("pixel buffer size mismatch".to_owned()))?;
        let mut png = Vec::new();
        image
            .write_to(&mut Cursor::new(&mut png), image::ImageFormat::Png)
            .map_err(|e| FigureError::Encode(e.to_string()))?;
        Ok(png)
    }
}

/// The path through `points` (closed into a polygon when `close`); `None` for no points.
fn path_through(points: &[(f32, f32)], close: bool) -> Option<tiny_skia::Path> {
    let mut builder = PathBuilder::new();
    for (i, &(x, y)) in points.iter().enumerate() {
        if i == 0 {
            builder.move_to(x, y);
        } else {
            builder.line_to(x, y);
        }
    }
    if close {
        builder.close();
    }
    builder.finish()
}

/// Collects glyph outlines into one path, font units (y up) to points (y down).
struct GlyphPath {
    builder: PathBuilder,
    origin: (f32, f32),
    per_unit: f32,
}

impl GlyphPath {
    fn map(&self, x: f32, y: f32) -> (f32, f32) {
        (
            self.origin.0 + x * self.per_unit,
            self.origin.1 - y * self.per_unit,
        )
    }
}

impl ttf_parser::OutlineBuilder for GlyphPath {
    fn move_to(&mut self, x: f32, y: f32) {
        let (x, y) = self.map(x, y);
        self.builder.move_to(x, y);
    }
    fn line_to(&mut self, x: f32, y: f32) {
        let (x, y) = self.map(x, y);
        self.builder.line_to(x, y);
    }
    fn quad_to(&mut self, x1: f32, y1: f32, x: f32, y: f32) {
        let (x1, y1) = self.map(x1, y1);
        let (x, y) = self.map(x, y);
        self.builder.quad_to(x1, y1, x, y);
    }
    fn curve_to(&mut self, x1: f32, y1: f32, x2: f32, y2: f32, x: f32, y: f32) {
        let (x1, y1) = self.map(x1, y1);
        let (x2, y2) = self.map(x2, y2);
        let (x, y) = self.map(x, y);
        self.builder.cubic_to(x1, y1, x2, y2, x, y);
    }
    fn close(&mut self) {
        self.builder.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_drawn_where_asked_and_measured() {
        let mut canvas = Canvas::new(120.0, 40.0, 2.0).expect("canvas");
        assert_eq!(canvas.size_px(), (240, 80));
        let width = canvas.text(
            "GiB 80",
            (10.0, 30.0),
            20.0,
            [0, 0, 0],
            Weight::Regular,
            Align::Left,
        );
        assert!(width > 40.0 && width < 90.0, "{width}");
        assert_eq!(canvas.text_width("GiB 80", 20.0), width);
        // Ink inside the text's box, none far right of it.
        let inked = |x0: u32, x1: u32| {
            (x0..x1).any(|x| (20..60).any(|y| canvas.pixel(x, y).is_some_and(|p| p[0] < 128)))
        };
        assert!(inked(20, (20.0 + width * 2.0) as u32));
        assert!(!inked((24.0 + width * 2.0) as u32, 240));
    }

    #[test]
    fn the_font_has_every_character_the_images_use() {
        let canvas = Canvas::new(1.0, 1.0, 1.0).expect("canvas");
        for c in
            "×·–—…%°µ0123456789 ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz()[]:,.'/+-@#"
                .chars()
        {
            assert!(
                canvas.font.glyph_index(c).is_some(),
                "{c:?} ({:#x})",
                c as u32
            );
        }
    }

    #[test]
    fn lines_areas_and_clipping() {
        let mut canvas = Canvas::new(100.0, 100.0, 1.0).expect("canvas");
        let plot = Area {
            x: 10.0,
            y: 10.0,
            width: 50.0,
            height: 50.0,
        };
        let mask = canvas.clip_mask(plot);
        canvas.polyline(
            &[(0.0, 30.0), (100.0, 30.0)],
            [200, 0, 0],
            2.0,
            None,
            mask.as_ref(),
        );
        assert_eq!(canvas.pixel(30, 30), Some([200, 0, 0]));
        assert_eq!(canvas.pixel(80, 30), Some([255, 255, 255]), "clipped");
        canvas.fill_polygon(
            &[(70.0, 70.0), (90.0, 70.0), (90.0, 90.0), (70.0, 90.0)],
            [0, 0, 200],
            1.0,
            None,
        );
        assert_eq!(canvas.pixel(80, 80), Some([0, 0, 200]));
        assert!(Canvas::new(100_000.0, 10.0, 1.0).is_err());
        let png = canvas.encode_png().expect("png");
        assert!(png.starts_with(b"\x89PNG"));
    }
}
