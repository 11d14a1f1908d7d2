//! `foya loadtest --html FILE` opened in headless Chromium: every chart is drawn (the
//! retries of a rate-limited run included), the text report stays within the page, and
//! the peak RSS is visible over the RSS line; a path in a missing directory is refused
//! before the run.

use foya_tests::browser::{Browser, screenshot_dir};
use foya_tests::foya_bin::foya;
use serde_json::json;

/// The charts the report has, by element id.
const CHARTS: &[&str] = &[
    "throughput",
    "latency-model",
    "latency-overhead",
    "latency-relay",
    "cpu",
    "rss",
    "errors",
    "retries",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_html_load_test_report_draws_every_chart() {
    super::within(180, async {
        let dir = tempfile::tempdir().unwrap();
        let html = dir.path().join("report.html");
        let out = tokio::task::spawn_blocking({
            let html = html.clone();
            move || {
                foya()
                    .args(["loadtest", "--sessions", "8", "--turns", "4"])
                    // Rate limited often, retried at once: the run has retries to show.
                    .args(["--error-rate-rate-limited", "0.2", "--retry-after-ms", "1"])
                    .args(["--seed", "7"])
                    .arg("--html")
                    .arg(&html)
                    .env("RUST_LOG", "warn")
                    .output()
                    .unwrap()
            }
        })
        .await
        .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let page = std::fs::read_to_string(&html).unwrap();
        // Self-contained: nothing fetched from anywhere.
        for link in ["http://", "https://", "src=", "<link"] {
            let outside = page.replace("http://www.w3.org/", "");
            assert!(!outside.contains(link), "the report refers outside itself: {link}");
        }
        let b = Browser::start().await;
        b.client.goto(&format!("file://{}", html.display())).await.unwrap();
        for id in CHARTS {
            let drawn = b
                .js(&format!(
                    "const s = document.querySelector('#{id} svg'); \
                     return s ? {{shapes: s.querySelectorAll('rect, line, polyline, path, circle, polygon').length, \
                                  texts: s.querySelectorAll('text').length, \
                                  width: s.getBoundingClientRect().width}} : null"
                ))
                .await;
            assert!(drawn != json!(null), "no chart #{id}");
            assert!(drawn["shapes"].as_u64().unwrap() >= 5, "#{id} is empty: {drawn}");
            assert!(drawn["texts"].as_u64().unwrap() >= 2, "#{id} has no labels: {drawn}");
            assert!(drawn["width"].as_f64().unwrap() > 100.0, "#{id} is not shown: {drawn}");
        }
        // The retries are charted by class, as the text report counts them.
        let legend = b
            .js("return document.querySelector('#retries svg').textContent")
            .await;
        assert!(
            legend.as_str().unwrap().contains("rate_limited"),
            "no rate_limited retries charted: {legend}"
        );
        // The text report wraps inside the page: nothing wider than the body.
        let widths = b
            .js("const p = document.querySelector('#text pre'); \
                 return {pre: p.getBoundingClientRect().right, \
                         body: document.body.getBoundingClientRect().right, \
                         scroll: p.scrollWidth, client: p.clientWidth, \
                         page: document.documentElement.scrollWidth, \
                         view: document.documentElement.clientWidth}")
            .await;
        assert!(
            widths["pre"].as_f64().unwrap() <= widths["body"].as_f64().unwrap() + 0.5
                && widths["scroll"].as_u64() <= widths["client"].as_u64()
                && widths["page"].as_u64() <= widths["view"].as_u64(),
            "the text box is wider than the page: {widths}"
        );
        if let Some(dir) = screenshot_dir() {
            b.client.set_window_size(1200, 3700).await.unwrap();
            b.screenshot(&dir.join("loadtest-report.png")).await;
        }
        b.close().await;
    })
    .await;
}

/// `--html` into a directory that does not exist is refused before the run (exit 2).
#[test]
fn an_html_report_path_in_a_missing_directory_is_refused_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing").join("report.html");
    let out = foya()
        .args(["loadtest", "--sessions", "1", "--turns", "1", "--html"])
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--html"), "{stderr}");
    assert!(out.stdout.is_empty(), "the run did not start");
    assert!(!path.exists());
}
