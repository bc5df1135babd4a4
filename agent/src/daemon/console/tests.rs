//! The node endpoint over real TLS: who may call it, and each resource's answers.

use super::*;
use crate::backend::Power;
use crate::backend::fake::FakeBackend;
use rustls::pki_types::ServerName;
use ssntp_net::TlsIdentity;
use ssntp_net::tls::Expected;
use testkit::TestPki;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[test]
fn requests_are_parsed() {
    let id = Uuid::from_u128(7);
    let path = format!("/v1/instances/{id}/console");
    let get = &Method::GET;
    assert_eq!(parse_request(get, &path, None), Ok((id, DEFAULT_LINES)));
    assert_eq!(parse_request(get, &path, Some("lines=5")), Ok((id, 5)));
    assert_eq!(parse_request(get, &path, Some("lines=0")), Ok((id, 0)));
    assert_eq!(
        parse_request(get, &path, Some("lines=99999999")),
        Ok((id, MAX_LINES))
    );
    let status = |m: &Method, p: &str, q: Option<&str>| parse_request(m, p, q).unwrap_err().0;
    assert_eq!(
        status(get, &path, Some("lines=-1")),
        StatusCode::BAD_REQUEST
    );
    assert_eq!(status(get, &path, Some("lines=x")), StatusCode::BAD_REQUEST);
    assert_eq!(status(get, &path, Some("tail=1")), StatusCode::BAD_REQUEST);
    assert_eq!(
        status(get, "/v1/instances/nope/console", None),
        StatusCode::BAD_REQUEST
    );
    assert_eq!(status(get, "/v1/other", None), StatusCode::NOT_FOUND);
    assert_eq!(
        status(&Method::POST, &path, None),
        StatusCode::METHOD_NOT_ALLOWED
    );
}

struct Endpoint {
    addr: std::net::SocketAddr,
    node: Uuid,
    instance: Uuid,
    backend: Arc<FakeBackend>,
    firewalls: Arc<FakeFirewalls>,
    /// Holds `exports/`, where disk copies are made.
    dir: tempfile::TempDir,
    stop: CancellationToken,
    served: tokio::task::JoinHandle<()>,
}

/// Records firewall updates; answers with what `answers` holds for the instance (else
/// `Ok`).
#[derive(Default)]
struct FakeFirewalls {
    got: std::sync::Mutex<Vec<(Uuid, Firewall)>>,
    answers: std::sync::Mutex<std::collections::HashMap<Uuid, FirewallRefusal>>,
}

impl Firewalls for FakeFirewalls {
    async fn set_firewall(
        &self,
        instance: Uuid,
        firewall: Firewall,
    ) -> Result<(), FirewallRefusal> {
        if let Some(refusal) = self.answers.lock().unwrap().get(&instance) {
            return Err(refusal.clone());
        }
        self.got.lock().unwrap().push((instance, firewall));
        Ok(())
    }
}

/// An endpoint over a fake backend with one started instance, with the agent certificate of
/// `pki` (binding `node`).
async fn endpoint(pki: &TestPki) -> Endpoint {
    let node = Uuid::new_v4();
    let tls = pki
        .identity(Role::AGENT, Some(node))
        .server_config()
        .unwrap();
    let backend = Arc::new(FakeBackend::new());
    let instance = Uuid::new_v4();
    backend.insert(instance, Power::Off);
    backend.start(instance).await.unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let firewalls = Arc::new(FakeFirewalls::default());
    let dir = tempfile::tempdir().unwrap();
    // What an earlier process left is gone when the endpoint starts.
    std::fs::create_dir(dir.path().join("exports")).unwrap();
    std::fs::write(dir.path().join("exports/left.qcow2"), b"x").unwrap();
    let exports = Arc::new(Exports::open(&dir.path().join("exports")).unwrap());
    let served = tokio::spawn(serve(
        listener,
        tls,
        backend.clone(),
        firewalls.clone(),
        exports,
        stop.clone(),
    ));
    Endpoint {
        addr,
        node,
        instance,
        backend,
        firewalls,
        dir,
        stop,
        served,
    }
}

/// One GET as `client`, dialling `name`, expecting the server to be `expected`: the
/// status line and the body, or why the exchange failed.
async fn get(
    addr: std::net::SocketAddr,
    client: &TlsIdentity,
    expected: Expected,
    name: &str,
    target: &str,
) -> Result<(u16, String), String> {
    let request = format!("GET {target} HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n");
    exchange(addr, client, expected, name, request.into_bytes()).await
}

/// One PUT of `body` as `client`.
async fn put(
    addr: std::net::SocketAddr,
    client: &TlsIdentity,
    expected: Expected,
    target: &str,
    body: &[u8],
) -> Result<(u16, String), String> {
    let mut request = format!(
        "PUT {target} HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\
         Content-Type: application/cbor\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    exchange(addr, client, expected, "127.0.0.1", request).await
}

/// Sends `request` as `client` and reads the whole answer: the status and the body.
async fn exchange(
    addr: std::net::SocketAddr,
    client: &TlsIdentity,
    expected: Expected,
    name: &str,
    request: Vec<u8>,
) -> Result<(u16, String), String> {
    let config = client.client_config_for(expected).unwrap();
    let connector = tokio_rustls::TlsConnector::from(config);
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from(name.to_string()).unwrap();
    let mut tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    tls.write_all(&request).await.map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    tls.read_to_end(&mut response)
        .await
        .map_err(|e| e.to_string())?;
    let response = String::from_utf8(response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").ok_or("no header end")?;
    let status = head.split(' ').nth(1).ok_or("no status")?.parse().unwrap();
    Ok((status, body.to_string()))
}

impl Endpoint {
    /// The node's certificate as the controller expects it.
    fn agent(&self) -> Expected {
        Expected {
            role: Role::AGENT,
            uuid: Some(self.node),
        }
    }

    /// The status (and body) of a GET of the instance's console, with `query`.
    async fn fetch(
        &self,
        client: &TlsIdentity,
        expected: Expected,
        name: &str,
        query: &str,
    ) -> Result<(u16, String), String> {
        let target = format!("/v1/instances/{}/console{query}", self.instance);
        get(self.addr, client, expected, name, &target).await
    }

    async fn status(
        &self,
        client: &TlsIdentity,
        expected: Expected,
        name: &str,
    ) -> Result<u16, String> {
        self.fetch(client, expected, name, "").await.map(|r| r.0)
    }

    async fn stop(self) {
        self.stop.cancel();
        self.served.await.unwrap();
    }
}

#[tokio::test]
async fn the_controller_reads_a_console_and_other_clients_are_refused() {
    let pki = TestPki::new();
    let e = endpoint(&pki).await;
    let agent = e.agent();
    let controller = pki.identity(Role::CONTROLLER, Some(Uuid::new_v4()));
    let local = "127.0.0.1";
    assert_eq!(
        e.fetch(&controller, agent, local, "").await,
        Ok((200, "Start\n".to_string()))
    );
    assert_eq!(
        e.fetch(&controller, agent, local, "?lines=0").await,
        Ok((200, String::new()))
    );
    assert_eq!(
        e.fetch(&controller, agent, local, "?lines=-3")
            .await
            .map(|r| r.0),
        Ok(400)
    );
    let unknown = format!("/v1/instances/{}/console", Uuid::new_v4());
    assert_eq!(
        get(e.addr, &controller, agent, local, &unknown)
            .await
            .map(|r| r.0),
        Ok(404)
    );
    // A certificate bound to the node's UUID names it whatever address was dialled.
    assert_eq!(e.status(&controller, agent, "10.9.8.7").await, Ok(200));
    // An agent's certificate is not the controller's.
    let other_agent = pki.identity(Role::AGENT, Some(Uuid::new_v4()));
    let refused = e.fetch(&other_agent, agent, local, "").await.unwrap();
    assert_eq!(refused.0, 403, "{refused:?}");
    assert!(refused.1.contains("controller role"), "{refused:?}");
    // A controller certificate of another CA does not get through the handshake.
    // (It trusts our CA, so that only the server's check can refuse it.)
    let theirs = TestPki::new().leaf(Role::CONTROLLER, None);
    let stranger = TlsIdentity::from_pem(
        pki.leaf(Role::CONTROLLER, None).ca_pem.as_bytes(),
        theirs.cert_pem.as_bytes(),
        theirs.key_pem.as_bytes(),
    )
    .unwrap();
    assert!(e.status(&stranger, agent, local).await.is_err());
    e.stop().await;
}

#[tokio::test]
async fn the_controller_removes_volumes() {
    let pki = TestPki::new();
    let e = endpoint(&pki).await;
    let (agent, local) = (e.agent(), "127.0.0.1");
    let controller = pki.identity(Role::CONTROLLER, None);
    let volume = Uuid::new_v4();
    let send = |method: &str, target: String, who: &TlsIdentity| {
        let request =
            format!("{method} {target} HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n");
        let who = who.clone();
        async move {
            exchange(e.addr, &who, agent, local, request.into_bytes())
                .await
                .unwrap()
        }
    };
    let path = format!("/v1/volumes/{volume}");
    assert_eq!(
        send("DELETE", path.clone(), &controller).await,
        (204, String::new())
    );
    assert_eq!(e.backend.removed_volumes(), vec![volume]);
    let other = pki.identity(Role::AGENT, Some(Uuid::new_v4()));
    assert_eq!(send("DELETE", path.clone(), &other).await.0, 403);
    assert_eq!(send("GET", path, &controller).await.0, 405);
    let bad = "/v1/volumes/nope".to_string();
    assert_eq!(send("DELETE", bad, &controller).await.0, 400);
    assert_eq!(e.backend.removed_volumes(), vec![volume]);
    e.stop().await;
}

#[tokio::test]
async fn the_controller_copies_a_disk_and_nothing_stays_behind() {
    let pki = TestPki::new();
    let e = endpoint(&pki).await;
    let (agent, local) = (e.agent(), "127.0.0.1");
    let controller = pki.identity(Role::CONTROLLER, None);
    let disk = format!("/v1/instances/{}/disk", e.instance);
    let (status, body) = get(e.addr, &controller, agent, local, &disk).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body.as_bytes(), FakeBackend::disk_of(e.instance));
    let exports = e.dir.path().join("exports");
    assert_eq!(
        std::fs::read_dir(&exports).unwrap().count(),
        0,
        "no copy kept"
    );
    let status = |target: String, who: &TlsIdentity| {
        let who = who.clone();
        async move { get(e.addr, &who, agent, local, &target).await.unwrap().0 }
    };
    let unknown = format!("/v1/instances/{}/disk", Uuid::new_v4());
    assert_eq!(status(unknown, &controller).await, 404);
    assert_eq!(status(format!("{disk}?x=1"), &controller).await, 400);
    assert_eq!(
        status("/v1/instances/nope/disk".into(), &controller).await,
        400
    );
    let other_agent = pki.identity(Role::AGENT, Some(Uuid::new_v4()));
    assert_eq!(status(disk.clone(), &other_agent).await, 403);
    let post =
        "POST {disk} HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n".replace("{disk}", &disk);
    let posted = exchange(e.addr, &controller, agent, local, post.into_bytes()).await;
    assert_eq!(posted.map(|r| r.0), Ok(405));
    assert_eq!(std::fs::read_dir(&exports).unwrap().count(), 0);
    e.stop().await;
}

#[tokio::test]
async fn the_controller_checks_the_node_it_dials() {
    let pki = TestPki::new();
    let e = endpoint(&pki).await;
    let controller = pki.identity(Role::CONTROLLER, None);
    let local = "127.0.0.1";
    // Another node's UUID.
    let wrong = Expected {
        uuid: Some(Uuid::new_v4()),
        ..e.agent()
    };
    let err = e.status(&controller, wrong, local).await.unwrap_err();
    assert!(err.contains("binds"), "{err}");
    // A role the agent's certificate lacks.
    let scheduler = Expected {
        role: Role::SCHEDULER,
        ..e.agent()
    };
    let err = e.status(&controller, scheduler, local).await.unwrap_err();
    assert!(err.contains("role"), "{err}");
    // No UUID known: the name dialled must be the certificate's.
    let unknown = Expected {
        uuid: None,
        ..e.agent()
    };
    assert_eq!(e.status(&controller, unknown, local).await, Ok(200));
    assert!(e.status(&controller, unknown, "10.9.8.7").await.is_err());
    e.stop().await;
}

#[tokio::test]
async fn connections_beyond_the_bound_are_closed_until_slots_free_up() {
    let pki = TestPki::new();
    let e = endpoint(&pki).await;
    let controller = pki.identity(Role::CONTROLLER, None);
    // Peers that connect and say nothing hold every slot (each for the handshake timeout).
    let mut idle = Vec::new();
    for _ in 0..MAX_CONNECTIONS {
        idle.push(tokio::net::TcpStream::connect(e.addr).await.unwrap());
    }
    let reached = async |want_ok: bool| {
        let e = &e;
        let controller = &controller;
        testkit::wait_until(Duration::from_secs(5), "the bound to act", || async move {
            e.status(controller, e.agent(), "127.0.0.1").await.is_ok() == want_ok
        })
        .await;
    };
    reached(false).await;
    drop(idle);
    reached(true).await;
    e.stop().await;
}

fn cbor(firewall: &Firewall) -> Vec<u8> {
    let mut out = Vec::new();
    ssntp::payload::cbor::encode_into(firewall, &mut out);
    out
}

#[tokio::test]
async fn the_controller_puts_a_firewall() {
    use ssntp::payload::{FirewallDirection, FirewallRule};
    let pki = TestPki::new();
    let e = endpoint(&pki).await;
    let agent = e.agent();
    let controller = pki.identity(Role::CONTROLLER, None);
    let path = |i: Uuid| format!("/v1/instances/{i}/firewall");
    let firewall = Firewall {
        revision: 4,
        rules: vec![FirewallRule {
            direction: FirewallDirection::Ingress,
            protocol: Some(6),
            port_min: Some(22),
            port_max: Some(22),
            remote: Some(vec!["10.0.0.0/8".parse().unwrap()]),
        }],
    };
    let put_as = async |who: &TlsIdentity, target: &str, body: &[u8]| {
        put(e.addr, who, agent, target, body).await.unwrap()
    };
    assert_eq!(
        put_as(&controller, &path(e.instance), &cbor(&firewall)).await,
        (204, String::new())
    );
    assert_eq!(
        e.firewalls.got.lock().unwrap().clone(),
        vec![(e.instance, firewall.clone())]
    );

    // What the core refuses, as statuses.
    let (gone, bare, broken, busy) = (
        Uuid::new_v4(),
        Uuid::new_v4(),
        Uuid::new_v4(),
        Uuid::new_v4(),
    );
    {
        let mut answers = e.firewalls.answers.lock().unwrap();
        answers.insert(gone, FirewallRefusal::NotFound);
        answers.insert(bare, FirewallRefusal::NoNic);
        answers.insert(
            broken,
            FirewallRefusal::Apply("nft: syntax error\nmore".into()),
        );
        answers.insert(busy, FirewallRefusal::Busy);
    }
    let body = cbor(&firewall);
    assert_eq!(put_as(&controller, &path(gone), &body).await.0, 404);
    assert_eq!(put_as(&controller, &path(bare), &body).await.0, 409);
    assert_eq!(
        put_as(&controller, &path(broken), &body).await,
        (500, "nft: syntax error".to_string())
    );
    assert_eq!(put_as(&controller, &path(busy), &body).await.0, 503);

    // Bodies that are not a good firewall.
    let (status, why) = put_as(&controller, &path(e.instance), b"not cbor").await;
    assert_eq!(status, 400, "{why}");
    let mut backwards = firewall.clone();
    backwards.rules[0].port_min = Some(80);
    let (status, why) = put_as(&controller, &path(e.instance), &cbor(&backwards)).await;
    assert_eq!((status, why.contains("80-22")), (400, true), "{why}");
    let huge = vec![0u8; MAX_BODY_BYTES + 1];
    assert_eq!(put_as(&controller, &path(e.instance), &huge).await.0, 413);
    assert_eq!(e.firewalls.got.lock().unwrap().len(), 1);

    // Other methods, other clients.
    let (status, _) = get(e.addr, &controller, agent, "127.0.0.1", &path(e.instance))
        .await
        .unwrap();
    assert_eq!(status, 405);
    let other_agent = pki.identity(Role::AGENT, Some(Uuid::new_v4()));
    assert_eq!(put_as(&other_agent, &path(e.instance), &body).await.0, 403);
    assert_eq!(e.firewalls.got.lock().unwrap().len(), 1);
    e.stop().await;
}

#[test]
fn routes() {
    let id = Uuid::from_u128(7);
    let fw = format!("/v1/instances/{id}/firewall");
    assert_eq!(route(&Method::PUT, &fw, None), Ok(Route::Firewall(id)));
    let console = format!("/v1/instances/{id}/console");
    assert_eq!(
        route(&Method::GET, &console, None),
        Ok(Route::Console(id, DEFAULT_LINES))
    );
    let status = |m: &Method, p: &str, q: Option<&str>| route(m, p, q).unwrap_err().0;
    assert_eq!(
        status(&Method::POST, &fw, None),
        StatusCode::METHOD_NOT_ALLOWED
    );
    assert_eq!(
        status(&Method::PUT, &console, None),
        StatusCode::METHOD_NOT_ALLOWED
    );
    assert_eq!(
        status(&Method::PUT, "/v1/instances/x/firewall", None),
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        status(&Method::PUT, &fw, Some("a=1")),
        StatusCode::BAD_REQUEST
    );
}
