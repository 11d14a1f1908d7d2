//! Real headless Chromium for the browser tests, driven over WebDriver: Debian's
//! `chromedriver` started on a free loopback port, a fresh profile directory, and a
//! [`fantoccini`] client. Both programs come from `.ci/setup-browser`; when either is
//! missing, [`Browser::start`] fails with a message naming that script (never a skip).

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use std::io::BufRead as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Where `.ci/setup-browser` installs Chromium.
pub const CHROMIUM: &str = "/usr/bin/chromium";
/// Where `.ci/setup-browser` installs chromedriver.
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// How long a wait for the page may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(30);

/// A running chromedriver and one Chromium session. Dropping it kills chromedriver
/// and every Chromium process it started (one process group).
#[derive(Debug)]
pub struct Browser {
    /// The WebDriver session.
    pub client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

/// The Chromium flags that work on the test machines (a closed network: no background
/// connections, no sandbox for root in a container).
fn chromium_args(profile: &Path) -> Vec<String> {
    [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1200,900",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .chain(std::iter::once(format!(
        "--user-data-dir={}",
        profile.display()
    )))
    .collect()
}

/// Fails (panics, in a test) unless Chromium and chromedriver are installed.
///
/// # Panics
/// When either program is missing.
pub fn require_installed() {
    for program in [CHROMIUM, CHROMEDRIVER] {
        assert!(
            Path::new(program).exists(),
            "{program} is missing: the browser tests need Chromium and chromedriver; \
             install them with `.ci/setup-browser` (Debian's chromium and chromium-driver)"
        );
    }
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session.
    ///
    /// # Panics
    /// When Chromium or chromedriver is missing (the message names `.ci/setup-browser`)
    /// or either fails to start.
    pub async fn start() -> Browser {
        require_installed();
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
            listener.local_addr().expect("its address").port()
        };
        let mut driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            // Its own process group, so that Chromium goes with it on drop.
            .process_group(0)
            .arg("--allowed-ips=127.0.0.1")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {CHROMEDRIVER}: {e}"));
        // chromedriver says when it listens.
        let stdout = driver.stdout.take().expect("piped stdout");
        let ready = tokio::task::spawn_blocking(move || {
            let mut lines = std::io::BufReader::new(stdout).lines();
            let ok = lines.any(|l| l.is_ok_and(|l| l.contains("started successfully")));
            // Keep draining so chromedriver never blocks on a full pipe.
            std::thread::spawn(move || lines.for_each(drop));
            ok
        });
        let ready = tokio::time::timeout(WAIT, ready)
            .await
            .expect("chromedriver started in time")
            .expect("the reader ran");
        assert!(ready, "chromedriver exited before listening");
        let profile = tempfile::tempdir().expect("a profile directory");
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({"binary": CHROMIUM, "args": chromium_args(profile.path())}),
        );
        // A dialog stays open until the test answers it (the default dismisses it when
        // any other command comes first).
        caps.insert("unhandledPromptBehavior".into(), json!("ignore"));
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .unwrap_or_else(|e| panic!("cannot start a Chromium session: {e}"));
        let browser = Browser {
            client,
            driver,
            _profile: profile,
        };
        browser
            .client
            .update_timeouts(fantoccini::wd::TimeoutConfiguration::new(
                Some(WAIT),
                Some(WAIT),
                Some(Duration::ZERO),
            ))
            .await
            .expect("timeouts set");
        browser
    }

    /// Runs `script` in the page (its `return` value as JSON).
    ///
    /// # Panics
    /// When the script throws or the session is gone.
    pub async fn js(&self, script: &str) -> Value {
        self.client
            .execute(script, Vec::new())
            .await
            .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// Waits until the JavaScript expression `predicate` is truthy in the page, checked
    /// now and after every change of the document (a `MutationObserver`, no polling);
    /// fails after [`WAIT`] with `what` and the page's text.
    ///
    /// # Panics
    /// When the predicate does not hold within [`WAIT`].
    pub async fn until(&self, what: &str, predicate: &str) {
        let script = format!(
            "const done = arguments[arguments.length - 1];
             const pred = () => {{ try {{ return !!({predicate}); }} catch (e) {{ return false; }} }};
             if (pred()) {{ done(true); return; }}
             const obs = new MutationObserver(() => {{ if (pred()) {{ obs.disconnect(); done(true); }} }});
             obs.observe(document, {{subtree: true, childList: true, characterData: true, attributes: true}});"
        );
        match self.client.execute_async(&script, Vec::new()).await {
            Ok(_) => {}
            Err(e) => {
                let text = self
                    .client
                    .execute(
                        "return document.body ? document.body.innerText : ''",
                        Vec::new(),
                    )
                    .await
                    .unwrap_or(Value::Null);
                panic!("waiting for {what} ({predicate}) failed: {e}\npage text:\n{text}");
            }
        }
    }

    /// The element `css` selects (waiting for it to appear).
    ///
    /// # Panics
    /// When it does not appear within [`WAIT`].
    pub async fn find(&self, css: &str) -> fantoccini::elements::Element {
        self.client
            .wait()
            .at_most(WAIT)
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no element {css}: {e}"))
    }

    /// Clicks the element `css` selects.
    ///
    /// # Panics
    /// When it cannot be found or clicked.
    pub async fn click(&self, css: &str) {
        self.find(css)
            .await
            .click()
            .await
            .unwrap_or_else(|e| panic!("cannot click {css}: {e}"));
    }

    /// Accepts the page's dialog (`confirm`, `alert`), waiting for it to open: a click's
    /// handler may open it after the click command has returned. Checked every 50 ms,
    /// like the WebDriver client's own waits, up to [`WAIT`].
    ///
    /// # Panics
    /// When no dialog opens within [`WAIT`].
    pub async fn accept_dialog(&self) {
        use fantoccini::error::{CmdError, ErrorStatus};
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            match self.client.accept_alert().await {
                Ok(()) => return,
                Err(CmdError::Standard(e))
                    if e.error == ErrorStatus::NoSuchAlert
                        && std::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                Err(e) => panic!("no dialog to accept: {e}"),
            }
        }
    }

    /// Types `text` into the element `css` selects.
    ///
    /// # Panics
    /// When it cannot be found or typed into.
    pub async fn type_into(&self, css: &str, text: &str) {
        self.find(css)
            .await
            .send_keys(text)
            .await
            .unwrap_or_else(|e| panic!("cannot type into {css}: {e}"));
    }

    /// Saves a PNG screenshot of the page to `path`.
    ///
    /// # Panics
    /// When the screenshot cannot be taken or written.
    pub async fn screenshot(&self, path: &Path) {
        let png = self.client.screenshot().await.expect("a screenshot");
        std::fs::write(path, png).expect("the screenshot written");
    }
}

impl Browser {
    /// Ends the WebDriver session (Chromium quits), then chromedriver.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // chromedriver and every Chromium process it started (same process group).
        if let Ok(pid) = i32::try_from(self.driver.id()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Where screenshots go when `FOYA_SCREENSHOTS` names a directory (for `docs/`).
#[must_use]
pub fn screenshot_dir() -> Option<PathBuf> {
    std::env::var_os("FOYA_SCREENSHOTS").map(PathBuf::from)
}
