//! A `Sheet` as a PDF (A4): the heading, seller and customer, the lines, the IVA breakdown
//! beside the totals, and with DIAN the CUFE or CUDE, the range's authorisation and the QR
//! code (vector squares, quiet zone kept) at the foot of the last page;
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
    use crate::documents::sheet::{Electronic, PartyLines, SheetLine};

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
            file_stem: "FV-1".into(),
            issued_on: "1 de enero de 2026".into(),
            reference: None,
            seller: PartyLines::default(),
            customer: PartyLines::default(),
            lines: vec![line; lines],
            breakdown: vec![],
            subtotal: "$ 0,00".into(),
            tax: "$ 0,00".into(),
            total: "$ 0,00".into(),
            dian: None,
        }
    }

    /// `sheet(lines)` as an electronic invoice numbered `SETP990000001`, or awaiting a number.
    fn electronic(lines: usize, numbered: bool) -> Sheet {
        let code = "0123456789abcdef".repeat(6);
        let mut sheet = sheet(lines);
        sheet.heading = "Factura electrónica de venta".into();
        sheet.number = if numbered {
            "SETP990000001".into()
        } else {
            "En espera de numeración DIAN".into()
        };
        sheet.dian = Some(Electronic {
            code_label: "CUFE",
            qr_url: numbered.then(|| {
                format!(
                    "https://catalogo-vpfe-hab.dian.gov.co/document/searchqr?documentkey={code}"
                )
            }),
            code: numbered.then_some(code),
            authorization: numbered.then(|| {
                "Autorización de numeración de facturación DIAN No. 18760000001 del 2019-01-19, \
                 prefijo SETP del 990000000 al 995000000, vigencia hasta 2030-01-19"
                    .into()
            }),
            numbered,
        });
        sheet
    }

    /// A text run's box: from its baseline up by the font's ascent, down by its descent.
    fn text_box(item: &Item) -> Option<[f32; 4]> {
        let Item::Text {
            x,
            y,
            size,
            bold,
            text,
            ..
        } = item
        else {
            return None;
        };
        let w = FONTS.width(text, *size, *bold);
        Some([*x, y - size * 0.76, x + w, y + size * 0.24])
    }

    fn overlap(a: [f32; 4], b: [f32; 4]) -> bool {
        a[0] < b[2] - 0.01 && b[0] < a[2] - 0.01 && a[1] < b[3] - 0.01 && b[1] < a[3] - 0.01
    }

    /// The bounding box of every QR module on a page (the black rectangles smaller than 3 pt).
    fn qr_box(items: &[Item]) -> Option<[f32; 4]> {
        let mut bounds: Option<[f32; 4]> = None;
        for item in items {
            let Item::Rects { color, rects } = item else {
                continue;
            };
            if *color != layout::BLACK {
                continue;
            }
            for [x, y, w, h] in rects {
                let b = bounds.get_or_insert([*x, *y, x + w, y + h]);
                *b = [b[0].min(*x), b[1].min(*y), b[2].max(x + w), b[3].max(y + h)];
            }
        }
        bounds
    }

    #[test]
    fn no_text_overlaps_text_or_the_qr_code_and_nothing_leaves_the_page() {
        for (what, doc) in [
            ("plain", sheet(3)),
            ("electronic", electronic(3, true)),
            ("awaiting", electronic(3, false)),
            ("electronic, full page", electronic(24, true)),
        ] {
            let pages = layout(&doc, &FONTS).expect("layout");
            for items in &pages {
                let boxes: Vec<[f32; 4]> = items.iter().filter_map(text_box).collect();
                for (i, a) in boxes.iter().enumerate() {
                    assert!(
                        a[0] >= layout::MARGIN - 0.01 && a[2] <= PAGE_W - layout::MARGIN + 0.01,
                        "{what}: text outside the margins at {a:?}"
                    );
                    for b in &boxes[i + 1..] {
                        assert!(!overlap(*a, *b), "{what}: text over text: {a:?} {b:?}");
                    }
                }
                if let Some(qr) = qr_box(items) {
                    // Four modules of quiet zone around the symbol, clear of text.
                    let quiet = (qr[2] - qr[0]) / 53.0 * 4.0;
                    let zone = [qr[0] - quiet, qr[1] - quiet, qr[2] + quiet, qr[3] + quiet];
                    for a in &boxes {
                        assert!(
                            !overlap(*a, zone),
                            "{what}: text in the QR code's zone {a:?}"
                        );
                    }
                    assert!(
                        zone[2] <= PAGE_W - layout::MARGIN + 0.01,
                        "{what}: {zone:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn an_electronic_invoice_carries_its_code_whole_and_a_qr_code_of_3_cm() {
        let doc = electronic(3, true);
        let pages = layout(&doc, &FONTS).expect("layout");
        let last = pages.last().expect("a page");
        let texts: Vec<&str> = last
            .iter()
            .filter_map(|item| match item {
                Item::Text { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        let code = doc
            .dian
            .as_ref()
            .and_then(|d| d.code.clone())
            .expect("code");
        let joined: String = texts.concat();
        assert!(joined.contains(&code), "the CUFE whole, wrapped: {texts:?}");
        // Wrapped into halves of 48 digits, not a long line and a stub.
        assert!(
            texts.contains(&&code[..48]) && texts.contains(&&code[48..]),
            "{texts:?}"
        );
        assert!(texts.iter().any(|t| t.starts_with("No. SETP990000001")));
        assert!(
            texts
                .iter()
                .any(|t| t.contains("Autorización de numeración"))
        );
        let qr = qr_box(last).expect("a QR code");
        let side = qr[2] - qr[0];
        // At least 2.5 cm (70.9 pt) to scan from paper; square.
        assert!(side >= 80.0, "the symbol is {side} pt");
        assert!((side - (qr[3] - qr[1])).abs() < 0.01);
        // Awaiting a range: its words in place of the number, and no code at all.
        let awaiting = layout(&electronic(3, false), &FONTS).expect("layout");
        assert!(qr_box(awaiting.last().expect("page")).is_none());
        assert!(awaiting[0].iter().any(
            |item| matches!(item, Item::Text { text, .. } if text == "En espera de numeración DIAN")
        ));
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
