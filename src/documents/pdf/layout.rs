//! Where everything goes on the page: `layout` turns a `Sheet` into pages of drawing items
//! (text runs and filled rectangles, in PDF points with the origin top left and y downwards).
//! Column widths, wrapping, shrinking an amount to fit and page breaks are decided here, so
//! they are testable without opening a PDF; `super::emit` only draws.

use super::RenderError;
use super::fonts::Fonts;
use crate::documents::qr::{QUIET, Qr};
use crate::documents::sheet::{Electronic, PartyLines, Sheet};
use crate::documents::text::DocText;

pub(super) const PAGE_W: f32 = 595.28; // A4
pub(super) const PAGE_H: f32 = 841.89;
pub(super) const MARGIN: f32 = 42.5; // 15 mm
pub(super) const CONTENT_W: f32 = PAGE_W - 2.0 * MARGIN;
/// Lowest y content may reach; below it sit the page footer lines.
pub(super) const BOTTOM: f32 = PAGE_H - MARGIN - 22.0;
/// The QR code's square, quiet zone included: 100 pt (3.5 cm), the symbol itself about 3 cm
/// (a DIAN URL with its CUFE is 53 modules, 61 with the quiet zone), scannable from paper.
pub(super) const QR_BOX: f32 = 100.0;

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

    // Heading: title on the left, number and date right-aligned; the title wraps before the
    // number (an electronic one's may be long, or say that it awaits DIAN's numbering).
    let number = match &doc.dian {
        Some(dian) if !dian.numbered => doc.number.clone(),
        _ => format!("{} {}", lb.number_label, doc.number),
    };
    let number_size = fonts.fit(&number, 12.0, true, 220.0);
    let number_w = fonts.width(&number, number_size, true).max(170.0);
    let title_lines = fonts.wrap(&doc.heading, 16.0, true, CONTENT_W - number_w - 20.0, 2);
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
    l.text_right(right, l.y + 14.0, number_size, true, BLACK, &number);
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

    if let Some(dian) = &doc.dian {
        electronic(&mut l, dian, lb)?;
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

/// The electronic document, pinned to the foot of the last page: the CUFE or CUDE in full
/// (wrapped), the range's authorisation and a note, beside the QR code of its `qr_url` (its
/// quiet zone inside `QR_BOX`, kept clear). Awaiting a range, only the note saying so.
fn electronic(l: &mut Layout, dian: &Electronic, lb: &DocText) -> Result<(), RenderError> {
    let fonts = l.fonts;
    let qr = match &dian.qr_url {
        Some(url) => Some(Qr::encode(url).ok_or_else(|| {
            RenderError::Qr(format!("{} bytes do not fit in a QR code", url.len()))
        })?),
        None => None,
    };
    let text_w = if qr.is_some() {
        CONTENT_W - QR_BOX - 12.0
    } else {
        CONTENT_W
    };
    // (size, bold, colour, text, the space it takes below the previous line's baseline)
    let mut lines: Vec<(f32, bool, Color, String, f32)> = Vec::new();
    if let Some(code) = &dian.code {
        lines.push((8.0, true, BLACK, dian.code_label.to_owned(), 0.0));
        // As many lines as it takes, of equal length (48 and 48 digits, not 82 and 14).
        let count = fonts.wrap(code, 8.0, false, text_w, 4).len().max(1);
        let digits: Vec<char> = code.chars().collect();
        for chunk in digits.chunks(digits.len().div_ceil(count).max(1)) {
            lines.push((8.0, false, BLACK, chunk.iter().collect(), 10.5));
        }
    }
    let mut gap: f32 = if lines.is_empty() { 0.0 } else { 14.0 };
    if let Some(authorization) = &dian.authorization {
        for line in fonts.wrap(authorization, 7.5, false, text_w, 4) {
            lines.push((7.5, false, BLACK, line, gap.max(10.0)));
            gap = 0.0;
        }
        gap = 13.0;
    }
    let note = if dian.numbered {
        lb.representation
    } else {
        lb.awaiting_note
    };
    for line in fonts.wrap(note, 7.0, false, text_w, 3) {
        lines.push((7.0, false, GREY, line, gap.max(9.5)));
        gap = 0.0;
    }
    if let Some(first) = lines.first_mut() {
        first.4 = 0.0;
    }
    let text_h = 8.0 + lines.iter().map(|line| line.4).sum::<f32>() + 3.0;
    let block_h = if qr.is_some() {
        QR_BOX.max(text_h)
    } else {
        text_h
    };
    l.ensure(block_h + 10.0);
    let top = BOTTOM - block_h;
    l.hrule(top - 8.0);
    // Vertically centred beside the QR code.
    let mut y = top + (block_h - text_h) / 2.0 + 8.0;
    for (size, bold, color, text, advance) in lines {
        y += advance;
        l.text(MARGIN, y, size, bold, color, &text);
    }
    if let Some(qr) = &qr {
        let module = QR_BOX / qr.side() as f32;
        let x0 = MARGIN + CONTENT_W - QR_BOX + QUIET as f32 * module;
        let y0 = top + QUIET as f32 * module;
        let rects = qr
            .runs()
            .iter()
            .map(|run| {
                [
                    x0 + run.col as f32 * module,
                    y0 + run.row as f32 * module,
                    run.len as f32 * module,
                    module,
                ]
            })
            .collect();
        l.page().push(Item::Rects {
            color: BLACK,
            rects,
        });
    }
    Ok(())
}
