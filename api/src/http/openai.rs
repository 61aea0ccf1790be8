//! `/v1`: OpenAI-compatible completions, chat completions and models, served by the live
//! cluster. A tenant key reaches its own tenant's model only (any other model id is the
//! 404 an unknown one gets); the admin token reaches every served model. Errors are in
//! OpenAI's shape. A full queue is a 429 with `Retry-After`; a prompt over the context
//! window, or a request that could never fit the KV cache, a 400 naming the limit; a
//! client that goes away cancels its request (its ticket's drop) and frees its KV.

use super::openai_types::*;
use crate::auth::{Caller, Role};
use crate::error::ApiError;
use crate::live::sample::SamplingParams;
use crate::live::{Cluster, Event, Finished, Refused, Ticket};
use crate::state::AppState;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use slicesched_exec::model::ByteTokenizer;
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedReceiver;
use utoipa_axum::{router::OpenApiRouter, routes};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(completions)).routes(routes!(chat)).routes(routes!(models))
}

/// Largest request body of `/v1` (a prompt at the largest context window, as JSON).
const BODY_LIMIT: usize = 4 << 20;

async fn body<T: serde::de::DeserializeOwned>(headers: &HeaderMap, b: axum::body::Body) -> Result<T, OaiFail> {
    let ct = crate::extract::content_type(headers);
    if ct != "application/json" && !ct.ends_with("+json") {
        return Err(ApiError::UnsupportedMediaType { expected: "application/json".into() }.into());
    }
    let bytes = crate::extract::read_body(headers, b, BODY_LIMIT).await?;
    Ok(crate::extract::parse_json(&bytes)?)
}

/// The cluster and served tenant `model` names, if the caller may reach it.
fn route(st: &AppState, caller: Result<Caller, ApiError>, model: &str) -> Result<(Arc<Cluster>, usize), OaiFail> {
    let caller = caller?;
    let cluster = st.live.current().ok_or_else(|| OaiFail::no_model(model))?;
    let t = cluster.model(model).ok_or_else(|| OaiFail::no_model(model))?;
    match caller.role {
        Role::Admin => Ok((cluster, t)),
        Role::Tenant if caller.tenant_id == Some(cluster.tenants[t].tenant_id) => Ok((cluster, t)),
        Role::Tenant => Err(OaiFail::no_model(model)),
        Role::Analyst => Err(ApiError::Forbidden.into()),
    }
}

/// What both endpoints check before a request is handed to the loop.
fn params(
    c: &Cluster,
    t: usize,
    prompt: &[i32],
    s: &Sampling,
    max: Option<u32>,
    chat: bool,
) -> Result<SamplingParams, OaiFail> {
    let tn = &c.tenants[t];
    let len = tn.max_model_len;
    let p = prompt.len() as u32;
    if p == 0 {
        return Err(OaiFail::bad(if chat { "messages" } else { "prompt" }, "the prompt is empty"));
    }
    if s.n.is_some_and(|n| n != 1) {
        return Err(OaiFail::bad("n", "only n = 1 is supported"));
    }
    let temperature = s.temperature.unwrap_or(1.0);
    if !(temperature.is_finite() && (0.0..=2.0).contains(&temperature)) {
        return Err(OaiFail::bad("temperature", "must be in [0, 2]"));
    }
    let top_p = s.top_p.unwrap_or(1.0);
    if !(top_p.is_finite() && top_p > 0.0 && top_p <= 1.0) {
        return Err(OaiFail::bad("top_p", "must be in (0, 1]"));
    }
    let stop = match &s.stop {
        None => vec![],
        Some(Stop::One(x)) => vec![x.clone()],
        Some(Stop::Many(v)) => v.clone(),
    };
    if stop.len() > 4 || stop.iter().any(|x| x.len() > 256) {
        return Err(OaiFail::bad("stop", "at most 4 sequences of at most 256 bytes"));
    }
    if p >= len {
        return Err(OaiFail::bad(
            if chat { "messages" } else { "prompt" },
            format!("This model's maximum context length is {len} tokens. However, your prompt has {p} tokens."),
        )
        .code("context_length_exceeded"));
    }
    let max_tokens = match max {
        Some(0) => return Err(OaiFail::bad("max_tokens", "must be at least 1")),
        Some(m) => m,
        None if chat => len - p,
        None => 16.min(len - p),
    };
    if p as u64 + max_tokens as u64 > len as u64 {
        return Err(OaiFail::bad(
            "max_tokens",
            format!(
                "This model's maximum context length is {len} tokens. However, you requested {} tokens ({p} in \
                 the prompt, {max_tokens} for the completion). Please reduce the prompt or max_tokens.",
                p as u64 + max_tokens as u64
            ),
        )
        .code("context_length_exceeded"));
    }
    let blocks = (p + max_tokens - 1).div_ceil(tn.block_size);
    if blocks > tn.kv_blocks {
        return Err(OaiFail::bad(
            "max_tokens",
            format!(
                "the request needs {blocks} KV-cache blocks of {} tokens; the model's cache holds {} ({} tokens)",
                tn.block_size,
                tn.kv_blocks,
                tn.kv_blocks as u64 * tn.block_size as u64
            ),
        )
        .code("kv_cache_exceeded"));
    }
    Ok(SamplingParams { max_tokens, temperature, top_p, seed: s.seed.map(|v| v as u64), stop })
}

/// Hands the request over and waits for the loop to take it.
async fn admit(
    c: &Arc<Cluster>,
    t: usize,
    prompt: Vec<i32>,
    p: SamplingParams,
) -> Result<(Ticket, UnboundedReceiver<Event>), OaiFail> {
    let (mut ticket, mut rx) = c.submit(t, prompt, p).map_err(|r| match r {
        Refused::Busy { retry_after_s, why } => {
            let mut f =
                OaiFail::new(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", why).code("rate_limit_exceeded");
            f.retry_after_s = Some(retry_after_s);
            f
        }
        Refused::ShuttingDown => shutting_down(),
    })?;
    match rx.recv().await {
        Some(Event::Admitted { .. }) => Ok((ticket, rx)),
        Some(Event::Rejected { status, message }) => {
            ticket.ended();
            Err(match status {
                400 => OaiFail::bad("max_tokens", message),
                _ => shutting_down(),
            })
        }
        _ => {
            ticket.ended();
            Err(shutting_down())
        }
    }
}

fn shutting_down() -> OaiFail {
    let mut f =
        OaiFail::new(StatusCode::SERVICE_UNAVAILABLE, "service_unavailable", "the live cluster is shutting down");
    f.retry_after_s = Some(2);
    f
}

/// A request's result, collected.
struct Collected {
    ids: Vec<i32>,
    text: String,
    done: Finished,
}

async fn collect(mut ticket: Ticket, mut rx: UnboundedReceiver<Event>) -> Result<Collected, OaiFail> {
    let (mut ids, mut text) = (Vec::new(), String::new());
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Token { id, text: t } => {
                ids.push(id);
                text += &t;
            }
            Event::Done(done) => {
                ticket.finish(&done);
                return Ok(Collected { ids, text, done });
            }
            Event::Failed(why) => {
                ticket.ended();
                return Err(OaiFail::new(StatusCode::SERVICE_UNAVAILABLE, "service_unavailable", why));
            }
            Event::Admitted { .. } | Event::Rejected { .. } => {}
        }
    }
    ticket.ended();
    Err(shutting_down())
}

fn usage(d: &Finished) -> Usage {
    Usage {
        prompt_tokens: d.prompt_tokens,
        completion_tokens: d.completion_tokens,
        total_tokens: d.prompt_tokens + d.completion_tokens,
    }
}

/// The stream of one request: a chunk per token, a last chunk with the finish reason
/// (and the usage when asked), `[DONE]`. Dropped by a client that went away, and with
/// it the ticket, which cancels the request.
fn stream(
    ticket: Ticket,
    rx: UnboundedReceiver<Event>,
    chunk: impl Fn(Option<(i32, String)>, Option<&Finished>) -> serde_json::Value + Send + 'static,
    include_usage: bool,
) -> Response {
    struct St<F> {
        ticket: Ticket,
        rx: UnboundedReceiver<Event>,
        chunk: F,
        tail: Vec<SseEvent>,
        over: bool,
    }
    let st = St { ticket, rx, chunk, tail: Vec::new(), over: false };
    let s = futures_util::stream::unfold(st, move |mut st| async move {
        if let Some(e) = st.tail.pop() {
            return Some((Ok::<_, std::convert::Infallible>(e), st));
        }
        if st.over {
            return None;
        }
        let data = |v: serde_json::Value| SseEvent::default().data(v.to_string());
        let ev = match st.rx.recv().await {
            Some(Event::Token { id, text }) => data((st.chunk)(Some((id, text)), None)),
            Some(Event::Done(d)) => {
                st.ticket.finish(&d);
                st.over = true;
                st.tail.push(SseEvent::default().data("[DONE]"));
                if include_usage {
                    let mut u = (st.chunk)(None, None);
                    u["choices"] = serde_json::json!([]);
                    u["usage"] = serde_json::to_value(usage(&d)).expect("usage serialises");
                    st.tail.push(data(u));
                }
                data((st.chunk)(None, Some(&d)))
            }
            Some(Event::Failed(why)) | Some(Event::Rejected { message: why, .. }) => {
                st.ticket.ended();
                st.over = true;
                st.tail.push(SseEvent::default().data("[DONE]"));
                let body = OaiFail::new(StatusCode::SERVICE_UNAVAILABLE, "service_unavailable", why).body;
                data(serde_json::to_value(body).expect("an error serialises"))
            }
            Some(Event::Admitted { .. }) => SseEvent::default().comment("admitted"),
            None => {
                st.ticket.ended();
                st.over = true;
                st.tail.push(SseEvent::default().data("[DONE]"));
                data(serde_json::to_value(shutting_down().body).expect("an error serialises"))
            }
        };
        Some((Ok(ev), st))
    });
    Sse::new(s).keep_alive(KeepAlive::new().interval(std::time::Duration::from_secs(1))).into_response()
}

fn prompt_ids(p: &Prompt, vocab: usize) -> Result<Vec<i32>, OaiFail> {
    match p {
        Prompt::Text(s) => Ok(ByteTokenizer::encode(s)),
        Prompt::Tokens(v) => v
            .iter()
            .map(|&i| {
                if (0..vocab as i64).contains(&i) {
                    Ok(i as i32)
                } else {
                    Err(OaiFail::bad("prompt", format!("token id {i} outside the vocabulary of {vocab}")))
                }
            })
            .collect(),
    }
}

#[utoipa::path(post, path = "/v1/completions", tag = "openai", request_body = CompletionRequest,
    responses((status = 200, description = "The completion, or with `stream` Server-Sent Events: a chunk per token, \
                 then `data: [DONE]`", content((Completion = "application/json"), (String = "text/event-stream"))),
              (status = 400, body = OaiError), (status = 401, body = OaiError), (status = 403, body = OaiError),
              (status = 404, body = OaiError), (status = 413, body = OaiError), (status = 415, body = OaiError),
              (status = 429, body = OaiError), (status = 503, body = OaiError)))]
async fn completions(
    State(st): State<AppState>,
    caller: Result<Caller, ApiError>,
    headers: HeaderMap,
    b: axum::body::Body,
) -> Result<Response, OaiFail> {
    let req: CompletionRequest = body(&headers, b).await?;
    let (c, t) = route(&st, caller, &req.model)?;
    let vocab = c.vocab(t);
    let prompt = prompt_ids(&req.prompt, vocab)?;
    let s = &req.sampling;
    let p = params(&c, t, &prompt, s, s.max_tokens, false)?;
    let (ticket, rx) = admit(&c, t, prompt, p).await?;
    let id = format!("cmpl-{}", uuid::Uuid::new_v4().simple());
    let (model, created, want_ids) = (req.model.clone(), chrono::Utc::now().timestamp(), s.return_token_ids);
    let doc = move |choices: Vec<CompletionChoice>, usage: Option<Usage>| Completion {
        id: id.clone(),
        object: "text_completion".into(),
        created,
        model: model.clone(),
        choices,
        usage,
    };
    if s.stream {
        let include = s.stream_options.as_ref().is_some_and(|o| o.include_usage);
        let chunk = move |tok: Option<(i32, String)>, done: Option<&Finished>| {
            let (text, ids) = tok.map_or((String::new(), None), |(i, t)| (t, Some(vec![i])));
            let choice = CompletionChoice {
                index: 0,
                text,
                finish_reason: done.map(|d| d.reason.to_string()),
                logprobs: None,
                token_ids: if want_ids { Some(ids.unwrap_or_default()) } else { None },
            };
            serde_json::to_value(doc(vec![choice], None)).expect("a chunk serialises")
        };
        return Ok(stream(ticket, rx, chunk, include));
    }
    let r = collect(ticket, rx).await?;
    let choice = CompletionChoice {
        index: 0,
        text: r.text,
        finish_reason: Some(r.done.reason.to_string()),
        logprobs: None,
        token_ids: want_ids.then_some(r.ids),
    };
    Ok(Json(doc(vec![choice], Some(usage(&r.done)))).into_response())
}

/// The plain chat template (no tokenizer config is read): `role: content` lines, then
/// `assistant:`.
pub fn plain_template(messages: &[ChatMessage]) -> String {
    let mut s = String::new();
    for m in messages {
        let text = match &m.content {
            None => String::new(),
            Some(Content::Text(t)) => t.clone(),
            Some(Content::Parts(p)) => {
                p.iter().filter(|x| x.kind == "text").filter_map(|x| x.text.clone()).collect::<Vec<_>>().join("")
            }
        };
        s += &format!("{}: {}\n", m.role, text);
    }
    s + "assistant:"
}

#[utoipa::path(post, path = "/v1/chat/completions", tag = "openai", request_body = ChatRequest,
    responses((status = 200, description = "The chat completion, or with `stream` Server-Sent Events: a chunk per \
                 token, then `data: [DONE]`", content((ChatCompletion = "application/json"), (String = "text/event-stream"))),
              (status = 400, body = OaiError), (status = 401, body = OaiError), (status = 403, body = OaiError),
              (status = 404, body = OaiError), (status = 413, body = OaiError), (status = 415, body = OaiError),
              (status = 429, body = OaiError), (status = 503, body = OaiError)))]
async fn chat(
    State(st): State<AppState>,
    caller: Result<Caller, ApiError>,
    headers: HeaderMap,
    b: axum::body::Body,
) -> Result<Response, OaiFail> {
    let req: ChatRequest = body(&headers, b).await?;
    let (c, t) = route(&st, caller, &req.model)?;
    if req.messages.is_empty() {
        return Err(OaiFail::bad("messages", "at least one message"));
    }
    let prompt = ByteTokenizer::encode(&plain_template(&req.messages));
    let s = &req.sampling;
    let p = params(&c, t, &prompt, s, req.max_completion_tokens.or(s.max_tokens), true)?;
    let (ticket, rx) = admit(&c, t, prompt, p).await?;
    let id = format!("chatcmpl-{}", uuid::Uuid::new_v4().simple());
    let (model, created, want_ids) = (req.model.clone(), chrono::Utc::now().timestamp(), s.return_token_ids);
    let doc = move |object: &str, choices: Vec<ChatChoice>, usage: Option<Usage>| ChatCompletion {
        id: id.clone(),
        object: object.into(),
        created,
        model: model.clone(),
        choices,
        usage,
    };
    if s.stream {
        let include = s.stream_options.as_ref().is_some_and(|o| o.include_usage);
        let first = std::sync::atomic::AtomicBool::new(true);
        let chunk = move |tok: Option<(i32, String)>, done: Option<&Finished>| {
            let role = first.swap(false, std::sync::atomic::Ordering::Relaxed).then(|| "assistant".to_string());
            let (content, ids) = tok.map_or((None, None), |(i, t)| (Some(t), Some(vec![i])));
            let choice = ChatChoice {
                index: 0,
                message: None,
                delta: Some(AssistantMessage { role, content }),
                finish_reason: done.map(|d| d.reason.to_string()),
                logprobs: None,
                token_ids: if want_ids { Some(ids.unwrap_or_default()) } else { None },
            };
            serde_json::to_value(doc("chat.completion.chunk", vec![choice], None)).expect("a chunk serialises")
        };
        return Ok(stream(ticket, rx, chunk, include));
    }
    let r = collect(ticket, rx).await?;
    let choice = ChatChoice {
        index: 0,
        message: Some(AssistantMessage { role: Some("assistant".into()), content: Some(r.text) }),
        delta: None,
        finish_reason: Some(r.done.reason.to_string()),
        logprobs: None,
        token_ids: want_ids.then_some(r.ids),
    };
    Ok(Json(doc("chat.completion", vec![choice], Some(usage(&r.done)))).into_response())
}

#[utoipa::path(get, path = "/v1/models", tag = "openai",
    responses((status = 200, body = ModelList), (status = 401, body = OaiError), (status = 403, body = OaiError)))]
async fn models(State(st): State<AppState>, caller: Result<Caller, ApiError>) -> Result<Json<ModelList>, OaiFail> {
    let caller = caller?;
    if caller.role == Role::Analyst {
        return Err(ApiError::Forbidden.into());
    }
    let data = st
        .live
        .current()
        .map(|c| {
            c.tenants
                .iter()
                .filter(|t| caller.role == Role::Admin || caller.tenant_id == Some(t.tenant_id))
                .map(|t| Model {
                    id: t.model_id.clone(),
                    object: "model".into(),
                    created: c.created,
                    owned_by: t.name.clone(),
                    max_model_len: t.max_model_len,
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Json(ModelList { object: "list".into(), data }))
}
