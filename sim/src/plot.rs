//! Time-series plots of a [`Report`] with plotters: goodput per flow, the
//! DCQCN rate per flow (when DCQCN runs), the bottleneck queue, and the
//! fraction of time hosts spent paused by PFC. SVG or PNG by the file
//! extension.
//!
//! Text needs a TrueType font (plotters' `ab_glyph` backend, no system font
//! library): `$ROCE_SIM_FONT`, else DejaVu Sans or Liberation Sans from the
//! usual Debian paths (`fonts-dejavu-core`).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::scenario::Report;

/// Where fonts are looked for when `$ROCE_SIM_FONT` is not set.
pub const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

/// Errors writing a plot.
#[derive(Debug)]
pub enum PlotError {
    /// The file name ends in neither `.svg` nor `.png`.
    Format(PathBuf),
    /// No usable TrueType font.
    NoFont,
    /// plotters failed (I/O or drawing).
    Draw(String),
}

impl std::fmt::Display for PlotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlotError::Format(p) => {
                write!(f, "{}: plot file must end in .svg or .png", p.display())
            }
            PlotError::NoFont => write!(
                f,
                "no TrueType font for the plot text: set ROCE_SIM_FONT or install fonts-dejavu-core"
            ),
            PlotError::Draw(e) => write!(f, "plot: {e}"),
        }
    }
}

impl std::error::Error for PlotError {}

fn draw_err<E: std::fmt::Display>(e: E) -> PlotError {
    PlotError::Draw(e.to_string())
}

/// Register a font for "sans-serif" once per process.
fn ensure_font() -> Result<(), PlotError> {
    static FONT: OnceLock<bool> = OnceLock::new();
    let ok = FONT.get_or_init(|| {
        let mut paths: Vec<PathBuf> = Vec::new();
        if let Some(p) = std::env::var_os("ROCE_SIM_FONT") {
            paths.push(p.into());
        }
        paths.extend(FONT_PATHS.iter().map(PathBuf::from));
        for p in paths {
            if let Ok(bytes) = std::fs::read(&p) {
                let leaked: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, leaked).is_ok() {
                    return true;
                }
            }
        }
        false
    });
    if *ok {
        Ok(())
    } else {
        Err(PlotError::NoFont)
    }
}

/// Moving average over `w` bins (centred), to make per-flow goodput of
/// packet-granular bins readable.
pub fn smooth(v: &[f64], w: usize) -> Vec<f64> {
    let w = w.max(1);
    let h = w / 2;
    (0..v.len())
        .map(|i| {
            let a = i.saturating_sub(h);
            let b = (i + w - h).min(v.len());
            v[a..b].iter().sum::<f64>() / (b - a).max(1) as f64
        })
        .collect()
}

/// Write `report`'s time series to `path` (`.svg` or `.png`), goodput
/// smoothed over `smooth_bins` bins.
pub fn write_plot(report: &Report, path: &Path, smooth_bins: usize) -> Result<(), PlotError> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    ensure_font()?;
    let size = (1000, 900);
    match ext.as_deref() {
        Some("svg") => {
            let root = SVGBackend::new(path, size).into_drawing_area();
            draw(report, &root, smooth_bins)?;
            root.present().map_err(draw_err)
        }
        Some("png") => {
            let root = BitMapBackend::new(path, size).into_drawing_area();
            draw(report, &root, smooth_bins)?;
            root.present().map_err(draw_err)
        }
        _ => Err(PlotError::Format(path.to_path_buf())),
    }
}

fn draw<DB: DrawingBackend>(
    r: &Report,
    root: &DrawingArea<DB, Shift>,
    smooth_bins: usize,
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(draw_err)?;
    let title = format!("{} [{}]", r.title, r.mode);
    let root = root.titled(&title, ("sans-serif", 22)).map_err(draw_err)?;
    let s = &r.series;
    let paused_any = s.paused.iter().any(|p| *p > 0.0);
    let mut panels = 2 + usize::from(!s.rates.is_empty()) + usize::from(paused_any);
    panels = panels.max(2);
    let areas = root.split_evenly((panels, 1));
    let t_max = s.t_us.last().copied().unwrap_or(1.0).max(1.0);
    let mut i = 0;

    let per_flow = |area: &DrawingArea<DB, Shift>,
                    caption: &str,
                    data: &[(String, Vec<f64>)],
                    w: usize|
     -> Result<(), PlotError> {
        let y_max = data
            .iter()
            .flat_map(|(_, v)| smooth(v, w))
            .fold(r.link_gbps, f64::max)
            * 1.05;
        let mut chart = ChartBuilder::on(area)
            .caption(caption, ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(30)
            .y_label_area_size(50)
            .build_cartesian_2d(0f64..t_max, 0f64..y_max)
            .map_err(draw_err)?;
        chart
            .configure_mesh()
            .x_desc("time [us]")
            .y_desc("Gbit/s")
            .label_style(("sans-serif", 12))
            .draw()
            .map_err(draw_err)?;
        for (k, (label, v)) in data.iter().enumerate() {
            let color = Palette99::pick(k).to_rgba();
            let pts: Vec<(f64, f64)> = s.t_us.iter().copied().zip(smooth(v, w)).collect();
            let series = chart
                .draw_series(LineSeries::new(pts, color.stroke_width(1)))
                .map_err(draw_err)?;
            if data.len() <= 8 {
                series
                    .label(label.clone())
                    .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color));
            }
        }
        if data.len() <= 8 {
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .label_font(("sans-serif", 12))
                .draw()
                .map_err(draw_err)?;
        }
        Ok(())
    };

    per_flow(
        &areas[i],
        &format!(
            "goodput per flow ({} bins moving average)",
            smooth_bins.max(1)
        ),
        &s.flows,
        smooth_bins,
    )?;
    i += 1;
    if !s.rates.is_empty() {
        per_flow(&areas[i], "DCQCN current rate per flow", &s.rates, 1)?;
        i += 1;
    }

    let q_max = s.queue_kb.iter().copied().fold(1.0, f64::max) * 1.05;
    let mut chart = ChartBuilder::on(&areas[i])
        .caption("bottleneck egress queue (max per bin)", ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..t_max, 0f64..q_max)
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .x_desc("time [us]")
        .y_desc("KB")
        .label_style(("sans-serif", 12))
        .draw()
        .map_err(draw_err)?;
    let pts: Vec<(f64, f64)> = s
        .t_us
        .iter()
        .copied()
        .zip(s.queue_kb.iter().copied())
        .collect();
    chart
        .draw_series(LineSeries::new(pts, BLUE.stroke_width(1)))
        .map_err(draw_err)?;
    i += 1;

    if paused_any {
        let p_max = s.paused.iter().copied().fold(1.0, f64::max) * 1.05;
        let mut chart = ChartBuilder::on(&areas[i])
            .caption(
                "hosts paused by PFC (host-time per bin time)",
                ("sans-serif", 16),
            )
            .margin(8)
            .x_label_area_size(30)
            .y_label_area_size(50)
            .build_cartesian_2d(0f64..t_max, 0f64..p_max)
            .map_err(draw_err)?;
        chart
            .configure_mesh()
            .x_desc("time [us]")
            .y_desc("hosts")
            .label_style(("sans-serif", 12))
            .draw()
            .map_err(draw_err)?;
        let pts: Vec<(f64, f64)> = s
            .t_us
            .iter()
            .copied()
            .zip(s.paused.iter().copied())
            .collect();
        chart
            .draw_series(LineSeries::new(pts, RED.stroke_width(1)))
            .map_err(draw_err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moving_average() {
        assert_eq!(smooth(&[0.0, 3.0, 0.0, 3.0], 1), vec![0.0, 3.0, 0.0, 3.0]);
        assert_eq!(smooth(&[0.0, 3.0, 0.0], 3), vec![1.5, 1.0, 1.5]);
    }
}
