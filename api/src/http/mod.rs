//! The router: one module per resource, each exposing `router()` built with utoipa-axum
//! so every route is in the OpenAPI document (served at `/api/openapi.json`, with an
//! offline Swagger UI at `/api/docs`). Outside `/api` the built web UI is served.

mod audit;
mod catalog;
mod export;
mod headers;
mod health;
mod keys;
mod live;
mod me;
mod middleware;
mod openai;
mod openai_types;
mod pagination;
mod plugins;
mod run_data;
mod runs;
pub(crate) mod tenants;
mod timeline;
mod web;

use crate::state::AppState;
use axum::Router;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "SliceScheduler control plane",
        description = "Runs, their history, tenants and SLAs, policy plugins. Bearer tokens: the admin token \
                       from configuration, tenant keys (POST /api/v1/tenants) and analyst keys (POST /api/v1/keys).",
        version = "1"
    ),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
    tags(
        (name = "me", description = "Who the token belongs to"),
        (name = "runs", description = "Replays and sweeps, and their results"),
        (name = "tenants", description = "Tenants, their SLAs (versioned) and statistics"),
        (name = "keys", description = "API keys: analyst keys created, any key revoked"),
        (name = "audit", description = "The audit log of every change (admin only)"),
        (name = "plugins", description = "Policy plugins (Wasm components)"),
        (name = "catalog", description = "Clusters, models and shipped scenarios"),
        (name = "live", description = "The live cluster serving tenants' models (admin only)"),
        (name = "openai", description = "OpenAI-compatible completions for tenant keys, served by the live cluster"),
        (name = "ops", description = "Health, readiness and metrics")
    )
)]
struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// Every documented route, with its OpenAPI description.
pub fn api() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(me::router())
        .merge(runs::router())
        .merge(run_data::router())
        .merge(export::router())
        .merge(timeline::router())
        .merge(tenants::router())
        .merge(keys::router())
        .merge(audit::router())
        .merge(plugins::router())
        .merge(catalog::router())
        .merge(health::router())
        .merge(live::router())
        .merge(openai::router())
}

/// The OpenAPI document alone (for `slicesched serve --print-openapi` and tests).
pub fn openapi() -> utoipa::openapi::OpenApi {
    api().into_openapi()
}

/// The whole service: API, its document and docs page, and the web UI.
pub fn app(state: AppState) -> Router {
    let (router, doc) = api().split_for_parts();
    let web_dir = state.config.web_dir.clone();
    let known = std::sync::Arc::new(headers::QueryParams::from_openapi(&doc));
    let head_limit = state.config.limits.max_header_bytes;
    router
        .route_layer(axum::middleware::from_fn_with_state(known, headers::known_query))
        .merge(utoipa_swagger_ui::SwaggerUi::new("/api/docs").url("/api/openapi.json", doc))
        .fallback_service(web::service(&web_dir))
        .layer(axum::middleware::from_fn_with_state(state.clone(), middleware::observe))
        .layer(axum::middleware::from_fn_with_state(head_limit, headers::head_limit))
        .layer(axum::middleware::from_fn(headers::security))
        .with_state(state)
}

#[cfg(test)]
mod tests {
    /// Every `$ref` names a component the document defines: utoipa registers the
    /// schemas of bodies and responses but not of path parameters, and an unresolvable
    /// reference makes clients' generators (and schemathesis) refuse the whole document.
    #[test]
    fn every_reference_resolves() {
        let doc = serde_json::to_value(super::openapi()).unwrap();
        let schemas = doc["components"]["schemas"].as_object().cloned().unwrap_or_default();
        let mut missing = Vec::new();
        let mut stack = vec![&doc];
        while let Some(v) = stack.pop() {
            match v {
                serde_json::Value::Object(map) => {
                    if let Some(serde_json::Value::String(r)) = map.get("$ref") {
                        let name = r.trim_start_matches("#/components/schemas/");
                        if !schemas.contains_key(name) {
                            missing.push(r.clone());
                        }
                    }
                    stack.extend(map.values());
                }
                serde_json::Value::Array(items) => stack.extend(items),
                _ => {}
            }
        }
        missing.sort();
        missing.dedup();
        assert!(missing.is_empty(), "unresolvable references: {missing:?}");
    }
}
