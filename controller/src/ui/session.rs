//! The dashboard's session: its cookies (the token, the CSRF value, a message for the next
//! page), the checks every form passes, and the login and logout pages.

use axum::body::Bytes;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::UiState;
use super::call::{Api, Failed, encode};
use super::html::{Flash, Who, bare, csrf_field, esc, notice};
use crate::api::PeerAddr;

/// The cookie holding the session's token.
const SESSION: &str = "cumulo_session";
/// The cookie holding the value every form must echo.
const CSRF: &str = "cumulo_csrf";
/// The cookie carrying a message to the next page.
const FLASH: &str = "cumulo_flash";
/// The longest message carried to the next page, in characters.
const FLASH_MAX: usize = 600;
/// ... and in bytes of the cookie (browsers keep cookies of up to 4 KiB).
const FLASH_BYTES: usize = 3000;

/// One browser's request: its cookies, and what answering it needs.
pub(super) struct Session {
    pub token: Option<String>,
    pub csrf: String,
    /// Whether `csrf` was made for this answer (it is then set as a cookie).
    fresh_csrf: bool,
    pub flash: Option<Flash>,
    peer: Option<PeerAddr>,
    /// Whether the request's `Origin` (or `Sec-Fetch-Site`) says it came from this site.
    same_site: bool,
    state: UiState,
}

impl FromRequestParts<UiState> for Session {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &UiState,
    ) -> Result<Session, std::convert::Infallible> {
        let headers = &parts.headers;
        let (csrf, fresh_csrf) = match cookie(headers, CSRF) {
            Some(value) if value.len() == 64 && value.bytes().all(|b| b.is_ascii_hexdigit()) => {
                (value, false)
            }
            _ => (random_hex(), true),
        };
        let flash = cookie(headers, FLASH).and_then(|v| {
            let (kind, text) = v.split_at_checked(1)?;
            Some(Flash {
                error: kind == "e",
                text: decode(text),
            })
        });
        Ok(Session {
            token: cookie(headers, SESSION).map(|t| decode(&t)),
            csrf,
            fresh_csrf,
            flash,
            peer: parts.extensions.get::<PeerAddr>().copied(),
            same_site: same_site(headers, state.secure),
            state: state.clone(),
        })
    }
}

impl Session {
    /// The API as this session calls it.
    pub fn api(&self) -> Api {
        Api::new(self.state.api.clone(), self.token.clone(), self.peer)
    }

    /// Who the session's token is (`GET /v3/auth/tokens` on itself).
    pub async fn who(&self) -> Result<Who, Failed> {
        let Some(token) = &self.token else {
            return Err(Failed {
                status: StatusCode::UNAUTHORIZED,
                message: "not logged in".into(),
            });
        };
        let answer = self
            .api()
            .call(
                axum::http::Method::GET,
                "/v3/auth/tokens",
                None,
                &[("x-subject-token", token.clone())],
            )
            .await?;
        let t = &answer.body["token"];
        let text = |v: &Value| v.as_str().unwrap_or("").to_string();
        Ok(Who {
            user: text(&t["user"]["name"]),
            project: text(&t["project"]["name"]),
            admin: t["roles"]
                .as_array()
                .is_some_and(|roles| roles.iter().any(|r| r["name"] == "admin")),
        })
    }

    /// An HTML answer (a live part, or a page through [`Session::shown`]), setting the CSRF
    /// cookie if it is new.
    pub fn html(&self, status: StatusCode, body: String) -> Response {
        let mut response = (
            status,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            body,
        )
            .into_response();
        if self.fresh_csrf {
            append(response.headers_mut(), &self.cookie(CSRF, &self.csrf, None));
        }
        response
    }

    /// A whole page's answer: as [`Session::html`], and the message it showed is cleared (a
    /// live part never clears it: another tab's poll would take it from the page it was for).
    pub fn shown(&self, status: StatusCode, body: String) -> Response {
        let mut response = self.html(status, body);
        if self.flash.is_some() {
            append(response.headers_mut(), &self.cookie(FLASH, "", Some(0)));
        }
        response
    }

    /// A whole page for `who`: `title`, the navigation at `here`, `body`, and the message the
    /// last form left.
    pub fn page(&self, who: &Who, title: &str, here: &str, body: &str) -> Response {
        let frame = super::html::Frame {
            who,
            csrf: &self.csrf,
            flash: self.flash.as_ref(),
        };
        self.shown(StatusCode::OK, super::html::page(&frame, title, here, body))
    }

    /// A live part's answer to a failed call: 401 when the session is over (the script then
    /// goes to the login page), else the message in place of the part.
    pub fn live_failed(&self, failed: Failed) -> Response {
        if failed.logged_out() {
            return self.html(
                StatusCode::UNAUTHORIZED,
                notice(true, "Your session has ended."),
            );
        }
        self.html(StatusCode::OK, notice(true, &failed.message))
    }

    /// See other: `to`, with `flash` for the page there.
    pub fn redirect(&self, to: &str, flash: Option<Flash>) -> Response {
        let mut response =
            (StatusCode::SEE_OTHER, [(header::LOCATION, to.to_string())]).into_response();
        if self.fresh_csrf {
            append(response.headers_mut(), &self.cookie(CSRF, &self.csrf, None));
        }
        if let Some(flash) = flash {
            let kind = if flash.error { "e" } else { "o" };
            let mut text: String = flash.text.chars().take(FLASH_MAX).collect();
            while encode(&text).len() > FLASH_BYTES {
                text.pop();
            }
            let value = format!("{kind}{}", encode(&text));
            append(response.headers_mut(), &self.cookie(FLASH, &value, None));
        }
        response
    }

    /// What a failed call shows: the login page when the session is over, else the message.
    pub fn failed(&self, failed: Failed) -> Response {
        if failed.logged_out() {
            return self.to_login();
        }
        let way_out = format!(
            "<p><a href=\"/ui/\">The overview</a></p>\
             <form method=\"post\" action=\"/ui/logout\">{}<button type=\"submit\">Log out</button></form>",
            csrf_field(&self.csrf)
        );
        let body = format!("{}{way_out}", notice(true, &failed.message));
        self.shown(failed.status, bare("Something went wrong", &body))
    }

    /// To the login page (saying that the session ended, if there was one), ending the
    /// session's cookie.
    pub fn to_login(&self) -> Response {
        let to = match self.token {
            Some(_) => "/ui/login?expired=1",
            None => "/ui/login",
        };
        let mut response = self.redirect(to, None);
        append(response.headers_mut(), &self.cookie(SESSION, "", Some(0)));
        response
    }

    /// Whether a form may act: sent from this site, echoing the CSRF cookie.
    pub fn check(&self, form: &Fields) -> Result<(), Box<Response>> {
        let echoed = form.get("csrf").unwrap_or("");
        if !self.fresh_csrf && self.same_site && same(echoed.as_bytes(), self.csrf.as_bytes()) {
            return Ok(());
        }
        let body = bare(
            "Refused",
            &notice(
                true,
                "This form was not sent from this dashboard's own page (its CSRF token is \
                 missing or stale). Go back, reload the page and send it again.",
            ),
        );
        Err(Box::new(self.html(StatusCode::FORBIDDEN, body)))
    }

    /// A `Set-Cookie` value for the dashboard's path.
    fn cookie(&self, name: &str, value: &str, max_age: Option<u64>) -> String {
        let mut text = format!("{name}={value}; Path=/ui; HttpOnly; SameSite=Strict");
        if self.state.secure {
            text.push_str("; Secure");
        }
        if let Some(age) = max_age {
            text.push_str(&format!("; Max-Age={age}"));
        }
        text
    }
}

fn append(headers: &mut HeaderMap, cookie: &str) {
    if let Ok(value) = HeaderValue::from_str(cookie) {
        headers.append(header::SET_COOKIE, value);
    }
}

/// A form's fields.
pub(super) struct Fields(Vec<(String, String)>);

impl Fields {
    /// The fields of a urlencoded body (malformed: none).
    pub fn parse(body: &Bytes) -> Fields {
        Fields(serde_urlencoded::from_bytes(body).unwrap_or_default())
    }

    /// The first value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The value of `name`, trimmed, if not empty.
    pub fn text(&self, name: &str) -> Option<&str> {
        self.get(name).map(str::trim).filter(|v| !v.is_empty())
    }
}

/// `GET /ui/login`: the login form (or the dashboard, for a session that is still good).
pub(super) async fn form(session: Session, query: axum::extract::RawQuery) -> Response {
    if session.token.is_some() && session.who().await.is_ok_and(|who| !who.project.is_empty()) {
        return session.redirect("/ui/", None);
    }
    let expired = query.0.is_some_and(|q| q.contains("expired"));
    let note = if expired {
        notice(false, "Your session has ended: log in again.")
    } else {
        String::new()
    };
    let body = login_form(&session.csrf, "", "", &note);
    session.shown(StatusCode::OK, bare("Log in", &body))
}

/// `POST /ui/login`: a token from the Identity API, kept in the session cookie.
pub(super) async fn login(State(_): State<UiState>, session: Session, body: Bytes) -> Response {
    let form = Fields::parse(&body);
    if let Err(refused) = session.check(&form) {
        return *refused;
    }
    let user = form.text("username").unwrap_or("");
    let project = form.text("project").unwrap_or("");
    let password = form.get("password").unwrap_or("");
    if user.is_empty() || project.is_empty() {
        let note = notice(true, "The user name and the project are both needed.");
        let body = login_form(&session.csrf, user, project, &note);
        return session.shown(StatusCode::BAD_REQUEST, bare("Log in", &body));
    }
    let auth = json!({
        "identity": {"methods": ["password"], "password": {"user": {
            "name": user, "domain": {"name": "Default"}, "password": password}}},
        "scope": {"project": {"name": project, "domain": {"name": "Default"}}},
    });
    let answer = Api::new(session.state.api.clone(), None, session.peer)
        .post("/v3/auth/tokens", json!({ "auth": auth }))
        .await;
    match answer {
        Ok(answer) => {
            let Some(token) = answer
                .headers
                .get("x-subject-token")
                .and_then(|v| v.to_str().ok())
            else {
                return session.failed(Failed {
                    status: StatusCode::BAD_GATEWAY,
                    message: "the Identity API issued no token".into(),
                });
            };
            let mut response = session.redirect("/ui/", None);
            append(
                response.headers_mut(),
                &session.cookie(SESSION, &encode(token), None),
            );
            response
        }
        Err(failed) => {
            let body = login_form(&session.csrf, user, project, &notice(true, &failed.message));
            session.shown(failed.status, bare("Log in", &body))
        }
    }
}

/// `POST /ui/logout`: the token revoked, the cookie gone.
pub(super) async fn logout(session: Session, body: Bytes) -> Response {
    let form = Fields::parse(&body);
    if let Err(refused) = session.check(&form) {
        return *refused;
    }
    if let Some(token) = &session.token {
        // Revoked if still good; an expired one needs nothing.
        let _ = session
            .api()
            .call(
                axum::http::Method::DELETE,
                "/v3/auth/tokens",
                None,
                &[("x-subject-token", token.clone())],
            )
            .await;
    }
    let mut response = session.redirect("/ui/login", None);
    append(
        response.headers_mut(),
        &session.cookie(SESSION, "", Some(0)),
    );
    response
}

fn login_form(csrf: &str, user: &str, project: &str, note: &str) -> String {
    format!(
        "{note}<form method=\"post\" action=\"/ui/login\" class=\"login\">{csrf}\
         <label for=\"username\">User name</label>\
         <input id=\"username\" name=\"username\" autocomplete=\"username\" required value=\"{user}\">\
         <label for=\"password\">Password</label>\
         <input id=\"password\" name=\"password\" type=\"password\" autocomplete=\"current-password\" required>\
         <label for=\"project\">Project</label>\
         <input id=\"project\" name=\"project\" required value=\"{project}\">\
         <button type=\"submit\">Log in</button></form>",
        csrf = csrf_field(csrf),
        user = esc(user),
        project = esc(project),
    )
}

/// The value of cookie `name`.
fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

/// Whether a request came from a page of this site: its `Origin`, when sent, is this host's
/// (over the scheme served); its `Sec-Fetch-Site`, when sent, is `same-origin`.
fn same_site(headers: &HeaderMap, secure: bool) -> bool {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = text("sec-fetch-site")
        && site != "same-origin"
    {
        return false;
    }
    match (text("origin"), text("host")) {
        (None, _) => true,
        (Some(origin), Some(host)) => {
            let scheme = if secure { "https" } else { "http" };
            origin == format!("{scheme}://{host}")
        }
        (Some(_), None) => false,
    }
}

/// 32 random bytes in hex.
fn random_hex() -> String {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 32];
    // The system's generator does not fail on Linux; a zero value would only make every form
    // of this answer refused.
    let _ = ring::rand::SystemRandom::new().fill(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Equal in constant time (for equal lengths).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Percent-decoding of [`encode`]'s output (bad escapes kept as they are).
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = text.get(i + 1..i + 3)
            && hex.bytes().all(|c| c.is_ascii_hexdigit())
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
