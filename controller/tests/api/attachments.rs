//! Volumes attached to servers and detached, end to end in process: the Compute API's
//! `os-volume_attachments` and the Block Storage API over the real engine, whose frames a
//! recorder keeps, with the nodes' answers (STATS, ATTACH/DETACH_VOLUME_FAILURE,
//! DELIVERY_FAILURE, INSTANCE_DELETED) fed to the engine as the scheduler would forward them.
//! The engine applies a frame before `handle` returns: no waiting.

use std::ops::Deref;

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use ssntp::Payload;
use ssntp::payload::{
    AttachVolumeFailure, AttachVolumeFailureReason, DeliveryFailure, DeliveryFailureReason,
    InstanceEvent,
};
use store::{Scope, VolumeStatus};
use uuid::Uuid;

use crate::engine_rig::{EngineRig, NODE_A, NODE_B, id_of};
use crate::support::TestTenant;

/// The API over the real engine ([`EngineRig`]), with the helpers of attachments.
struct Rig(EngineRig);

impl Deref for Rig {
    type Target = EngineRig;

    fn deref(&self) -> &EngineRig {
        &self.0
    }
}

impl Rig {
    async fn start() -> Rig {
        Rig(EngineRig::start().await)
    }

    /// A server of the fixture's image, as created (pending): its id.
    async fn launch(&self, token: &str, name: &str) -> Uuid {
        let (status, body) = self
            .create_server(token, name, json!({"imageRef": self.image.id}))
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        id_of(&body, "server")
    }

    /// A server, active on `node` (its STATS lists only it).
    async fn server_on(&self, token: &str, name: &str, node: Uuid) -> Uuid {
        let id = self.launch(token, name).await;
        self.stats(node, &[(id, &[])]);
        let placed = self.store.instance(Scope::All, id).unwrap();
        assert_eq!(placed.node, Some(node));
        assert_eq!(placed.state, store::InstanceState::Active);
        self.out.take();
        id
    }

    /// A volume of `t` of `size` GiB.
    async fn volume(&self, token: &str, t: &TestTenant, size: u32) -> Uuid {
        self.new_volume(token, t, json!({"size": size})).await
    }

    fn status(&self, volume: Uuid) -> VolumeStatus {
        self.store.volume(Scope::All, volume).unwrap().status
    }

    /// An attached volume of `server` on `node`: attached, then reported.
    async fn attached(&self, token: &str, server: Uuid, volume: Uuid, node: Uuid) {
        let (status, body) = self.attach(token, server, volume, None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        self.stats(node, &[(server, &[volume])]);
        assert_eq!(self.status(volume), VolumeStatus::InUse);
        self.out.take();
    }

    /// The events of the server's newest action named `action`: (name, result, traceback).
    async fn action_events(
        &self,
        token: &str,
        server: Uuid,
        action: &str,
    ) -> Vec<(String, Value, Value)> {
        let path = format!("/compute/v2.1/servers/{server}/os-instance-actions");
        let (status, list) = self.client().call(Method::GET, &path, token, None).await;
        assert_eq!(status, StatusCode::OK, "{list}");
        let request = list["instanceActions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["action"] == action)
            .unwrap_or_else(|| panic!("no {action} in {list}"))["request_id"]
            .as_str()
            .unwrap()
            .to_string();
        let (status, one) = self
            .client()
            .call(Method::GET, &format!("{path}/{request}"), token, None)
            .await;
        assert_eq!(status, StatusCode::OK, "{one}");
        one["instanceAction"]["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["event"].as_str().unwrap().to_string(),
                    e["result"].clone(),
                    e["traceback"].clone(),
                )
            })
            .collect()
    }

    async fn stop(self) {
        self.0.stop().await;
    }
}

/// Nova's (and Cinder's) fault name and code of an error body.
fn fault(body: &Value) -> (String, u64) {
    let (key, inner) = body
        .as_object()
        .and_then(|o| o.iter().next())
        .unwrap_or_else(|| panic!("not a fault: {body}"));
    (key.clone(), inner["code"].as_u64().unwrap())
}

#[tokio::test]
async fn attach_is_settled_by_stats_and_detach_too() {
    let r = Rig::start().await;
    let a = r.token(&r.a).await;
    let server = r.server_on(&a, "web", NODE_A).await;
    let v1 = r.volume(&a, &r.a, 2).await;
    let v2 = r.volume(&a, &r.a, 1).await;

    // Attach: 200 with the attachment, the volume attaching, the frame to the server's node.
    let (status, body) = r.attach(&a, server, v1, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let attachment = &body["volumeAttachment"];
    assert_eq!(attachment["id"], v1.to_string());
    assert_eq!(attachment["volumeId"], v1.to_string());
    assert_eq!(attachment["serverId"], server.to_string());
    assert_eq!(attachment["device"], "/dev/vdb");
    assert_eq!(r.status(v1), VolumeStatus::Attaching);
    let shown = r.show_volume(&a, &r.a, v1).await;
    assert_eq!(shown["status"], "attaching");
    let sent = r.out.volume_commands();
    assert_eq!(sent.len(), 1, "{sent:?}");
    let (frame, command) = &sent[0];
    assert_eq!(*frame, "ATTACH_VOLUME");
    assert_eq!(command.instance_uuid, server);
    assert_eq!(command.volume_uuid, v1);
    assert_eq!(command.workload_agent_uuid, NODE_A);
    assert_eq!(command.size_mb, Some(2 * 1024));
    assert_eq!(command.device.as_deref(), Some("vdb"));
    assert_eq!(command.image, None);
    assert!(!command.force);

    // A STATS that lists the server without it changes nothing; one that lists it: in-use, on
    // that node.
    r.stats(NODE_A, &[(server, &[])]);
    assert_eq!(r.status(v1), VolumeStatus::Attaching);
    r.stats(NODE_A, &[(server, &[v1])]);
    let record = r.store.volume(Scope::All, v1).unwrap();
    assert_eq!(record.status, VolumeStatus::InUse);
    assert_eq!(record.node, Some(NODE_A));
    let shown = r.show_volume(&a, &r.a, v1).await;
    assert_eq!(shown["status"], "in-use");
    let attachments = shown["attachments"].as_array().unwrap();
    assert_eq!(attachments.len(), 1, "{shown}");
    let at = &attachments[0];
    assert_eq!(at["server_id"], server.to_string());
    assert_eq!(at["volume_id"], v1.to_string());
    assert_eq!(at["device"], "/dev/vdb");
    assert_eq!(at["host_name"], Value::Null);
    assert_eq!(at["id"], at["attachment_id"]);
    assert!(at["attached_at"].is_string(), "{at}");
    assert_eq!(
        r.action_events(&a, server, "attach_volume").await,
        vec![
            (
                "controller_attach_volume".into(),
                json!("Success"),
                json!(null)
            ),
            ("node_attach_volume".into(), json!("Success"), json!(null)),
        ]
    );

    // The same volume again: 400, as Nova's (not available). A second volume: the next device.
    let (status, body) = r.attach(&a, server, v1, None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(fault(&body), ("badRequest".into(), 400));
    let (status, body) = r.attach(&a, server, v2, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["volumeAttachment"]["device"], "/dev/vdc");
    let sent = r.out.volume_commands();
    assert_eq!(sent[0].1.device.as_deref(), Some("vdc"));
    assert_eq!(sent[0].1.size_mb, Some(1024));
    r.stats(NODE_A, &[(server, &[v1, v2])]);
    assert_eq!(r.status(v2), VolumeStatus::InUse);

    // The server's attachments, by device; one of them; a volume not its own: 404.
    let c = r.client();
    let base = format!("/compute/v2.1/servers/{server}/os-volume_attachments");
    let (status, _, list) = c.send(Method::GET, &base, Some(&a), None).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let devices: Vec<&str> = list["volumeAttachments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["device"].as_str().unwrap())
        .collect();
    assert_eq!(devices, ["/dev/vdb", "/dev/vdc"]);
    let (status, _, one) = c
        .send(Method::GET, &format!("{base}/{v2}"), Some(&a), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{one}");
    assert_eq!(one["volumeAttachment"]["volumeId"], v2.to_string());
    let (status, _, _) = c
        .send(
            Method::GET,
            &format!("{base}/{}", Uuid::new_v4()),
            Some(&a),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // An attached volume is not deleted: Cinder's 400.
    let (status, _, body) = c
        .send(
            Method::DELETE,
            &format!("/volume/v3/{}/volumes/{v1}", r.a.id),
            Some(&a),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["badRequest"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Invalid volume: Volume status must be available or error"),
        "{body}"
    );

    // Detach: 202, detaching, the frame; gone from the STATS: available, detached, still on
    // the node that holds its file.
    let (status, body) = r.detach(&a, server, v1).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(r.status(v1), VolumeStatus::Detaching);
    let sent = r.out.volume_commands();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].0, "DETACH_VOLUME");
    assert_eq!(
        (
            sent[0].1.instance_uuid,
            sent[0].1.volume_uuid,
            sent[0].1.workload_agent_uuid
        ),
        (server, v1, NODE_A)
    );
    assert!(!sent[0].1.force);
    // Still listed (being detached): nothing yet. Again while detaching: 409.
    r.stats(NODE_A, &[(server, &[v1, v2])]);
    assert_eq!(r.status(v1), VolumeStatus::Detaching);
    let (status, _) = r.detach(&a, server, v1).await;
    assert_eq!(status, StatusCode::CONFLICT);
    r.stats(NODE_A, &[(server, &[v2])]);
    let record = r.store.volume(Scope::All, v1).unwrap();
    assert_eq!(record.status, VolumeStatus::Available);
    assert_eq!(record.attachment, None);
    assert_eq!(record.node, Some(NODE_A));
    let shown = r.show_volume(&a, &r.a, v1).await;
    assert_eq!(shown["status"], "available");
    assert_eq!(shown["attachments"], json!([]));
    assert_eq!(
        r.action_events(&a, server, "detach_volume").await,
        vec![
            (
                "controller_detach_volume".into(),
                json!("Success"),
                json!(null)
            ),
            ("node_detach_volume".into(), json!("Success"), json!(null)),
        ]
    );
    // The freed device is given out again.
    let (status, body) = r.attach(&a, server, v1, Some("auto")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["volumeAttachment"]["device"], "/dev/vdb");
    // Not attached to it: 404, as Nova's.
    let other = r.server_on(&a, "other", NODE_B).await;
    let (status, body) = r.detach(&a, other, v2).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    r.stop().await;
}

#[tokio::test]
async fn failures_put_volumes_back_with_their_cause() {
    let r = Rig::start().await;
    let a = r.token(&r.a).await;
    let server = r.server_on(&a, "web", NODE_A).await;
    let v = r.volume(&a, &r.a, 1).await;

    // ATTACH_VOLUME_FAILURE: available, detached; the cause in the action and the event log.
    let (status, body) = r.attach(&a, server, v, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    r.out.take();
    r.frame(Payload::AttachVolumeFailure(
        AttachVolumeFailure::new(
            server,
            v,
            Some(NODE_A),
            AttachVolumeFailureReason::AttachFailure,
        )
        .with_message("libvirt: unable to attach /var/lib/cumulo/volumes/x.qcow2"),
    ));
    let record = r.store.volume(Scope::All, v).unwrap();
    assert_eq!(record.status, VolumeStatus::Available);
    assert_eq!(record.attachment, None);
    assert_eq!(record.node, None);
    let events = r.action_events(&a, server, "attach_volume").await;
    assert_eq!(events[1].0, "node_attach_volume");
    assert_eq!(events[1].1, "Error");
    assert_eq!(
        events[1].2,
        "attach_failure: libvirt: unable to attach /var/lib/cumulo/volumes/x.qcow2"
    );
    let logged = r.store.events(Scope::All, None, 100).unwrap();
    assert!(
        logged
            .iter()
            .any(|e| e.message.contains("unable to attach") && e.message.contains(&v.to_string())),
        "{logged:?}"
    );

    // DELIVERY_FAILURE of the ATTACH_VOLUME: back to available.
    r.attach(&a, server, v, None).await;
    r.frame(Payload::DeliveryFailure(DeliveryFailure {
        operand_type: ssntp::Operand::AttachVolume.to_wire().0,
        operand: ssntp::Operand::AttachVolume.to_wire().1,
        target_uuid: Some(NODE_A),
        reason: DeliveryFailureReason::NodeUnavailable,
    }));
    assert_eq!(r.status(v), VolumeStatus::Available);
    let events = r.action_events(&a, server, "attach_volume").await;
    assert_eq!(events[1].1, "Error");
    assert!(
        events[1].2.as_str().unwrap().contains("node_unavailable"),
        "{events:?}"
    );

    // DETACH_VOLUME_FAILURE and an undelivered DETACH_VOLUME: back to in-use.
    r.attached(&a, server, v, NODE_A).await;
    let (status, _) = r.detach(&a, server, v).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    r.frame(Payload::DetachVolumeFailure(
        AttachVolumeFailure::new(
            server,
            v,
            Some(NODE_A),
            AttachVolumeFailureReason::StateFailure,
        )
        .with_message("the guest did not release vdb"),
    ));
    let record = r.store.volume(Scope::All, v).unwrap();
    assert_eq!(record.status, VolumeStatus::InUse);
    assert_eq!(record.attachment.unwrap().instance, server);
    let events = r.action_events(&a, server, "detach_volume").await;
    assert_eq!(
        events[1].2, "state_failure: the guest did not release vdb",
        "{events:?}"
    );
    r.detach(&a, server, v).await;
    r.frame(Payload::DeliveryFailure(DeliveryFailure {
        operand_type: ssntp::Operand::DetachVolume.to_wire().0,
        operand: ssntp::Operand::DetachVolume.to_wire().1,
        target_uuid: Some(NODE_A),
        reason: DeliveryFailureReason::NodeUnavailable,
    }));
    assert_eq!(r.status(v), VolumeStatus::InUse);

    // A controller without its scheduler: 503, the volume untouched.
    r.out.disconnect();
    let (status, body) = r.detach(&a, server, v).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(r.status(v), VolumeStatus::InUse);
    r.stop().await;
}

#[tokio::test]
async fn attaches_the_rules_refuse() {
    let r = Rig::start().await;
    let a = r.token(&r.a).await;
    let b = r.token(&r.b).await;
    let on_a = r.server_on(&a, "on-a", NODE_A).await;
    let on_b = r.server_on(&a, "on-b", NODE_B).await;
    let v = r.volume(&a, &r.a, 1).await;

    // Pinned to node A by its first attach: a server on node B cannot have it.
    r.attached(&a, on_a, v, NODE_A).await;
    r.detach(&a, on_a, v).await;
    r.stats(NODE_A, &[(on_a, &[])]);
    assert_eq!(r.status(v), VolumeStatus::Available);
    r.out.take();
    let (status, body) = r.attach(&a, on_b, v, None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let message = body["conflictingRequest"]["message"].as_str().unwrap();
    assert!(message.contains(&NODE_A.to_string()), "{message}");
    assert!(r.out.volume_commands().is_empty());

    // Another tenant's volume is unknown; so are an unknown server and volume.
    let theirs = r.volume(&b, &r.b, 1).await;
    let (status, body) = r.attach(&a, on_a, theirs, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(fault(&body), ("itemNotFound".into(), 404));
    let (status, _) = r.attach(&a, on_a, Uuid::new_v4(), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = r.attach(&a, Uuid::new_v4(), v, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Another tenant's server is unknown too.
    let (status, _) = r.attach(&b, on_a, theirs, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = r.detach(&b, on_a, v).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Bad bodies: 400.
    let path = format!("/compute/v2.1/servers/{on_a}/os-volume_attachments");
    for bad in [
        json!({}),
        json!({"volumeAttachment": {"volumeId": "not-a-uuid"}}),
        json!({"volumeAttachment": {"volumeId": v, "device": "/dev/sdb"}}),
        json!({"volumeAttachment": {"volumeId": v, "bogus": 1}}),
    ] {
        let (status, _, body) = r
            .client()
            .send(Method::POST, &path, Some(&a), Some(bad.clone()))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert_eq!(fault(&body), ("badRequest".into(), 400));
    }
    // `tag` and `delete_on_termination` are taken; a device asked for is honoured, and refused
    // when in use.
    let (status, body) = r.attach(&a, on_a, v, Some("/dev/vdd")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["volumeAttachment"]["device"], "/dev/vdd");
    let w = r.volume(&a, &r.a, 1).await;
    let (status, body) = r.attach(&a, on_a, w, Some("vdd")).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let (status, _, body) = r
        .client()
        .send(
            Method::POST,
            &path,
            Some(&a),
            Some(json!({"volumeAttachment": {
                "volumeId": w, "tag": "data", "delete_on_termination": false
            }})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["volumeAttachment"]["device"], "/dev/vdb");

    // A server in a state that cannot take a volume: 409 (a pending one, and a suspended one).
    let pending = r.launch(&a, "pending").await;
    let x = r.volume(&a, &r.a, 1).await;
    let (status, body) = r.attach(&a, pending, x, None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(
        body["conflictingRequest"]["message"]
            .as_str()
            .unwrap()
            .contains("cannot attach a volume"),
        "{body}"
    );
    let current = r.store.instance(Scope::All, on_b).unwrap();
    r.store
        .update_instance(
            Scope::All,
            on_b,
            current.version,
            store::InstanceChange {
                state: Some(store::InstanceState::Suspended),
                ..store::InstanceChange::default()
            },
        )
        .unwrap();
    let (status, _) = r.attach(&a, on_b, x, None).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(r.status(x), VolumeStatus::Available);
    r.stop().await;
}

#[tokio::test]
async fn a_deleted_server_releases_its_volumes() {
    let r = Rig::start().await;
    let a = r.token(&r.a).await;
    let server = r.server_on(&a, "web", NODE_A).await;
    let v1 = r.volume(&a, &r.a, 1).await;
    let v2 = r.volume(&a, &r.a, 1).await;
    r.attached(&a, server, v1, NODE_A).await;
    // v2 is still attaching when the server goes.
    let (status, _) = r.attach(&a, server, v2, None).await;
    assert_eq!(status, StatusCode::OK);

    r.delete_server(&a, server).await;
    // Until the node confirms, the volumes stay attached.
    assert_eq!(r.status(v1), VolumeStatus::InUse);
    r.frame(Payload::InstanceDeleted(InstanceEvent {
        instance_uuid: server,
    }));
    for v in [v1, v2] {
        let record = r.store.volume(Scope::All, v).unwrap();
        assert_eq!(record.status, VolumeStatus::Available, "{v}");
        assert_eq!(record.attachment, None);
    }
    assert_eq!(r.store.volume(Scope::All, v1).unwrap().node, Some(NODE_A));
    // Free to go now.
    let (status, _, body) = r
        .client()
        .send(
            Method::DELETE,
            &format!("/volume/v3/{}/volumes/{v1}", r.a.id),
            Some(&a),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    r.stop().await;
}

#[tokio::test]
async fn admins_detach_by_force() {
    let r = Rig::start().await;
    let a = r.token(&r.a).await;
    let admin = r.admin_token().await;
    let server = r.server_on(&a, "web", NODE_A).await;
    let v = r.volume(&a, &r.a, 1).await;
    // Stuck attaching: the node never lists it.
    let (status, _) = r.attach(&a, server, v, None).await;
    assert_eq!(status, StatusCode::OK);
    r.out.take();
    let force = json!({"os-force_detach": {}});
    let (status, _, body) = r
        .client()
        .send(
            Method::POST,
            &format!("/volume/v3/{}/volumes/{v}/action", r.a.id),
            Some(&a),
            Some(force.clone()),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let admin_project = r.api.admin.project;
    let (status, _, body) = r
        .client()
        .send(
            Method::POST,
            &format!("/volume/v3/{admin_project}/volumes/{v}/action"),
            Some(&admin),
            Some(force.clone()),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(r.status(v), VolumeStatus::Detaching);
    let sent = r.out.volume_commands();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].0, "DETACH_VOLUME");
    assert!(sent[0].1.force);
    r.stats(NODE_A, &[(server, &[])]);
    assert_eq!(r.status(v), VolumeStatus::Available);
    // Attached to nothing: 400.
    let (status, _, body) = r
        .client()
        .send(
            Method::POST,
            &format!("/volume/v3/{admin_project}/volumes/{v}/action"),
            Some(&admin),
            Some(force),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    r.stop().await;
}
