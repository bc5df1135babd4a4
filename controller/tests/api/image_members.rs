//! Image members (`visibility: shared`), as Glance shares images: the owner shares, the member
//! sees and boots the image whatever its answer but lists it only once it accepted it; a third
//! project neither sees nor boots it; a removed member loses it; only the owner adds and removes
//! members, only the member answers; members only on shared images, at most 128; community
//! images; the schemas.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use store::{NewTenant, Quota};
use uuid::Uuid;

use crate::images::{create, patch, upload};
use crate::support::{Client, PASSWORD, TestTenant, World, tenant};

/// A shared image world: the API, tokens of projects A (the owner), B (the member) and C (a
/// third project), and an active image of A's.
struct Sharing {
    w: World,
    c: Client,
    a: String,
    b: String,
    third: TestTenant,
    t: String,
    image: String,
}

/// An active image of `token`'s project with `fields` (uploaded data); its id.
async fn active_image(c: &Client, token: &str, fields: Value) -> String {
    let (status, made) = create(c, token, fields).await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let id = made["id"].as_str().unwrap().to_string();
    let (status, body) = upload(c, token, &id, b"shared image data").await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    id
}

async fn set_visibility(
    c: &Client,
    token: &str,
    id: &str,
    visibility: &str,
) -> (StatusCode, Value) {
    let ops = json!([{"op": "replace", "path": "/visibility", "value": visibility}]);
    patch(c, token, id, ops).await
}

/// A project (no users) named `name`, made in the store: its id.
fn project(w: &World, name: &str) -> Uuid {
    w.store
        .create_tenant(NewTenant {
            name: name.into(),
            quota: Quota::default(),
            subnet_prefix: 24,
        })
        .unwrap()
        .id
}

/// The ids `GET /v2/images{query}` lists for `token`.
async fn listed(c: &Client, token: &str, query: &str) -> Vec<String> {
    let path = format!("/image/v2/images{query}");
    let (status, body) = c.call(Method::GET, &path, token, None).await;
    assert_eq!(status, StatusCode::OK, "{query}: {body}");
    body["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap().to_string())
        .collect()
}

impl Sharing {
    async fn start() -> Sharing {
        let w = World::start().await;
        let third = tenant(w.store.as_ref(), "gamma", Quota::default());
        let (a, b) = (w.token_a().await, w.token_b().await);
        let t = w.token(&third.user_name, PASSWORD, &third.name).await;
        let c = w.client();
        let image = active_image(&c, &a, json!({"name": "golden", "disk_format": "qcow2"})).await;
        Sharing {
            w,
            c,
            a,
            b,
            third,
            t,
            image,
        }
    }

    fn members(&self) -> String {
        format!("/image/v2/images/{}/members", self.image)
    }

    fn member(&self, member: impl std::fmt::Display) -> String {
        format!("{}/{member}", self.members())
    }

    async fn send(
        &self,
        m: Method,
        path: &str,
        token: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        self.c.call(m, path, token, body).await
    }

    /// `token` adds the project `member` (its id) to the image.
    async fn add_member(&self, token: &str, member: impl std::fmt::Display) -> (StatusCode, Value) {
        let body = json!({ "member": member.to_string() });
        self.send(Method::POST, &self.members(), token, Some(body))
            .await
    }

    /// `token`'s server create with the image.
    async fn boot(&self, token: &str) -> (StatusCode, Value) {
        self.boot_image(token, &self.image).await
    }

    /// `token`'s server create with image `id`.
    async fn boot_image(&self, token: &str, id: &str) -> (StatusCode, Value) {
        let server =
            json!({"server": {"name": "vm", "flavorRef": self.w.flavor.id, "imageRef": id}});
        self.send(Method::POST, "/compute/v2.1/servers", token, Some(server))
            .await
    }

    /// `GET /v2/schemas/{name}`, which must be there.
    async fn schema(&self, token: &str, name: &str) -> Value {
        let path = format!("/image/v2/schemas/{name}");
        let (status, schema) = self.send(Method::GET, &path, token, None).await;
        assert_eq!(status, StatusCode::OK, "{schema}");
        schema
    }

    /// Whether `GET /v2/images{query}` lists image `id` for `token`.
    async fn lists(&self, token: &str, query: &str, id: &str) -> bool {
        listed(&self.c, token, query).await.iter().any(|i| i == id)
    }

    async fn show(&self, token: &str) -> StatusCode {
        self.show_image(token, &self.image).await.0
    }

    /// `GET /v2/images/{id}` as `token`.
    async fn show_image(&self, token: &str, id: &str) -> (StatusCode, Value) {
        let path = format!("/image/v2/images/{id}");
        self.send(Method::GET, &path, token, None).await
    }

    async fn answer(
        &self,
        token: &str,
        member: impl std::fmt::Display,
        status: &str,
    ) -> (StatusCode, Value) {
        self.send(
            Method::PUT,
            &self.member(member),
            token,
            Some(json!({"status": status})),
        )
        .await
    }
}

#[tokio::test]
async fn an_owner_shares_an_image_its_member_sees_boots_and_lists_once_accepted() {
    let s = Sharing::start().await;
    let (a, b, t) = (&s.a, &s.b, &s.t);
    let (image, b_id) = (s.image.clone(), s.w.b.id);

    // Members only on a shared image: this one is private.
    let (status, body) = s.add_member(a, b_id).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body.to_string().contains("Only shared images have members"),
        "{body}"
    );
    let (status, shared) = set_visibility(&s.c, a, &image, "shared").await;
    assert_eq!(status, StatusCode::OK, "{shared}");
    assert_eq!(shared["visibility"], "shared");
    // Not shared with B yet: B neither sees it nor boots it.
    assert_eq!(s.show(b).await, StatusCode::NOT_FOUND);
    let (status, body) = s.boot(b).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.to_string().contains("could not be found"), "{body}");

    // The owner adds B: pending.
    let (status, member) = s.add_member(a, b_id).await;
    assert_eq!(status, StatusCode::OK, "{member}");
    assert_eq!(member["image_id"], image.as_str());
    assert_eq!(member["member_id"], b_id.to_string());
    assert_eq!(member["status"], "pending");
    assert_eq!(member["schema"], "/v2/schemas/member");
    assert!(
        member["created_at"].is_string() && member["updated_at"].is_string(),
        "{member}"
    );
    let (status, body) = s.add_member(a, b_id).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");

    // Pending, B sees it and boots it, but lists it only when it asks for pending images.
    assert_eq!(s.show(b).await, StatusCode::OK);
    let (status, body) = s.boot(b).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert!(!s.lists(b, "", &image).await);
    assert!(s.lists(b, "?member_status=pending", &image).await);
    assert!(
        s.lists(b, "?visibility=shared&member_status=all", &image)
            .await
    );
    assert!(!s.lists(b, "?visibility=shared", &image).await);
    assert!(s.lists(a, "", &image).await);
    assert!(s.lists(a, "?visibility=shared", &image).await);
    assert!(!s.lists(a, "?visibility=private", &image).await);
    let (status, body) = s
        .send(Method::GET, "/image/v2/images?member_status=maybe", b, None)
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    // The third project sees nothing of it, and boots nothing of it.
    assert_eq!(s.show(t).await, StatusCode::NOT_FOUND);
    let (status, body) = s.boot(t).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.to_string().contains("could not be found"), "{body}");
    assert!(
        !s.lists(t, "?visibility=all&member_status=all", &image)
            .await
    );
    for (m, path) in [
        (Method::GET, s.members()),
        (Method::GET, s.member(b_id)),
        (Method::DELETE, s.member(b_id)),
    ] {
        let (status, body) = s.send(m, &path, t, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
    }
    let (status, body) = s.answer(t, b_id, "accepted").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");

    // The owner lists every member, the member only itself.
    let (status, list) = s.send(Method::GET, &s.members(), a, None).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(list["schema"], "/v2/schemas/members");
    assert_eq!(list["members"], json!([member]));
    let (_, list) = s.send(Method::GET, &s.members(), b, None).await;
    assert_eq!(list["members"], json!([member]));
    let (status, shown) = s.send(Method::GET, &s.member(b_id), b, None).await;
    assert_eq!((status, &shown), (StatusCode::OK, &member));
    let (status, _) = s.send(Method::GET, &s.member(s.w.a.id), b, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = s
        .send(Method::GET, &s.member("not-a-project"), a, None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Only the member answers: not the owner (403), not another project (404).
    let (status, body) = s.answer(a, b_id, "accepted").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, body) = s.answer(b, b_id, "maybe").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = s
        .send(Method::PUT, &s.member(b_id), b, Some(json!({})))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, accepted) = s.answer(b, b_id, "accepted").await;
    assert_eq!(status, StatusCode::OK, "{accepted}");
    assert_eq!(accepted["status"], "accepted");
    assert_eq!(accepted["created_at"], member["created_at"]);

    // Accepted, B lists it (the Image API's default listing and the native API's).
    assert!(s.lists(b, "", &image).await);
    assert!(s.lists(b, "?visibility=shared", &image).await);
    let (_, native) = s.send(Method::GET, "/cumulo/v1/images", b, None).await;
    assert!(native.to_string().contains(&image), "{native}");
    let (_, native) = s.send(Method::GET, "/cumulo/v1/images", t, None).await;
    assert!(!native.to_string().contains(&image), "{native}");

    // The member neither shares it further, nor removes members, nor changes or deletes it.
    let (status, body) = s.add_member(b, s.third.id).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, body) = s.send(Method::DELETE, &s.member(b_id), b, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, body) = set_visibility(&s.c, b, &image, "private").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, body) = s
        .send(
            Method::DELETE,
            &format!("/image/v2/images/{image}"),
            b,
            None,
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");

    // Rejected, B lists it no more, but still sees and boots it.
    let (status, body) = s.answer(b, b_id, "rejected").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(!s.lists(b, "", &image).await);
    assert!(s.lists(b, "?member_status=rejected", &image).await);
    assert_eq!(s.show(b).await, StatusCode::OK);
    let (status, body) = s.boot(b).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");

    // Private again, B sees it no more; shared again, B is a member again.
    let (status, body) = set_visibility(&s.c, a, &image, "private").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(s.show(b).await, StatusCode::NOT_FOUND);
    let (status, _) = s.send(Method::GET, &s.members(), a, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    set_visibility(&s.c, a, &image, "shared").await;
    assert_eq!(s.show(b).await, StatusCode::OK);

    // Removed, B loses it: no show, no boot, no membership.
    let (status, body) = s.send(Method::DELETE, &s.member(b_id), a, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    assert_eq!(s.show(b).await, StatusCode::NOT_FOUND);
    let (status, body) = s.boot(b).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _) = s.send(Method::GET, &s.members(), b, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = s.answer(b, b_id, "accepted").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = s.send(Method::DELETE, &s.member(b_id), a, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, list) = s.send(Method::GET, &s.members(), a, None).await;
    assert_eq!(list["members"], json!([]));

    // An admin manages members of any shared image.
    let admin = s.w.admin_token().await;
    let (status, body) = s.add_member(&admin, b_id).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = s.answer(&admin, b_id, "accepted").await;
    assert_eq!(
        (status, &body["status"]),
        (StatusCode::OK, &json!("accepted")),
        "{body}"
    );
    let (status, _) = s.send(Method::DELETE, &s.member(b_id), &admin, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    s.w.stop().await;
}

#[tokio::test]
async fn members_are_bounded_checked_and_only_on_shared_images() {
    let s = Sharing::start().await;
    let a = &s.a;
    set_visibility(&s.c, a, &s.image, "shared").await;
    // Who can be a member: a project that exists, other than the owner.
    for (member, want) in [
        (json!({}), StatusCode::BAD_REQUEST),
        (json!({"member": ""}), StatusCode::BAD_REQUEST),
        (json!({"member": 5}), StatusCode::BAD_REQUEST),
        (json!({"member": "not-a-project"}), StatusCode::BAD_REQUEST),
        (json!({"member": Uuid::new_v4()}), StatusCode::BAD_REQUEST),
        (json!({"member": s.w.a.id}), StatusCode::BAD_REQUEST),
    ] {
        let (status, body) = s
            .send(Method::POST, &s.members(), a, Some(member.clone()))
            .await;
        assert_eq!(status, want, "{member}: {body}");
    }
    // A project id without hyphens, as Keystone writes them, is one too.
    let simple = s.w.b.id.simple().to_string();
    let (status, body) = s.add_member(a, &simple).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["member_id"], s.w.b.id.to_string());
    let (status, _) = s.send(Method::GET, &s.member(simple), a, None).await;
    assert_eq!(status, StatusCode::OK);

    // At most 128 members (Glance's image_member_quota): 413 past them.
    let (status, _) = s.add_member(a, s.third.id).await;
    assert_eq!(status, StatusCode::OK);
    for n in 2..128 {
        let (status, body) = s.add_member(a, project(&s.w, &format!("p{n}"))).await;
        assert_eq!(status, StatusCode::OK, "member {n}: {body}");
    }
    let (status, body) = s.add_member(a, project(&s.w, "one-more")).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    let (_, list) = s.send(Method::GET, &s.members(), a, None).await;
    assert_eq!(list["members"].as_array().unwrap().len(), 128);

    // A public image (an admin's) and a community one have no members: 403, and 404 for one
    // member (Glance hides it so).
    let admin = s.w.admin_token().await;
    let public = active_image(&s.c, &admin, json!({"name": "pub", "visibility": "public"})).await;
    let community = active_image(&s.c, a, json!({"name": "com", "visibility": "community"})).await;
    for id in [&public, &community] {
        let members = format!("/image/v2/images/{id}/members");
        let (status, body) = s
            .send(
                Method::POST,
                &members,
                &admin,
                Some(json!({"member": s.w.b.id})),
            )
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        let (status, _) = s.send(Method::GET, &members, &admin, None).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        let (status, _) = s
            .send(
                Method::GET,
                &format!("{members}/{}", s.w.b.id),
                &admin,
                None,
            )
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }

    // The schemas.
    let schema = s.schema(a, "member").await;
    assert_eq!(schema["name"], "member");
    assert_eq!(
        schema["properties"]["status"]["enum"],
        json!(["pending", "accepted", "rejected"])
    );
    assert_eq!(s.schema(a, "members").await["name"], "members");
    assert_eq!(
        s.schema(a, "image").await["properties"]["visibility"]["enum"],
        json!(["public", "private", "shared", "community"])
    );
    s.w.stop().await;
}

#[tokio::test]
async fn community_images_are_seen_and_booted_by_all_and_listed_when_asked() {
    let s = Sharing::start().await;
    let (a, b) = (&s.a, &s.b);
    let image = active_image(&s.c, a, json!({"name": "com", "visibility": "community"})).await;
    let (status, shown) = s.show_image(b, &image).await;
    assert_eq!(status, StatusCode::OK, "{shown}");
    assert_eq!(shown["visibility"], "community");
    assert_eq!(shown["owner"], s.w.a.id.to_string());
    // Listed to its owner by default, to others when they ask for community images (or all).
    assert!(s.lists(a, "", &image).await);
    assert!(!s.lists(b, "", &image).await);
    assert!(s.lists(b, "?visibility=community", &image).await);
    assert!(s.lists(b, "?visibility=all", &image).await);
    let (status, body) = s.boot_image(b, &image).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    // Only its owner changes it: back to private, B sees it no more.
    let (status, body) = set_visibility(&s.c, b, &image, "private").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, body) = set_visibility(&s.c, a, &image, "private").await;
    assert_eq!(
        (status, &body["visibility"]),
        (StatusCode::OK, &json!("private")),
        "{body}"
    );
    assert_eq!(s.show_image(b, &image).await.0, StatusCode::NOT_FOUND);
    s.w.stop().await;
}
