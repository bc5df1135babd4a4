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
        let driver_exit = std::cell::RefCell::new(None);
        crate::try_poll_for(Duration::from_secs(20), || {
            if let Ok(Some(exit)) = browser.driver.try_wait() {
                *driver_exit.borrow_mut() = Some(exit);
                return Ok(());
            }
            match browser.http_within("GET", "/status", None, Duration::from_secs(2)) {
                Ok(status) if status["value"]["ready"] == true => Ok(()),
                Ok(status) => Err(format!("not ready: {status}")),
                Err(e) => Err(e.to_string()),
            }
        })
        .map_err(|seen| {
            Error(format!(
                "chromedriver did not answer on port {port} within 20 s: {seen}"
            ))
        })?;
        if let Some(exit) = driver_exit.into_inner() {
            return Err(Error(format!("chromedriver exited: {exit}")));
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
        self.http_within(method, path, body, COMMAND_LIMIT)
    }

    /// [`Browser::http`] with an answer due within `limit`.
    fn http_within(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        limit: Duration,
    ) -> Result<Value> {
        let body = body.map(Value::to_string).unwrap_or_default();
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.port));
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .map_err(|e| Error(format!("chromedriver: {e}")))?;
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.port,
            body.len()
        );
        stream
            .write_all(request.as_bytes())
            .map_err(|e| Error(format!("chromedriver: {e}")))?;
        let deadline = Instant::now() + limit;
        let (head, payload) = read_answer(stream, deadline)
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
        crate::try_poll_for(limit, || check(self).ok_or_else(String::new)).map_err(|_| {
            let text = self
                .find("body")
                .and_then(|b| self.text(&b))
                .unwrap_or_default();
            Error(format!(
                "{what}: not within {limit:?}; the page ({}) shows:\n{text}",
                self.url().unwrap_or_default()
            ))
        })
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

/// The longest a WebDriver command may take (a page load included).
const COMMAND_LIMIT: Duration = Duration::from_secs(120);

/// A reader that fails once `deadline` has passed (each read waits at most until then).
struct Timed {
    stream: TcpStream,
    deadline: Instant,
}

impl Read for Timed {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no whole answer within the command's time",
            ));
        }
        self.stream.set_read_timeout(Some(left))?;
        self.stream.read(buf)
    }
}

/// An HTTP/1.1 answer read to its end by `deadline`: by its `Content-Length`, by its chunks, or
/// to the connection's close (the driver may keep the connection open). Its head and body.
fn read_answer(stream: TcpStream, deadline: Instant) -> std::io::Result<(String, Vec<u8>)> {
    use std::io::BufRead;
    let bad = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    let mut reader = std::io::BufReader::new(Timed { stream, deadline });
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Err(bad(format!("closed within the answer's head: {head}")));
        }
        if line == "\r\n" || line == "\n" {
            break;
        }
        head.push_str(&line);
    }
    let lower = head.to_ascii_lowercase();
    let length = lower
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok());
    let chunked = lower
        .lines()
        .any(|l| l.starts_with("transfer-encoding:") && l.contains("chunked"));
    let mut body = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size)?;
            let size = size.split(';').next().unwrap_or("").trim();
            let n = usize::from_str_radix(size, 16)
                .map_err(|e| bad(format!("a bad chunk size {size:?}: {e}")))?;
            if n == 0 {
                // Trailers, to the empty line.
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line)? == 0 || line.trim().is_empty() {
                        break;
                    }
                }
                break;
            }
            let start = body.len();
            body.resize(start + n, 0);
            reader.read_exact(&mut body[start..])?;
            let mut end = [0u8; 2];
            reader.read_exact(&mut end)?;
        }
    } else if let Some(n) = length {
        body.resize(n, 0);
        reader.read_exact(&mut body)?;
    } else {
        reader.read_to_end(&mut body)?;
    }
    Ok((head, body))
}
