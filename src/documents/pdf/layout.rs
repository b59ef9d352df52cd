//! Where everything goes on the page: `layout` turns a `Sheet` into pages of drawing items
//! (text runs and filled rectangles, in PDF points with the origin top left and y downwards).
//! Column widths, wrapping, shrinking an amount to fit and page breaks are decided here, so
//! they are testable without opening a PDF; `super::emit` only draws.

use super::RenderError;
use super::fonts::Fonts;
use crate::documents::sheet::{PartyLines, Sheet};

pub(super) const PAGE_W: f32 = 595.28; // A4
pub(super) const PAGE_H: f32 = 841.89;
pub(super) const MARGIN: f32 = 42.5; // 15 mm
pub(super) const CONTENT_W: f32 = PAGE_W - 2.0 * MARGIN;
/// Lowest y content may reach; below it sit the page footer lines.
pub(super) const BOTTOM: f32 = PAGE_H - MARGIN - 22.0;
pub(super) const QR_SIZE: f32 = 85.0; // 3 cm

pub(super) type Color = (u8, u8, u8);
pub(super) const BLACK: Color = (0, 0, 0);
pub(super) const GREY: Color = (95, 95, 95);
pub(super) const RULE: Color = (180, 180, 180);
pub(super) const SHADE: Color = (236, 238, 241);

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Item {
    /// `y` is the baseline.
    Text {
        x: f32,
        y: f32,
        size: f32,
        bold: bool,
        color: Color,
        text: String,
    },
    /// Filled rectangles sharing one colour (table shading, rules, QR modules).
    Rects { color: Color, rects: Vec<[f32; 4]> },
}

#[derive(Clone, Copy, PartialEq)]
enum Align {
    Left,
    Right,
}

/// How a table row is set: its text's size and weight, whether it is shaded (a header), and
/// how many lines a wrapped cell may take.
#[derive(Clone, Copy)]
struct RowStyle {
    size: f32,
    bold: bool,
    shade: bool,
    max_lines: usize,
}

const HEADER: RowStyle = RowStyle {
    size: 8.0,
    bold: true,
    shade: true,
    max_lines: 1,
};
const LINE: RowStyle = RowStyle {
    size: 8.0,
    bold: false,
    shade: false,
    max_lines: 3,
};
const BREAKDOWN: RowStyle = RowStyle {
    max_lines: 2,
    ..LINE
};

struct Col {
    width: f32,
    align: Align,
}

struct Layout<'a> {
    fonts: &'a Fonts,
    pages: Vec<Vec<Item>>,
    y: f32,
}

impl<'a> Layout<'a> {
    fn page(&mut self) -> &mut Vec<Item> {
        self.pages.last_mut().expect("layout always has a page")
    }

    fn new_page(&mut self) {
        self.pages.push(Vec::new());
        self.y = MARGIN;
    }

    /// Starts a new page if `height` more points would run into the footer.
    /// Returns whether it did, so callers can repeat a table header.
    fn ensure(&mut self, height: f32) -> bool {
        if self.y + height > BOTTOM {
            self.new_page();
            true
        } else {
            false
        }
    }

    fn text(&mut self, x: f32, y: f32, size: f32, bold: bool, color: Color, text: &str) {
        if text.is_empty() {
            return;
        }
        let text = text.to_string();
        self.page().push(Item::Text {
            x,
            y,
            size,
            bold,
            color,
            text,
        });
    }

    fn text_right(&mut self, right: f32, y: f32, size: f32, bold: bool, color: Color, text: &str) {
        let w = self.fonts.width(text, size, bold);
        self.text(right - w, y, size, bold, color, text);
    }

    fn rect(&mut self, color: Color, x: f32, y: f32, w: f32, h: f32) {
        self.page().push(Item::Rects {
            color,
            rects: vec![[x, y, w, h]],
        });
    }

    fn hrule(&mut self, y: f32) {
        self.rect(RULE, MARGIN, y, CONTENT_W, 0.6);
    }

    /// One table row. Text cells wrap (up to `max_lines`); right-aligned cells
    /// are amounts and shrink to fit instead. Returns the row height.
    fn row(&mut self, x0: f32, cols: &[Col], cells: &[String], style: RowStyle) -> f32 {
        let RowStyle {
            size,
            bold,
            shade,
            max_lines,
        } = style;
        const PAD: f32 = 3.0;
        let leading = size * 1.25;
        let fonts = self.fonts;
        let wrapped: Vec<Vec<String>> = cols
            .iter()
            .zip(cells)
            .map(|(c, t)| match c.align {
                Align::Left => fonts.wrap(t, size, bold, c.width - 2.0 * PAD, max_lines),
                Align::Right => vec![t.clone()],
            })
            .collect();
        let lines = wrapped.iter().map(Vec::len).max().unwrap_or(1).max(1);
        let height = lines as f32 * leading + 2.0 * PAD;
        let total_w: f32 = cols.iter().map(|c| c.width).sum();
        if shade {
            self.rect(SHADE, x0, self.y, total_w, height);
        }
        let first_baseline = self.y + PAD + size * 0.95;
        let mut x = x0;
        for (col, cell_lines) in cols.iter().zip(&wrapped) {
            for (i, line) in cell_lines.iter().enumerate() {
                let y = first_baseline + i as f32 * leading;
                match col.align {
                    Align::Left => self.text(x + PAD, y, size, bold, BLACK, line),
                    Align::Right => {
                        let s = fonts.fit(line, size, bold, col.width - 2.0 * PAD);
                        self.text_right(x + col.width - PAD, y, s, bold, BLACK, line)
                    }
                }
            }
            x += col.width;
        }
        self.y += height;
        self.rect(RULE, x0, self.y - 0.4, total_w, 0.4);
        height
    }
}

pub(super) fn layout(doc: &Sheet, fonts: &Fonts) -> Result<Vec<Vec<Item>>, RenderError> {
    let lb = doc.t;
    let mut l = Layout {
        fonts,
        pages: Vec::new(),
        y: MARGIN,
    };
    l.new_page();
    let right = MARGIN + CONTENT_W;

    // Heading: title on the left, number and date right-aligned.
    let title_lines = fonts.wrap(&doc.heading, 16.0, true, CONTENT_W - 190.0, 2);
    let mut y = l.y + 16.0;
    for line in &title_lines {
        l.text(MARGIN, y, 16.0, true, BLACK, line);
        y += 19.0;
    }
    // A credit note names the invoice it credits under its heading.
    if let Some(reference) = &doc.reference {
        l.text(MARGIN, y - 4.0, 9.0, false, GREY, reference);
        y += 12.0;
    }
    let number = format!("{} {}", lb.number_label, doc.number);
    l.text_right(right, l.y + 14.0, 12.0, true, BLACK, &number);
    l.text_right(
        right,
        l.y + 28.0,
        8.5,
        false,
        GREY,
        &format!("{}: {}", lb.issued, doc.issued_on),
    );
    l.y = (y - 5.0).max(l.y + 34.0);
    l.hrule(l.y);
    l.y += 12.0;

    // Seller and customer side by side.
    let half = (CONTENT_W - 20.0) / 2.0;
    let top = l.y;
    let y_seller = party(&mut l, MARGIN, top, half, lb.seller, &doc.seller);
    let y_customer = party(
        &mut l,
        MARGIN + half + 20.0,
        top,
        half,
        lb.customer,
        &doc.customer,
    );
    l.y = y_seller.max(y_customer) + 10.0;

    // Lines table. Description takes whatever width the fixed columns leave.
    let fixed = [78.0, 34.0, 64.0, 46.0, 58.0, 70.0];
    let cols: Vec<Col> = std::iter::once(Col {
        width: CONTENT_W - fixed.iter().sum::<f32>(),
        align: Align::Left,
    })
    .chain(fixed.iter().enumerate().map(|(i, &w)| Col {
        width: w,
        align: if i == 0 { Align::Left } else { Align::Right },
    }))
    .collect();
    let header = vec![
        lb.description.to_owned(),
        lb.period.to_owned(),
        lb.quantity.to_owned(),
        lb.base.to_owned(),
        lb.rate.to_owned(),
        lb.tax.to_owned(),
        lb.amount.to_owned(),
    ];
    l.ensure(40.0);
    l.row(MARGIN, &cols, &header, HEADER);
    for line in &doc.lines {
        let cells = vec![
            line.description.clone(),
            line.period.clone(),
            line.quantity.to_string(),
            line.base.clone(),
            line.rate.clone(),
            line.tax.clone(),
            line.amount.clone(),
        ];
        // Worst case: three wrapped lines of 8 pt plus padding.
        if l.ensure(3.0 * 10.0 + 6.0) {
            l.row(MARGIN, &cols, &header, HEADER);
        }
        l.row(MARGIN, &cols, &cells, LINE);
    }
    l.y += 14.0;

    // Tax breakdown (left) and totals (right), kept together on one page.
    let breakdown_h = 14.0 + (doc.breakdown.len() as f32 + 1.0) * 16.0;
    l.ensure(breakdown_h.max(3.0 * 18.0));
    let top = l.y;
    l.text(MARGIN, l.y + 9.0, 9.0, true, BLACK, lb.breakdown);
    l.y += 14.0;
    let bcols = [
        Col {
            width: 110.0,
            align: Align::Left,
        },
        Col {
            width: 90.0,
            align: Align::Right,
        },
        Col {
            width: 80.0,
            align: Align::Right,
        },
    ];
    l.row(
        MARGIN,
        &bcols,
        &[
            lb.breakdown_rate.to_owned(),
            lb.base.to_owned(),
            lb.tax.to_owned(),
        ],
        HEADER,
    );
    for row in &doc.breakdown {
        l.row(
            MARGIN,
            &bcols,
            &[row.label.clone(), row.base.clone(), row.tax.clone()],
            BREAKDOWN,
        );
    }
    let after_breakdown = l.y;

    let tx = right - 200.0;
    let mut ty = top + 12.0;
    for (label, amount, bold) in [
        (lb.subtotal, &doc.subtotal, false),
        (lb.total_tax, &doc.tax, false),
        (lb.total, &doc.total, true),
    ] {
        let size = if bold { 11.0 } else { 9.0 };
        if bold {
            l.rect(SHADE, tx, ty - 13.0, 200.0, 19.0);
        }
        l.text(tx + 6.0, ty, size, bold, BLACK, label);
        let size = fonts.fit(amount, size, bold, 120.0);
        l.text_right(right - 6.0, ty, size, bold, BLACK, amount);
        ty += 20.0;
    }
    l.y = after_breakdown.max(ty) + 14.0;

    // CUFE + QR block, pinned to the bottom of the last page.
    let qr = match &doc.qr_url {
        Some(url) => Some(
            qrcode::QrCode::with_error_correction_level(url.as_bytes(), qrcode::EcLevel::M)
                .map_err(|e| RenderError::Qr(e.to_string()))?,
        ),
        None => None,
    };
    if doc.cufe.is_some() || qr.is_some() {
        let text_w = if qr.is_some() {
            CONTENT_W - QR_SIZE - 16.0
        } else {
            CONTENT_W
        };
        let cufe_lines = doc
            .cufe
            .as_deref()
            .map(|c| fonts.wrap(c, 7.0, false, text_w, 6))
            .unwrap_or_default();
        let text_h = 12.0 + cufe_lines.len() as f32 * 9.0;
        let block_h = if qr.is_some() {
            QR_SIZE.max(text_h)
        } else {
            text_h
        };
        l.ensure(block_h + 8.0);
        let top = BOTTOM - block_h;
        l.hrule(top - 8.0);
        if !cufe_lines.is_empty() {
            l.text(MARGIN, top + 8.0, 8.0, true, BLACK, lb.cufe);
            for (i, line) in cufe_lines.iter().enumerate() {
                l.text(MARGIN, top + 19.0 + i as f32 * 9.0, 7.0, false, GREY, line);
            }
        }
        if let Some(code) = &qr {
            let rects = qr_rects(code, right - QR_SIZE, top, QR_SIZE);
            l.page().push(Item::Rects {
                color: BLACK,
                rects,
            });
        }
    }

    // Page footer on every page, now that the page count is known.
    let count = l.pages.len();
    for (i, page) in l.pages.iter_mut().enumerate() {
        let y = PAGE_H - MARGIN + 4.0;
        page.push(Item::Text {
            x: MARGIN,
            y,
            size: 7.0,
            bold: false,
            color: GREY,
            text: lb.footer_note.to_owned(),
        });
        let label = format!(
            "{} · {} {} {} {count}",
            doc.number,
            lb.page,
            i + 1,
            lb.page_of
        );
        let w = fonts.width(&label, 7.0, false);
        page.push(Item::Text {
            x: right - w,
            y,
            size: 7.0,
            bold: false,
            color: GREY,
            text: label,
        });
    }
    Ok(l.pages)
}

/// Prints a labelled party block and returns the y below it.
fn party(l: &mut Layout, x: f32, top: f32, width: f32, label: &str, p: &PartyLines) -> f32 {
    let fonts = l.fonts;
    l.text(x, top + 7.0, 7.5, true, GREY, &label.to_uppercase());
    let mut y = top + 21.0;
    for line in fonts.wrap(&p.name, 10.5, true, width, 2) {
        l.text(x, y, 10.5, true, BLACK, &line);
        y += 13.0;
    }
    let optional = |text: &Option<String>| text.clone().unwrap_or_default();
    for (text, max_lines) in [
        (p.id_line.clone(), 1),
        (optional(&p.address_line), 2),
        (optional(&p.email), 1),
    ] {
        for line in fonts.wrap(&text, 8.5, false, width, max_lines) {
            l.text(x, y, 8.5, false, BLACK, &line);
            y += 11.0;
        }
    }
    y
}

/// QR modules as rectangles, one per horizontal run of dark modules: fewer
/// path segments than one square per module, and no hairline seams between
/// neighbours when a viewer anti-aliases. The quiet zone is left to the page.
fn qr_rects(code: &qrcode::QrCode, x: f32, y: f32, size: f32) -> Vec<[f32; 4]> {
    let n = code.width();
    let m = size / n as f32;
    let colors = code.to_colors();
    let mut rects = Vec::new();
    for row in 0..n {
        let mut col = 0;
        while col < n {
            if colors[row * n + col] == qrcode::Color::Dark {
                let start = col;
                while col < n && colors[row * n + col] == qrcode::Color::Dark {
                    col += 1;
                }
                rects.push([
                    x + start as f32 * m,
                    y + row as f32 * m,
                    (col - start) as f32 * m,
                    m,
                ]);
            } else {
                col += 1;
            }
        }
    }
    rects
}
