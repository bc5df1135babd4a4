//! The API's one error type, [`ApiError`], and the one place where it becomes an HTTP response.
//!
//! Two body shapes, chosen by the route family (the [`Dialect`] a router layer sets):
//! - identity, image and native routes: `{"error": {"code": 404, "title": "Not Found", "message": "..."}}`
//!   (Keystone's shape);
//! - compute routes: Nova's, keyed by the fault name: `{"itemNotFound": {"code": 404, "message": "..."}}`.
//!
//! Server faults (`Internal`) are logged with their detail and answered with a generic message.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::cluster::ClusterError;
use store::StoreError;

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// Malformed or invalid input (bad JSON, unknown field, unknown flavor or image).
    #[error("{0}")]
    BadRequest(String),
    /// No credentials, or credentials that are expired, forged or no longer valid.
    #[error("{0}")]
    Unauthorized(String),
    /// Authenticated, but not allowed.
    #[error("{0}")]
    Forbidden(String),
    /// No such object, or not one the caller may see.
    #[error("{0}")]
    NotFound(String),
    /// The route exists, the method does not.
    #[error("{0}")]
    MethodNotAllowed(String),
    /// The requested microversion is not one this server implements.
    #[error("{0}")]
    NotAcceptable(String),
    /// A stale version, a duplicate name, an object in use, or a state that forbids the action.
    #[error("{0}")]
    Conflict(String),
    /// The client took too long to send the body.
    #[error("{0}")]
    RequestTimeout(String),
    /// The body is larger than the configured limit.
    #[error("{0}")]
    PayloadTooLarge(String),
    /// The body is of a content type the route does not take.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// The tenant's quota would be exceeded (Nova answers 403).
    #[error("{0}")]
    OverLimit(String),
    /// The cluster cannot take the request now (scheduler unreachable, addresses exhausted).
    #[error("{0}")]
    Unavailable(String),
    /// Over a rate limit (login attempts): 429, with `Retry-After`.
    #[error("{message}")]
    TooManyRequests {
        /// What was limited.
        message: String,
        /// Seconds until an attempt may succeed (at least 1).
        retry_after: u64,
    },
    /// The server is too busy to take the request now (the password hashing queue is full):
    /// 503, with `Retry-After`.
    #[error("{message}")]
    Overloaded {
        /// What is busy.
        message: String,
        /// Seconds to wait before trying again.
        retry_after: u64,
    },
    /// A fault of the server; the detail is logged, never sent.
    #[error("{0}")]
    Internal(String),
}

/// Which error body shape a route family answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dialect {
    /// `{"error": {...}}`: identity, image, native.
    #[default]
    Standard,
    /// Nova's fault names: compute.
    Nova,
}

impl ApiError {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) | ApiError::OverLimit(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::NotAcceptable(_) => StatusCode::NOT_ACCEPTABLE,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::RequestTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Unavailable(_) | ApiError::Overloaded { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ApiError::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The message sent to the client (never the detail of an internal fault).
    pub fn public_message(&self) -> String {
        match self {
            ApiError::Internal(_) => "internal error: see the controller's log".to_string(),
            other => other.to_string(),
        }
    }

    /// Seconds the client should wait before trying again (`Retry-After`), if it should.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            ApiError::TooManyRequests { retry_after, .. }
            | ApiError::Overloaded { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }

    /// Nova's fault name for this error.
    fn nova_key(&self) -> &'static str {
        match self {
            ApiError::BadRequest(_) => "badRequest",
            ApiError::Unauthorized(_) => "unauthorized",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::NotFound(_) => "itemNotFound",
            ApiError::MethodNotAllowed(_) => "methodNotAllowed",
            ApiError::NotAcceptable(_) => "notAcceptable",
            ApiError::Conflict(_) => "conflictingRequest",
            ApiError::RequestTimeout(_) => "requestTimeout",
            ApiError::UnsupportedMediaType(_) => "unsupportedMediaType",
            ApiError::PayloadTooLarge(_)
            | ApiError::OverLimit(_)
            | ApiError::TooManyRequests { .. } => "overLimit",
            ApiError::Unavailable(_) | ApiError::Overloaded { .. } => "serviceUnavailable",
            ApiError::Internal(_) => "computeFault",
        }
    }

    /// The response in `dialect`.
    pub fn render(&self, dialect: Dialect) -> Response {
        let status = self.status();
        if let ApiError::Internal(detail) = self {
            tracing::error!(%detail, "internal error answering a request");
        }
        let message = self.public_message();
        let code = status.as_u16();
        let body = match dialect {
            Dialect::Standard => json!({"error": {
                "code": code,
                "title": status.canonical_reason().unwrap_or("Error"),
                "message": message,
            }}),
            Dialect::Nova => json!({ self.nova_key(): {"code": code, "message": message} }),
        };
        let mut response = (status, axum::Json(body)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Keystone uri=\"/v3\""),
            );
        }
        if let Some(secs) = self.retry_after() {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response.extensions_mut().insert(self.clone());
        response
    }
}

impl IntoResponse for ApiError {
    /// Renders in the standard dialect; the compute router re-renders in Nova's (see
    /// `renderer`).
    fn into_response(self) -> Response {
        self.render(Dialect::Standard)
    }
}

/// A response mapper for a route family: re-renders errors in `dialect`.
pub fn renderer(dialect: Dialect) -> impl Fn(Response) -> Response + Clone + Send + Sync + 'static {
    move |response: Response| match response.extensions().get::<ApiError>() {
        Some(error) if dialect != Dialect::Standard => error.render(dialect),
        _ => response,
    }
}

/// Re-renders the [`ApiError`] an extractor answered with (authentication, bodies, paths) in a
/// route family's own shape (`render`), keeping `WWW-Authenticate` and `Retry-After`. A response
/// that carries no `ApiError`, or one already in that shape (marked with an `M`), passes as it is.
pub(crate) fn rerender<M: Send + Sync + 'static>(
    response: Response,
    render: impl FnOnce(ApiError) -> Response,
) -> Response {
    if response.extensions().get::<M>().is_some() {
        return response;
    }
    let Some(error) = response.extensions().get::<ApiError>().cloned() else {
        return response;
    };
    let mut out = render(error.clone());
    for name in [header::WWW_AUTHENTICATE, header::RETRY_AFTER] {
        if let Some(value) = response.headers().get(&name) {
            out.headers_mut().insert(name, value.clone());
        }
    }
    out.extensions_mut().insert(error);
    out
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> ApiError {
        match error {
            StoreError::NotFound { .. } => ApiError::NotFound(error.to_string()),
            StoreError::Conflict(_) | StoreError::Fenced { .. } => {
                ApiError::Conflict(error.to_string())
            }
            StoreError::QuotaExceeded { .. } => ApiError::OverLimit(error.to_string()),
            StoreError::Exhausted(_) | StoreError::Full(_) => {
                ApiError::Unavailable(error.to_string())
            }
            StoreError::Invalid(_) => ApiError::BadRequest(error.to_string()),
            StoreError::SchemaTooNew { .. } | StoreError::Backend(_) => {
                ApiError::Internal(error.to_string())
            }
            // The controller's own etcd user lacks a permission: a deployment error, not the
            // caller's; logged (as every internal error) with what to fix.
            StoreError::PermissionDenied(_) => ApiError::Internal(format!(
                "the store refused the controller: {error} (give the controller's etcd user the \
                 controller role: `cumulo-controller etcd-setup --controller-user CN`)"
            )),
        }
    }
}

impl From<ClusterError> for ApiError {
    fn from(error: ClusterError) -> ApiError {
        match error {
            ClusterError::Store(store) => store.into(),
            ClusterError::InvalidState { .. } => ApiError::Conflict(error.to_string()),
            ClusterError::NoNode(_) => ApiError::NotFound(error.to_string()),
            ClusterError::Invalid(_) => ApiError::BadRequest(error.to_string()),
            ClusterError::Unavailable(_) => ApiError::Unavailable(error.to_string()),
            ClusterError::NotAvailable(_) | ClusterError::Conflict(_) => {
                ApiError::Conflict(error.to_string())
            }
            ClusterError::OverCapacity { .. } => ApiError::OverLimit(error.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_errors_map_to_statuses() {
        let cases = [
            (StoreError::not_found("instance", "x"), 404),
            (StoreError::Conflict("dup".into()), 409),
            (
                StoreError::QuotaExceeded {
                    what: store::QuotaKind::Instances,
                    limit: 5,
                },
                403,
            ),
            (StoreError::Exhausted("ips".into()), 503),
            (StoreError::Full("database or disk is full".into()), 503),
            (StoreError::Invalid("bad".into()), 400),
            (StoreError::Backend("disk on fire".into()), 500),
            (StoreError::PermissionDenied("etcd user c".into()), 500),
        ];
        for (error, status) in cases {
            assert_eq!(ApiError::from(error).status().as_u16(), status);
        }
    }

    /// A permission the controller's etcd user lacks is the deployment's fault: a 500 whose
    /// detail (logged, not sent) says what to fix.
    #[test]
    fn a_permission_denied_by_the_store_is_an_internal_error_naming_the_fix() {
        let error = ApiError::from(StoreError::PermissionDenied("etcd at e: user c".into()));
        assert_eq!(error.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(!error.public_message().contains("etcd"));
        let ApiError::Internal(detail) = &error else {
            panic!("{error:?}")
        };
        assert!(
            detail.contains("permission denied: etcd at e: user c"),
            "{detail}"
        );
        assert!(detail.contains("etcd-setup"), "{detail}");
    }

    #[test]
    fn console_failures_map_to_conflict_and_unavailable() {
        let off_host =
            ClusterError::NotAvailable("console log not available for off-host instances".into());
        let error = ApiError::from(off_host);
        assert_eq!(error.status(), StatusCode::CONFLICT);
        assert_eq!(
            error.public_message(),
            "console log not available for off-host instances"
        );
        let down = ApiError::from(ClusterError::Unavailable("node x: connect: refused".into()));
        assert_eq!(down.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(down.public_message().contains("connect: refused"));
    }

    #[test]
    fn internal_detail_is_not_sent() {
        let error = ApiError::from(StoreError::Backend("secret path /var/x".into()));
        assert!(!error.public_message().contains("secret"));
    }

    #[tokio::test]
    async fn rate_limits_are_429_in_keystones_shape_with_retry_after() {
        let error = ApiError::TooManyRequests {
            message: "slow down".into(),
            retry_after: 7,
        };
        let response = error.render(Dialect::Standard);
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "7");
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            body,
            json!({"error": {"code": 429, "title": "Too Many Requests", "message": "slow down"}})
        );
        let busy = ApiError::Overloaded {
            message: "busy".into(),
            retry_after: 1,
        }
        .render(Dialect::Nova);
        assert_eq!(busy.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(busy.headers()[header::RETRY_AFTER], "1");
    }

    #[test]
    fn quota_is_nova_over_limit_with_403() {
        let response = ApiError::OverLimit("quota".into()).render(Dialect::Nova);
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
    }
}
