//! DIAN's QR code (CONTRACT §12) as both renderers draw it: the `qr_url` of an electronic
//! document encoded once (`Qr::encode`, error correction M), its dark modules as horizontal
//! runs (the PDF fills one rectangle per run) or as SVG path data (the hosted page inlines an
//! `<svg>`: a path and presentation attributes, nothing the page's Content-Security-Policy
//! refuses). Both keep a quiet zone of `QUIET` light modules around the symbol, which
//! scanners need to find it. No raster image is made anywhere.

/// Light modules on every side of the symbol (ISO/IEC 18004 asks for four).
pub const QUIET: usize = 4;

/// A QR code's modules, row by row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Qr {
    width: usize,
    dark: Vec<bool>,
}

/// A horizontal run of dark modules: its row, first column and length, in modules of the
/// symbol (the quiet zone not counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    pub row: usize,
    pub col: usize,
    pub len: usize,
}

impl Qr {
    /// `data` as a QR code; `None` only past what a QR code holds (about 2 KB).
    pub fn encode(data: &str) -> Option<Self> {
        let code = qrcode::QrCode::with_error_correction_level(data.as_bytes(), qrcode::EcLevel::M)
            .ok()?;
        Some(Self {
            width: code.width(),
            dark: code
                .to_colors()
                .into_iter()
                .map(|color| color == qrcode::Color::Dark)
                .collect(),
        })
    }

    /// Modules on a side of the symbol and its quiet zone.
    pub fn side(&self) -> usize {
        self.width + 2 * QUIET
    }

    /// The dark modules, one run per stretch of a row: fewer shapes than one per module, and
    /// no hairline seams between neighbours when a viewer anti-aliases.
    pub fn runs(&self) -> Vec<Run> {
        let mut runs = Vec::new();
        for row in 0..self.width {
            let cells = &self.dark[row * self.width..(row + 1) * self.width];
            let mut col = 0;
            while col < self.width {
                if !cells[col] {
                    col += 1;
                    continue;
                }
                let start = col;
                while col < self.width && cells[col] {
                    col += 1;
                }
                runs.push(Run {
                    row,
                    col: start,
                    len: col - start,
                });
            }
        }
        runs
    }

    /// SVG path data of the dark modules in a `0 0 side side` view box (the quiet zone
    /// included): `M4 4h7v1h-7z…`.
    pub fn svg_path(&self) -> String {
        let mut d = String::new();
        for run in self.runs() {
            let (x, y) = (run.col + QUIET, run.row + QUIET);
            d.push_str(&format!("M{x} {y}h{}v1h-{}z", run.len, run.len));
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_cover_exactly_the_dark_modules() {
        let qr =
            Qr::encode("https://catalogo-vpfe-hab.dian.gov.co/document/searchqr?documentkey=ab")
                .expect("fits");
        let mut drawn = vec![false; qr.width * qr.width];
        for run in qr.runs() {
            for col in run.col..run.col + run.len {
                let cell = &mut drawn[run.row * qr.width + col];
                assert!(!*cell, "a module drawn twice");
                *cell = true;
            }
        }
        assert_eq!(drawn, qr.dark);
        assert_eq!(qr.side(), qr.width + 8);
    }

    #[test]
    fn a_dian_url_with_a_cufe_fits_and_the_svg_starts_inside_the_quiet_zone() {
        let url = format!(
            "https://catalogo-vpfe.dian.gov.co/document/searchqr?documentkey={}",
            "f".repeat(96)
        );
        let qr = Qr::encode(&url).expect("fits");
        // Version 9 at level M: 53 modules, 61 with the quiet zone.
        assert_eq!(qr.side(), 61);
        // The finder pattern's top-left corner is the first dark module, four modules in.
        assert!(qr.svg_path().starts_with("M4 4h7v1h-7z"));
        assert!(Qr::encode(&"x".repeat(4_000)).is_none());
    }
}
