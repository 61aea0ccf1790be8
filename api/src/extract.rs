//! Extractors whose rejections are problem documents naming the field: JSON bodies
//! (size-capped before they are read whole, unknown fields refused by the types) and
//! query strings.

use crate::error::ApiError;
use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::{header, request::Parts};
use serde::de::DeserializeOwned;

/// Largest JSON body accepted (an inline scenario is the biggest legitimate one).
pub const JSON_LIMIT: usize = 256 * 1024;

/// A JSON body of type `T`.
pub struct ApiJson<T>(pub T);

/// Reads at most `limit` bytes: a declared length over it is refused before reading,
/// and a body that turns out longer is cut off at the limit.
pub async fn read_body(headers: &axum::http::HeaderMap, body: Body, limit: usize) -> Result<Bytes, ApiError> {
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(ApiError::TooLarge { limit });
    }
    axum::body::to_bytes(body, limit).await.map_err(|_| ApiError::TooLarge { limit })
}

pub fn content_type(headers: &axum::http::HeaderMap) -> String {
    let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase()
}

/// Parses JSON, naming the path of the first bad field (`sla.ttft_ms`) in the error.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let msg = inner.to_string();
        // The path already ends at an unknown field's name; at the top level it is `.`.
        let field = match (path.as_str(), msg.strip_prefix("unknown field `").and_then(|r| r.split('`').next())) {
            (".", Some(f)) => f.to_string(),
            (".", None) => "body".to_string(),
            _ => path,
        };
        if inner.is_syntax() || inner.is_eof() {
            ApiError::bad("body", format!("malformed JSON: {msg}"))
        } else {
            ApiError::invalid(field, msg)
        }
    })
}

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, ApiError> {
        let (parts, body) = req.into_parts();
        let ct = content_type(&parts.headers);
        if ct != "application/json" && !ct.ends_with("+json") {
            return Err(ApiError::UnsupportedMediaType { expected: "application/json".into() });
        }
        let bytes = read_body(&parts.headers, body, JSON_LIMIT).await?;
        // Postgres text and jsonb cannot hold NUL: refuse it here rather than fail there.
        if bytes.windows(6).any(|w| w.eq_ignore_ascii_case(b"\\u0000")) {
            return Err(ApiError::bad("body", "NUL characters (\\u0000) are not accepted"));
        }
        parse_json(&bytes).map(ApiJson)
    }
}

/// A query string of type `T`.
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        let q = parts.uri.query().unwrap_or("");
        if let Some((k, _)) = form_urlencoded::parse(q.as_bytes()).find(|(k, v)| k.contains('\0') || v.contains('\0')) {
            return Err(ApiError::bad(k.replace('\0', ""), "NUL characters are not accepted"));
        }
        let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(q.as_bytes()));
        serde_path_to_error::deserialize(de).map(ApiQuery).map_err(|e| {
            let path = e.path().to_string();
            let msg = e.into_inner().to_string();
            let field = match msg.strip_prefix("unknown field `").and_then(|r| r.split('`').next()) {
                Some(f) => f.to_string(),
                None if path == "." => "query".to_string(),
                None => path,
            };
            ApiError::bad(field, msg)
        })
    }
}

/// Path parameters; a malformed one (an id that is not a UUID) is a 400 naming it.
pub struct ApiPath<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| ApiPath(p.0))
            .map_err(|e| ApiError::bad("id", e.body_text()))
    }
}
