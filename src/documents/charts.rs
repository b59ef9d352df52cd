//! Charts drawn by `plotters` into SVG strings that a server-rendered page embeds (CONTRACT
//! §16: MRR over the last twelve months, and the month's movements). The SVG is ours, from
//! numbers only: the labels are escaped by plotters' SVG backend, and the picture carries a
//! `role="img"` and an `aria-label` saying what a reader who cannot see it would read off it
//! (each page also shows the figures as a table).
//!
//! Amounts are integer cents; the axes show whole pesos, abbreviated (`$1,2 M`).

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::error::Error;

/// The size the charts are drawn at; the page scales them to its width (plotters gives the
/// SVG its `viewBox`).
const SIZE: (u32, u32) = (560, 320);
/// The least span of an axis, in cents ($1,000): an account with no revenue yet gets a
/// readable scale, not labels of a few cents.
const SMALLEST_SPAN: i64 = 100_000;
const LINE: RGBColor = RGBColor(0x1d, 0x4e, 0xd8);
const GAIN: RGBColor = RGBColor(0x15, 0x80, 0x3d);
const LOSS: RGBColor = RGBColor(0xb9, 0x1c, 0x1c);
const INK: RGBColor = RGBColor(0x1f, 0x29, 0x37);

/// Whole pesos of `cents`, abbreviated for an axis: `$950`, `$12 k`, `$1,2 M`.
pub fn pesos_short(cents: i64) -> String {
    let pesos = cents as f64 / 100.0;
    let (sign, pesos) = if pesos < 0.0 {
        ("−", -pesos)
    } else {
        ("", pesos)
    };
    let text = if pesos >= 1e6 {
        format!("{:.1} M", pesos / 1e6)
    } else if pesos >= 1e3 {
        format!("{:.0} k", pesos / 1e3)
    } else {
        format!("{pesos:.0}")
    };
    format!("{sign}${}", text.replace('.', ","))
}

/// A line of MRR over `points` (a label per month, oldest first, and its MRR in cents), the
/// area under it shaded. `label` is the picture's accessible name.
pub fn mrr_line(points: &[(String, i64)], label: &str) -> String {
    drawn(draw_line, points, label)
}

/// A drawing function: `data` drawn into an SVG string.
type Draw = for<'a> fn(&'a mut String, &[(String, i64)]) -> Result<(), Box<dyn Error + 'a>>;

/// What a drawing function drew of `data`, as an image named `label`; nothing (and a warning
/// in the log) if it failed.
fn drawn(draw: Draw, data: &[(String, i64)], label: &str) -> String {
    let mut svg = String::new();
    if let Err(err) = draw(&mut svg, data) {
        tracing::warn!(error = %err, chart = label, "a chart could not be drawn");
        return String::new();
    }
    accessible(svg, label)
}

fn draw_line<'a>(svg: &'a mut String, points: &[(String, i64)]) -> Result<(), Box<dyn Error + 'a>> {
    let root = SVGBackend::with_string(svg, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let top = points
        .iter()
        .map(|(_, v)| *v)
        .max()
        .unwrap_or(0)
        .max(SMALLEST_SPAN);
    let last = points.len().saturating_sub(1).max(1);
    let mut chart = ChartBuilder::on(&root)
        .margin(16)
        .x_label_area_size(36)
        .y_label_area_size(84)
        .build_cartesian_2d(0..last, 0i64..top + top / 10)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(points.len())
        .x_label_formatter(&|i| points.get(*i).map(|(l, _)| l.clone()).unwrap_or_default())
        .y_labels(5)
        .y_label_formatter(&|v| pesos_short(*v))
        .label_style(font())
        .axis_style(INK.mix(0.6))
        .light_line_style(INK.mix(0.08))
        .draw()?;
    let series = points.iter().enumerate().map(|(i, (_, v))| (i, *v));
    chart.draw_series(AreaSeries::new(series.clone(), 0, LINE.mix(0.12)).border_style(LINE))?;
    chart.draw_series(series.map(|p| Circle::new(p, 3, LINE.filled())))?;
    root.present()?;
    Ok(())
}

/// Bars of the month's movements (`bars`: a label and a signed amount in cents each, in the
/// order shown), gains green right of the axis and losses red left of it, each with its amount, the first on
/// top.
pub fn movement_bars(bars: &[(String, i64)], label: &str) -> String {
    drawn(draw_bars, bars, label)
}

fn draw_bars<'a>(svg: &'a mut String, bars: &[(String, i64)]) -> Result<(), Box<dyn Error + 'a>> {
    let root = SVGBackend::with_string(svg, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let high = bars.iter().map(|(_, v)| *v).max().unwrap_or(0).max(0);
    let low = bars.iter().map(|(_, v)| *v).min().unwrap_or(0).min(0);
    let span = (high - low).max(SMALLEST_SPAN);
    // Room beside each end for a bar's amount.
    let (low, high) = (
        if low < 0 { low - span / 3 } else { low },
        if high > 0 || low == 0 {
            high + span / 3
        } else {
            high
        },
    );
    // Horizontal bars, the movements' names on the left: long names need no rotation, and a
    // phone's narrow screen keeps them readable.
    let last = bars.len().saturating_sub(1);
    let mut chart = ChartBuilder::on(&root)
        .margin(16)
        .x_label_area_size(36)
        .y_label_area_size(150)
        .build_cartesian_2d(low..high, (0..bars.len()).into_segmented())?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(bars.len())
        .y_label_formatter(&|segment| match segment {
            SegmentValue::CenterOf(i) => last
                .checked_sub(*i)
                .and_then(|j| bars.get(j))
                .map(|(l, _)| l.clone())
                .unwrap_or_default(),
            _ => String::new(),
        })
        .x_labels(4)
        .x_label_formatter(&|v| pesos_short(*v))
        .label_style(font())
        .axis_style(INK.mix(0.6))
        .light_line_style(INK.mix(0.08))
        .draw()?;
    // The first bar on top: segment `last - i` holds bar `i` (a bar spans its segment's start
    // to the next one's, so the range has one segment more, left empty above the first).
    let row = |i: usize| last.saturating_sub(i);
    chart.draw_series(bars.iter().enumerate().map(|(i, (_, v))| {
        let color = if *v < 0 { LOSS } else { GAIN };
        let mut bar = Rectangle::new(
            [
                (0, SegmentValue::Exact(row(i))),
                (*v, SegmentValue::Exact(row(i) + 1)),
            ],
            color.filled(),
        );
        bar.set_margin(6, 6, 0, 0);
        bar
    }))?;
    chart.draw_series(bars.iter().enumerate().map(|(i, (_, v))| {
        // Left of a loss's bar end, right of a gain's.
        let (pos, text) = if *v < 0 {
            (
                Pos::new(HPos::Right, VPos::Center),
                format!("{} ", pesos_short(*v)),
            )
        } else {
            (
                Pos::new(HPos::Left, VPos::Center),
                format!(" {}", pesos_short(*v)),
            )
        };
        Text::new(text, (*v, SegmentValue::CenterOf(row(i))), font().pos(pos))
    }))?;
    root.present()?;
    Ok(())
}

/// The labels' font: large enough to read on a phone, where the chart is drawn at about
/// two thirds of its size.
fn font() -> TextStyle<'static> {
    ("sans-serif", 20).into_font().color(&INK)
}

/// The SVG as an image with an accessible name, scaling to its container's width.
fn accessible(svg: String, label: &str) -> String {
    let label = askama::filters::escape(label, askama::filters::Html)
        .map(|s| s.to_string())
        .unwrap_or_default();
    svg.replacen(
        "<svg ",
        &format!("<svg role=\"img\" aria-label=\"{label}\" style=\"max-width:100%;height:auto\" "),
        1,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_are_abbreviated_whole_pesos() {
        assert_eq!(pesos_short(95_000), "$950");
        assert_eq!(pesos_short(1_200_000), "$12 k");
        assert_eq!(pesos_short(120_000_000), "$1,2 M");
        assert_eq!(pesos_short(-4_990_000), "−$50 k");
    }

    #[test]
    fn a_chart_is_an_svg_image_naming_itself_and_its_months() {
        let points: Vec<(String, i64)> = (1..=12)
            .map(|m| (format!("m{m:02}"), i64::from(m) * 1_000_000))
            .collect();
        let svg = mrr_line(&points, "MRR <twelve> months");
        assert!(
            svg.starts_with("<svg role=\"img\" aria-label=\"MRR &#60;twelve&#62; months\""),
            "{svg}"
        );
        assert!(
            svg.contains(">\nm01\n<") && svg.contains(">\nm12\n<"),
            "{svg}"
        );
        let bars = movement_bars(
            &[("new".to_owned(), 500_000), ("churn".to_owned(), -200_000)],
            "movements",
        );
        assert!(
            bars.contains(">\n $5 k\n<") && bars.contains(">\n−$2 k \n<"),
            "{bars}"
        );
    }

    #[test]
    fn the_first_movement_is_drawn_on_top_beside_its_name() {
        let bars: Vec<(String, i64)> =
            [("first", 100_000), ("second", 200_000), ("third", 300_000)]
                .map(|(l, v)| (l.to_owned(), v))
                .to_vec();
        let svg = movement_bars(&bars, "x");
        // The bars' tops (y) in the order drawn, and where each name is written.
        let tops: Vec<f64> = svg
            .lines()
            .filter(|l| l.starts_with("<rect") && l.contains("#15803D"))
            .map(|l| attribute(l, "y"))
            .collect();
        assert_eq!(tops.len(), 3, "{svg}");
        assert!(tops[0] < tops[1] && tops[1] < tops[2], "{tops:?}");
        let lines: Vec<&str> = svg.lines().collect();
        assert_eq!(lines.iter().filter(|l| **l == "first").count(), 1, "{svg}");
        for (name, top) in ["first", "second", "third"].iter().zip(&tops) {
            let at = lines.iter().position(|l| l == name).expect("name written");
            let y = attribute(lines[at - 1], "y");
            assert!(
                *top < y && y < top + 80.0,
                "{name} at {y}, its bar at {top}"
            );
        }
    }

    fn attribute(line: &str, name: &str) -> f64 {
        let at = line.find(&format!(" {name}=\"")).expect("attribute") + name.len() + 3;
        line[at..]
            .split('"')
            .next()
            .and_then(|v| v.parse().ok())
            .expect("number")
    }
}
