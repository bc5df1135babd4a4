//! Three controllers' APIs on one etcd prefix serve one state (the store's shared half, seen
//! through the API): what one creates, the others list; one quota for all; a token revoked on
//! one is refused by the others.

use std::sync::Arc;
use std::time::Duration;

use controller::api::TokenSigner;
use controller::api::testing::{ADMIN_NAME, ADMIN_PASSWORD, ADMIN_PROJECT, FakeCluster, TestApi};
use serde_json::{Value, json};
use store::{
    CatalogStore, EtcdStore, IdentityStore, ImageKind, NewFlavor, NewImage, NewTenant, NewWorkload,
    Quota, Store, Tenant, Workload,
};
use uuid::Uuid;

use crate::support::login_body;

/// A tenant with `quota` and a public workload of `vcpus` vCPUs.
fn tenant_and_workload(store: &EtcdStore, quota: Quota, vcpus: u32) -> (Tenant, Workload) {
    let tenant = store
        .create_tenant(NewTenant {
            name: "t".into(),
            quota,
            subnet_prefix: 24,
        })
        .unwrap();
    let flavor = store
        .create_flavor(NewFlavor {
            name: format!("f{vcpus}"),
            vcpus,
            memory_mb: 64,
            disk_gb: 1,
            is_public: true,
        })
        .unwrap();
    let image = store
        .create_image(NewImage {
            owner: None,
            name: "i".into(),
            kind: ImageKind::Raw,
            reference: "i.raw".into(),
        })
        .unwrap();
    let workload = store
        .create_workload(NewWorkload {
            owner: None,
            name: "w".into(),
            flavor: flavor.id,
            image: image.id,
            user_data: String::new(),
            ephemeral: false,
        })
        .unwrap();
    (tenant, workload)
}

/// A controller's transport to the test's etcd: TLS with a certificate from its CA
/// (authentication is off on the shared etcd of this binary: any such certificate may do all).
fn tls(server: &testkit::etcd::EtcdServer) -> store::EtcdTransport {
    store::EtcdTransport::Tls(server.identity("cumulo-controller"))
}

/// `n` controllers' APIs on `prefix` of `server`, each with its own store client; with `key`,
/// all sign tokens with it (as controllers sharing a key file), else each with its own.
fn start_apis(
    runtime: &tokio::runtime::Runtime,
    server: &testkit::etcd::EtcdServer,
    prefix: &str,
    n: usize,
    key: Option<[u8; controller::api::token::KEY_LEN]>,
) -> Vec<TestApi> {
    runtime.block_on(async {
        let mut apis = Vec::new();
        for _ in 0..n {
            let (endpoint, prefix) = (server.endpoint(), prefix.to_string());
            let tls = tls(server);
            let store: Arc<dyn Store> = tokio::task::spawn_blocking(move || {
                Arc::new(EtcdStore::connect(&[endpoint], &prefix, &tls).unwrap()) as Arc<dyn Store>
            })
            .await
            .unwrap();
            let cluster = Arc::new(FakeCluster::new(store.clone()));
            let signer = match key {
                Some(key) => TokenSigner::new(&key, Duration::from_secs(3600)),
                None => TokenSigner::random(Duration::from_secs(3600)).unwrap(),
            };
            let api = TestApi::start_signed(store, cluster, None, signer, |_| {});
            apis.push(api.await.unwrap());
        }
        apis
    })
}

/// The admin's token from the API at `url`, logging in with `password`.
fn admin_login(http: &ureq::Agent, url: &str, password: &str) -> String {
    let body = login_body(ADMIN_NAME, password, ADMIN_PROJECT);
    let response = http.post(&format!("{url}/v3/auth/tokens")).send_json(&body);
    let response = response.unwrap();
    assert_eq!(response.status().as_u16(), 201);
    let token = response.headers()["x-subject-token"].to_str().unwrap();
    token.to_string()
}

/// A runtime for the APIs (the test drives them from plain threads).
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn ids(body: &serde_json::Value, key: &str) -> Vec<String> {
    let mut ids: Vec<String> = body[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} in {body}"))
        .iter()
        .map(|item| item["id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

#[test]
fn three_apis_on_one_etcd_serve_the_same_state() {
    let Some(server) = testkit::etcd::shared() else {
        eprintln!("SKIPPED: no etcd");
        return;
    };
    let prefix = format!("/cumulo-test/{}/", Uuid::new_v4());
    let quota = Quota {
        instances: Some(3),
        ..Quota::default()
    };
    let (tenant, workload) = tenant_and_workload(
        &EtcdStore::connect(&[server.endpoint()], &prefix, &tls(&server)).unwrap(),
        quota,
        1,
    );
    let runtime = runtime();
    // Three controllers' APIs, each with its own store client (and its own token key).
    let apis = start_apis(&runtime, &server, &prefix, 3, None);
    let http: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let tokens: Vec<String> = apis
        .iter()
        .map(|api| admin_login(&http, &api.url, ADMIN_PASSWORD))
        .collect();
    let launch = |at: usize, count: u32| {
        let mut response = http
            .post(&format!("{}/cumulo/v1/instances", apis[at].url))
            .header("x-auth-token", &tokens[at])
            .send_json(json!({
                "workload": workload.id, "name": "vm", "count": count, "tenant": tenant.id
            }))
            .unwrap();
        let status = response.status().as_u16();
        let body: Value = response.body_mut().read_json().unwrap_or(Value::Null);
        (status, body)
    };
    let get = |at: usize, path: &str| -> Value {
        let mut response = http
            .get(&format!("{}/cumulo/v1/{path}", apis[at].url))
            .header("x-auth-token", &tokens[at])
            .call()
            .unwrap();
        assert_eq!(response.status().as_u16(), 200, "{path}");
        response.body_mut().read_json().unwrap()
    };
    // Two through the first controller; two more through the second would pass the quota of 3;
    // one through the third fits.
    let (status, first) = launch(0, 2);
    assert_eq!(status, 202, "{first}");
    let (status, refused) = launch(1, 2);
    assert!((400..500).contains(&status), "{status} {refused}");
    assert!(refused.to_string().contains("quota"), "{refused}");
    let (status, third) = launch(2, 1);
    assert_eq!(status, 202, "{third}");
    let mut made = ids(&first, "instances");
    made.extend(ids(&third, "instances"));
    made.sort();
    // Every controller answers the same.
    for at in 0..3 {
        assert_eq!(ids(&get(at, "instances"), "instances"), made, "api {at}");
        assert_eq!(
            ids(&get(at, "tenants"), "tenants"),
            ids(&get(0, "tenants"), "tenants")
        );
    }
    runtime.block_on(async {
        for api in apis {
            api.stop().await.unwrap();
        }
    });
}

/// Two controllers on one etcd prefix with one token key: a token revoked through one is
/// refused by the other at once (401 on use, 404 on validation), and a password changed through
/// one ends the user's tokens on the other; nothing is cached per controller.
#[test]
fn a_token_revoked_on_one_controller_is_refused_by_another() {
    let Some(server) = testkit::etcd::shared() else {
        eprintln!("SKIPPED: no etcd");
        return;
    };
    let prefix = format!("/cumulo-test/{}/", Uuid::new_v4());
    let runtime = runtime();
    let apis = start_apis(&runtime, &server, &prefix, 2, Some([7; 32]));
    let http: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let login = |at: usize, password: &str| admin_login(&http, &apis[at].url, password);
    // What `method` on `path` at controller `at` with `token` (and `subject`) answers.
    let ask = |at: usize, method: &str, path: &str, token: &str, subject: Option<&str>| {
        let url = format!("{}{path}", apis[at].url);
        let response = match (method, subject) {
            ("DELETE", Some(s)) => http
                .delete(&url)
                .header("x-auth-token", token)
                .header("x-subject-token", s)
                .call(),
            (_, Some(s)) => http
                .get(&url)
                .header("x-auth-token", token)
                .header("x-subject-token", s)
                .call(),
            _ => http.get(&url).header("x-auth-token", token).call(),
        };
        response.unwrap().status().as_u16()
    };
    let (first, other) = (login(0, ADMIN_PASSWORD), login(1, ADMIN_PASSWORD));
    assert_eq!(ask(1, "GET", "/cumulo/v1/tenants", &first, None), 200);
    assert_eq!(
        ask(0, "DELETE", "/v3/auth/tokens", &first, Some(&first)),
        204
    );
    assert_eq!(ask(1, "GET", "/cumulo/v1/tenants", &first, None), 401);
    assert_eq!(ask(1, "GET", "/v3/auth/tokens", &other, Some(&first)), 404);
    assert_eq!(ask(1, "GET", "/cumulo/v1/tenants", &other, None), 200);

    // A password change through controller 1 ends the admin's tokens on controller 0.
    let user = apis[0].admin.user;
    let response = http
        .patch(&format!("{}/cumulo/v1/users/{user}", apis[1].url))
        .header("x-auth-token", &other)
        .send_json(json!({"password": "another-pass"}))
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(ask(0, "GET", "/cumulo/v1/tenants", &other, None), 401);
    let fresh = login(1, "another-pass");
    assert_eq!(ask(0, "GET", "/cumulo/v1/tenants", &fresh, None), 200);
    runtime.block_on(async {
        for api in apis {
            api.stop().await.unwrap();
        }
    });
}
