//! The PDFs' font and how wide its text is. DejaVu Sans, regular and bold, is compiled in
//! (`fonts/`, Bitstream Vera licence with DejaVu's changes in the public domain:
//! `fonts/LICENSE-DejaVu.txt`); krilla embeds only the glyphs a document uses, so every PDF
//! renders the same in every viewer, accents and `ñ` included, where a standard PDF font would
//! be each viewer's look-alike and limited to Windows-1252.

use krilla::text::Font;
use skrifa::instance::{LocationRef, Size};
use skrifa::metrics::GlyphMetrics;
use skrifa::{FontRef, MetadataProvider, charmap::Charmap};

static REGULAR_TTF: &[u8] = include_bytes!("fonts/DejaVuSans.ttf");
static BOLD_TTF: &[u8] = include_bytes!("fonts/DejaVuSans-Bold.ttf");

/// A face as krilla needs it for drawing, plus skrifa tables for measuring.
/// krilla does not expose glyph advances, and we need widths to right-align
/// amounts and to wrap text, so we read them from the same font bytes.
pub(super) struct Face {
    pub(super) font: Font,
    charmap: Charmap<'static>,
    metrics: GlyphMetrics<'static>,
    units_per_em: f32,
}

impl Face {
    fn load(data: &'static [u8]) -> Face {
        // The font files are compiled in and known good, so failing here is a build defect.
        let font = Font::new(data.into(), 0).expect("embedded font must parse");
        let face = FontRef::new(data).expect("embedded font must parse");
        Face {
            units_per_em: font.units_per_em(),
            font,
            charmap: face.charmap(),
            metrics: face.glyph_metrics(Size::unscaled(), LocationRef::default()),
        }
    }

    /// Advance width of `text` at `size` points. Ignores kerning, which for
    /// DejaVu changes a line by well under a point.
    fn width(&self, text: &str, size: f32) -> f32 {
        let units: f32 = text
            .chars()
            .map(|c| {
                let gid = self.charmap.map(c).unwrap_or_default();
                self.metrics.advance_width(gid).unwrap_or(0.0)
            })
            .sum();
        units * size / self.units_per_em
    }
}

pub(super) struct Fonts {
    regular: Face,
    bold: Face,
}

impl Fonts {
    pub(super) fn load() -> Fonts {
        Fonts {
            regular: Face::load(REGULAR_TTF),
            bold: Face::load(BOLD_TTF),
        }
    }

    pub(super) fn face(&self, bold: bool) -> &Face {
        if bold { &self.bold } else { &self.regular }
    }

    pub(super) fn width(&self, text: &str, size: f32, bold: bool) -> f32 {
        self.face(bold).width(text, size)
    }

    /// Greedy word wrap into lines no wider than `max_w`. Words wider than a
    /// whole line (the CUFE, long URLs) are broken between characters. If more
    /// than `max_lines` result, the last kept line ends in "…" so the cell
    /// never grows without bound.
    pub(super) fn wrap(
        &self,
        text: &str,
        size: f32,
        bold: bool,
        max_w: f32,
        max_lines: usize,
    ) -> Vec<String> {
        let fits = |s: &str| self.width(s, size, bold) <= max_w;
        let mut lines: Vec<String> = Vec::new();
        let mut line = String::new();
        for word in text.split_whitespace() {
            let candidate = if line.is_empty() {
                word.to_string()
            } else {
                format!("{line} {word}")
            };
            if fits(&candidate) {
                line = candidate;
                continue;
            }
            if !line.is_empty() {
                lines.push(std::mem::take(&mut line));
            }
            if fits(word) {
                line = word.to_string();
            } else {
                for ch in word.chars() {
                    line.push(ch);
                    if !fits(&line) && line.chars().count() > 1 {
                        line.pop();
                        lines.push(std::mem::replace(&mut line, ch.to_string()));
                    }
                }
            }
        }
        if !line.is_empty() {
            lines.push(line);
        }
        if lines.len() > max_lines.max(1) {
            lines.truncate(max_lines.max(1));
            let last = lines.last_mut().expect("at least one line");
            while !last.is_empty() && !fits(&format!("{last}…")) {
                last.pop();
            }
            let trimmed = last.trim_end().to_string();
            *last = format!("{trimmed}…");
        }
        lines
    }

    /// Largest size ≤ `size` at which `text` fits in `max_w` on one line. Used
    /// for amounts: shrinking is better than wrapping or clipping a number.
    pub(super) fn fit(&self, text: &str, size: f32, bold: bool, max_w: f32) -> f32 {
        let w = self.width(text, size, bold);
        if w <= max_w {
            size
        } else {
            (size * max_w / w).max(4.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_breaks_long_words_and_ellipsizes() {
        let fonts = Fonts::load();
        let cufe = "a".repeat(96);
        let lines = fonts.wrap(&cufe, 7.0, false, 100.0, 10);
        assert!(lines.len() > 1);
        assert_eq!(lines.concat(), cufe);
        assert!(lines.iter().all(|l| fonts.width(l, 7.0, false) <= 100.0));

        let long = "palabra ".repeat(40);
        let lines = fonts.wrap(&long, 8.0, false, 80.0, 3);
        assert_eq!(lines.len(), 3);
        assert!(lines[2].ends_with('…'));
        assert!(lines.iter().all(|l| fonts.width(l, 8.0, false) <= 80.0));
    }

    #[test]
    fn an_amount_too_wide_shrinks_to_its_column() {
        let fonts = Fonts::load();
        let amount = "$ 92.233.720.368.547.758,07";
        let size = fonts.fit(amount, 8.0, false, 60.0);
        assert!(size < 8.0);
        assert!(fonts.width(amount, size, false) <= 60.0 + 0.01);
    }
}
