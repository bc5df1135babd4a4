//! The instance actions log: Compute's `os-instance-actions` (list, show, 404s, tenancy) and the
//! native `GET /instances/{id}/actions`, over the fake cluster (which records actions as the
//! engine does, with no `node_start`).

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::World;

fn actions_path(server: &str) -> String {
    format!("/compute/v2.1/servers/{server}/os-instance-actions")
}

/// Sends a server action and expects 202.
async fn act(w: &World, token: &str, server: &str, body: Value) {
    let (status, _, reply) = w
        .client()
        .send(
            Method::POST,
            &format!("/compute/v2.1/servers/{server}/action"),
            Some(token),
            Some(body),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{reply}");
}

/// Whether `text` is a time as Nova writes action times (`2026-11-30T08:37:56.123000`).
fn is_nova_time(text: &Value) -> bool {
    text.as_str().is_some_and(|t| {
        t.len() == 26 && t.as_bytes()[10] == b'T' && t.as_bytes()[19] == b'.' && !t.ends_with('Z')
    })
}

#[tokio::test]
async fn create_stop_start_leave_three_actions_in_order() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    let server = w.server_a(&a, "vm").await;
    act(&w, &a, &server, json!({"os-stop": null})).await;
    act(&w, &a, &server, json!({"os-start": null})).await;
    // A refused request (it is active already) records nothing.
    let (status, _, _) = c
        .send(
            Method::POST,
            &format!("/compute/v2.1/servers/{server}/action"),
            Some(&a),
            Some(json!({"os-start": null})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);

    let (status, _, body) = c
        .send(Method::GET, &actions_path(&server), Some(&a), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let list = body["instanceActions"].as_array().unwrap();
    let names: Vec<&str> = list.iter().map(|x| x["action"].as_str().unwrap()).collect();
    assert_eq!(names, ["start", "stop", "create"], "newest first");
    let start = &list[0];
    assert_eq!(start["instance_uuid"], server);
    assert_eq!(start["user_id"], w.a.user.to_string());
    assert_eq!(start["project_id"], w.a.id.to_string());
    assert_eq!(start["message"], Value::Null);
    assert!(is_nova_time(&start["start_time"]), "{start}");
    assert!(start["request_id"].as_str().unwrap().starts_with("req-"));
    assert!(start.get("events").is_none(), "the list has no events");
    let mut keys: Vec<&String> = start.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "action",
            "instance_uuid",
            "message",
            "project_id",
            "request_id",
            "start_time",
            "user_id"
        ]
    );

    // Each one with its events and results.
    for (item, event) in
        list.iter()
            .zip(["controller_start", "controller_stop", "controller_create"])
    {
        let request_id = item["request_id"].as_str().unwrap();
        let (status, _, body) = c
            .send(
                Method::GET,
                &format!("{}/{request_id}", actions_path(&server)),
                Some(&a),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let action = &body["instanceAction"];
        assert_eq!(action["request_id"], request_id);
        assert_eq!(action["action"], item["action"]);
        let events = action["events"].as_array().unwrap();
        assert_eq!(events.len(), 1, "{action}");
        assert_eq!(events[0]["event"], event);
        assert_eq!(events[0]["result"], "Success");
        assert_eq!(events[0]["traceback"], Value::Null);
        assert!(is_nova_time(&events[0]["start_time"]), "{action}");
        assert!(is_nova_time(&events[0]["finish_time"]), "{action}");
    }
    w.stop().await;
}

#[tokio::test]
async fn unknown_servers_and_requests_are_404_and_other_projects_see_nothing() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    let b = w.token_b().await;
    let admin = w.admin_token().await;
    let server = w.server_a(&a, "vm").await;
    let unknown = uuid::Uuid::new_v4().to_string();
    for (path, token) in [
        (actions_path(&unknown), &a),
        (actions_path("not-a-uuid"), &a),
        (format!("{}/req-nothing", actions_path(&server)), &a),
        (format!("{}/req-nothing", actions_path(&unknown)), &a),
        // Another project's server does not exist for B.
        (actions_path(&server), &b),
    ] {
        let (status, _, body) = c.send(Method::GET, &path, Some(token), None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
        assert_eq!(body["itemNotFound"]["code"], 404, "{path}: {body}");
    }
    let (_, _, body) = c
        .send(
            Method::GET,
            &format!("{}/req-nothing", actions_path(&server)),
            Some(&a),
            None,
        )
        .await;
    assert_eq!(
        body["itemNotFound"]["message"],
        "Action req-nothing not found"
    );
    let (_, _, body) = c
        .send(Method::GET, &actions_path(&server), Some(&a), None)
        .await;
    let request_id = body["instanceActions"][0]["request_id"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, _, _) = c
        .send(
            Method::GET,
            &format!("{}/{request_id}", actions_path(&server)),
            Some(&b),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Admins see any project's.
    let (status, _, body) = c
        .send(Method::GET, &actions_path(&server), Some(&admin), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["instanceActions"].as_array().unwrap().len(), 1);
    let (status, _, _) = c
        .send(Method::GET, &actions_path(&server), None, None)
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    w.stop().await;
}

#[tokio::test]
async fn a_deleted_servers_actions_stay_readable() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    let server = w.server_a(&a, "vm").await;
    let (status, _, _) = c
        .send(
            Method::DELETE,
            &format!("/compute/v2.1/servers/{server}"),
            Some(&a),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _, _) = c
        .send(
            Method::GET,
            &format!("/compute/v2.1/servers/{server}"),
            Some(&a),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "the record is gone");
    let (status, _, body) = c
        .send(Method::GET, &actions_path(&server), Some(&a), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let names: Vec<&str> = body["instanceActions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["action"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["delete", "create"]);
    let b = w.token_b().await;
    let (status, _, _) = c
        .send(Method::GET, &actions_path(&server), Some(&b), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    w.stop().await;
}

#[tokio::test]
async fn the_native_api_lists_actions_with_their_events() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    let b = w.token_b().await;
    let server = w.server_a(&a, "vm").await;
    let (status, _, _) = c
        .send(
            Method::POST,
            &format!("/cumulo/v1/instances/{server}/restart"),
            Some(&a),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let path = format!("/cumulo/v1/instances/{server}/actions");
    let (status, _, body) = c.send(Method::GET, &path, Some(&a), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let actions = body["actions"].as_array().unwrap();
    assert_eq!(actions.len(), 2);
    let reboot = &actions[0];
    assert_eq!(reboot["action"], "reboot");
    assert_eq!(reboot["instance"], server);
    assert_eq!(reboot["tenant"], w.a.id.to_string());
    assert_eq!(reboot["user"], w.a.user.to_string());
    assert_eq!(reboot["events"][0]["name"], "controller_reboot");
    assert_eq!(reboot["events"][0]["result"], "success");
    assert_eq!(actions[1]["action"], "create");
    for (path, token) in [
        (path.clone(), &b),
        (
            format!("/cumulo/v1/instances/{}/actions", uuid::Uuid::new_v4()),
            &a,
        ),
    ] {
        let (status, _, body) = c.send(Method::GET, &path, Some(token), None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
        assert_eq!(body["error"]["code"], 404, "{body}");
    }
    w.stop().await;
}
