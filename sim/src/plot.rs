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

/// Colour-blind-safe colours (Okabe & Ito, "Color Universal Design").
pub const PALETTE: [RGBColor; 8] = [
    RGBColor(0, 0, 0),
    RGBColor(213, 94, 0),
    RGBColor(0, 114, 178),
    RGBColor(0, 158, 115),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(204, 121, 167),
    RGBColor(240, 228, 66),
];

/// The colour of a mode in every plot: none black, pfc vermillion, dcqcn
/// blue, dcqcn+pfc green.
pub fn mode_colour(m: crate::scenario::Mode) -> RGBColor {
    use crate::scenario::Mode;
    match m {
        Mode::None => PALETTE[0],
        Mode::Pfc => PALETTE[1],
        Mode::Dcqcn => PALETTE[2],
        Mode::DcqcnPfc => PALETTE[3],
    }
}

// The drawing callbacks take each backend's area (the SVG one has a
// lifetime of its own, so no alias).
#[allow(clippy::type_complexity)]
fn with_backend(
    path: &Path,
    size: (u32, u32),
    draw: &dyn Fn(&DrawingArea<SVGBackend, Shift>) -> Result<(), PlotError>,
    draw_png: &dyn Fn(&DrawingArea<BitMapBackend, Shift>) -> Result<(), PlotError>,
) -> Result<(), PlotError> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    ensure_font()?;
    match ext.as_deref() {
        Some("svg") => {
            let root = SVGBackend::new(path, size).into_drawing_area();
            draw(&root)?;
            root.present().map_err(draw_err)
        }
        Some("png") => {
            let root = BitMapBackend::new(path, size).into_drawing_area();
            draw_png(&root)?;
            root.present().map_err(draw_err)
        }
        _ => Err(PlotError::Format(path.to_path_buf())),
    }
}

/// A legend in its own area (beside the chart, never over the data).
fn legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[(String, RGBColor, bool)],
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    let style = ("sans-serif", 13).into_font();
    for (i, (label, colour, dashed)) in entries.iter().enumerate() {
        let y = 40 + 22 * i as i32;
        let line = if *dashed {
            vec![(8, y), (14, y), (18, y), (24, y)]
        } else {
            vec![(8, y), (28, y)]
        };
        if *dashed {
            for seg in line.chunks(2) {
                area.draw(&PathElement::new(seg.to_vec(), colour.stroke_width(2)))
                    .map_err(draw_err)?;
            }
        } else {
            area.draw(&PathElement::new(line, colour.stroke_width(2)))
                .map_err(draw_err)?;
        }
        area.draw(&Text::new(label.clone(), (34, y - 7), style.clone()))
            .map_err(draw_err)?;
    }
    Ok(())
}

/// Aggregate `v` into at most `n` columns (means).
fn columns(v: &[f64], n: usize) -> Vec<f64> {
    if v.len() <= n || n == 0 {
        return v.to_vec();
    }
    let k = v.len().div_ceil(n);
    v.chunks(k)
        .map(|c| c.iter().sum::<f64>() / c.len() as f64)
        .collect()
}

/// A heat map of per-link pause: one row per link (the `max_rows` most
/// paused), one column per time bin (aggregated), white =
/// never paused in the bin, dark red = paused all of it (80 columns at
/// most; cells paused under 1 % of the time left white).
fn pause_heat_map<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    caption: &str,
    rows: &[(String, Vec<f64>)],
    bin_us: f64,
    max_rows: usize,
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    let mut rows: Vec<&(String, Vec<f64>)> = rows.iter().collect();
    rows.sort_by(|a, b| {
        let s = |r: &(String, Vec<f64>)| r.1.iter().sum::<f64>();
        s(b).total_cmp(&s(a)).then_with(|| a.0.cmp(&b.0))
    });
    rows.truncate(max_rows);
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    let nbins = rows.iter().map(|r| r.1.len()).max().unwrap_or(0).max(1);
    let cols = 80usize.min(nbins);
    let col_us = bin_us * nbins.div_ceil(cols) as f64;
    let t_max = col_us * nbins.div_ceil(nbins.div_ceil(cols)) as f64;
    let names: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
    let n = rows.len().max(1) as i32;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(30)
        .y_label_area_size(110)
        .build_cartesian_2d(0f64..t_max.max(1e-9), (0..n).into_segmented())
        .map_err(draw_err)?;
    let fmt = |v: &SegmentValue<i32>| match v {
        SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
            names.get(*i as usize).cloned().unwrap_or_default()
        }
        SegmentValue::Last => String::new(),
    };
    chart
        .configure_mesh()
        .disable_y_mesh()
        .x_desc("time [us]")
        .y_labels(rows.len().max(1))
        .y_label_formatter(&fmt)
        .label_style(("sans-serif", 11))
        .draw()
        .map_err(draw_err)?;
    for (i, (_, v)) in rows.iter().enumerate() {
        let c = columns(v, cols);
        chart
            .draw_series(
                c.iter()
                    .enumerate()
                    .filter(|(_, f)| **f >= 0.01)
                    .map(|(j, f)| {
                        let f = f.clamp(0.0, 1.0);
                        let shade = RGBColor(
                            (255.0 - f * (255.0 - 128.0)) as u8,
                            (255.0 * (1.0 - f)) as u8,
                            (255.0 * (1.0 - f)) as u8,
                        );
                        Rectangle::new(
                            [
                                (j as f64 * col_us, SegmentValue::Exact(i as i32)),
                                ((j + 1) as f64 * col_us, SegmentValue::Exact(i as i32 + 1)),
                            ],
                            shade.filled(),
                        )
                    }),
            )
            .map_err(draw_err)?;
    }
    Ok(())
}

fn draw_collective<DB: DrawingBackend>(
    reports: &[crate::collective::CollectiveReport],
    root: &DrawingArea<DB, Shift>,
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(draw_err)?;
    let Some(first) = reports.first() else {
        return Ok(());
    };
    let c = &first.clos;
    let title = format!(
        "{} of {} per host, {} hosts ({} leaves x {}, {} spines, {}/{} Gbit/s, ranks {})",
        first.kind.name(),
        crate::collective::bytes(first.bytes_per_host),
        c.hosts(),
        c.leaves,
        c.hosts_per_leaf,
        c.spines,
        c.host.gbps,
        c.uplink.gbps,
        first.placement.name()
    );
    let root = root.titled(&title, ("sans-serif", 20)).map_err(draw_err)?;
    let maps: Vec<&crate::collective::CollectiveReport> = reports
        .iter()
        .filter(|r| !r.net.pause_map.is_empty())
        .take(2)
        .collect();
    let panels = 1 + maps.len();
    let areas = root.split_evenly((panels, 1));
    // Panel 1: per-step completion time per mode, the ideal dashed.
    let (chart_area, legend_area) =
        areas[0].split_horizontally(areas[0].dim_in_pixel().0 as i32 - 170);
    let us = |p: u64| p as f64 / 1e6;
    let steps = reports
        .iter()
        .map(|r| r.steps.len())
        .max()
        .unwrap_or(1)
        .max(1);
    let ideal_step = us(first.ideal_ps) / first.steps.len().max(1) as f64;
    let y_min = reports
        .iter()
        .flat_map(|r| r.steps.iter().map(|s| us(s.time_ps)))
        .fold(ideal_step, f64::min);
    let y_max = reports
        .iter()
        .flat_map(|r| r.steps.iter().map(|s| us(s.time_ps)))
        .fold(ideal_step, f64::max);
    let pad = ((y_max - y_min) * 0.08).max(y_max * 0.01);
    let mut chart = ChartBuilder::on(&chart_area)
        .caption(
            "completion time of each step (a step ends with its slowest transfer)",
            ("sans-serif", 16),
        )
        .margin(8)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..steps as f64, (y_min - pad).max(0.0)..y_max + pad)
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .x_desc(if first.kind == crate::collective::Kind::AllReduce {
            "step (all iterations)"
        } else {
            "step"
        })
        .y_desc("us")
        .label_style(("sans-serif", 12))
        .draw()
        .map_err(draw_err)?;
    let mut entries = Vec::new();
    for r in reports {
        let col = mode_colour(r.mode);
        let pts: Vec<(f64, f64)> = r
            .steps
            .iter()
            .enumerate()
            .flat_map(|(i, s)| [(i as f64, us(s.time_ps)), (i as f64 + 1.0, us(s.time_ps))])
            .collect();
        chart
            .draw_series(LineSeries::new(pts, col.stroke_width(2)))
            .map_err(draw_err)?;
        entries.push((
            format!("{} (x{:.2})", r.mode.name(), r.slowdown()),
            col,
            false,
        ));
    }
    chart
        .draw_series(DashedLineSeries::new(
            [(0.0, ideal_step), (steps as f64, ideal_step)],
            6,
            4,
            PALETTE[6].stroke_width(2),
        ))
        .map_err(draw_err)?;
    entries.push(("ideal".into(), PALETTE[6], true));
    legend(&legend_area, &entries)?;
    for (k, r) in maps.iter().enumerate() {
        pause_heat_map(
            &areas[1 + k],
            &format!(
                "PFC pause per link [{}]: white = running, dark red = paused the whole bin",
                r.mode.name()
            ),
            &r.net.pause_map,
            r.net.bin_us,
            24,
        )?;
    }
    Ok(())
}

/// Plot collective reports (one per mode): per-step completion times with
/// the ideal, and the per-link pause heat map of up to two modes with PFC.
pub fn write_collective_plot(
    reports: &[crate::collective::CollectiveReport],
    path: &Path,
) -> Result<(), PlotError> {
    let maps = reports
        .iter()
        .filter(|r| !r.net.pause_map.is_empty())
        .count()
        .min(2);
    let size = (1200, 420 + 480 * maps as u32);
    with_backend(path, size, &|a| draw_collective(reports, a), &|a| {
        draw_collective(reports, a)
    })
}

fn draw_fct<DB: DrawingBackend>(
    reports: &[crate::fct::FctReport],
    root: &DrawingArea<DB, Shift>,
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(draw_err)?;
    let Some(first) = reports.first() else {
        return Ok(());
    };
    let c = &first.clos;
    let title = format!(
        "FCT slowdown, {} flows at load {:.2}, {} hosts ({} leaves x {}, {} spines, {}/{} Gbit/s)",
        first.dist.name(),
        first.load,
        c.hosts(),
        c.leaves,
        c.hosts_per_leaf,
        c.spines,
        c.host.gbps,
        c.uplink.gbps
    );
    let root = root.titled(&title, ("sans-serif", 20)).map_err(draw_err)?;
    let maps: Vec<&crate::fct::FctReport> = reports
        .iter()
        .filter(|r| !r.net.pause_map.is_empty())
        .take(1)
        .collect();
    let areas = root.split_evenly((1 + maps.len(), 1));
    let (row, legend_area) = areas[0].split_horizontally(areas[0].dim_in_pixel().0 as i32 - 170);
    let halves = row.split_evenly((1, 2));
    let classes: [(&str, u64); 2] = [("all flows", u64::MAX), ("flows under 100 KB", 100_000)];
    let mut entries = Vec::new();
    for (k, &(name, below)) in classes.iter().enumerate() {
        let sets: Vec<Vec<f64>> = reports
            .iter()
            .map(|r| {
                let mut v: Vec<f64> = r
                    .records
                    .iter()
                    .filter(|f| f.size < below)
                    .map(|f| f.slowdown())
                    .collect();
                v.sort_by(f64::total_cmp);
                v
            })
            .collect();
        let x_max = sets
            .iter()
            .filter_map(|v| v.last().copied())
            .fold(2.0, f64::max)
            * 1.1;
        let mut chart = ChartBuilder::on(&halves[k])
            .caption(format!("CDF of slowdown, {name}"), ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(35)
            .y_label_area_size(50)
            .build_cartesian_2d((1f64..x_max).log_scale(), 0f64..1.0)
            .map_err(draw_err)?;
        let fmt = |x: &f64| {
            if *x >= 10.0 {
                format!("{x:.0}")
            } else {
                format!("{x:.1}")
            }
        };
        chart
            .configure_mesh()
            .x_labels(8)
            .x_label_formatter(&fmt)
            .x_desc("slowdown (FCT / ideal), log scale")
            .y_desc("fraction of flows")
            .label_style(("sans-serif", 12))
            .draw()
            .map_err(draw_err)?;
        for (r, v) in reports.iter().zip(&sets) {
            let n = v.len().max(1) as f64;
            let col = mode_colour(r.mode);
            // At most ~600 points per line (every few ranks, and the last).
            let every = v.len().div_ceil(600).max(1);
            let pts: Vec<(f64, f64)> = v
                .iter()
                .enumerate()
                .filter(|(i, _)| i % every == 0 || i + 1 == v.len())
                .map(|(i, x)| (*x, (i + 1) as f64 / n))
                .collect();
            chart
                .draw_series(LineSeries::new(pts, col.stroke_width(2)))
                .map_err(draw_err)?;
            if k == 0 {
                entries.push((r.mode.name().to_string(), col, false));
            }
        }
    }
    legend(&legend_area, &entries)?;
    for (k, r) in maps.iter().enumerate() {
        pause_heat_map(
            &areas[1 + k],
            &format!(
                "PFC pause per link [{}]: white = running, dark red = paused the whole bin",
                r.mode.name()
            ),
            &r.net.pause_map,
            r.net.bin_us,
            24,
        )?;
    }
    Ok(())
}

/// Plot FCT reports (one per mode): slowdown CDFs of all flows and of
/// flows under 100 KB, and one per-link pause heat map.
pub fn write_fct_plot(reports: &[crate::fct::FctReport], path: &Path) -> Result<(), PlotError> {
    let maps = reports.iter().any(|r| !r.net.pause_map.is_empty());
    let size = (1200, 440 + if maps { 480 } else { 0 });
    with_backend(path, size, &|a| draw_fct(reports, a), &|a| {
        draw_fct(reports, a)
    })
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
