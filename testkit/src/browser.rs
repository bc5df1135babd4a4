//! A real browser for tests: Chromium headless (Debian's `chromium`) driven through its
//! WebDriver server (`chromedriver`, Debian's `chromium-driver`) by a small blocking W3C
//! WebDriver client over HTTP/1.1 on loopback.
//!
//! [`Browser::start_or_skip`] starts `chromedriver` on a free port and opens a session; dropping
//! the [`Browser`] ends the session (Chromium quits) and kills the `chromedriver` it started.
//! Every wait polls with a deadline.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

/// The key of an element reference in W3C WebDriver answers.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";
/// The Tab key, as WebDriver sends keys.
pub const TAB: &str = "\u{E004}";

/// A WebDriver error or an unexpected answer.
#[derive(Debug)]
pub struct Error(pub String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

type Result<T> = std::result::Result<T, Error>;

/// An element of the page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element(String);

/// Chromium headless in a WebDriver session.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
    profile: PathBuf,
}

/// Where the browser's programs are: `CUMULO_CHROMIUM` and `CUMULO_CHROMEDRIVER`, else Debian's.
fn programs() -> (PathBuf, PathBuf) {
    let var = |name: &str, default: &str| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(default))
    };
    (
        var("CUMULO_CHROMIUM", "/usr/bin/chromium"),
        var("CUMULO_CHROMEDRIVER", "/usr/bin/chromedriver"),
    )
}

impl Browser {
    /// A browser, or `None` after saying why the test is skipped (no Chromium or driver);
    /// `CUMULO_REQUIRE_BROWSER=1` (CI) makes that a failure.
    pub fn start_or_skip() -> Option<Browser> {
        let (chromium, driver) = programs();
        let missing: Vec<String> = [&chromium, &driver]
            .into_iter()
            .filter(|p| !p.is_file())
            .map(|p| p.display().to_string())
            .collect();
        if !missing.is_empty() {
            let why = format!(
                "{} missing (Debian: apt-get install chromium chromium-driver; scripts/deps.sh)",
                missing.join(", ")
            );
            assert!(
                std::env::var("CUMULO_REQUIRE_BROWSER").as_deref() != Ok("1"),
                "CUMULO_REQUIRE_BROWSER=1 but {why}"
            );
            eprintln!("SKIPPED: no browser: {why}");
            return None;
        }
        Some(Browser::start(&chromium, &driver).unwrap_or_else(|e| panic!("the browser: {e}")))
    }

    /// Starts `driver` and a session of `chromium`, headless.
    pub fn start(chromium: &std::path::Path, driver: &std::path::Path) -> Result<Browser> {
        let port = crate::procfs::free_port();
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| Error(format!("{}: {e}", driver.display())))?;
        let profile =
            std::env::temp_dir().join(format!("cumulo-browser-{}-{port}", std::process::id()));
        let mut browser = Browser {
            driver: child,
            port,
            session: String::new(),
            profile,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match browser.http("GET", "/status", None) {
                Ok(status) if status["value"]["ready"] == true => break,
                _ if Instant::now() > deadline => {
                    return Err(Error(format!(
                        "chromedriver did not answer on port {port} within 20 s"
                    )));
                }
                _ => {
                    if let Ok(Some(exit)) = browser.driver.try_wait() {
                        return Err(Error(format!("chromedriver exited: {exit}")));
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
        let args = vec![
            "--headless=new".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-dev-shm-usage".into(),
            "--no-first-run".into(),
            "--window-size=1280,900".into(),
            format!("--user-data-dir={}", browser.profile.display()),
        ];
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "acceptInsecureCerts": true,
            "unhandledPromptBehavior": "ignore",
            "goog:chromeOptions": {"binary": chromium.display().to_string(), "args": args},
        }}});
        let answer = browser.http("POST", "/session", Some(&caps))?;
        browser.session = answer["value"]["sessionId"]
            .as_str()
            .ok_or_else(|| Error(format!("no session: {answer}")))?
            .to_string();
        Ok(browser)
    }

    /// One WebDriver command: `method path` with `body`; the answer's JSON, or its error.
    fn http(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value> {
        let body = body.map(Value::to_string).unwrap_or_default();
        let mut stream = TcpStream::connect(("127.0.0.1", self.port))
            .map_err(|e| Error(format!("chromedriver: {e}")))?;
        stream
            .set_read_timeout(Some(Duration::from_secs(120)))
            .map_err(|e| Error(e.to_string()))?;
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.port,
            body.len()
        );
        stream
            .write_all(request.as_bytes())
            .map_err(|e| Error(format!("chromedriver: {e}")))?;
        let (head, payload) = read_answer(&mut stream)
            .map_err(|e| Error(format!("chromedriver: {method} {path}: {e}")))?;
        let status: u16 = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let value: Value = serde_json::from_slice(&payload).unwrap_or(Value::Null);
        if status >= 400 {
            let text = String::from_utf8_lossy(&payload);
            return Err(Error(format!(
                "{method} {path}: {status}: {}",
                value["value"]["message"].as_str().unwrap_or(&text)
            )));
        }
        Ok(value)
    }

    /// A command of the session; its `value`.
    fn command(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value> {
        let path = format!("/session/{}{path}", self.session);
        self.http(method, &path, body.as_ref())
            .map(|mut v| v["value"].take())
    }

    /// Goes to `url`.
    pub fn goto(&self, url: &str) -> Result<()> {
        self.command("POST", "/url", Some(json!({ "url": url })))
            .map(|_| ())
    }

    /// The page's URL.
    pub fn url(&self) -> Result<String> {
        Ok(self
            .command("GET", "/url", None)?
            .as_str()
            .unwrap_or("")
            .to_string())
    }

    /// The page's title.
    pub fn title(&self) -> Result<String> {
        Ok(self
            .command("GET", "/title", None)?
            .as_str()
            .unwrap_or("")
            .to_string())
    }

    /// The elements `css` selects.
    pub fn all(&self, css: &str) -> Result<Vec<Element>> {
        let found = self.command(
            "POST",
            "/elements",
            Some(json!({"using": "css selector", "value": css})),
        )?;
        Ok(found
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e[ELEMENT].as_str().map(|id| Element(id.to_string())))
            .collect())
    }

    /// The first element `css` selects.
    pub fn find(&self, css: &str) -> Result<Element> {
        self.all(css)?.into_iter().next().ok_or_else(|| {
            Error(format!(
                "no element {css:?} on {}",
                self.url().unwrap_or_default()
            ))
        })
    }

    /// The element that has the focus.
    pub fn active(&self) -> Result<Element> {
        let found = self.command("GET", "/element/active", None)?;
        found[ELEMENT]
            .as_str()
            .map(|id| Element(id.to_string()))
            .ok_or_else(|| Error("no active element".into()))
    }

    /// Clicks `element`.
    pub fn click(&self, element: &Element) -> Result<()> {
        self.command(
            "POST",
            &format!("/element/{}/click", element.0),
            Some(json!({})),
        )
        .map(|_| ())
    }

    /// Types `text` into `element` (after clearing it, unless `text` is a key like [`TAB`]).
    pub fn type_in(&self, element: &Element, text: &str) -> Result<()> {
        if !text.starts_with(|c: char| ('\u{E000}'..='\u{F8FF}').contains(&c)) {
            self.command(
                "POST",
                &format!("/element/{}/clear", element.0),
                Some(json!({})),
            )?;
        }
        self.command(
            "POST",
            &format!("/element/{}/value", element.0),
            Some(json!({ "text": text })),
        )
        .map(|_| ())
    }

    /// Presses and releases `key` (such as [`TAB`]) on whatever has the focus.
    pub fn press(&self, key: &str) -> Result<()> {
        let actions = json!({"actions": [{"type": "key", "id": "keyboard", "actions": [
            {"type": "keyDown", "value": key}, {"type": "keyUp", "value": key}]}]});
        self.command("POST", "/actions", Some(actions)).map(|_| ())
    }

    /// The rendered text of `element`.
    pub fn text(&self, element: &Element) -> Result<String> {
        Ok(self
            .command("GET", &format!("/element/{}/text", element.0), None)?
            .as_str()
            .unwrap_or("")
            .to_string())
    }

    /// Runs `script` (a function body; `arguments` are `args`) in the page; what it returns.
    pub fn run(&self, script: &str, args: Vec<Value>) -> Result<Value> {
        self.command(
            "POST",
            "/execute/sync",
            Some(json!({ "script": script, "args": args })),
        )
    }

    /// Accepts the dialog open (a `confirm`).
    pub fn accept_dialog(&self) -> Result<()> {
        self.command("POST", "/alert/accept", Some(json!({})))
            .map(|_| ())
    }

    /// The session's cookies, as WebDriver describes them.
    pub fn cookies(&self) -> Result<Vec<Value>> {
        Ok(self
            .command("GET", "/cookie", None)?
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    /// A PNG of the page as shown, written to `path`.
    pub fn screenshot(&self, path: &std::path::Path) -> Result<()> {
        let data = self.command("GET", "/screenshot", None)?;
        let png = base64::engine::general_purpose::STANDARD
            .decode(data.as_str().unwrap_or(""))
            .map_err(|e| Error(format!("screenshot: {e}")))?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| Error(e.to_string()))?;
        }
        std::fs::write(path, png).map_err(|e| Error(format!("{}: {e}", path.display())))
    }

    /// Polls `check` until it gives `Some`, for at most `limit`; the error says `what` was
    /// awaited, and the page's text when the wait ended.
    pub fn wait_for<T>(
        &self,
        what: &str,
        limit: Duration,
        mut check: impl FnMut(&Browser) -> Option<T>,
    ) -> Result<T> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(found) = check(self) {
                return Ok(found);
            }
            if Instant::now() > deadline {
                let text = self
                    .find("body")
                    .and_then(|b| self.text(&b))
                    .unwrap_or_default();
                return Err(Error(format!(
                    "{what}: not within {limit:?}; the page ({}) shows:\n{text}",
                    self.url().unwrap_or_default()
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self.http("DELETE", &format!("/session/{}", self.session), None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// An HTTP/1.1 answer read to its end (by its `Content-Length`, or its chunks; the driver may
/// keep the connection open): its head and its body.
fn read_answer(stream: &mut TcpStream) -> std::io::Result<(String, Vec<u8>)> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    loop {
        if let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..split]).into_owned();
            let lower = head.to_ascii_lowercase();
            let length = lower
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok());
            let chunked = lower.contains("transfer-encoding: chunked");
            let body = &raw[split + 4..];
            let done = match length {
                Some(n) => body.len() >= n,
                None if chunked => body.windows(5).any(|w| w == b"0\r\n\r\n"),
                None => false,
            };
            if done {
                let body = match length {
                    Some(n) => body[..n].to_vec(),
                    None => dechunk(body),
                };
                return Ok((head, body));
            }
        }
        let n = stream.read(&mut buf)?;
        if n == 0 {
            // Closed: the body is what came.
            let split = raw
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .ok_or_else(|| bad("closed before the answer's head"))?;
            let head = String::from_utf8_lossy(&raw[..split]).into_owned();
            return Ok((head, raw[split + 4..].to_vec()));
        }
        raw.extend_from_slice(&buf[..n]);
    }
}

/// The body of a chunked transfer.
fn dechunk(mut rest: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = rest.windows(2).position(|w| w == b"\r\n") {
        let size = String::from_utf8_lossy(&rest[..end]);
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        let tail = &rest[end + 2..];
        if n == 0 || tail.len() < n {
            break;
        }
        out.extend_from_slice(&tail[..n]);
        rest = tail[n..].strip_prefix(b"\r\n").unwrap_or(&tail[n..]);
    }
    out
}
