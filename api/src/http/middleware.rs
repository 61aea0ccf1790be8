//! Per-request telemetry: a span per request and the HTTP metrics, labelled by the
//! matched route (not the raw path, which would make one series per id).

use crate::state::AppState;
use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use std::time::Instant;
use tracing::Instrument;

pub async fn observe(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let route = req.extensions().get::<MatchedPath>().map_or("unmatched", |m| m.as_str()).to_string();
    let method = req.method().to_string();
    let span = tracing::info_span!("http", %method, %route, status = tracing::field::Empty);
    let started = Instant::now();
    let resp = next.run(req).instrument(span.clone()).await;
    let status = resp.status().as_u16();
    span.record("status", status);
    let m = &state.metrics;
    m.http_requests.with_label_values(&[&method, &route, &status.to_string()]).inc();
    m.http_latency.with_label_values(&[&method, &route]).observe(started.elapsed().as_secs_f64());
    if status >= 500 {
        tracing::error!(parent: &span, %method, %route, status, "server error");
    }
    resp
}
