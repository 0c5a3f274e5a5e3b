//! The throughput-vs-concurrency plot, as a PNG.

use plotters::prelude::*;
use std::path::Path;

/// Registers a TrueType font found on the system as plotters' "sans-serif".
fn register_font() -> Result<(), String> {
    let candidates = [
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/TTF/DejaVuSans.ttf",
        "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
        "/Library/Fonts/Arial.ttf",
    ];
    let path = candidates
        .iter()
        .find(|p| Path::new(p).exists())
        .ok_or("no TrueType font found for the plot (Debian: apt-get install fonts-dejavu-core)")?;
    let bytes: &'static [u8] = Box::leak(
        std::fs::read(path)
            .map_err(|e| e.to_string())?
            .into_boxed_slice(),
    );
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| "cannot load the font".to_owned())
}

/// One line per mode: (label, [(concurrency, calls/s)]).
#[allow(dead_code)] // the HTTP benchmark includes this file for `draw_with_axes` only
pub fn draw(path: &Path, title: &str, series: &[(String, Vec<(u32, f64)>)]) -> Result<(), String> {
    let axes = ("concurrent callers (log scale)", "calls per second");
    draw_with_axes(path, title, axes, series)
}

/// One line per mode: (label, [(concurrency, calls/s)]), with the axes named `x` and `y`.
pub fn draw_with_axes(
    path: &Path,
    title: &str,
    (x, y): (&str, &str),
    series: &[(String, Vec<(u32, f64)>)],
) -> Result<(), String> {
    register_font()?;
    let root = BitMapBackend::new(path, (1000, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let max_rate = series
        .iter()
        .flat_map(|(_, points)| points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max)
        * 1.1;
    let max_c = series
        .iter()
        .flat_map(|(_, points)| points.iter().map(|p| p.0))
        .max()
        .unwrap_or(64);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(80)
        .build_cartesian_2d((1u32..max_c + max_c / 4).log_scale(), 0f64..max_rate)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc(x)
        .y_desc(y)
        .label_style(("sans-serif", 16))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(|e| e.to_string())?;
    // One color per series (the sweep draws eight): a repeated color made two lines one.
    const ORANGE: RGBColor = RGBColor(230, 120, 0);
    const GREY: RGBColor = RGBColor(128, 128, 128);
    let palette = [&BLUE, &RED, &GREEN, &MAGENTA, &BLACK, &CYAN, &ORANGE, &GREY];
    for (i, (label, points)) in series.iter().enumerate() {
        let color = palette[i % palette.len()];
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(|e| e.to_string())?
            .label(label.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(points.iter().map(|p| Circle::new(*p, 4, color.filled())))
            .map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 16))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}
