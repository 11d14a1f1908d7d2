//! The HTML report: one page, every chart an inline SVG, nothing loaded from elsewhere,
//! model- or user-given text escaped.
#![allow(clippy::unwrap_used)]

use super::{Input, page};
use crate::Samples;
use crate::report::{Percentiles, Report};
use crate::timeline::{RssSample, Timeline};

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
    assert!(html.contains("provider &lt;sim&gt;") && !html.contains("<sim>"));
    assert!(!html.contains("<script") && !html.contains("src="));
}
