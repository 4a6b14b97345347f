//! The operator console in a real browser: headless Chromium driven through WebDriver
//! (`chromedriver` started by the test on a free port, `fantoccini` as the client). Each page
//! visited is saved as a PNG under `target/console-screenshots/`.
//!
//! WebDriver was chosen over the DevTools protocol because its client is small (a few plain
//! HTTP calls, no generated protocol crate of several hundred thousand lines to compile) and
//! chromedriver ships beside Chromium in the same Debian package set.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

use crate::console_support::seed;
use crate::harness::{Kind, Service, OPERATOR_ACME};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// The flags without which Chromium tries the network (closed here) and hangs on it.
const FLAGS: [&str; 10] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,900",
];

fn binary(env: &str, default: &str) -> PathBuf {
    let path = std::env::var_os(env)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(default));
    assert!(
        path.exists(),
        "{} is missing: the console's browser tests need Chromium and its WebDriver. Install them \
         with `apt-get update && apt-get install -y chromium chromium-driver` (scripts/test does \
         this when run as root), or point {env} at the binary.",
        path.display()
    );
    path
}

/// Where the screenshots go: `$CARGO_TARGET_DIR/console-screenshots`, else the workspace's
/// `target/console-screenshots`.
fn screenshot_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let dir = target.join("console-screenshots");
    std::fs::create_dir_all(&dir).expect("the screenshot directory can be created");
    dir
}

/// A chromedriver process with one browser session, ended on drop.
struct Browser {
    driver: Child,
    client: Option<Client>,
    _profile: tempfile::TempDir,
    shots: PathBuf,
    prefix: &'static str,
}

impl Browser {
    async fn start(prefix: &'static str) -> Browser {
        let chromium = binary("CHROMIUM", CHROMIUM);
        let chromedriver = binary("CHROMEDRIVER", CHROMEDRIVER);
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let driver = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", chromedriver.display()));
        let profile = tempfile::tempdir().expect("a fresh Chromium profile directory");
        let mut browser = Browser {
            driver,
            client: None,
            shots: screenshot_dir(),
            _profile: profile,
            prefix,
        };
        let url = format!("http://127.0.0.1:{port}");
        let status = reqwest::Client::new();
        let mut ready = false;
        for _ in 0..100 {
            if status
                .get(format!("{url}/status"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                ready = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(ready, "chromedriver did not answer on {url} within 10 s");
        let mut args: Vec<String> = FLAGS.iter().map(|f| (*f).to_owned()).collect();
        args.push(format!(
            "--user-data-dir={}",
            browser._profile.path().display()
        ));
        let caps = json!({
            "browserName": "chrome",
            "goog:chromeOptions": { "binary": chromium, "args": args },
        });
        let caps = caps.as_object().unwrap().clone();
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&url)
            .await
            .expect("a Chromium session through chromedriver");
        browser.client = Some(client);
        browser
    }

    fn c(&self) -> &Client {
        self.client.as_ref().expect("a browser session")
    }

    /// Saves the current page as `{backend}-{name}.png`.
    async fn shot(&self, name: &str) {
        let png = self.c().screenshot().await.expect("a screenshot");
        assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
        let path = self.shots.join(format!("{}-{name}.png", self.prefix));
        std::fs::write(&path, png).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }

    async fn wait(&self, css: &str) -> fantoccini::elements::Element {
        match self
            .c()
            .wait()
            .at_most(Duration::from_secs(15))
            .for_element(Locator::Css(css))
            .await
        {
            Ok(e) => e,
            Err(e) => {
                let url = self.c().current_url().await.map(|u| u.to_string());
                let page = self.source().await;
                panic!("no {css} on the page ({e}) at {url:?}:\n{page}")
            }
        }
    }

    async fn source(&self) -> String {
        self.c().source().await.expect("the page source")
    }

    async fn close(mut self) {
        if let Some(c) = self.client.take() {
            let _ = c.close().await;
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The session's Chromium ends with the session; chromedriver is this test's own child.
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

pub async fn console_an_operator_works_the_console_in_a_browser(kind: Kind) {
    let s = Service::start(kind).await;
    let seeded = seed(&s).await;
    let prefix = match kind {
        Kind::Sqlite => "sqlite",
        Kind::Postgres => "postgres",
    };
    let b = Browser::start(prefix).await;
    let c = b.c();

    // Signing in: the console sends an unauthenticated browser to the sign-in form.
    c.goto(&format!("{}/console", s.base)).await.unwrap();
    let token = b.wait("#token").await;
    b.shot("signin").await;
    token.send_keys(OPERATOR_ACME).await.unwrap();
    c.find(Locator::Css("#signin"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    b.wait("#deliveries").await;
    b.shot("deliveries").await;
    let list = b.source().await;
    assert!(list.contains(&seeded.acme_first), "{list}");
    assert!(
        !list.contains(&seeded.beta_first),
        "another tenant's delivery is listed"
    );

    // Searching a delivery by its id opens its proof.
    let q = c.find(Locator::Css("#q")).await.unwrap();
    q.send_keys(&seeded.acme_quarantined).await.unwrap();
    c.find(Locator::Css("#search"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    b.wait("#decision").await;
    b.shot("proof").await;
    let proof = b.source().await;
    assert!(proof.contains("quarantine"), "{proof}");
    assert!(
        proof.contains("/data/amount"),
        "the differences are shown: {proof}"
    );
    assert!(proof.contains(r#"id="skipped""#));
    // The reference delivery is a link to its own proof.
    c.find(Locator::Css(&format!(
        "#decision a[href='/console/deliveries/{}']",
        seeded.acme_first
    )))
    .await
    .unwrap()
    .click()
    .await
    .unwrap();
    b.wait("#linked").await;
    assert!(c
        .current_url()
        .await
        .unwrap()
        .path()
        .ends_with(&seeded.acme_first));

    // Paging the queue one item at a time: acme's quarantine first (the oldest), the markup
    // delivery's reconcile item on the next page, and back.
    c.goto(&format!("{}/console/queue?limit=1", s.base))
        .await
        .unwrap();
    let first_card = format!("article[data-delivery='{}']", seeded.acme_quarantined);
    let second_card = format!("article[data-delivery='{}']", seeded.acme_markup);
    b.wait(&first_card).await;
    assert_eq!(
        c.find_all(Locator::Css("#queue article"))
            .await
            .unwrap()
            .len(),
        1
    );
    c.find(Locator::Css("#next-page"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    b.wait(&second_card).await;
    assert!(!b.source().await.contains(&seeded.acme_quarantined));
    assert!(
        c.find(Locator::Css("#next-page")).await.is_err(),
        "acme has two open items: no third page"
    );
    b.shot("queue-page-2").await;
    c.find(Locator::Css("#previous-page"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    b.wait(&first_card).await;
    assert!(c
        .current_url()
        .await
        .unwrap()
        .query()
        .unwrap_or("")
        .contains("before="));

    // Resolving a queue item: htmx swaps the item in place; reloading shows the open list
    // without it.
    c.goto(&format!("{}/console/queue", s.base)).await.unwrap();
    let card = format!("article[data-delivery='{}']", seeded.acme_quarantined);
    b.wait(&card).await;
    let queue = b.source().await;
    assert!(
        !queue.contains(&seeded.beta_quarantined),
        "another tenant's item is listed"
    );
    b.shot("queue").await;
    let note = c
        .find(Locator::Css(&format!("{card} textarea[name='note']")))
        .await
        .unwrap();
    note.send_keys("the second capture is real: confirmed with the payment team")
        .await
        .unwrap();
    c.find(Locator::Css(&format!("{card} button[type='submit']")))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    b.wait(&format!(
        "article.resolved[data-delivery='{}']",
        seeded.acme_quarantined
    ))
    .await;
    // The counts bar was swapped out of band: no open quarantine is left for acme.
    let count = b.wait("#count-quarantine").await.text().await.unwrap();
    assert_eq!(count, "0", "the open count follows the resolution");
    b.shot("queue-resolved").await;
    c.goto(&format!("{}/console/queue", s.base)).await.unwrap();
    b.wait("#queue").await;
    let open = b.source().await;
    assert!(
        !open.contains(&seeded.acme_quarantined),
        "the item left the open list"
    );

    // Another tenant's delivery is not found, even by its id.
    c.goto(&format!(
        "{}/console/deliveries/{}",
        s.base, seeded.beta_quarantined
    ))
    .await
    .unwrap();
    let missing = b.source().await;
    assert!(missing.contains("404"), "{missing}");
    assert!(!missing.contains("/data/amount"));

    for (path, shot, marker) in [
        ("/console/report", "report", "#report"),
        ("/console/decisions", "decisions", "#decisions-chart"),
        ("/console/breakers", "breakers", "#no-breakers"),
    ] {
        c.goto(&format!("{}{path}", s.base)).await.unwrap();
        b.wait(marker).await;
        b.shot(shot).await;
    }

    // Signing out: back to the sign-in form, and the pages ask for it again.
    c.find(Locator::Css("#signout"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    b.wait("#token").await;
    c.goto(&format!("{}/console/queue", s.base)).await.unwrap();
    b.wait("#token").await;
    assert!(c
        .current_url()
        .await
        .unwrap()
        .path()
        .ends_with("/console/signin"));
    b.close().await;
    s.stop().await;
}
