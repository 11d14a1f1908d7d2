//! `foya loadtest --html FILE`: the report as one self-contained HTML page (no script,
//! nothing loaded from elsewhere) with charts drawn by `plotters` as inline SVG:
//! turns/s and steps/s over time, histograms of the model request latency, runtime
//! overhead and relay latency with p50/p95/p99 marked, the CPU split, memory over time
//! (the peak dashed over the resident set), errors by class and model request retries by
//! class over time. The text report follows the charts, wrapped to the page's width.

use super::Samples;
use super::report::{Percentiles, Report};
use super::timeline::{self, RssSample, Timeline};
use plotters::prelude::*;

/// What the page shows.
#[derive(Debug)]
pub(crate) struct Input<'a> {
    pub(crate) report: &'a Report,
    pub(crate) samples: &'a Samples,
    pub(crate) timeline: &'a Timeline,
    pub(crate) memory: &'a [RssSample],
}

const SIZE: (u32, u32) = (900, 320);
const FONT: &str = "sans-serif";
const BINS: usize = 40;
const MIB: f64 = 1024.0 * 1024.0;

/// `text` with `&`, `<`, `>` and `"` escaped, for HTML text and attributes.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The whole page.
pub(crate) fn page(input: &Input<'_>) -> String {
    let r = input.report;
    let wall = r.wall_s.max(0.001);
    let width = timeline::interval_s(wall);
    let t = input.timeline;
    let sections = [
        (
            "throughput",
            "Throughput over time",
            throughput(t, width, wall),
        ),
        (
            "latency-model",
            "Model request latency",
            histogram(&input.samples.model_ms, r.model_latency_ms, "ms"),
        ),
        (
            "latency-overhead",
            "Runtime overhead between a response and the next request",
            histogram(&input.samples.overhead_us, r.overhead_us, "µs"),
        ),
        (
            "latency-relay",
            "Relay latency (model client to subscriber)",
            histogram(&input.samples.relay_ms, r.relay_latency_ms, "ms"),
        ),
        ("cpu", "CPU time by part", cpu(r)),
        ("rss", "Memory over time", memory(input.memory, wall)),
        (
            "errors",
            "Errors by class over time",
            by_class(&t.errors_s, width, wall, "errors"),
        ),
        (
            "retries",
            "Model request retries by class over time",
            by_class(&t.retries_s, width, wall, "retries"),
        ),
    ];
    let mut out = String::from(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>foya load test</title>\n<style>\n\
         body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5em auto; max-width: 960px; color: #1d2330; }\n\
         section { margin: 1.5em 0; } h2 { font-size: 16px; margin: 0 0 .4em; }\n\
         svg { display: block; max-width: 100%; height: auto; border: 1px solid #dde2ea; }\n\
         pre { box-sizing: border-box; max-width: 100%; background: #f4f6f9; padding: .8em; \
         white-space: pre-wrap; overflow-wrap: anywhere; }\n\
         </style>\n</head>\n<body>\n",
    );
    out.push_str(&format!(
        "<h1>foya load test: {} sessions × {} turns, provider {}</h1>\n",
        r.sessions,
        r.turns_per_session,
        escape(&r.provider)
    ));
    for (id, title, svg) in sections {
        out.push_str(&format!(
            "<section id=\"{id}\">\n<h2>{}</h2>\n{svg}\n</section>\n",
            escape(title)
        ));
    }
    out.push_str(&format!(
        "<section id=\"text\">\n<h2>Report</h2>\n<pre>{}</pre>\n</section>\n</body>\n</html>\n",
        escape(&r.to_text())
    ));
    out
}

/// Draws with `draw` into an SVG string; a drawing error becomes a note in the page.
fn svg(
    draw: impl FnOnce(&DrawingArea<SVGBackend<'_>, plotters::coord::Shift>) -> Result<(), String>,
) -> String {
    let mut text = String::new();
    let result = {
        let root = SVGBackend::with_string(&mut text, SIZE).into_drawing_area();
        root.fill(&WHITE)
            .map_err(|e| e.to_string())
            .and_then(|()| draw(&root))
            .and_then(|()| root.present().map_err(|e| e.to_string()))
    };
    match result {
        Ok(()) => text,
        Err(e) => format!("<p>chart not drawn: {}</p>", escape(&e)),
    }
}

/// Largest `y` of the series (at least `floor`), with 10 % headroom.
fn top(values: impl Iterator<Item = f64>, floor: f64) -> f64 {
    values.fold(floor, f64::max) * 1.1
}

fn throughput(t: &Timeline, width: f64, wall: f64) -> String {
    let turns = timeline::rates(&t.turns_s, width, wall);
    let steps = timeline::rates(&t.steps_s, width, wall);
    line_chart(
        None,
        wall,
        (&format!("seconds (per {width:.2} s)"), "per second"),
        &[
            ("turns/s", &turns, BLUE.to_rgba(), Stroke::Solid),
            ("steps/s", &steps, GREEN.to_rgba(), Stroke::Solid),
        ],
    )
}

/// One named curve of a [`line_chart`]: its label, points, colour and stroke.
type Curve<'a> = (&'a str, &'a [(f64, f64)], RGBAColor, Stroke);

/// How a curve is drawn: a dashed curve drawn after a solid one stays visible where the
/// two coincide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stroke {
    Solid,
    Dashed,
}

/// A line chart of `curves` over x from 0 to `x_end`, with the axes' descriptions
/// `(x, y)`, the y axis up to a little over the highest point (at least 1), an optional
/// caption and a legend.
fn line_chart(
    caption: Option<String>,
    x_end: f64,
    desc: (&str, &str),
    curves: &[Curve<'_>],
) -> String {
    svg(|root| {
        let y = top(curves.iter().flat_map(|c| c.1.iter().map(|p| p.1)), 1.0);
        let mut builder = ChartBuilder::on(root);
        if let Some(caption) = caption {
            builder.caption(caption, (FONT, 14));
        }
        let mut chart = builder
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(0.0..x_end, 0.0..y)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc(desc.0)
            .y_desc(desc.1)
            .draw()
            .map_err(|e| e.to_string())?;
        for &(name, points, color, stroke) in curves {
            let drawn = match stroke {
                Stroke::Solid => chart.draw_series(LineSeries::new(
                    points.iter().copied(),
                    color.stroke_width(2),
                )),
                Stroke::Dashed => chart.draw_series(DashedLineSeries::new(
                    points.iter().copied(),
                    6,
                    4,
                    color.stroke_width(3),
                )),
            };
            let legend_style = match stroke {
                Stroke::Solid => color.stroke_width(2),
                Stroke::Dashed => color.stroke_width(3),
            };
            // Three pieces of the legend's line: joined for a solid curve, apart for a
            // dashed one.
            let pieces: [(i32, i32); 3] = match stroke {
                Stroke::Solid => [(0, 7), (7, 14), (14, 20)],
                Stroke::Dashed => [(0, 5), (8, 13), (16, 20)],
            };
            drawn
                .map_err(|e| e.to_string())?
                .label(name)
                .legend(move |(x, y)| {
                    let piece =
                        |(a, b): (i32, i32)| PathElement::new(vec![(a, 0), (b, 0)], legend_style);
                    EmptyElement::at((x, y))
                        + piece(pieces[0])
                        + piece(pieces[1])
                        + piece(pieces[2])
                });
        }
        legend(&mut chart)
    })
}

fn legend<'a, X, Y>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
) -> Result<(), String>
where
    X: plotters::coord::ranged1d::Ranged,
    Y: plotters::coord::ranged1d::Ranged,
{
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()
        .map_err(|e| e.to_string())
}

/// A histogram of `values` over [0, p99 × 1.25] (larger values in the last bin), with
/// the percentiles as vertical lines.
fn histogram(values: &[f64], p: Percentiles, unit: &str) -> String {
    let hi = p.p99.map_or(1.0, |p99| (p99 * 1.25).max(f64::MIN_POSITIVE));
    let bin = hi / BINS as f64;
    let mut counts = [0u64; BINS];
    for v in values {
        let i = ((v / bin).floor().max(0.0) as usize).min(BINS - 1);
        counts[i] += 1;
    }
    svg(|root| {
        let y = top(counts.iter().map(|c| *c as f64), 1.0);
        let caption = if values.is_empty() {
            "no samples".to_owned()
        } else {
            format!("{} samples", values.len())
        };
        let mut chart = ChartBuilder::on(root)
            .caption(caption, (FONT, 14))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(0.0..hi, 0.0..y)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc(unit)
            .y_desc("samples")
            .draw()
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(counts.iter().enumerate().map(|(i, c)| {
                let x0 = i as f64 * bin;
                Rectangle::new([(x0, 0.0), (x0 + bin, *c as f64)], BLUE.mix(0.55).filled())
            }))
            .map_err(|e| e.to_string())?;
        for (name, value, color) in [
            ("p50", p.p50, GREEN),
            ("p95", p.p95, RGBColor(230, 140, 0)),
            ("p99", p.p99, RED),
        ] {
            let Some(v) = value else { continue };
            chart
                .draw_series(LineSeries::new([(v, 0.0), (v, y)], color.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(format!("{name} {v:.3} {unit}"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
        legend(&mut chart)
    })
}

/// The run's CPU by part, in seconds: the runtime's own (the store's writer apart), the
/// provider client, tools (blocking pool included), the store's writer, the load driver.
fn cpu(r: &Report) -> String {
    let own = (r.cpu_s
        - r.provider_cpu_s
        - r.tool_cpu_s
        - r.tool_blocking_cpu_s
        - r.driver_cpu_s
        - r.meter_overhead_s)
        .max(0.0);
    let parts = [
        ("runtime", (own - r.storage_cpu_s).max(0.0)),
        ("provider", r.provider_cpu_s),
        ("tools", r.tool_cpu_s + r.tool_blocking_cpu_s),
        ("store", r.storage_cpu_s),
        ("driver", r.driver_cpu_s),
    ];
    svg(|root| {
        let x = top(parts.iter().map(|p| p.1), 0.001);
        let mut chart = ChartBuilder::on(root)
            .caption(format!("{:.3} s CPU in all", r.cpu_s), (FONT, 14))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(20)
            .build_cartesian_2d(0.0..x, 0.0..parts.len() as f64)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(0)
            .x_desc("CPU seconds")
            .draw()
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(parts.iter().enumerate().map(|(i, (_, s))| {
                let y0 = (parts.len() - 1 - i) as f64 + 0.15;
                Rectangle::new(
                    [(0.0, y0), (*s, y0 + 0.7)],
                    Palette99::pick(i).mix(0.7).filled(),
                )
            }))
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(parts.iter().enumerate().map(|(i, (name, s))| {
                let y = (parts.len() - 1 - i) as f64 + 0.65;
                Text::new(format!("{name} {s:.3} s"), (x * 0.01, y), (FONT, 14))
            }))
            .map_err(|e| e.to_string())?;
        Ok(())
    })
}

/// Most points drawn per memory curve: a long run's samples are thinned to every n-th.
const MAX_POINTS: usize = 600;

fn memory(samples: &[RssSample], wall: f64) -> String {
    let every = samples.len().div_ceil(MAX_POINTS).max(1);
    let kept: Vec<&RssSample> = samples
        .iter()
        .enumerate()
        .filter(|(i, _)| i % every == 0 || *i + 1 == samples.len())
        .map(|(_, s)| s)
        .collect();
    let rss: Vec<(f64, f64)> = kept
        .iter()
        .map(|s| (s.at_s, s.rss_bytes as f64 / MIB))
        .collect();
    let peak: Vec<(f64, f64)> = kept
        .iter()
        .map(|s| (s.at_s, s.peak_bytes as f64 / MIB))
        .collect();
    let end = samples.last().map_or(wall, |s| s.at_s.max(wall));
    line_chart(
        None,
        end,
        ("seconds", "MiB"),
        // RSS first, the peak dashed over it: the peak equals the RSS while memory only
        // grows, and a solid line drawn last would hide it.
        &[
            ("RSS", &rss, BLUE.to_rgba(), Stroke::Solid),
            ("peak RSS", &peak, RED.to_rgba(), Stroke::Dashed),
        ],
    )
}

/// Running totals of `events` (errors, retries: `noun`) by class over time.
fn by_class(events: &[(f64, String)], width: f64, wall: f64, noun: &str) -> String {
    let by_class = timeline::totals_by_class(events, width, wall);
    let (caption, none) = if by_class.is_empty() {
        (format!("no {noun}"), vec![(0.0, 0.0), (wall, 0.0)])
    } else {
        (format!("{} {noun}", events.len()), Vec::new())
    };
    let mut curves: Vec<Curve<'_>> = by_class
        .iter()
        .enumerate()
        .map(|(i, (class, series))| {
            (
                class.as_str(),
                series.as_slice(),
                Palette99::pick(i).to_rgba(),
                Stroke::Solid,
            )
        })
        .collect();
    if by_class.is_empty() {
        curves.push(("none", &none, GREEN.to_rgba(), Stroke::Solid));
    }
    let y = format!("{noun} so far");
    line_chart(Some(caption), wall, ("seconds", &y), &curves)
}

#[cfg(test)]
#[path = "html_tests.rs"]
mod tests;
