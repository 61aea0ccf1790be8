//! The wall-clock side of `slicesched load`: one streamed completion per arrival, sent
//! at its arrival time (an open loop, like vLLM's `benchmark_serving`: a slow server
//! does not slow the arrivals down), each stream's chunks timed as they come.

use std::time::{Duration, Instant};

/// One request to send.
#[derive(Debug, Clone)]
pub struct Planned {
    /// Index into the scenario's tenants.
    pub tenant: u32,
    /// When to send it, from the start.
    pub arrival: Duration,
    pub prompt_tokens: u32,
    pub output_tokens: u32,
}

/// Where a tenant's requests go.
#[derive(Debug, Clone)]
pub struct Route {
    pub key: String,
    pub model: String,
}

/// How one request went, times from the start of the load.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    pub sent: Duration,
    /// Each token chunk's arrival, in order.
    pub tokens: Vec<Duration>,
    /// The stream ended with `[DONE]` after a chunk naming a finish reason.
    pub finished: bool,
    pub finish_reason: Option<String>,
    /// HTTP status of the answer (0: no answer).
    pub status: u16,
    /// Why it failed, for the summary (`None` when it finished).
    pub failure: Option<&'static str>,
    /// The server's words, when it said why.
    pub message: Option<String>,
}

/// Failure reasons (the `dropped` column of `requests.csv`, counted in the summary).
pub const RATE_LIMITED: &str = "rate limited (429)";
pub const REFUSED: &str = "refused by the server (400)";
pub const UNAVAILABLE: &str = "server unavailable (503)";
pub const HTTP_ERROR: &str = "HTTP error (other status)";
pub const CONNECT: &str = "connection failed";
pub const STREAM: &str = "stream failed mid-way";
pub const UNFINISHED: &str = "unfinished when the drain window closed";

/// A prompt of exactly `n` tokens for the server's byte-level tokenizer: `n` ASCII
/// bytes of words, varied by `salt` so requests do not share a prefix.
pub fn prompt_text(n: u32, salt: u64) -> String {
    const WORDS: [&str; 16] = [
        "the",
        "scheduler",
        "places",
        "every",
        "operator",
        "into",
        "idle",
        "slices",
        "of",
        "a",
        "shared",
        "cluster",
        "while",
        "tenants",
        "send",
        "requests",
    ];
    let mut s = String::with_capacity(n as usize + 16);
    let mut x = salt.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while s.len() < n as usize {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s += WORDS[(x % WORDS.len() as u64) as usize];
        s.push(' ');
    }
    s.truncate(n as usize);
    s
}

/// What one `data:` payload of a completion stream says.
#[derive(Debug, PartialEq)]
pub enum Chunk {
    Token,
    Finish(String),
    Usage,
    Error(String),
    Done,
}

/// Reads one `data:` payload (OpenAI's completion chunk shape).
pub fn parse_chunk(data: &str) -> Chunk {
    if data.trim() == "[DONE]" {
        return Chunk::Done;
    }
    let v: serde_json::Value = match serde_json::from_str(data) {
        Ok(v) => v,
        Err(e) => return Chunk::Error(format!("an unreadable chunk ({e}): {data:.80}")),
    };
    if let Some(e) = v.get("error") {
        return Chunk::Error(e["message"].as_str().unwrap_or("an error chunk").to_string());
    }
    match v["choices"].get(0) {
        None => Chunk::Usage,
        Some(c) => match c["finish_reason"].as_str() {
            Some(r) => Chunk::Finish(r.to_string()),
            None => Chunk::Token,
        },
    }
}

/// Takes the complete SSE events out of `buf`; returns their `data:` payloads.
pub fn sse_events(buf: &mut String) -> Vec<String> {
    let mut out = Vec::new();
    loop {
        let end = match (buf.find("\n\n"), buf.find("\r\n\r\n")) {
            (Some(a), Some(b)) if b < a => b + 4,
            (Some(a), _) => a + 2,
            (None, Some(b)) => b + 4,
            (None, None) => break,
        };
        let block: String = buf.drain(..end).collect();
        let data: Vec<&str> =
            block.lines().filter_map(|l| l.strip_prefix("data:")).map(|d| d.strip_prefix(' ').unwrap_or(d)).collect();
        if !data.is_empty() {
            out.push(data.join("\n"));
        }
    }
    out
}

/// Sends one request at its arrival time and follows its stream until it ends or the
/// drain deadline passes (then the stream is dropped, which cancels it on the server).
pub async fn one(
    client: reqwest::Client,
    url: String,
    route: Route,
    p: Planned,
    salt: u64,
    t0: tokio::time::Instant,
    deadline: tokio::time::Instant,
) -> Outcome {
    tokio::time::sleep_until(t0 + p.arrival).await;
    let body = serde_json::json!({
        "model": route.model,
        "prompt": prompt_text(p.prompt_tokens.max(1), salt),
        "max_tokens": p.output_tokens.max(1),
        "temperature": 0,
        "stream": true,
    });
    let start = Instant::now();
    let sent = start - t0.into_std();
    let mut out = Outcome { sent, ..Outcome::default() };
    let t0 = t0.into_std();
    let work = async {
        let resp = client.post(format!("{url}/v1/completions")).bearer_auth(&route.key).json(&body).send().await;
        let mut resp = match resp {
            Ok(r) => r,
            Err(e) => {
                out.failure = Some(CONNECT);
                out.message = Some(e.to_string());
                return;
            }
        };
        out.status = resp.status().as_u16();
        if !resp.status().is_success() {
            out.failure = Some(match out.status {
                429 => RATE_LIMITED,
                400 => REFUSED,
                503 => UNAVAILABLE,
                _ => HTTP_ERROR,
            });
            let text = resp.text().await.unwrap_or_default();
            out.message = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
                .or(Some(text));
            return;
        }
        let mut buf = String::new();
        loop {
            match resp.chunk().await {
                Ok(Some(bytes)) => {
                    let now = Instant::now() - t0;
                    buf += &String::from_utf8_lossy(&bytes);
                    for data in sse_events(&mut buf) {
                        match parse_chunk(&data) {
                            Chunk::Token => out.tokens.push(now),
                            Chunk::Finish(r) => out.finish_reason = Some(r),
                            Chunk::Usage => {}
                            Chunk::Error(m) => {
                                out.failure = Some(STREAM);
                                out.message = Some(m);
                            }
                            Chunk::Done => {
                                out.finished = out.failure.is_none() && out.finish_reason.is_some();
                                if !out.finished && out.failure.is_none() {
                                    out.failure = Some(STREAM);
                                    out.message = Some("[DONE] without a finish reason".into());
                                }
                                return;
                            }
                        }
                    }
                }
                Ok(None) => {
                    out.failure.get_or_insert(STREAM);
                    out.message.get_or_insert_with(|| "the stream ended before [DONE]".into());
                    return;
                }
                Err(e) => {
                    out.failure = Some(STREAM);
                    out.message = Some(e.to_string());
                    return;
                }
            }
        }
    };
    if tokio::time::timeout_at(deadline, work).await.is_err() {
        out.finished = false;
        out.failure = Some(UNFINISHED);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_have_exactly_the_tokens_asked_for() {
        for n in [1, 2, 7, 96, 1000] {
            let p = prompt_text(n, n as u64);
            assert_eq!(p.len(), n as usize);
            assert!(p.is_ascii(), "one byte, one token");
        }
        assert_ne!(prompt_text(64, 1), prompt_text(64, 2));
    }

    #[test]
    fn a_stream_is_read_event_by_event_across_chunk_boundaries() {
        let mut buf = String::from(": admitted\n\ndata: {\"choices\":[{\"text\":\"a\",\"finish_reason\":null}]}\n\nda");
        let ev = sse_events(&mut buf);
        assert_eq!(ev.len(), 1, "the comment carries no data");
        assert_eq!(parse_chunk(&ev[0]), Chunk::Token);
        assert_eq!(buf, "da");
        buf += "ta: {\"choices\":[{\"text\":\"\",\"finish_reason\":\"length\"}]}\r\n\r\ndata: [DONE]\n\n";
        let ev = sse_events(&mut buf);
        assert_eq!(
            ev.iter().map(|d| parse_chunk(d)).collect::<Vec<_>>(),
            [Chunk::Finish("length".into()), Chunk::Done]
        );
        assert_eq!(parse_chunk("{\"choices\":[],\"usage\":{}}"), Chunk::Usage);
        assert!(matches!(parse_chunk("{\"error\":{\"message\":\"x\"}}"), Chunk::Error(m) if m == "x"));
        assert!(matches!(parse_chunk("not json"), Chunk::Error(_)));
    }
}
