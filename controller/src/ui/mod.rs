//! The dashboard: HTML pages under `/ui`, served by the controller on the API's own listener
//! (same TLS, same users and projects), with no build step and nothing fetched from elsewhere.
//!
//! - **Pages are rendered on the server** from the API's own answers: every page calls the REST
//!   API in-process (`call::Api`, a `oneshot` on the API router with the session's token), so
//!   the dashboard sees what the `openstack` CLI sees, is refused what it is refused, and shows
//!   the API's error messages in words.
//! - **Live parts** (`data-live` regions) are re-fetched every 2 s by the one script,
//!   `static/app.js` (ours, no library), and swapped in place: no page reloads. When the
//!   controller cannot be reached the page says so and keeps trying, so it survives a restart.
//! - **Session**: a login form posts the user's name, password and project; the token the
//!   Identity API issues is kept in the `cumulo_session` cookie (`HttpOnly`, `SameSite=Strict`,
//!   `Secure` over TLS, `Path=/ui`), and revoked at logout.
//! - **CSRF**: every form carries the value of the `cumulo_csrf` cookie (random, `HttpOnly`,
//!   `SameSite=Strict`), which every POST must echo; a POST whose `Origin` names another site is
//!   refused too.
//! - **Headers**: a strict Content-Security-Policy (scripts, styles and requests from this origin
//!   only; no inline script or style; no framing), `nosniff`, `no-store`.
//!
//! `GET /` from a browser (one that asks for `text/html`) is sent to `/ui/`; every other client
//! gets Keystone's version document there as before.

mod call;
mod html;
mod instance;
mod instances;
mod lists;
mod nodes;
mod overview;
mod session;

use axum::Router;
use axum::extract::{Path, Request};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};

/// What the dashboard's handlers share.
#[derive(Clone)]
pub(crate) struct UiState {
    /// The API, called in-process.
    api: Router,
    /// Whether the dashboard is served over TLS (its cookies are then `Secure`).
    secure: bool,
}

/// The API's routes with the dashboard beside them (`secure`: served over TLS).
pub fn dashboard(api: Router, secure: bool) -> Router {
    let state = UiState {
        api: api.clone(),
        secure,
    };
    let ui = Router::new()
        .route("/ui", get(|| async { Redirect::to("/ui/") }))
        .route("/ui/", get(overview::page))
        .route("/ui/overview/live", get(overview::live))
        .route("/ui/login", get(session::form).post(session::login))
        .route("/ui/logout", post(session::logout))
        .route(
            "/ui/instances",
            get(instances::list).post(instances::create),
        )
        .route("/ui/instances/live", get(instances::table))
        .route("/ui/instances/{id}", get(instance::show))
        .route("/ui/instances/{id}/live", get(instance::detail))
        .route("/ui/instances/{id}/{action}", post(instances::act))
        .route("/ui/nodes", get(nodes::list))
        .route("/ui/nodes/live", get(nodes::table))
        .route("/ui/nodes/{id}", get(nodes::show))
        .route("/ui/nodes/{id}/live", get(nodes::detail))
        .route("/ui/nodes/{id}/{action}", post(nodes::act))
        .route("/ui/images", get(lists::images))
        .route("/ui/flavors", get(lists::flavors))
        .route("/ui/networks", get(lists::networks))
        .route("/ui/networks/live", get(lists::networks_live))
        .route("/ui/tenants", get(lists::tenants))
        .route("/ui/events", get(lists::events))
        .route("/ui/events/live", get(lists::events_live))
        .route("/ui/traces", get(lists::traces))
        .route("/ui/static/{file}", get(asset))
        .route("/ui/{*rest}", get(missing))
        .layer(axum::extract::DefaultBodyLimit::max(FORM_LIMIT))
        .layer(axum::middleware::from_fn(guard))
        .with_state(state);
    ui.merge(api).layer(axum::middleware::from_fn(browser_root))
}

/// The Content-Security-Policy of every dashboard answer: nothing but this origin's own script,
/// style and requests; no inline script or style, no plugins, no framing, forms posted here only.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                       connect-src 'self'; form-action 'self'; frame-ancestors 'none'; \
                       base-uri 'none'";

/// The largest form a dashboard POST may carry (user data is up to 64 KiB, base64 grows it).
const FORM_LIMIT: usize = 256 * 1024;

/// Security headers on every dashboard answer, and the form size bound.
async fn guard(request: Request, next: Next) -> Response {
    if request.method() == Method::POST {
        let declared = request
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        if declared.is_some_and(|n| n > FORM_LIMIT) {
            return (StatusCode::PAYLOAD_TOO_LARGE, "form too large").into_response();
        }
    }
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

/// `GET /` from a browser goes to the dashboard.
async fn browser_root(request: Request, next: Next) -> Response {
    let browser = request.method() == Method::GET
        && request.uri().path() == "/"
        && request
            .headers()
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("text/html"));
    if browser {
        return Redirect::to("/ui/").into_response();
    }
    next.run(request).await
}

/// A dashboard page that does not exist.
async fn missing() -> Response {
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        html::bare(
            "No such page",
            "<p>There is no such page. <a href=\"/ui/\">The overview</a></p>",
        ),
    )
        .into_response()
}

/// The dashboard's script and style sheet, built into the binary.
async fn asset(Path(file): Path<String>) -> Response {
    let (body, kind) = match file.as_str() {
        "app.js" => (
            include_str!("static/app.js"),
            "text/javascript; charset=utf-8",
        ),
        "app.css" => (include_str!("static/app.css"), "text/css; charset=utf-8"),
        _ => return (StatusCode::NOT_FOUND, "no such file").into_response(),
    };
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests;
