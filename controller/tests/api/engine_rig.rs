//! The API over the real engine, for the tests that follow the frames it sends: a [`Recorder`]
//! keeps them, and the nodes' answers are fed to the engine as the scheduler forwards them (the
//! engine applies a frame before `handle` returns: no waiting). Two compute nodes, two tenants;
//! each test file wraps [`EngineRig`] with the fixtures and helpers of its own.

use std::sync::{Arc, Mutex};

use axum::http::{Method, StatusCode};
use controller::api::testing::TestApi;
use controller::engine::{Engine, EngineConfig, Outbound, SendFailure};
use serde_json::{Value, json};
use ssntp::Payload;
use ssntp::payload::{
    InstanceStat, InstanceState as Reported, NodeEvent, NodeState, NodeStatus, NodeType, Start,
    Stats, VolumeCommand,
};
use store::{Flavor, Image, Store};
use uuid::Uuid;

use crate::support::{Client, PASSWORD, TestTenant, seeded};

pub const NODE_A: Uuid = Uuid::from_bytes([0xaa; 16]);
pub const NODE_B: Uuid = Uuid::from_bytes([0xbb; 16]);

/// Keeps what the engine sends; can be "disconnected".
#[derive(Default)]
pub struct Recorder {
    sent: Mutex<Vec<Payload>>,
    down: Mutex<bool>,
}

impl Outbound for Recorder {
    fn send(&self, payload: &Payload) -> Result<(), SendFailure> {
        if *self.down.lock().unwrap() {
            return Err(SendFailure::NotConnected);
        }
        self.sent.lock().unwrap().push(payload.clone());
        Ok(())
    }

    fn connected(&self) -> bool {
        !*self.down.lock().unwrap()
    }
}

impl Recorder {
    /// What was sent since the last take.
    pub fn take(&self) -> Vec<Payload> {
        std::mem::take(&mut *self.sent.lock().unwrap())
    }

    /// From now on, sends fail as they do with the scheduler gone.
    pub fn disconnect(&self) {
        *self.down.lock().unwrap() = true;
    }

    /// The STARTs sent since the last take.
    pub fn starts(&self) -> Vec<Start> {
        self.take()
            .into_iter()
            .filter_map(|p| match p {
                Payload::Start(s) => Some(*s),
                _ => None,
            })
            .collect()
    }

    /// The volume commands sent since the last take, with their frame's name.
    pub fn volume_commands(&self) -> Vec<(&'static str, VolumeCommand)> {
        self.take()
            .into_iter()
            .filter_map(|p| match p {
                Payload::AttachVolume(c) => Some(("ATTACH_VOLUME", c)),
                Payload::DetachVolume(c) => Some(("DETACH_VOLUME", c)),
                _ => None,
            })
            .collect()
    }
}

/// The id of the `kind` (`server`, `volume`) a response `body` shows.
pub fn id_of(body: &Value, kind: &str) -> Uuid {
    Uuid::parse_str(body[kind]["id"].as_str().unwrap()).unwrap()
}

/// The API over the real engine (its frames recorded), compute nodes [`NODE_A`] and [`NODE_B`]
/// connected and ready with nothing on them, and the fixtures of [`seeded`].
pub struct EngineRig {
    pub api: TestApi,
    pub store: Arc<dyn Store>,
    pub engine: Arc<Engine>,
    pub out: Arc<Recorder>,
    pub flavor: Flavor,
    /// The fixture's image (registered by reference: a file on the nodes).
    pub image: Image,
    pub a: TestTenant,
    pub b: TestTenant,
    _dir: tempfile::TempDir,
}

impl EngineRig {
    /// The rig, nothing recorded yet.
    pub async fn start() -> EngineRig {
        let seeded = seeded();
        let store = seeded.store;
        let out = Arc::new(Recorder::default());
        let engine = Arc::new(
            Engine::new(
                store.clone(),
                out.clone(),
                EngineConfig::new(Uuid::from_bytes([0xc0; 16])),
            )
            .unwrap(),
        );
        let api = TestApi::start(store.clone(), engine.clone(), None)
            .await
            .unwrap();
        let rig = EngineRig {
            api,
            store,
            engine,
            out,
            flavor: seeded.flavor,
            image: seeded.image,
            a: seeded.a,
            b: seeded.b,
            _dir: seeded.dir,
        };
        for node in [NODE_A, NODE_B] {
            rig.frame(Payload::NodeConnected(NodeEvent {
                node_uuid: node,
                node_type: NodeType::ComputeNode,
            }));
            rig.stats(node, &[]);
        }
        rig.out.take();
        rig
    }

    pub fn client(&self) -> Client {
        Client::plain(self.api.addr)
    }

    /// A token of `t`'s user in `t`.
    pub async fn token(&self, t: &TestTenant) -> String {
        let (status, headers, body) = self.client().login(&t.user_name, PASSWORD, &t.name).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        headers["x-subject-token"].to_str().unwrap().to_string()
    }

    /// A token of the cluster admin.
    pub async fn admin_token(&self) -> String {
        use controller::api::testing::{ADMIN_NAME, ADMIN_PASSWORD, ADMIN_PROJECT};
        let (status, headers, body) = self
            .client()
            .login(ADMIN_NAME, ADMIN_PASSWORD, ADMIN_PROJECT)
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        headers["x-subject-token"].to_str().unwrap().to_string()
    }

    /// Applies a frame as the scheduler forwards it.
    pub fn frame(&self, payload: Payload) {
        self.engine.handle(&payload).unwrap();
    }

    /// A STATS of `node` listing `instances`, active, each with its attached volumes.
    pub fn stats(&self, node: Uuid, instances: &[(Uuid, &[Uuid])]) {
        self.stats_in(node, None, instances);
    }

    /// [`EngineRig::stats`] of a node in `zone`.
    pub fn stats_in(&self, node: Uuid, zone: Option<&str>, instances: &[(Uuid, &[Uuid])]) {
        let stats = Stats {
            node: NodeStatus {
                node_uuid: node,
                hostname: format!("host-{node}"),
                mem_total_mb: 64 * 1024,
                mem_available_mb: 32 * 1024,
                disk_total_mb: 1_000_000,
                disk_available_mb: 500_000,
                vcpus_total: 64,
                vcpus_available: 32,
                load: 1,
                networks: vec![],
                zone: zone.map(String::from),
            },
            status: NodeState::Ready,
            instances: instances
                .iter()
                .map(|(id, volumes)| InstanceStat {
                    instance_uuid: *id,
                    state: Reported::Active,
                    ssh_ip: None,
                    ssh_port: None,
                    memory_usage_mb: 10,
                    disk_usage_mb: 10,
                    cpu_usage: None,
                    volumes: volumes.to_vec(),
                })
                .collect(),
        };
        self.frame(Payload::Stats(Box::new(stats)));
    }

    /// `POST /servers` with `server` (its name and the fixture's flavor added): the status and
    /// the body.
    pub async fn create_server(
        &self,
        token: &str,
        name: &str,
        server: Value,
    ) -> (StatusCode, Value) {
        let mut server = server;
        server["name"] = json!(name);
        server["flavorRef"] = json!(self.flavor.id);
        let body = json!({ "server": server });
        self.client()
            .call(Method::POST, "/compute/v2.1/servers", token, Some(body))
            .await
    }

    /// `GET /servers/{id}`: the server in Nova's shape.
    pub async fn show_server(&self, token: &str, id: Uuid) -> Value {
        let path = format!("/compute/v2.1/servers/{id}");
        let (status, body) = self.client().call(Method::GET, &path, token, None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["server"].clone()
    }

    /// `DELETE /servers/{id}`, which must succeed.
    pub async fn delete_server(&self, token: &str, id: Uuid) {
        let path = format!("/compute/v2.1/servers/{id}");
        let (status, body) = self.client().call(Method::DELETE, &path, token, None).await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    }

    /// `POST /volume/v3/{project}/volumes` with `volume`: the status and the body.
    pub async fn create_volume(
        &self,
        token: &str,
        t: &TestTenant,
        volume: Value,
    ) -> (StatusCode, Value) {
        let path = format!("/volume/v3/{}/volumes", t.id);
        let body = json!({ "volume": volume });
        self.client()
            .call(Method::POST, &path, token, Some(body))
            .await
    }

    /// A volume of `t` with `volume`'s fields, which must be made: its id.
    pub async fn new_volume(&self, token: &str, t: &TestTenant, volume: Value) -> Uuid {
        let (status, body) = self.create_volume(token, t, volume).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        id_of(&body, "volume")
    }

    /// `GET /volume/v3/{project}/volumes/{id}`: the volume in Cinder's shape.
    pub async fn show_volume(&self, token: &str, t: &TestTenant, id: Uuid) -> Value {
        let path = format!("/volume/v3/{}/volumes/{id}", t.id);
        let (status, body) = self.client().call(Method::GET, &path, token, None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["volume"].clone()
    }

    /// `POST /servers/{server}/os-volume_attachments` of `volume` (on `device`, if given).
    pub async fn attach(
        &self,
        token: &str,
        server: Uuid,
        volume: Uuid,
        device: Option<&str>,
    ) -> (StatusCode, Value) {
        let mut attachment = json!({"volumeId": volume});
        if let Some(device) = device {
            attachment["device"] = json!(device);
        }
        let path = format!("/compute/v2.1/servers/{server}/os-volume_attachments");
        let body = json!({ "volumeAttachment": attachment });
        self.client()
            .call(Method::POST, &path, token, Some(body))
            .await
    }

    /// `DELETE /servers/{server}/os-volume_attachments/{volume}`.
    pub async fn detach(&self, token: &str, server: Uuid, volume: Uuid) -> (StatusCode, Value) {
        let path = format!("/compute/v2.1/servers/{server}/os-volume_attachments/{volume}");
        self.client().call(Method::DELETE, &path, token, None).await
    }

    pub async fn stop(self) {
        self.api.stop().await.unwrap();
    }
}
