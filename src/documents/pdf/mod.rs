//! A `Sheet` as a PDF (A4): the heading, seller and customer, the lines, the IVA breakdown
//! beside the totals, and with DIAN the CUFE and its QR code at the foot of the last page;
//! "Página n de N" on every page. `layout` decides where everything goes, `emit` draws it with
//! krilla. Nothing here computes money: every amount arrives written out by `sheet`.
//!
//! Drawn on each request from the stored invoice, never stored; krilla sets no creation date,
//! so the same invoice always gives the same bytes.

mod fonts;
mod layout;

use crate::documents::sheet::Sheet;
use crate::documents::text::Locale;
use fonts::Fonts;
use krilla::color::rgb;
use krilla::geom::{PathBuilder, Point, Rect};
use krilla::metadata::Metadata;
use krilla::num::NormalizedF32;
use krilla::page::PageSettings;
use krilla::paint::{Fill, FillRule};
use krilla::text::TextDirection;
use layout::{Color, Item, PAGE_H, PAGE_W, layout};
use std::sync::LazyLock;

/// The fonts, parsed once.
static FONTS: LazyLock<Fonts> = LazyLock::new(Fonts::load);

/// A PDF that could not be written: never answered half.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The QR payload does not fit in a QR code (URLs over about 2 KB).
    #[error("QR code: {0}")]
    Qr(String),
    /// krilla refused to write the document.
    #[error("PDF: {0}")]
    Pdf(String),
}

/// `sheet` as the bytes of a PDF.
pub fn render(sheet: &Sheet) -> Result<Vec<u8>, RenderError> {
    let fonts = &*FONTS;
    let pages = layout(sheet, fonts)?;
    emit(sheet, fonts, &pages)
}

fn emit(doc: &Sheet, fonts: &Fonts, pages: &[Vec<Item>]) -> Result<Vec<u8>, RenderError> {
    let mut pdf = krilla::Document::new();
    // No creation date is set, so the same sheet always yields the same bytes.
    pdf.set_metadata(
        Metadata::new()
            .title(doc.title.clone())
            .language(match doc.locale {
                Locale::Es => "es-CO".to_owned(),
                Locale::En => "en".to_owned(),
            }),
    );
    let fill = |(r, g, b): Color| Fill {
        paint: rgb::Color::new(r, g, b).into(),
        opacity: NormalizedF32::ONE,
        rule: FillRule::NonZero,
    };
    for items in pages {
        let settings = PageSettings::from_wh(PAGE_W, PAGE_H).expect("A4 is a valid size");
        let mut page = pdf.start_page_with(settings);
        let mut surface = page.surface();
        for item in items {
            match item {
                Item::Text {
                    x,
                    y,
                    size,
                    bold,
                    color,
                    text,
                } => {
                    surface.set_fill(Some(fill(*color)));
                    let font = fonts.face(*bold).font.clone();
                    surface.draw_text(
                        Point::from_xy(*x, *y),
                        font,
                        *size,
                        text,
                        false,
                        TextDirection::Auto,
                    );
                }
                Item::Rects { color, rects } => {
                    let mut pb = PathBuilder::new();
                    for [x, y, w, h] in rects {
                        if let Some(r) = Rect::from_xywh(*x, *y, *w, *h) {
                            pb.push_rect(r);
                        }
                    }
                    if let Some(path) = pb.finish() {
                        surface.set_fill(Some(fill(*color)));
                        surface.draw_path(&path);
                    }
                }
            }
        }
        surface.finish();
        page.finish();
    }
    pdf.finish().map_err(|e| RenderError::Pdf(format!("{e:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::documents::sheet::{PartyLines, SheetLine};

    fn sheet(lines: usize) -> Sheet {
        let line = SheetLine {
            description: "Plan Pro mensual".into(),
            period: "1 nov 2026 – 1 dic 2026".into(),
            quantity: 1,
            base: "$ 41.932,77".into(),
            rate: "19 %".into(),
            tax: "$ 7.967,23".into(),
            amount: "$ 49.900,00".into(),
        };
        Sheet {
            locale: Locale::Es,
            t: crate::documents::text::of(Locale::Es),
            heading: "Factura de venta".into(),
            title: "Factura de venta FV-1".into(),
            number: "FV-1".into(),
            issued_on: "1 de enero de 2026".into(),
            reference: None,
            seller: PartyLines::default(),
            customer: PartyLines::default(),
            lines: vec![line; lines],
            breakdown: vec![],
            subtotal: "$ 0,00".into(),
            tax: "$ 0,00".into(),
            total: "$ 0,00".into(),
            cufe: Some("f".repeat(96)),
            qr_url: Some("https://example.invalid/".into()),
        }
    }

    #[test]
    fn many_lines_paginate_within_the_margins() {
        let pages = layout(&sheet(80), &FONTS).expect("layout");
        assert!(pages.len() >= 3);
        for page in &pages {
            for item in page {
                if let Item::Text { y, .. } = item {
                    assert!(
                        *y <= PAGE_H - layout::MARGIN + 5.0,
                        "text below the margin: {y}"
                    );
                }
            }
        }
        let pdf = render(&sheet(80)).expect("pdf");
        assert!(pdf.starts_with(b"%PDF-"));
    }

    #[test]
    fn the_same_sheet_gives_the_same_bytes() {
        assert_eq!(
            render(&sheet(2)).expect("pdf"),
            render(&sheet(2)).expect("pdf")
        );
    }
}
