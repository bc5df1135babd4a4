//! Request ids: every request gets one (`req-<UUID>`, as OpenStack services make them), every
//! answer carries it in `X-OpenStack-Request-Id` (and, on the Compute API, also in
//! `X-Compute-Request-Id`, as Nova answers), and the controller's log lines about the request are
//! in a span that names it, so that a client's error report leads to the log.

use axum::extract::Request;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

/// The header every answer carries.
pub const HEADER: &str = "x-openstack-request-id";
/// The one the Compute API's answers carry too.
pub const COMPUTE_HEADER: &str = "x-compute-request-id";

/// A request's id (`req-` and this UUID), in its extensions for the handlers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestId(pub uuid::Uuid);

/// The middleware: an id for the request, in its extensions, its span and its answer's headers.
pub async fn stamp(mut request: Request, next: Next) -> Response {
    let uuid = uuid::Uuid::new_v4();
    let id = format!("req-{uuid}");
    let compute = request.uri().path().starts_with("/compute");
    let span = tracing::info_span!(
        "request",
        id = %id,
        method = %request.method(),
        path = %request.uri().path()
    );
    request.extensions_mut().insert(RequestId(uuid));
    let mut response = next.run(request).instrument(span).await;
    if let Ok(value) = HeaderValue::from_str(&id) {
        let headers = response.headers_mut();
        headers.insert(HEADER, value.clone());
        if compute {
            headers.insert(COMPUTE_HEADER, value);
        }
    }
    response
}
