//! The dashboard's calls to the REST API, in-process: a request on the API router with the
//! session's token, as a client would send it, and its answer read back as JSON.

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use serde_json::Value;
use tower::ServiceExt;

use crate::api::PeerAddr;

/// The most bytes of an answer the dashboard reads (a console log of 10,000 lines fits).
const ANSWER_LIMIT: usize = 16 << 20;

/// Why a call failed, as the user is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Failed {
    /// The API's status.
    pub status: StatusCode,
    /// The API's message, in words.
    pub message: String,
}

impl Failed {
    /// Whether the session's token was refused (expired, revoked): the user must log in again.
    pub fn logged_out(&self) -> bool {
        self.status == StatusCode::UNAUTHORIZED
    }
}

/// A successful answer.
pub(super) struct Answer {
    pub headers: HeaderMap,
    pub body: Value,
}

/// The API as one session calls it.
#[derive(Clone)]
pub(super) struct Api {
    router: Router,
    token: Option<String>,
    peer: Option<PeerAddr>,
}

impl Api {
    /// Calls on `router` with `token` (none: unauthenticated), from the browser's `peer` address
    /// (login rate limits count by it).
    pub fn new(router: Router, token: Option<String>, peer: Option<PeerAddr>) -> Api {
        Api {
            router,
            token,
            peer,
        }
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Result<Value, Failed> {
        self.call(Method::GET, path, None, &[])
            .await
            .map(|a| a.body)
    }

    /// `POST path` with a JSON body.
    pub async fn post(&self, path: &str, body: Value) -> Result<Answer, Failed> {
        self.call(Method::POST, path, Some(body), &[]).await
    }

    /// `DELETE path`.
    pub async fn delete(&self, path: &str) -> Result<(), Failed> {
        self.call(Method::DELETE, path, None, &[]).await.map(|_| ())
    }

    /// One call: `method path` with `body` and the `extra` headers.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        extra: &[(&'static str, String)],
    ) -> Result<Answer, Failed> {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::ACCEPT, "application/json");
        if let Some(token) = &self.token {
            request = request.header("x-auth-token", token);
        }
        for (name, value) in extra {
            request = request.header(*name, value);
        }
        let body = match body {
            Some(json) => {
                request = request.header(header::CONTENT_TYPE, "application/json");
                Body::from(json.to_string())
            }
            None => Body::empty(),
        };
        let mut request = request.body(body).map_err(|e| Failed {
            status: StatusCode::BAD_REQUEST,
            message: format!("bad request: {e}"),
        })?;
        if let Some(peer) = self.peer {
            request.extensions_mut().insert(peer);
        }
        let response = match self.router.clone().oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        };
        let status = response.status();
        let error = response.extensions().get::<crate::api::ApiError>().cloned();
        let headers = response.headers().clone();
        let bytes = axum::body::to_bytes(response.into_body(), ANSWER_LIMIT)
            .await
            .map_err(|e| Failed {
                status: StatusCode::BAD_GATEWAY,
                message: format!("the API's answer could not be read: {e}"),
            })?;
        let body: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or(Value::Null)
        };
        if status.is_success() {
            return Ok(Answer { headers, body });
        }
        let message = match error {
            Some(error) => error.to_string(),
            None => message_of(&body).unwrap_or_else(|| {
                format!(
                    "{} {}",
                    status.as_u16(),
                    status.canonical_reason().unwrap_or("error")
                )
            }),
        };
        Err(Failed { status, message })
    }
}

/// The message of an error body in any of the API's shapes: `{"error": {"message": ...}}`
/// (Keystone, native) or `{"<fault>": {"message": ...}}` (Nova).
pub(super) fn message_of(body: &Value) -> Option<String> {
    let object = body.as_object()?;
    object
        .values()
        .find_map(|v| v.get("message").and_then(Value::as_str))
        .map(str::to_string)
}

/// `text` escaped for a URL's query or path segment.
pub(super) fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
