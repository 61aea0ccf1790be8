//! The web UI's built assets at `/`, with the SPA's index for client-side routes; a page
//! saying how to build them when they are missing. Unknown `/api` paths get a problem.

use crate::error::ApiError;
use axum::http::{StatusCode, Uri};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::path::Path;
use tower_http::services::{ServeDir, ServeFile};

const NOT_BUILT: &str = "<!doctype html><meta charset=utf-8><title>SliceScheduler</title>\
<h1>SliceScheduler</h1><p>The web UI is not built. Build it with \
<code>(cd web &amp;&amp; npm ci &amp;&amp; npm run build)</code> (or run <code>bash scripts/demo.sh</code>) \
and reload. The API is at <a href=\"/api/docs\">/api/docs</a>.</p>";

pub fn service(dir: &Path) -> Router {
    let api_404 = get(api_not_found).post(api_not_found).put(api_not_found).delete(api_not_found);
    let router = Router::new().route("/api/{*rest}", api_404);
    if dir.join("index.html").is_file() {
        let spa = ServeDir::new(dir).fallback(ServeFile::new(dir.join("index.html")));
        router.fallback_service(spa)
    } else {
        router.fallback(|| async { (StatusCode::OK, Html(NOT_BUILT)) })
    }
}

async fn api_not_found(_uri: Uri) -> Response {
    ApiError::NotFound.into_response()
}
