//! Three controllers' APIs on one etcd prefix serve one state (the store's shared half, seen
//! through the API): what one creates, the others list; one quota for all.

use std::sync::Arc;

use controller::api::testing::{ADMIN_NAME, ADMIN_PASSWORD, ADMIN_PROJECT, FakeCluster, TestApi};
use serde_json::{Value, json};
use store::{
    CatalogStore, EtcdStore, IdentityStore, ImageKind, NewFlavor, NewImage, NewTenant, NewWorkload,
    Quota, Store, Tenant, Workload,
};
use uuid::Uuid;

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
        &EtcdStore::connect(&[server.endpoint()], &prefix).unwrap(),
        quota,
        1,
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // Three controllers' APIs, each with its own store client (and its own token key).
    let apis: Vec<TestApi> = runtime.block_on(async {
        let mut apis = Vec::new();
        for _ in 0..3 {
            let (endpoint, prefix) = (server.endpoint(), prefix.clone());
            let store: Arc<dyn Store> = tokio::task::spawn_blocking(move || {
                Arc::new(EtcdStore::connect(&[endpoint], &prefix).unwrap()) as Arc<dyn Store>
            })
            .await
            .unwrap();
            let cluster = Arc::new(FakeCluster::new(store.clone()));
            apis.push(TestApi::start(store, cluster, None).await.unwrap());
        }
        apis
    });
    let http: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let login = |url: &str| {
        let body = json!({"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": ADMIN_NAME, "domain": {"name": "Default"}, "password": ADMIN_PASSWORD}}},
            "scope": {"project": {"name": ADMIN_PROJECT, "domain": {"name": "Default"}}}}});
        let response = http
            .post(&format!("{url}/v3/auth/tokens"))
            .send_json(&body)
            .unwrap();
        assert_eq!(response.status().as_u16(), 201);
        response.headers()["x-subject-token"]
            .to_str()
            .unwrap()
            .to_string()
    };
    let tokens: Vec<String> = apis.iter().map(|api| login(&api.url)).collect();
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
