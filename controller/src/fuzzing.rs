//! Fuzz entry point for the REST API: every request parser the API has (paths and their
//! parameters, query strings, JSON bodies, token headers, content types) behind the real router,
//! over a real SQLite store and a [`FakeCluster`]. The property beyond "no panic": no request
//! ever gets a 5xx answer. The target under `fuzz/` is a one-line call to [`rest_request`]; the
//! seed corpus under `fuzz/corpus/rest_request` is replayed by this module's tests.
//!
//! An input is read as: byte 0 the method, byte 1 the route (an index into the paths of the
//! API's own `/openapi.json`), byte 2 flags, then up to three fields split by `\n`: the value
//! put in every `{parameter}` of the path, the query string, and the body (the rest).

// A harness that cannot be built is a broken fuzz target, not an input to tolerate.
#![allow(clippy::expect_used, clippy::panic)]

use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, header};
use tower::ServiceExt;
use uuid::Uuid;

use crate::api::testing::FakeCluster;
use crate::api::{ApiConfig, ApiState, TokenSigner, bootstrap_with, router};
use store::{SqliteStore, Store};

/// The largest response body read back (the API's own answers are far smaller).
const READ_LIMIT: usize = 16 << 20;

/// Methods, indexed by the input's first byte.
const METHODS: [Method; 6] = [
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::PATCH,
    Method::DELETE,
    Method::HEAD,
];

/// The OpenStack-compatible routes, which `/openapi.json` (the native API's document) does not
/// list; the harness adds the native ones from the document.
const OPENSTACK_ROUTES: [&str; 29] = [
    "/",
    "/v3",
    "/v3/auth/tokens",
    "/v3/auth/catalog",
    "/v3/auth/projects",
    "/v3/projects",
    "/v3/projects/{id}",
    "/v3/users",
    "/v3/users/{id}",
    "/v3/users/{id}/projects",
    "/compute",
    "/compute/v2.1",
    "/compute/v2.1/flavors",
    "/compute/v2.1/flavors/detail",
    "/compute/v2.1/flavors/{id}",
    "/compute/v2.1/flavors/{id}/os-extra_specs",
    "/compute/v2.1/limits",
    "/compute/v2.1/servers",
    "/compute/v2.1/servers/detail",
    "/compute/v2.1/servers/{id}",
    "/compute/v2.1/servers/{id}/action",
    "/compute/v2.1/os-availability-zone",
    "/compute/v2.1/os-keypairs",
    "/compute/v2.1/os-keypairs/{name}",
    "/image",
    "/image/versions",
    "/image/v2/images",
    "/image/v2/images/{id}",
    "/metrics",
];

/// Flag bits of the input's third byte.
const AUTH_ADMIN: u8 = 1;
const PARAM_IS_PROJECT: u8 = 2;
const JSON_BODY: u8 = 4;
const AUTH_FROM_INPUT: u8 = 8;

struct Harness {
    rt: tokio::runtime::Runtime,
    router: Router,
    paths: Vec<String>,
    token: String,
    project: Uuid,
}

static HARNESS: OnceLock<Harness> = OnceLock::new();

fn harness() -> &'static Harness {
    HARNESS.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let dir = std::env::temp_dir().join(format!("cumulo-fuzz-rest-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        let store: Arc<dyn Store> =
            Arc::new(SqliteStore::open(dir.join("store.db")).expect("a SQLite store"));
        let admin = bootstrap_with(store.as_ref(), "admin", "fuzz-password", "admin", 1)
            .expect("the admin bootstrapped");
        let signer = TokenSigner::random(Duration::from_secs(3600)).expect("a token key");
        let (token, _) = signer
            .issue(admin.user, admin.project, 0, SystemTime::now())
            .expect("an admin token");
        let cluster = Arc::new(FakeCluster::new(store.clone()));
        let mut config = ApiConfig::new("http://127.0.0.1:1");
        config.password_iterations = 1;
        config.body_limit = 64 << 10;
        let router = router(ApiState::new(store, cluster, signer, config));
        let doc = rt.block_on(async {
            let response = router
                .clone()
                .oneshot(
                    Request::get("/openapi.json")
                        .body(Body::empty())
                        .expect("a request"),
                )
                .await
                .expect("an answer");
            axum::body::to_bytes(response.into_body(), READ_LIMIT)
                .await
                .expect("the document")
        });
        let doc: serde_json::Value = serde_json::from_slice(&doc).expect("JSON");
        let mut paths: Vec<String> = doc["paths"]
            .as_object()
            .expect("paths")
            .keys()
            .cloned()
            .collect();
        paths.extend(OPENSTACK_ROUTES.iter().map(|r| r.to_string()));
        paths.sort();
        Harness {
            rt,
            router,
            paths,
            token,
            project: admin.project,
        }
    })
}

/// `raw` percent-encoded for a path segment or a query (`keep` names the bytes left as they
/// are besides the unreserved ones).
fn encode(raw: &[u8], keep: &[u8]) -> String {
    let mut out = String::with_capacity(raw.len());
    for &b in raw {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) || keep.contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `template` with every `{parameter}` replaced by `value`.
fn fill(template: &str, value: &str) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        match rest[open..].find('}') {
            Some(close) => {
                out.push_str(value);
                rest = &rest[open + close + 1..];
            }
            None => {
                rest = &rest[open..];
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

/// One request built from `data`, sent through the router: it must not panic, and its answer
/// must not be a 5xx.
pub fn rest_request(data: &[u8]) {
    let [m, p, flags, rest @ ..] = data else {
        return;
    };
    let h = harness();
    let method = METHODS[usize::from(*m) % METHODS.len()].clone();
    let template = &h.paths[usize::from(*p) % h.paths.len()];
    let mut fields = rest.splitn(3, |&b| b == b'\n');
    let param = fields.next().unwrap_or_default();
    let query = fields.next().unwrap_or_default();
    let body = fields.next().unwrap_or_default();
    let value = if flags & PARAM_IS_PROJECT != 0 {
        h.project.to_string()
    } else {
        encode(param, b"")
    };
    let mut uri = fill(template, &value);
    if !query.is_empty() {
        uri.push('?');
        uri.push_str(&encode(query, b"=&"));
    }
    let mut request = Request::builder().method(method.clone()).uri(&uri);
    if flags & AUTH_ADMIN != 0 {
        request = request.header("x-auth-token", &h.token);
    } else if flags & AUTH_FROM_INPUT != 0
        && let Ok(value) = header::HeaderValue::from_bytes(param)
    {
        request = request.header("x-auth-token", value);
    }
    if flags & JSON_BODY != 0 {
        request = request.header(header::CONTENT_TYPE, "application/json");
    }
    let Ok(request) = request.body(Body::from(body.to_vec())) else {
        return; // not an HTTP request at all (the URI did not parse): nothing reaches the API
    };
    let status = h.rt.block_on(async {
        let response = h
            .router
            .clone()
            .oneshot(request)
            .await
            .expect("the router is infallible");
        let status = response.status();
        let _ = axum::body::to_bytes(response.into_body(), READ_LIMIT).await;
        status
    });
    if status.is_server_error() {
        panic!("{method} {uri} answered {status}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_replaces_every_parameter() {
        assert_eq!(fill("/a/{x}/b/{y}", "v"), "/a/v/b/v");
        assert_eq!(fill("/a/{x", "v"), "/a/{x");
        assert_eq!(fill("/plain", "v"), "/plain");
    }

    #[test]
    fn encode_escapes_what_is_not_unreserved() {
        assert_eq!(encode(b"a b/%", b""), "a%20b%2F%25");
        assert_eq!(encode(b"k=v&x", b"=&"), "k=v&x");
    }

    /// Key pair bodies and names, good and bad, on `/os-keypairs` and `/os-keypairs/{name}`:
    /// never a 5xx.
    #[test]
    fn key_pair_requests_answer_without_a_5xx() {
        let index = |path: &str| {
            let at = harness().paths.iter().position(|p| p == path).unwrap();
            u8::try_from(at).unwrap()
        };
        let (all, one) = (
            index("/compute/v2.1/os-keypairs"),
            index("/compute/v2.1/os-keypairs/{name}"),
        );
        let bodies: [&[u8]; 8] = [
            br#"{"keypair": {"name": "k1"}}"#,
            br#"{"keypair": {"name": "k2", "public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDqQAmShDSQy5PElKTKfr2Xx0D8ZW+CSzdNTY+7C0SPx"}}"#,
            br#"{"keypair": {"name": "k3", "public_key": "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAAQ=="}}"#,
            br#"{"keypair": {"name": "k4", "public_key": "ecdsa-sha2-nistp521 AAAA"}}"#,
            br#"{"keypair": {"name": "\u0000", "type": []}}"#,
            br#"{"keypair": {"name": "k5", "public_key": "ssh-ed25519 AAAAAAAAAAAAAAAAAAAA"}}"#,
            br#"{"keypair": null}"#,
            br#"{"keypair": {"name": "k6", "user_id": "x", "public_key": ""}}"#,
        ];
        for body in bodies {
            let mut input = vec![1, all, AUTH_ADMIN | JSON_BODY, b'\n', b'\n'];
            input.extend_from_slice(body);
            rest_request(&input);
        }
        for name in [&b"k1"[..], b"k2", b"a/b", b"%00", b"", &[0xff; 300]] {
            for m in [0u8, 4] {
                let mut input = vec![m, one, AUTH_ADMIN];
                input.extend_from_slice(name);
                rest_request(&input);
            }
        }
    }

    /// Replays every committed corpus and crash-regression file.
    #[test]
    fn seed_corpus_replays() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
        let mut n = 0;
        for dir in [
            root.join("corpus/rest_request"),
            root.join("regressions/rest_request"),
        ] {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries {
                let path = entry.unwrap().path();
                rest_request(&std::fs::read(&path).unwrap());
                n += 1;
            }
        }
        assert!(n > 0, "no seed corpus for rest_request");
    }

    /// A few requests through every route with the admin's token: the harness reaches the API.
    #[test]
    fn every_route_answers_without_a_5xx() {
        let routes = u8::try_from(harness().paths.len()).unwrap();
        for p in 0..routes {
            for m in 0..6u8 {
                rest_request(&[
                    m,
                    p,
                    AUTH_ADMIN | PARAM_IS_PROJECT | JSON_BODY,
                    b'\n',
                    b'\n',
                ]);
                rest_request(&[m, p, JSON_BODY, b'x', b'\n', b'\n', b'{']);
            }
        }
    }

    /// Writes the seed corpus: every route with every method (with the admin's token, and
    /// without), and realistic bodies for the routes that create things: `cargo test -p
    /// controller --lib -- --ignored write_seed_corpus` (then commit `fuzz/corpus`).
    #[test]
    #[ignore = "writes files; run by hand to refresh the seed corpus"]
    fn write_seed_corpus() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/rest_request");
        std::fs::create_dir_all(&dir).unwrap();
        let paths = &harness().paths;
        let bodies: [(&str, &str); 7] = [
            (
                "/v3/auth/tokens",
                r#"{"auth":{"identity":{"methods":["password"],"password":{"user":{"name":"admin","domain":{"id":"default"},"password":"fuzz-password"}}},"scope":{"project":{"name":"admin","domain":{"id":"default"}}}}}"#,
            ),
            (
                "/compute/v2.1/servers",
                r#"{"server":{"name":"s","flavorRef":"1","imageRef":"tiny","min_count":2}}"#,
            ),
            (
                "/cumulo/v1/workloads",
                r#"{"name":"w","image":"tiny","vcpus":1,"mem_mb":64,"disk_mb":10}"#,
            ),
            (
                "/compute/v2.1/servers/{server_id}/action",
                r#"{"os-stop":null}"#,
            ),
            (
                "/cumulo/v1/tenants",
                r#"{"name":"t","quota":{"instances":3}}"#,
            ),
            (
                "/cumulo/v1/flavors",
                r#"{"name":"f","vcpus":1,"mem_mb":64,"disk_mb":10}"#,
            ),
            ("/cumulo/v1/instances", r#"{"workload":"w","count":1}"#),
        ];
        let mut n = 0;
        for (p, path) in paths.iter().enumerate() {
            let p = u8::try_from(p).unwrap();
            for m in 0..6u8 {
                let seed = [
                    m,
                    p,
                    AUTH_ADMIN | PARAM_IS_PROJECT | JSON_BODY,
                    b'x',
                    b'\n',
                    b'\n',
                ];
                std::fs::write(dir.join(format!("route-{p:03}-{m}")), seed).unwrap();
                n += 1;
            }
            for (route, body) in bodies {
                if path == route {
                    let mut seed = vec![1, p, AUTH_ADMIN | JSON_BODY, b'x', b'\n', b'\n'];
                    seed.extend_from_slice(body.as_bytes());
                    std::fs::write(dir.join(format!("body-{p:03}")), seed).unwrap();
                    n += 1;
                }
            }
        }
        assert!(n > 0);
    }
}
