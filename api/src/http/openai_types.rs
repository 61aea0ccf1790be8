//! The OpenAI wire types of `/v1` (the fields vLLM's server takes and answers; unknown
//! request fields are ignored as OpenAI's are) and its error shape.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A prompt: text (byte-level tokens) or token ids.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Tokens(Vec<i64>),
}

/// One stop sequence or several.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct StreamOptions {
    /// A last chunk (before `[DONE]`) carries the usage.
    #[serde(default)]
    pub include_usage: bool,
}

/// Sampling fields common to both endpoints.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct Sampling {
    /// Tokens to generate (completions: 16 by default; chat: what the context leaves).
    pub max_tokens: Option<u32>,
    /// 0 is greedy; default 1.
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub seed: Option<i64>,
    /// Up to 4 sequences; the text stops before the first that appears.
    pub stop: Option<Stop>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    /// Only 1.
    pub n: Option<u32>,
    /// vLLM's extension: also answer the generated token ids.
    #[serde(default)]
    pub return_token_ids: bool,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct CompletionRequest {
    pub model: String,
    pub prompt: Prompt,
    #[serde(flatten)]
    pub sampling: Sampling,
}

/// A chat message's content: text, or parts of which the text ones are read.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct ChatMessage {
    pub role: String,
    pub content: Option<Content>,
}

#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    /// OpenAI's newer name for `max_tokens`.
    pub max_completion_tokens: Option<u32>,
    #[serde(flatten)]
    pub sampling: Sampling,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Usage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub total_tokens: u32,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CompletionChoice {
    pub index: u32,
    pub text: String,
    /// `stop`, `length`, or null in a chunk before the last.
    pub finish_reason: Option<String>,
    pub logprobs: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<Vec<i32>>,
}

/// A completion, or (`object` = `text_completion`, in a stream) one chunk of one.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Completion {
    pub id: String,
    pub object: String,
    pub created: i64,
    pub model: String,
    pub choices: Vec<CompletionChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AssistantMessage {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChatChoice {
    pub index: u32,
    /// In a complete answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<AssistantMessage>,
    /// In a stream's chunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta: Option<AssistantMessage>,
    pub finish_reason: Option<String>,
    pub logprobs: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<Vec<i32>>,
}

/// A chat completion (`chat.completion`) or a chunk of one (`chat.completion.chunk`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChatCompletion {
    pub id: String,
    pub object: String,
    pub created: i64,
    pub model: String,
    pub choices: Vec<ChatChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Model {
    pub id: String,
    pub object: String,
    pub created: i64,
    pub owned_by: String,
    /// The context window, tokens.
    pub max_model_len: u32,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ModelList {
    pub object: String,
    pub data: Vec<Model>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct OaiErrorBody {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub param: Option<String>,
    pub code: Option<String>,
}

/// OpenAI's error document: `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct OaiError {
    pub error: OaiErrorBody,
}

/// An error answered in OpenAI's shape, with its status (and `Retry-After` on a 429).
#[derive(Debug, Clone)]
pub struct OaiFail {
    pub status: StatusCode,
    pub body: OaiError,
    pub retry_after_s: Option<u32>,
}

impl OaiFail {
    pub fn new(status: StatusCode, kind: &str, message: impl Into<String>) -> Self {
        Self {
            status,
            body: OaiError {
                error: OaiErrorBody { message: message.into(), kind: kind.into(), param: None, code: None },
            },
            retry_after_s: None,
        }
    }
    pub fn bad(param: &str, message: impl Into<String>) -> Self {
        let mut f = Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message);
        f.body.error.param = Some(param.into());
        f
    }
    pub fn code(mut self, code: &str) -> Self {
        self.body.error.code = Some(code.into());
        self
    }
    pub fn no_model(model: &str) -> Self {
        let shown: String = model.chars().take(100).collect();
        let mut f =
            Self::new(StatusCode::NOT_FOUND, "invalid_request_error", format!("The model `{shown}` does not exist."));
        f.body.error.param = Some("model".into());
        f.code("model_not_found")
    }
}

impl IntoResponse for OaiFail {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&self.body).expect("an error serialises");
        let mut r = (self.status, body).into_response();
        r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(s) = self.retry_after_s {
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        r
    }
}

impl From<crate::error::ApiError> for OaiFail {
    fn from(e: crate::error::ApiError) -> Self {
        use crate::error::ApiError as E;
        match e {
            E::Unauthorized => {
                Self::new(StatusCode::UNAUTHORIZED, "authentication_error", "missing or invalid API key")
                    .code("invalid_api_key")
            }
            E::Forbidden => Self::new(StatusCode::FORBIDDEN, "permission_error", "this key may not do that"),
            E::TooLarge { limit } => Self::bad("body", format!("body larger than {limit} bytes")),
            E::UnsupportedMediaType { expected } => Self::bad("body", format!("expected content type {expected}")),
            E::BadRequest { field, detail } | E::Invalid { field, detail } => Self::bad(&field, detail),
            E::Unavailable => {
                let mut f =
                    Self::new(StatusCode::SERVICE_UNAVAILABLE, "service_unavailable", "the database is unavailable");
                f.retry_after_s = Some(2);
                f
            }
            other => {
                tracing::error!(error = %other, "internal error on /v1");
                Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", "internal error")
            }
        }
    }
}
