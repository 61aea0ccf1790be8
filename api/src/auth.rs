//! Bearer tokens and roles. The admin token comes from configuration; tenant and analyst
//! keys live in the database as the sha256 of the token, which is shown once.

use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::FromRequestParts;
use axum::http::{header, request::Parts};
use rand::RngCore;
use serde::Serialize;
use sha2::{Digest, Sha256};
use utoipa::ToSchema;
use uuid::Uuid;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Admin,
    Tenant,
    Analyst,
}

/// Who is calling: the subject of every role check and the actor of every audit row.
#[derive(Debug, Clone)]
pub struct Caller {
    pub role: Role,
    pub name: String,
    /// Set for tenants only.
    pub tenant_id: Option<Uuid>,
}

impl Caller {
    pub fn require(&self, allowed: &[Role]) -> Result<(), ApiError> {
        if allowed.contains(&self.role) {
            Ok(())
        } else {
            Err(ApiError::Forbidden)
        }
    }
    pub fn admin(&self) -> Result<(), ApiError> {
        self.require(&[Role::Admin])
    }
    /// Admins and analysts read history; tenants do not.
    pub fn reader(&self) -> Result<(), ApiError> {
        self.require(&[Role::Admin, Role::Analyst])
    }
    /// Whether this caller may see tenant `id`'s things. Others' are answered 404.
    pub fn sees_tenant(&self, id: Uuid) -> Result<(), ApiError> {
        match self.role {
            Role::Admin | Role::Analyst => Ok(()),
            Role::Tenant if self.tenant_id == Some(id) => Ok(()),
            Role::Tenant => Err(ApiError::NotFound),
        }
    }
    /// The name written to audit rows and `created_by` columns.
    pub fn actor(&self) -> String {
        match self.role {
            Role::Admin => format!("admin:{}", self.name),
            Role::Tenant => format!("tenant:{}", self.name),
            Role::Analyst => format!("analyst:{}", self.name),
        }
    }
}

pub fn sha256(token: &str) -> [u8; 32] {
    sha256_bytes(token.as_bytes())
}

pub fn sha256_bytes(b: &[u8]) -> [u8; 32] {
    Sha256::digest(b).into()
}

/// A fresh random token (256 bits) with a recognisable prefix.
pub fn new_token() -> String {
    let mut b = [0u8; 32];
    rand::rng().fill_bytes(&mut b);
    format!("ssk_{}", hex::encode(b))
}

/// Compares digests without an early exit, so timing says nothing about the token.
fn same_digest(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[derive(sqlx::FromRow)]
struct KeyRow {
    role: String,
    name: String,
    tenant_id: Option<Uuid>,
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let token = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
            .map(str::trim)
            .filter(|t| !t.is_empty() && t.len() <= 256)
            .ok_or(ApiError::Unauthorized)?;
        let digest = sha256(token);
        if same_digest(&digest, &state.admin_token_sha256) {
            return Ok(Caller { role: Role::Admin, name: "admin".into(), tenant_id: None });
        }
        // A revoked key, or the key of a removed tenant, is no key at all.
        let row: Option<KeyRow> = sqlx::query_as(
            "select k.role, k.name, k.tenant_id from api_keys k left join tenants t on t.id = k.tenant_id \
             where k.token_sha256 = $1 and k.revoked_at is null and t.removed_at is null",
        )
        .bind(&digest[..])
        .fetch_optional(&state.db)
        .await?;
        let row = row.ok_or(ApiError::Unauthorized)?;
        let role = match row.role.as_str() {
            "tenant" => Role::Tenant,
            "analyst" => Role::Analyst,
            other => return Err(ApiError::Internal(format!("unknown role {other} in api_keys"))),
        };
        Ok(Caller { role, name: row.name, tenant_id: row.tenant_id })
    }
}
