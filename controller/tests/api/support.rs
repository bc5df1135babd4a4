//! The harness of the API tests: a store with a flavor, a public image and two tenants with a
//! member each, the API served on loopback with the fake cluster, and a small HTTP client
//! (hyper over TCP, optionally TLS) that logs in and sends JSON.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::http::{HeaderMap, Method, Request, StatusCode};
use controller::api::password;
use controller::api::testing::{FakeCluster, TEST_ITERATIONS, TestApi};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use store::{
    Flavor, IdentityStore, Image, ImageChange, ImageFile, ImageKind, NewFlavor, NewImage,
    NewTenant, NewUser, Quota, Role, Scope, SqliteStore, Store,
};
use tokio::net::{TcpSocket, TcpStream};
use uuid::Uuid;

/// The password of every test user.
pub const PASSWORD: &str = "pass-word";

/// One test tenant with a member user.
#[derive(Debug, Clone)]
pub struct TestTenant {
    pub id: Uuid,
    pub name: String,
    pub user: Uuid,
    pub user_name: String,
}

/// The API on loopback, with its store, fake cluster and fixtures.
pub struct World {
    pub api: TestApi,
    pub store: Arc<dyn Store>,
    pub cluster: Arc<FakeCluster>,
    pub flavor: Flavor,
    pub image: Image,
    pub a: TestTenant,
    pub b: TestTenant,
    _dir: tempfile::TempDir,
}

pub fn tenant(store: &dyn IdentityStore, name: &str, quota: Quota) -> TestTenant {
    let t = store
        .create_tenant(NewTenant {
            name: name.into(),
            quota,
            subnet_prefix: 24,
        })
        .unwrap();
    let user_name = format!("{name}-user");
    let user = store
        .create_user(NewUser {
            name: user_name.clone(),
            password_hash: password::hash(PASSWORD, TEST_ITERATIONS).unwrap(),
        })
        .unwrap();
    store.grant_role(user.id, t.id, Role::Member).unwrap();
    TestTenant {
        id: t.id,
        name: name.into(),
        user: user.id,
        user_name,
    }
}

/// A SQLite store in a temporary directory with a flavor (`m1.tiny`), a public image
/// (`cirros`) and two tenants (`alpha`, `beta`).
pub struct Seeded {
    pub dir: tempfile::TempDir,
    pub store: Arc<dyn Store>,
    pub flavor: Flavor,
    pub image: Image,
    pub a: TestTenant,
    pub b: TestTenant,
}

pub fn seeded() -> Seeded {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("db")).unwrap());
    let flavor = store
        .create_flavor(NewFlavor {
            name: "m1.tiny".into(),
            vcpus: 1,
            memory_mb: 128,
            disk_gb: 1,
            is_public: true,
        })
        .unwrap();
    let image = store
        .create_image(NewImage {
            owner: None,
            name: "cirros".into(),
            kind: ImageKind::Qcow2,
            reference: "/images/cirros.qcow2".into(),
        })
        .unwrap();
    let a = tenant(store.as_ref(), "alpha", Quota::default());
    let b = tenant(store.as_ref(), "beta", Quota::default());
    Seeded {
        dir,
        store,
        flavor,
        image,
        a,
        b,
    }
}

/// An image whose data was uploaded (`sha512/<hash>`, as `openstack image create --file` leaves
/// it) of `size` bytes, `kind`, of `owner` (public without one), `active`.
pub fn uploaded(
    store: &dyn Store,
    owner: Option<Uuid>,
    name: &str,
    kind: ImageKind,
    size: u64,
) -> Image {
    let hash = format!("{:0128x}", Uuid::new_v4().as_u128());
    let image = store
        .create_image(NewImage {
            owner,
            name: name.into(),
            kind,
            reference: format!("sha512/{hash}"),
        })
        .unwrap();
    store
        .change_image(
            Scope::All,
            image.id,
            ImageChange {
                file: Some(Some(ImageFile {
                    size,
                    md5: "0".repeat(32),
                    sha512: hash,
                })),
                ..ImageChange::default()
            },
        )
        .unwrap()
}

impl World {
    pub async fn start() -> World {
        World::start_tls(None).await
    }

    pub async fn start_tls(tls: Option<Arc<rustls::ServerConfig>>) -> World {
        World::start_with(tls, |_| {}).await
    }

    pub async fn start_with(
        tls: Option<Arc<rustls::ServerConfig>>,
        tune: impl FnOnce(&mut controller::api::ApiConfig),
    ) -> World {
        let Seeded {
            dir,
            store,
            flavor,
            image,
            a,
            b,
        } = seeded();
        let cluster = Arc::new(FakeCluster::new(store.clone()));
        let api = TestApi::start_with(store.clone(), cluster.clone(), tls, tune)
            .await
            .unwrap();
        World {
            api,
            store,
            cluster,
            flavor,
            image,
            a,
            b,
            _dir: dir,
        }
    }

    pub fn client(&self) -> Client {
        Client::plain(self.api.addr)
    }

    /// A plain client whose connections come from `from` (a loopback address: 127.0.0.2...).
    pub fn client_from(&self, from: [u8; 4]) -> Client {
        Client {
            from: Some(IpAddr::from(from)),
            ..self.client()
        }
    }

    /// A token for `user` in `project`.
    pub async fn token(&self, user: &str, password: &str, project: &str) -> String {
        let (status, headers, body) = self.client().login(user, password, project).await;
        assert_eq!(status, StatusCode::CREATED, "login of {user}: {body}");
        headers["x-subject-token"].to_str().unwrap().to_string()
    }

    pub async fn token_a(&self) -> String {
        self.token(&self.a.user_name, PASSWORD, &self.a.name).await
    }

    pub async fn token_b(&self) -> String {
        self.token(&self.b.user_name, PASSWORD, &self.b.name).await
    }

    pub async fn admin_token(&self) -> String {
        use controller::api::testing::{ADMIN_NAME, ADMIN_PASSWORD, ADMIN_PROJECT};
        self.token(ADMIN_NAME, ADMIN_PASSWORD, ADMIN_PROJECT).await
    }

    /// Creates a server in tenant A through the compute API; returns its id.
    pub async fn server_a(&self, token: &str, name: &str) -> String {
        let (status, _, body) = self
            .client()
            .send(
                Method::POST,
                "/compute/v2.1/servers",
                Some(token),
                Some(json!({"server": {"name": name, "flavorRef": self.flavor.id, "imageRef": self.image.id}})),
            )
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        body["server"]["id"].as_str().unwrap().to_string()
    }

    pub async fn stop(self) {
        self.api.stop().await.unwrap();
    }
}

pub fn login_body(user: &str, password: &str, project: &str) -> Value {
    json!({"auth": {
        "identity": {"methods": ["password"], "password": {"user": {
            "name": user, "domain": {"name": "Default"}, "password": password}}},
        "scope": {"project": {"name": project, "domain": {"name": "Default"}}},
    }})
}

/// A TCP connection to `to` from the local address `from`.
pub async fn connect_from(from: IpAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0))?;
    socket.connect(to).await
}

/// An HTTP/1.1 client of one server; one connection per request.
#[derive(Clone)]
pub struct Client {
    pub addr: SocketAddr,
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// The local address connections are bound to (any, if none).
    pub from: Option<IpAddr>,
}

impl Client {
    /// A client of `addr` over plain HTTP, from any local address.
    pub fn plain(addr: SocketAddr) -> Client {
        Client {
            addr,
            tls: None,
            from: None,
        }
    }

    /// `POST /v3/auth/tokens` for `user` with `password` in `project`.
    pub async fn login(
        &self,
        user: &str,
        password: &str,
        project: &str,
    ) -> (StatusCode, HeaderMap, Value) {
        let body = login_body(user, password, project);
        self.send(Method::POST, "/v3/auth/tokens", None, Some(body))
            .await
    }

    /// Sends a JSON request with `token`; returns the status and body (JSON, or a string).
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let (status, _, body) = self.send(method, path, Some(token), body).await;
        (status, body)
    }

    /// Sends a JSON request; returns the status, headers and body (JSON, or a string).
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (StatusCode, HeaderMap, Value) {
        let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        self.raw(method, path, token, bytes).await
    }

    /// Sends raw body bytes (labelled JSON).
    pub async fn raw(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Vec<u8>,
    ) -> (StatusCode, HeaderMap, Value) {
        let headers: Vec<(&str, &str)> = token.map(|t| ("x-auth-token", t)).into_iter().collect();
        self.request(method, path, &headers, body).await
    }

    /// Sends a JSON request with extra headers.
    pub async fn send_with(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Value>,
    ) -> (StatusCode, HeaderMap, Value) {
        let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        self.request(method, path, headers, bytes).await
    }

    /// Sends a request with `headers` and raw body bytes.
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> (StatusCode, HeaderMap, Value) {
        self.try_request(method, path, headers, body).await.unwrap()
    }

    /// As [`Client::request`], with connection and TLS failures as errors.
    pub async fn try_request(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Result<(StatusCode, HeaderMap, Value), String> {
        let e = |e: &dyn std::fmt::Display| e.to_string();
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header("host", self.addr.to_string());
        if !headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("content-type"))
        {
            request = request.header("content-type", "application/json");
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(Full::new(Bytes::from(body))).unwrap();
        let tcp = match self.from {
            None => TcpStream::connect(self.addr).await.map_err(|x| e(&x))?,
            Some(from) => connect_from(from, self.addr).await.map_err(|x| e(&x))?,
        };
        let response = match &self.tls {
            None => {
                let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
                    .await
                    .map_err(|x| e(&x))?;
                tokio::spawn(conn);
                sender.send_request(request).await.map_err(|x| e(&x))?
            }
            Some(config) => {
                let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
                let stream = tokio_rustls::TlsConnector::from(config.clone())
                    .connect(name, tcp)
                    .await
                    .map_err(|x| e(&x))?;
                let (mut sender, conn) =
                    hyper::client::conn::http1::handshake(TokioIo::new(stream))
                        .await
                        .map_err(|x| e(&x))?;
                tokio::spawn(conn);
                sender.send_request(request).await.map_err(|x| e(&x))?
            }
        };
        let (parts, body) = response.into_parts();
        let bytes = body.collect().await.map_err(|x| e(&x))?.to_bytes();
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
        };
        Ok((parts.status, parts.headers, value))
    }
}
