//! SVG charts (plotters): lookup cost against size, and reader cost against
//! reader threads.

use crate::report::Row;
use plotters::prelude::*;
use std::error::Error;
use std::path::Path;

/// `(x, y)` points of one line, in drawing order.
type Series = (String, Vec<(f64, f64)>);

/// Groups rows into one series per structure, in first-seen order.
fn series(rows: &[&Row], x: impl Fn(&Row) -> f64) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    // A point that is not finite and positive would hang the log scale.
    for r in rows.iter().filter(|r| r.value.is_finite() && r.value > 0.0) {
        let p = (x(r), r.value);
        match out.iter_mut().find(|(name, _)| name == r.structure) {
            Some((_, pts)) => pts.push(p),
            None => out.push((r.structure.to_string(), vec![p])),
        }
    }
    out
}

fn bounds(series: &[Series]) -> ((f64, f64), (f64, f64)) {
    let pts = || series.iter().flat_map(|(_, p)| p.iter());
    let fold = |f: fn(&(f64, f64)) -> f64| {
        pts()
            .map(f)
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
                (lo.min(v), hi.max(v))
            })
    };
    (fold(|p| p.0), fold(|p| p.1))
}

/// A fixed colour per structure, so that every chart agrees: black for
/// BTreeMap, reds/oranges/browns for latchtree, other hues for the peers.
fn color_of(name: &str) -> RGBColor {
    const BY_NAME: [(&str, RGBColor); 12] = [
        ("BTreeMap (unsync", RGBColor(0, 0, 0)),
        ("sorted Vec", RGBColor(150, 150, 150)),
        ("AddrIndex", RGBColor(214, 39, 40)),
        ("module_address (held", RGBColor(255, 127, 14)),
        ("module_address (pin", RGBColor(227, 119, 194)),
        ("LatchTree", RGBColor(140, 86, 75)),
        ("std RwLock", RGBColor(31, 119, 180)),
        ("parking_lot", RGBColor(23, 190, 207)),
        ("ArcSwap", RGBColor(44, 160, 44)),
        ("left-right", RGBColor(148, 103, 189)),
        ("SkipMap", RGBColor(188, 189, 34)),
        ("scc", RGBColor(127, 127, 255)),
    ];
    BY_NAME
        .iter()
        .find(|(key, _)| name.contains(key))
        .map_or(RGBColor(100, 100, 100), |&(_, c)| c)
}

/// A value for an axis label: no decimals from 10 up.
fn label(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Draws `series` on `area`: y logarithmic, x logarithmic when asked.
/// latchtree's lines are drawn thicker.
fn draw(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    title: &str,
    x_desc: &str,
    series: &[Series],
    log_x: bool,
) -> Result<(), Box<dyn Error>> {
    let ((x0, x1), (y0, y1)) = bounds(series);
    let (y0, y1) = (y0 * 0.8, y1 * 1.25);
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60);
    let x_fmt = |x: &f64| if log_x { label(*x) } else { format!("{x:.0}") };
    let y_fmt = |y: &f64| label(*y);
    macro_rules! plot {
        ($chart:expr, $x_labels:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(x_desc)
                .y_desc("ns per lookup (log scale)")
                .x_labels($x_labels)
                .x_label_formatter(&x_fmt)
                .y_label_formatter(&y_fmt)
                .draw()?;
            for (name, pts) in series {
                let color = color_of(name);
                let width = if name.starts_with("latchtree") { 3 } else { 2 };
                chart
                    .draw_series(LineSeries::new(
                        pts.iter().copied(),
                        color.stroke_width(width),
                    ))?
                    .label(name.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(width))
                    });
                chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperLeft)
                .label_font(("sans-serif", 12))
                .draw()?;
        }};
    }
    if log_x {
        plot!(
            builder.build_cartesian_2d((x0 * 0.8..x1 * 1.25).log_scale(), (y0..y1).log_scale())?,
            10
        );
    } else {
        let ticks = (x1 - x0) as usize + 1;
        plot!(
            builder.build_cartesian_2d(x0 - 0.5..x1 + 0.5, (y0..y1).log_scale())?,
            ticks
        );
    }
    Ok(())
}

/// `lookup.svg`: single-threaded ns per lookup against n, one line per
/// structure, on structures grown by ascending inserts (how loaders and JIT
/// allocators fill an index; the table has every order).
pub(crate) fn lookup_chart(rows: &[Row], path: &Path, title: &str) -> Result<(), Box<dyn Error>> {
    let rows: Vec<&Row> = rows
        .iter()
        .filter(|r| r.section == "lookup" && r.case.ends_with(" ascending"))
        .collect();
    let s = series(&rows, |r| r.n as f64);
    if s.iter().all(|(_, p)| p.len() < 2) {
        return Ok(());
    }
    let root = SVGBackend::new(path, (1000, 640)).into_drawing_area();
    root.fill(&WHITE)?;
    let title = format!("{title}: grown by ascending inserts");
    draw(&root, &title, "entries n (log)", &s, true)?;
    root.present()?;
    Ok(())
}

/// `readers.svg`: reader ns per lookup against reader threads, without a
/// writer (left) and with a tight writer (right).
pub(crate) fn readers_chart(rows: &[Row], path: &Path, title: &str) -> Result<(), Box<dyn Error>> {
    let root = SVGBackend::new(path, (1400, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((1, 2));
    for (panel, (writer, label)) in panels
        .iter()
        .zip([(false, "no writer"), (true, "tight writer")])
    {
        let rows: Vec<&Row> = rows
            .iter()
            .filter(|r| {
                r.section == "readers"
                    && r.case
                        .contains(if writer { "tight writer" } else { "no writer" })
            })
            .collect();
        let s = series(&rows, |r| r.readers as f64);
        if s.is_empty() {
            continue;
        }
        draw(
            panel,
            &format!("{title}: {label}"),
            "reader threads",
            &s,
            false,
        )?;
    }
    root.present()?;
    Ok(())
}
