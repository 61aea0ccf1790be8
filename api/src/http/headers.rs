//! What every response carries and what every request is checked for before a handler
//! runs: security headers (a CSP allowing only the app's own assets, no framing, no
//! sniffing, no referrer), a bound on the request head, and the refusal of query
//! parameters an operation does not document (read from the OpenAPI document itself, so
//! the rule and the document cannot drift apart).

use crate::error::ApiError;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderName, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The UI's policy: its own scripts, styles, images and API; nothing inline, no frames.
pub const CSP_APP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; \
     connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; \
     frame-ancestors 'none'";
/// The vendored Swagger UI sets inline styles of its own.
pub const CSP_DOCS: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
     img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'";
/// JSON and problem documents are never rendered.
pub const CSP_API: &str = "default-src 'none'; frame-ancestors 'none'";

/// Adds the security headers to every response.
pub async fn security(req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    let mut resp = next.run(req).await;
    let csp = if path.starts_with("/api/docs") {
        CSP_DOCS
    } else if path.starts_with("/api/") || path == "/healthz" || path == "/readyz" || path == "/metrics" {
        CSP_API
    } else {
        CSP_APP
    };
    let h = resp.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(csp));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(HeaderName::from_static("cross-origin-opener-policy"), HeaderValue::from_static("same-origin"));
    resp
}

/// Refuses a request head (target and headers) over `limit` bytes with a 431.
pub async fn head_limit(State(limit): State<usize>, req: Request, next: Next) -> Response {
    let target = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
    let headers: usize = req.headers().iter().map(|(k, v)| k.as_str().len() + v.len() + 4).sum();
    if target + headers > limit {
        return ApiError::HeadersTooLarge { limit }.into_response();
    }
    next.run(req).await
}

/// Documented query parameters per (method, route template).
#[derive(Debug, Default)]
pub struct QueryParams(HashMap<(Method, String), HashSet<String>>);

impl QueryParams {
    pub fn from_openapi(doc: &utoipa::openapi::OpenApi) -> QueryParams {
        use utoipa::openapi::path::ParameterIn;
        use utoipa::openapi::RefOr;
        let mut map = HashMap::new();
        for (path, item) in &doc.paths.paths {
            let ops = [
                (Method::GET, &item.get),
                (Method::POST, &item.post),
                (Method::PUT, &item.put),
                (Method::PATCH, &item.patch),
                (Method::DELETE, &item.delete),
            ];
            for (method, op) in ops {
                let Some(op) = op else { continue };
                let names = op
                    .parameters
                    .iter()
                    .flatten()
                    .chain(item.parameters.iter().flatten())
                    .filter_map(|p| match p {
                        RefOr::T(p) if matches!(p.parameter_in, ParameterIn::Query) => Some(p.name.clone()),
                        _ => None,
                    })
                    .collect();
                map.insert((method, path.clone()), names);
            }
        }
        QueryParams(map)
    }
}

/// Refuses any query parameter the matched operation does not document (400 naming it).
pub async fn known_query(State(known): State<Arc<QueryParams>>, req: Request, next: Next) -> Response {
    let Some(route) = req.extensions().get::<MatchedPath>().map(|m| m.as_str().to_string()) else {
        return next.run(req).await;
    };
    let method = if req.method() == Method::HEAD { Method::GET } else { req.method().clone() };
    if let (Some(q), Some(allowed)) = (req.uri().query(), known.0.get(&(method, route))) {
        if let Some((k, _)) = form_urlencoded::parse(q.as_bytes()).find(|(k, _)| !allowed.contains(k.as_ref())) {
            let name = crate::text::one_line(&k, 64);
            let mut list: Vec<&str> = allowed.iter().map(String::as_str).collect();
            list.sort();
            let detail = if list.is_empty() {
                format!("unknown query parameter `{name}` (this operation takes none)")
            } else {
                format!("unknown query parameter `{name}` (expected one of: {})", list.join(", "))
            };
            return ApiError::bad(name, detail).into_response();
        }
    }
    next.run(req).await
}
