//! The one error type of the API: every failure a handler can meet, answered as
//! `application/problem+json` (RFC 9457) naming the offending field where there is one.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

/// A problem document. `field` names the body field or query parameter at fault.
#[derive(Debug, Serialize, ToSchema)]
pub struct Problem {
    /// A URI naming the kind of problem (`about:blank` style short names here).
    #[serde(rename = "type")]
    pub kind: String,
    pub title: String,
    pub status: u16,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Over a budget: the limit the value was checked against.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<f64>,
    /// Over a budget: the value asked for (or estimated from what was asked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("missing or invalid bearer token")]
    Unauthorized,
    #[error("this role may not do that")]
    Forbidden,
    /// Also what a tenant gets for another tenant's things: existence must not leak.
    #[error("not found")]
    NotFound,
    /// A 404 that names what is missing (the same answer for what the caller may not see).
    #[error("{0}")]
    Missing(String),
    #[error("{field}: {detail}")]
    BadRequest { field: String, detail: String },
    #[error("{field}: {detail}")]
    Invalid { field: String, detail: String },
    #[error("{field}: {detail}")]
    Conflict { field: String, detail: String },
    /// Over a budget (`crate::limits`): a 422 naming the field, the limit and the value.
    #[error("{field}: {detail}")]
    OverLimit { field: String, detail: String, limit: f64, value: f64 },
    /// The database is unreachable: a 503 with `Retry-After`, the client may retry.
    #[error("the database is unavailable, retry shortly")]
    Unavailable,
    #[error("request head (target and headers) larger than {limit} bytes")]
    HeadersTooLarge { limit: usize },
    #[error("body larger than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("expected content type {expected}")]
    UnsupportedMediaType { expected: String },
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    #[error("internal: {0}")]
    Internal(String),
}

impl ApiError {
    pub fn bad(field: impl Into<String>, detail: impl Into<String>) -> Self {
        ApiError::BadRequest { field: field.into(), detail: detail.into() }
    }
    pub fn invalid(field: impl Into<String>, detail: impl Into<String>) -> Self {
        ApiError::Invalid { field: field.into(), detail: detail.into() }
    }
    pub fn conflict(field: impl Into<String>, detail: impl Into<String>) -> Self {
        ApiError::Conflict { field: field.into(), detail: detail.into() }
    }
    /// 404 naming the thing: "no run with id …".
    pub fn missing(what: &str, id: impl std::fmt::Display) -> Self {
        ApiError::Missing(format!("no {what} with id {id}"))
    }

    fn status(&self) -> StatusCode {
        match self {
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden => StatusCode::FORBIDDEN,
            ApiError::NotFound | ApiError::Missing(_) => StatusCode::NOT_FOUND,
            ApiError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            ApiError::Invalid { .. } | ApiError::OverLimit { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Conflict { .. } => StatusCode::CONFLICT,
            ApiError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::HeadersTooLarge { .. } => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ApiError::UnsupportedMediaType { .. } => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Db(_) | ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// Unique constraints by name, the field each one guards and what it names.
const UNIQUE_FIELDS: &[(&str, &str, &str)] = &[
    ("tenants_name_key", "name", "a tenant named"),
    ("models_name_key", "name", "a model named"),
    ("clusters_name_key", "name", "a cluster named"),
    ("plugins_sha256_key", "bytes", "a plugin with SHA-256"),
    ("plugins_name_version_key", "version", "a plugin with name and version"),
];

/// "a tenant named `acme` already exists", from Postgres' "Key (name)=(acme) already exists.".
fn exists_detail(noun: &str, pg_detail: Option<&str>) -> String {
    let value = pg_detail.and_then(|d| d.split_once(")=(")).and_then(|(_, v)| v.rsplit_once(") already exists"));
    match value {
        Some((v, _)) => format!("{noun} `{}` already exists", v.chars().take(80).collect::<String>()),
        None => format!("{noun} this value already exists"),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // A named unique constraint is the client's conflict, not our failure.
        let this = match self {
            ApiError::Db(sqlx::Error::Database(ref e)) if e.is_unique_violation() => {
                let hit = e.constraint().and_then(|c| UNIQUE_FIELDS.iter().find(|(n, _, _)| *n == c));
                let pg = e.try_downcast_ref::<sqlx::postgres::PgDatabaseError>().and_then(|p| p.detail());
                match hit {
                    Some((_, field, noun)) => ApiError::conflict(*field, exists_detail(noun, pg)),
                    None => ApiError::conflict("id", exists_detail("a record with", pg)),
                }
            }
            ApiError::Db(ref e) if is_outage(e) => {
                tracing::warn!(error = %e, "database unavailable");
                ApiError::Unavailable
            }
            other => other,
        };
        let status = this.status();
        let (limit, value) = match &this {
            ApiError::OverLimit { limit, value, .. } => (Some(*limit), Some(*value)),
            ApiError::TooLarge { limit } | ApiError::HeadersTooLarge { limit } => (Some(*limit as f64), None),
            _ => (None, None),
        };
        let (field, detail) = match &this {
            ApiError::BadRequest { field, detail }
            | ApiError::Invalid { field, detail }
            | ApiError::Conflict { field, detail }
            | ApiError::OverLimit { field, detail, .. } => (Some(field.clone()), detail.clone()),
            ApiError::Db(e) => {
                // Internals stay in the log, never in the answer.
                tracing::error!(error = %e, "database error");
                (None, "internal error".to_string())
            }
            ApiError::Internal(e) => {
                tracing::error!(error = %e, "internal error");
                (None, "internal error".to_string())
            }
            // Refusals of the request's framing name the part at fault too.
            ApiError::TooLarge { .. } => (Some("body".to_string()), this.to_string()),
            ApiError::HeadersTooLarge { .. } => (Some("headers".to_string()), this.to_string()),
            ApiError::UnsupportedMediaType { .. } => (Some("content-type".to_string()), this.to_string()),
            other => (None, other.to_string()),
        };
        let problem = Problem {
            kind: status.canonical_reason().unwrap_or("error").to_lowercase().replace(' ', "-"),
            title: status.canonical_reason().unwrap_or("error").to_string(),
            status: status.as_u16(),
            detail,
            field,
            limit,
            value,
        };
        let body = serde_json::to_vec(&problem).expect("a problem always serialises");
        let mut resp = (status, body).into_response();
        resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        if status == StatusCode::SERVICE_UNAVAILABLE {
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_S));
        }
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

/// Seconds a client is told to wait while the database is down.
pub const RETRY_AFTER_S: &str = "2";

/// Whether a database error means the server is unreachable or going away (rather than
/// a statement the server refused): the connection failed, the pool found no live
/// connection in time, or the server is shutting down or starting up (SQLSTATE 57P0x,
/// connection exceptions 08xxx).
pub fn is_outage(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Tls(_) => true,
        sqlx::Error::Protocol(_) | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(d) => d.code().is_some_and(|c| c.starts_with("57P") || c.starts_with("08")),
        _ => false,
    }
}
