//! The HTML report: one page, every chart an inline SVG, nothing loaded from elsewhere,
//! model- or user-given text escaped.
#![allow(clippy::unwrap_used)]

use super::{Input, page};
use crate::Samples;
use crate::report::{Percentiles, Report};
use crate::timeline::{RssSample, Timeline};

/// The `<section id="ID">` of `html`, up to its end.
fn section<'a>(html: &'a str, id: &str) -> &'a str {
    let at = html
        .find(&format!("<section id=\"{id}\">"))
        .unwrap_or_else(|| panic!("no {id}"));
    &html[at..at + html[at..].find("</section>").unwrap()]
}

#[test]
fn every_chart_is_an_inline_svg_and_text_is_escaped() {
    let mut report = Report {
        provider: "<sim>".into(),
        sessions: 2,
        turns_per_session: 3,
        wall_s: 2.0,
        cpu_s: 1.0,
        provider_cpu_s: 0.2,
        tool_cpu_s: 0.1,
        storage_cpu_s: 0.05,
        ..Report::default()
    };
    let mut model = vec![1.0, 2.0, 3.0, 10.0];
    report.model_latency_ms = Percentiles::of(&mut model);
    let samples = Samples {
        model_ms: model,
        ..Samples::default()
    };
    let timeline = Timeline {
        turns_s: vec![0.5, 1.0, 1.5],
        steps_s: vec![0.2, 0.5, 0.9, 1.0, 1.5],
        errors_s: vec![(1.2, "tool_error".into())],
        retries_s: vec![(0.4, "rate_limited".into()), (1.1, "rate_limited".into())],
        ..Timeline::default()
    };
    let memory = [
        RssSample {
            at_s: 0.0,
            rss_bytes: 10 << 20,
            peak_bytes: 10 << 20,
        },
        RssSample {
            at_s: 1.0,
            rss_bytes: 12 << 20,
            peak_bytes: 12 << 20,
        },
    ];
    let html = page(&Input {
        report: &report,
        samples: &samples,
        timeline: &timeline,
        memory: &memory,
    });
    for id in [
        "throughput",
        "latency-model",
        "latency-overhead",
        "latency-relay",
        "cpu",
        "rss",
        "errors",
        "retries",
    ] {
        let at = html
            .find(&format!("<section id=\"{id}\">"))
            .unwrap_or_else(|| panic!("no {id}"));
        let section = &html[at..at + html[at..].find("</section>").unwrap()];
        assert!(section.contains("<svg"), "{id} has no svg");
        assert!(!section.contains("chart not drawn"), "{id}: {section}");
    }
    assert!(
        html.contains("p50 2.000 ms"),
        "percentile marked in the legend"
    );
    assert!(html.contains("tool_error"));
    // Retries have a chart of their own, by class.
    let retries = section(&html, "retries");
    assert!(
        retries.contains("2 retries") && retries.contains("rate_limited"),
        "{retries}"
    );
    // The peak RSS is drawn dashed over the RSS line (which would hide it where the two
    // coincide): the RSS polyline first, then the peak's dashes in red.
    let rss = section(&html, "rss");
    let blue = rss.find("stroke=\"#0000FF\"").expect("the RSS line");
    let red: Vec<usize> = rss
        .match_indices("stroke=\"#FF0000\"")
        .map(|(i, _)| i)
        .collect();
    assert!(red.len() > 3, "the peak is not dashed: {rss}");
    assert!(
        red.iter().all(|&i| i > blue),
        "the peak is drawn under the RSS line"
    );
    // The text report wraps within the page instead of widening it.
    assert!(html.contains("white-space: pre-wrap") && html.contains("box-sizing: border-box"));
    assert!(html.contains("provider &lt;sim&gt;") && !html.contains("<sim>"));
    assert!(!html.contains("<script") && !html.contains("src="));
}
