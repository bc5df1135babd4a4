//! `GET /v2/schemas/image`, `/v2/schemas/images`, `/v2/schemas/member` and
//! `/v2/schemas/members`: JSON schemas of what this Image API shows and takes (clients read them
//! to know the fields; free-form properties are strings).

use axum::Json;
use serde_json::{Value, json};

/// The schema of one image.
fn image_schema() -> Value {
    let text = json!({"type": "string", "maxLength": 255});
    let nullable_text = json!({"type": ["null", "string"], "maxLength": 255});
    json!({
        "name": "image",
        "additionalProperties": {"type": "string"},
        "properties": {
            "id": {"type": "string", "readOnly": true,
                "pattern": "^([0-9a-fA-F]){8}-([0-9a-fA-F]){4}-([0-9a-fA-F]){4}-([0-9a-fA-F]){4}-([0-9a-fA-F]){12}$"},
            "name": nullable_text,
            "status": {"type": "string", "readOnly": true,
                "enum": ["queued", "saving", "active", "killed"]},
            "visibility": {"type": "string",
                "enum": ["public", "private", "shared", "community"]},
            "protected": {"type": "boolean"},
            "os_hidden": {"type": "boolean"},
            "checksum": {"type": ["null", "string"], "readOnly": true, "maxLength": 32},
            "os_hash_algo": {"type": ["null", "string"], "readOnly": true, "maxLength": 64},
            "os_hash_value": {"type": ["null", "string"], "readOnly": true, "maxLength": 128},
            "owner": {"type": ["null", "string"], "readOnly": true, "maxLength": 255},
            "size": {"type": ["null", "integer"], "readOnly": true},
            "virtual_size": {"type": ["null", "integer"], "readOnly": true},
            "container_format": {"type": ["null", "string"], "enum": [null, "bare", "aki", "ari", "docker"]},
            "disk_format": {"type": ["null", "string"], "enum": [null, "raw", "qcow2", "iso", "aki", "ari"]},
            "created_at": {"type": "string", "readOnly": true},
            "updated_at": {"type": "string", "readOnly": true},
            "tags": {"type": "array", "items": text},
            "min_ram": {"type": "integer"},
            "min_disk": {"type": "integer"},
            "self": {"type": "string", "readOnly": true},
            "file": {"type": "string", "readOnly": true},
            "schema": {"type": "string", "readOnly": true},
        },
        "links": [
            {"rel": "self", "href": "{self}"},
            {"rel": "enclosure", "href": "{file}"},
            {"rel": "describedby", "href": "{schema}"},
        ],
    })
}

/// `GET /v2/schemas/image`.
pub(super) async fn image() -> Json<Value> {
    Json(image_schema())
}

/// `GET /v2/schemas/images`.
pub(super) async fn images() -> Json<Value> {
    Json(json!({
        "name": "images",
        "properties": {
            "images": {"type": "array", "items": image_schema()},
            "schema": {"type": "string"},
            "first": {"type": "string"},
            "next": {"type": "string"},
        },
        "links": [
            {"rel": "first", "href": "{first}"},
            {"rel": "next", "href": "{next}"},
            {"rel": "describedby", "href": "{schema}"},
        ],
    }))
}

/// The schema of one image member.
fn member_schema() -> Value {
    json!({
        "name": "member",
        "properties": {
            "member_id": {"type": "string",
                "description": "An identifier for the image member (tenantId)"},
            "image_id": {"type": "string", "description": "An identifier for the image",
                "pattern": "^([0-9a-fA-F]){8}-([0-9a-fA-F]){4}-([0-9a-fA-F]){4}-([0-9a-fA-F]){4}-([0-9a-fA-F]){12}$"},
            "created_at": {"type": "string",
                "description": "Date and time of image member creation"},
            "updated_at": {"type": "string",
                "description": "Date and time of last modification of image member"},
            "status": {"type": "string", "description": "The status of this image member",
                "enum": ["pending", "accepted", "rejected"]},
            "schema": {"type": "string", "readOnly": true},
        },
    })
}

/// `GET /v2/schemas/member`.
pub(super) async fn member() -> Json<Value> {
    Json(member_schema())
}

/// `GET /v2/schemas/members`.
pub(super) async fn members() -> Json<Value> {
    Json(json!({
        "name": "members",
        "properties": {
            "members": {"type": "array", "items": member_schema()},
            "schema": {"type": "string"},
        },
        "links": [
            {"rel": "describedby", "href": "{schema}"},
        ],
    }))
}
