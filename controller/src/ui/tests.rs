//! The dashboard over the API on a fake cluster, in-process: headers, the session's cookies,
//! CSRF, escaping, and the pages' data.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use tower::ServiceExt;

use crate::api::testing::FakeCluster;
use crate::api::{ApiConfig, ApiState, TokenSigner, bootstrap_with, router};

const ADMIN: &str = "admin";
const PASSWORD: &str = "a-good-long-password";

/// A fresh store, in a directory removed with it.
fn fresh_store() -> (tempfile::TempDir, Arc<dyn store::Store>) {
    let dir = tempfile::tempdir().unwrap();
    let store = store::SqliteStore::open(dir.path().join("db")).unwrap();
    (dir, Arc::new(store))
}

/// The dashboard and API over a fresh store with its admin.
struct App {
    router: Router,
    cluster: Arc<FakeCluster>,
    _dir: tempfile::TempDir,
}

impl std::ops::Deref for App {
    type Target = Router;
    fn deref(&self) -> &Router {
        &self.router
    }
}

fn app() -> App {
    let (dir, store) = fresh_store();
    bootstrap_with(store.as_ref(), ADMIN, PASSWORD, ADMIN, 1000).unwrap();
    let cluster = Arc::new(FakeCluster::new(store.clone()));
    let signer = TokenSigner::random(std::time::Duration::from_secs(3600)).unwrap();
    let mut config = ApiConfig::new("http://127.0.0.1:1");
    config.password_iterations = 1000;
    App {
        router: super::dashboard(
            router(ApiState::new(store, cluster.clone(), signer, config)),
            false,
        ),
        cluster,
        _dir: dir,
    }
}

struct Answer {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: String,
}

async fn send(app: &Router, request: Request<Body>) -> Answer {
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 24)
        .await
        .unwrap();
    Answer {
        status,
        headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

fn get(path: &str, cookies: &str) -> Request<Body> {
    Request::get(path)
        .header(header::ACCEPT, "text/html")
        .header(header::COOKIE, cookies)
        .body(Body::empty())
        .unwrap()
}

fn post(path: &str, cookies: &str, form: &str) -> Request<Body> {
    Request::post(path)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::COOKIE, cookies)
        .body(Body::from(form.to_string()))
        .unwrap()
}

/// The `name=value` of each `Set-Cookie`, and the whole header lines.
fn set_cookies(a: &Answer) -> Vec<String> {
    a.headers
        .get_all(header::SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect()
}

fn cookie_value(a: &Answer, name: &str) -> Option<String> {
    set_cookies(a).iter().find_map(|c| {
        let first = c.split(';').next()?;
        let (k, v) = first.split_once('=')?;
        (k == name).then(|| v.to_string())
    })
}

/// The value of cookie `name` in the `Cookie` header `cookies`.
fn sent(cookies: &str, name: &str) -> String {
    cookies
        .split("; ")
        .find_map(|c| c.strip_prefix(name)?.strip_prefix('='))
        .unwrap()
        .to_string()
}

/// Logged in as the admin: the cookies to send.
async fn login(app: &Router) -> String {
    let form = send(app, get("/ui/login", "")).await;
    assert_eq!(form.status, StatusCode::OK);
    let csrf = cookie_value(&form, "cumulo_csrf").expect("a CSRF cookie");
    assert!(form.body.contains(&csrf), "the form carries the CSRF value");
    let cookies = format!("cumulo_csrf={csrf}");
    let answer = send(
        app,
        post(
            "/ui/login",
            &cookies,
            &format!("csrf={csrf}&username={ADMIN}&password={PASSWORD}&project={ADMIN}"),
        ),
    )
    .await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    let session = cookie_value(&answer, "cumulo_session").expect("a session cookie");
    format!("{cookies}; cumulo_session={session}")
}

#[tokio::test]
async fn every_answer_carries_a_strict_policy_and_cookies_are_locked_down() {
    let app = app();
    let form = send(&app, get("/ui/login", "")).await;
    assert_eq!(
        form.headers[header::CONTENT_SECURITY_POLICY],
        super::CSP,
        "the policy"
    );
    assert!(super::CSP.contains("script-src 'self'") && !super::CSP.contains("unsafe"));
    assert_eq!(form.headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
    assert_eq!(form.headers[header::X_FRAME_OPTIONS], "DENY");
    for c in set_cookies(&form) {
        assert!(
            c.contains("HttpOnly") && c.contains("SameSite=Strict") && c.contains("Path=/ui"),
            "{c}"
        );
        assert!(!c.contains("Secure"), "not over TLS: {c}");
    }
    let js = send(&app, get("/ui/static/app.js", "")).await;
    assert_eq!(js.status, StatusCode::OK);
    assert!(
        js.headers[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/javascript")
    );
}

#[tokio::test]
async fn cookies_are_secure_over_tls() {
    let (_dir, store) = fresh_store();
    let cluster = Arc::new(FakeCluster::new(store.clone()));
    let signer = TokenSigner::random(std::time::Duration::from_secs(3600)).unwrap();
    let state = ApiState::new(
        store,
        cluster,
        signer,
        ApiConfig::new("https://127.0.0.1:1"),
    );
    let app = super::dashboard(router(state), true);
    let form = send(&app, get("/ui/login", "")).await;
    let cookies = set_cookies(&form);
    assert!(!cookies.is_empty());
    assert!(
        cookies.iter().all(|c| c.contains("; Secure")),
        "{cookies:?}"
    );
}

#[tokio::test]
async fn a_browser_at_the_root_goes_to_the_dashboard_and_clients_get_the_versions() {
    let app = app();
    let browser = send(&app, get("/", "")).await;
    assert_eq!(browser.status, StatusCode::SEE_OTHER);
    assert_eq!(browser.headers[header::LOCATION], "/ui/");
    let client = send(
        &app,
        Request::get("/")
            .header(header::ACCEPT, "application/json")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(client.status, StatusCode::MULTIPLE_CHOICES);
    assert!(client.body.contains("versions"));
    // Without a session, a page sends the browser to the login form.
    let page = send(&app, get("/ui/", "")).await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    assert!(
        page.headers[header::LOCATION]
            .to_str()
            .unwrap()
            .starts_with("/ui/login")
    );
    // A live part answers 401 (the script then goes to the login page).
    let live = send(&app, get("/ui/overview/live", "")).await;
    assert_eq!(live.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_form_without_its_csrf_value_or_from_another_site_is_refused() {
    let app = app();
    let cookies = login(&app).await;
    let csrf = sent(&cookies, "cumulo_csrf");
    let form = "name=x&flavor=1&image=1&count=1";
    // No CSRF value.
    let none = send(&app, post("/ui/instances", &cookies, form)).await;
    assert_eq!(none.status, StatusCode::FORBIDDEN);
    assert!(none.body.contains("CSRF"));
    // Another value.
    let wrong = send(
        &app,
        post(
            "/ui/instances",
            &cookies,
            &format!("{form}&csrf={}", "0".repeat(64)),
        ),
    )
    .await;
    assert_eq!(wrong.status, StatusCode::FORBIDDEN);
    // The right value from another origin.
    let mut other = post("/ui/instances", &cookies, &format!("{form}&csrf={csrf}"));
    other
        .headers_mut()
        .insert(header::HOST, "127.0.0.1:1".parse().unwrap());
    other
        .headers_mut()
        .insert(header::ORIGIN, "http://evil.example".parse().unwrap());
    assert_eq!(send(&app, other).await.status, StatusCode::FORBIDDEN);
    // Logging out needs it too.
    let out = send(&app, post("/ui/logout", &cookies, "")).await;
    assert_eq!(out.status, StatusCode::FORBIDDEN);
    // A login without the cookie the form set.
    let login = send(
        &app,
        post(
            "/ui/login",
            "",
            &format!("csrf={csrf}&username={ADMIN}&password={PASSWORD}"),
        ),
    )
    .await;
    assert_eq!(login.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn a_bad_login_says_why_and_logout_revokes_the_token() {
    let app = app();
    let form = send(&app, get("/ui/login", "")).await;
    let csrf = cookie_value(&form, "cumulo_csrf").unwrap();
    let cookies = format!("cumulo_csrf={csrf}");
    let bad = send(
        &app,
        post(
            "/ui/login",
            &cookies,
            &format!("csrf={csrf}&username={ADMIN}&password=wrong&project={ADMIN}"),
        ),
    )
    .await;
    assert_eq!(bad.status, StatusCode::UNAUTHORIZED);
    assert!(bad.body.contains("role=\"alert\""), "{}", bad.body);
    assert!(cookie_value(&bad, "cumulo_session").is_none());

    let cookies = login(&app).await;
    let overview = send(&app, get("/ui/", &cookies)).await;
    assert_eq!(overview.status, StatusCode::OK, "{}", overview.body);
    assert!(overview.body.contains("Quota use") && overview.body.contains("Recent events"));
    let csrf = sent(&cookies, "cumulo_csrf");
    let out = send(&app, post("/ui/logout", &cookies, &format!("csrf={csrf}"))).await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    assert_eq!(cookie_value(&out, "cumulo_session").as_deref(), Some(""));
    // The old token no longer opens a page.
    let after = send(&app, get("/ui/", &cookies)).await;
    assert_eq!(after.status, StatusCode::SEE_OTHER);
}

#[tokio::test]
async fn names_are_escaped_and_errors_are_shown_in_words() {
    let app = app();
    let cookies = login(&app).await;
    let csrf = sent(&cookies, "cumulo_csrf");
    // A flavor and an image to create from, through the API as the admin.
    let token = sent(&cookies, "cumulo_session");
    let json = |path: &str, body: serde_json::Value| {
        Request::post(path)
            .header(
                "x-auth-token",
                token
                    .replace("%2B", "+")
                    .replace("%2F", "/")
                    .replace("%3D", "="),
            )
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .unwrap()
    };
    let flavor = send(
        &app,
        json(
            "/cumulo/v1/flavors",
            serde_json::json!({"name": "tiny", "vcpus": 1, "memory_mb": 64, "disk_gb": 0}),
        ),
    )
    .await;
    assert!(flavor.status.is_success(), "{}", flavor.body);
    let flavor: serde_json::Value = serde_json::from_str(&flavor.body).unwrap();
    let list = send(&app, get("/ui/instances", &cookies)).await;
    assert_eq!(list.status, StatusCode::OK, "{}", list.body);
    assert!(list.body.contains("tiny"), "the flavor is offered");
    // An unknown image: the Compute API's 400, in words, on the next page.
    let name = "<script>alert(1)</script>";
    let create = send(
        &app,
        post(
            "/ui/instances",
            &cookies,
            &format!(
                "csrf={csrf}&name={}&flavor={}&image=00000000-0000-0000-0000-000000000000&count=1",
                super::call::encode(name),
                flavor["id"]
                    .as_str()
                    .or(flavor["flavor"]["id"].as_str())
                    .unwrap_or("")
            ),
        ),
    )
    .await;
    assert_eq!(create.status, StatusCode::SEE_OTHER);
    let flash = cookie_value(&create, "cumulo_flash").expect("a message for the next page");
    let next = send(
        &app,
        get("/ui/instances", &format!("{cookies}; cumulo_flash={flash}")),
    )
    .await;
    assert!(
        next.body.contains("The instance was not created: "),
        "{}",
        next.body
    );
    assert!(!next.body.contains("<script>alert"), "escaped");
    // The message is cleared once shown.
    assert_eq!(cookie_value(&next, "cumulo_flash").as_deref(), Some(""));
    // An action on no such instance.
    let act = send(
        &app,
        post(
            &format!("/ui/instances/{}/stop", uuid::Uuid::new_v4()),
            &cookies,
            &format!("csrf={csrf}&back=%2Fui%2Finstances"),
        ),
    )
    .await;
    assert_eq!(act.status, StatusCode::SEE_OTHER);
    let flash = cookie_value(&act, "cumulo_flash").unwrap();
    assert!(flash.starts_with('e'), "an error: {flash}");
    // A `back` to elsewhere is not followed.
    let away = send(
        &app,
        post(
            &format!("/ui/instances/{}/stop", uuid::Uuid::new_v4()),
            &cookies,
            &format!("csrf={csrf}&back=%2F%2Fevil.example%2F"),
        ),
    )
    .await;
    assert_eq!(away.headers[header::LOCATION], "/ui/instances");
}

/// A connected node with figures.
fn node(name: &str) -> crate::cluster::Node {
    crate::cluster::Node {
        id: uuid::Uuid::new_v4(),
        kinds: crate::cluster::NodeKinds {
            compute: true,
            network: true,
        },
        status: crate::cluster::NodeStatus::Ready,
        hostname: name.into(),
        zone: ssntp::payload::DEFAULT_ZONE.into(),
        mem_total_mb: 4096,
        mem_available_mb: 1024,
        disk_total_mb: 10_000,
        disk_available_mb: 5_000,
        vcpus_total: 4,
        vcpus_available: 1,
        load: 150,
        instances: 3,
        ips: vec![std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)],
        connected: std::time::SystemTime::now(),
        last_stats: Some(std::time::SystemTime::now()),
    }
}

#[tokio::test]
async fn an_admin_sees_every_page_and_the_nodes_with_their_plots() {
    let app = app();
    let n = node("<b>host1</b>");
    app.cluster.add_node(n.clone());
    app.cluster.add_node(n.clone());
    let cookies = login(&app).await;
    for (path, want) in [
        ("/ui/nodes", "<svg class=\"plot\""),
        ("/ui/nodes/live", "Evacuate"),
        (&format!("/ui/nodes/{}", n.id) as &str, "The last hour"),
        ("/ui/images", "Images"),
        ("/ui/flavors", "Flavors"),
        ("/ui/networks", "CNCIs"),
        ("/ui/tenants", "tenant(s)"),
        ("/ui/events", "Events"),
        ("/ui/traces", "No trace"),
        (
            "/ui/instances?page=4294967295&marker=x&sort=nonsense&name=%ZZ",
            "Instances",
        ),
    ] {
        let page = send(&app, get(path, &cookies)).await;
        assert_eq!(page.status, StatusCode::OK, "{path}: {}", page.body);
        assert!(
            page.body.contains(want),
            "{path}: no {want:?}: {}",
            page.body
        );
        assert!(!page.body.contains("<b>host1"), "{path}: escaped");
    }
    // Evacuate through the form: the node is in maintenance, and says so.
    let csrf = sent(&cookies, "cumulo_csrf");
    let act = send(
        &app,
        post(
            &format!("/ui/nodes/{}/evacuate", n.id),
            &cookies,
            &format!("csrf={csrf}&back=%2Fui%2Fnodes"),
        ),
    )
    .await;
    assert_eq!(act.status, StatusCode::SEE_OTHER);
    assert_eq!(act.headers[header::LOCATION], "/ui/nodes");
    let nodes = send(&app, get("/ui/nodes/live", &cookies)).await;
    assert!(
        nodes.body.contains("maintenance") && nodes.body.contains("Restore"),
        "{}",
        nodes.body
    );
    // A page that does not exist: the dashboard's own 404, with its headers.
    let missing = send(&app, get("/ui/nowhere", &cookies)).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert!(
        missing
            .headers
            .contains_key(header::CONTENT_SECURITY_POLICY)
    );
}

#[tokio::test]
async fn a_message_outlives_live_polls_and_is_cleared_by_its_page() {
    let app = app();
    let cookies = login(&app).await;
    let with = format!("{cookies}; cumulo_flash=eSomething%20failed");
    let live = send(&app, get("/ui/overview/live", &with)).await;
    assert_eq!(live.status, StatusCode::OK);
    assert!(
        cookie_value(&live, "cumulo_flash").is_none(),
        "a live part keeps it"
    );
    let page = send(&app, get("/ui/", &with)).await;
    assert!(page.body.contains("Something failed"));
    assert_eq!(cookie_value(&page, "cumulo_flash").as_deref(), Some(""));
}

#[tokio::test]
async fn a_login_needs_a_project() {
    let app = app();
    let form = send(&app, get("/ui/login", "")).await;
    let csrf = cookie_value(&form, "cumulo_csrf").unwrap();
    let cookies = format!("cumulo_csrf={csrf}");
    let unscoped = send(
        &app,
        post(
            "/ui/login",
            &cookies,
            &format!("csrf={csrf}&username={ADMIN}&password={PASSWORD}&project="),
        ),
    )
    .await;
    assert_eq!(unscoped.status, StatusCode::BAD_REQUEST);
    assert!(unscoped.body.contains("the project are both needed"));
    assert!(cookie_value(&unscoped, "cumulo_session").is_none());
}
