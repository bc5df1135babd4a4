//! `GET /openapi.json`: the OpenAPI 3.0 document of the native API.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use super::ApiState;

/// The document.
pub async fn document(State(state): State<ApiState>) -> Json<Value> {
    Json(
        json!({"openapi": "3.0.3", "info": {"title": "cumulo", "version": "1"},
        "servers": [{"url": state.config.public_url}], "paths": {}}),
    )
}
