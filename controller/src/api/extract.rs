//! Request parsing that answers with [`ApiError`]s: JSON bodies (size-limited, malformed or
//! unknown input → 400, too large → 413), query strings, and object ids in paths.
//!
//! Strictness lives in the body types: native request types deny unknown fields; the OpenStack
//! ones ignore fields the CLI sends that cumulo does not use.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use uuid::Uuid;

use super::error::ApiError;

/// How long a client may take to send a body.
const BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// A JSON body of type `T`.
#[derive(Debug, Clone)]
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let read = tokio::time::timeout(BODY_TIMEOUT, Bytes::from_request(request, state));
        let bytes = read
            .await
            .map_err(|_| ApiError::RequestTimeout("the request body came too slowly".into()))?
            .map_err(|rejection| {
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::PayloadTooLarge("the request body is too large".into())
                } else {
                    ApiError::BadRequest(format!("cannot read the request body: {rejection}"))
                }
            })?;
        parse_json(&bytes).map(JsonBody)
    }
}

/// Parses a JSON body, which must be an object; an empty or malformed body, or one of the wrong
/// shape, is a 400.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::BadRequest(
            "a JSON request body is required".into(),
        ));
    }
    let value: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::BadRequest(format!("malformed request body: {e}")))?;
    if !value.is_object() {
        return Err(ApiError::BadRequest(
            "the request body must be a JSON object".into(),
        ));
    }
    serde_json::from_value(value)
        .map_err(|e| ApiError::BadRequest(format!("invalid request body: {e}")))
}

/// For optional body fields that may be absent but not `null`: with `#[serde(default,
/// deserialize_with = "present")]`, absent is `None` and `null` is an error.
pub fn present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}

/// For a field where absent and `null` differ (`#[serde(default, deserialize_with =
/// "nullable")]` on an `Option<Option<T>>`): absent is `None`, `null` is `Some(None)`, a value
/// is `Some(Some(value))`.
pub fn nullable<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    <Option<T> as serde::Deserialize>::deserialize(deserializer).map(Some)
}

/// As [`present`], for a nested object: anything but a JSON object (an array, `null`) is an
/// error.
pub fn present_object<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: DeserializeOwned,
{
    use serde::Deserialize;
    let value = serde_json::Value::deserialize(deserializer)?;
    if !value.is_object() {
        return Err(serde::de::Error::custom("expected a JSON object"));
    }
    serde_json::from_value(value)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

/// A query string parsed into `T` (unknown parameters are ignored unless `T` denies them).
#[derive(Debug, Clone)]
pub struct QueryParams<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        let query = parts.uri.query().unwrap_or("");
        serde_urlencoded_parse(query).map(QueryParams)
    }
}

fn serde_urlencoded_parse<T: DeserializeOwned>(query: &str) -> Result<T, ApiError> {
    axum::extract::Query::<T>::try_from_uri(
        &format!("/?{query}")
            .parse()
            .map_err(|_| ApiError::BadRequest("malformed query string".into()))?,
    )
    .map(|q| q.0)
    .map_err(|e| ApiError::BadRequest(format!("bad query string: {}", e.body_text())))
}

/// Path parameters; a path that cannot be read (not UTF-8) names no object (404).
#[derive(Debug, Clone)]
pub struct PathParams<T>(pub T);

impl<T, S> FromRequestParts<S> for PathParams<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| PathParams(p.0))
            .map_err(|_| ApiError::NotFound(format!("no resource at {}", parts.uri.path())))
    }
}

/// The object `id` of `kind` named in a path: a text that is not a UUID names no object (404,
/// as Nova answers).
pub fn path_id(kind: &str, id: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(id).map_err(|_| ApiError::NotFound(format!("{kind} {id} not found")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Strict {
        #[allow(dead_code)]
        name: String,
    }

    #[test]
    fn bodies_are_checked() {
        assert!(parse_json::<Strict>(br#"{"name":"a"}"#).is_ok());
        for bad in [
            &b""[..],
            b"  ",
            b"{",
            b"[]",
            br#"{"name":1}"#,
            br#"{"name":"a","x":1}"#,
        ] {
            let error = parse_json::<Strict>(bad).unwrap_err();
            assert_eq!(error.status(), StatusCode::BAD_REQUEST, "{bad:?}");
        }
    }

    #[derive(Debug, serde::Deserialize)]
    struct Optional {
        #[serde(default, deserialize_with = "present")]
        count: Option<u32>,
    }

    #[test]
    fn optional_fields_may_be_absent_but_not_null() {
        assert_eq!(parse_json::<Optional>(b"{}").unwrap().count, None);
        assert_eq!(
            parse_json::<Optional>(br#"{"count":2}"#).unwrap().count,
            Some(2)
        );
        assert!(parse_json::<Optional>(br#"{"count":null}"#).is_err());
        assert!(parse_json::<Optional>(b"[1]").is_err());
    }

    #[derive(Debug, serde::Deserialize)]
    struct Outer {
        #[serde(default, deserialize_with = "present_object")]
        inner: Option<Strict>,
    }

    #[test]
    fn nested_objects_must_be_objects() {
        assert!(
            parse_json::<Outer>(br#"{"inner":{"name":"a"}}"#)
                .unwrap()
                .inner
                .is_some()
        );
        for bad in [
            &br#"{"inner":["a"]}"#[..],
            br#"{"inner":null}"#,
            br#"{"inner":{"name":"a","x":1}}"#,
        ] {
            assert!(parse_json::<Outer>(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn path_ids_that_are_not_uuids_are_not_found() {
        assert_eq!(
            path_id("server", "../etc").unwrap_err().status(),
            StatusCode::NOT_FOUND
        );
        assert!(path_id("server", &Uuid::new_v4().to_string()).is_ok());
    }
}
