//! What `slicesched load` asks the server before it sends: each tenant's model (the
//! one its key reaches, from `GET /v1/models`) and, with an admin token, the live
//! cluster (`GET /api/v1/live`: the policy, KV blocks, preemptions).

use super::drive::Route;
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use slicesched_sim::Scenario;
use std::time::Duration;

pub fn client() -> Result<reqwest::Client> {
    reqwest::Client::builder()
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(10))
        .pool_idle_timeout(Duration::from_secs(30))
        .build()
        .context("building the HTTP client")
}

/// What the server said before the load.
pub struct Probe {
    /// Per scenario tenant.
    pub routes: Vec<Route>,
    /// The live cluster's policy (admin token only).
    pub policy: Option<String>,
    /// Per scenario tenant: (KV blocks, preemptions so far), admin token only.
    pub live_before: Option<Vec<(u32, u64)>>,
    /// The live cluster as `GET /api/v1/live` described it (less its engines' state).
    pub live: Option<Value>,
    /// Per scenario tenant, the served tenant's name (admin token only).
    served: Vec<Option<String>>,
    pub warnings: Vec<String>,
}

async fn get(c: &reqwest::Client, url: &str, token: &str) -> Result<(u16, Value)> {
    let r = c.get(url).bearer_auth(token).send().await.with_context(|| format!("GET {url}"))?;
    let status = r.status().as_u16();
    let text = r.text().await.with_context(|| format!("GET {url}: reading the answer"))?;
    Ok((status, serde_json::from_str(&text).unwrap_or(Value::String(text))))
}

fn block<T>(f: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    tokio::runtime::Builder::new_current_thread().enable_all().build().context("tokio runtime")?.block_on(f)
}

/// The model a key reaches: the only one it lists, else the one its tenant owns or
/// named like the scenario's model.
fn pick_model(list: &Value, tenant: &str, scenario_model: &str) -> Option<(String, Option<u64>)> {
    let data = list["data"].as_array()?;
    let by = |f: &dyn Fn(&Value) -> bool| data.iter().find(|m| f(m));
    let m = if data.len() == 1 {
        data.first()
    } else {
        by(&|m| m["owned_by"] == tenant).or_else(|| by(&|m| m["id"] == scenario_model))
    }?;
    Some((m["id"].as_str()?.to_string(), m["max_model_len"].as_u64()))
}

pub fn probe(url: &str, scn: &Scenario, keys: &[(String, String)], admin: Option<&str>) -> Result<Probe> {
    let names: Vec<&str> = scn.tenants.iter().map(|t| t.name.as_str()).collect();
    if let Some((t, _)) = keys.iter().find(|(t, _)| !names.contains(&t.as_str())) {
        bail!("--keys names `{t}`, which is no tenant of the scenario (its tenants: {})", names.join(", "));
    }
    block(async {
        let c = client()?;
        let mut warnings = Vec::new();
        let mut routes = Vec::new();
        for (i, t) in scn.tenants.iter().enumerate() {
            let key = keys.iter().find(|(n, _)| *n == t.name).map(|k| k.1.clone()).with_context(|| {
                format!("--keys has no key for tenant `{}` (every scenario tenant sends its requests)", t.name)
            })?;
            let (status, list) = get(&c, &format!("{url}/v1/models"), &key).await?;
            if status != 200 {
                bail!("GET {url}/v1/models with `{}`'s key answered {status}: {list}", t.name);
            }
            let (model, max_len) = pick_model(&list, &t.name, &t.model.name).with_context(|| {
                format!("`{}`'s key reaches no served model (is the live cluster running?): {list}", t.name)
            })?;
            if model != t.model.name {
                warnings.push(format!(
                    "tenant `{}`: the scenario's model is {}, the server's is `{model}` (the comparison assumes the same)",
                    t.name, t.model.name
                ));
            }
            if let Some(len) = max_len {
                let over = scn
                    .requests
                    .iter()
                    .filter(|(ti, r)| *ti as usize == i && (r.prompt_tokens + r.output_tokens) as u64 > len)
                    .count();
                if over > 0 {
                    warnings.push(format!(
                        "tenant `{}`: {over} requests exceed the model's context window of {len} tokens: the server \
                         will refuse them (400)",
                        t.name
                    ));
                }
            }
            routes.push(Route { key, model });
        }
        let mut p = Probe {
            routes,
            policy: None,
            live_before: None,
            live: None,
            served: vec![None; scn.tenants.len()],
            warnings,
        };
        if let Some(token) = admin {
            match get(&c, &format!("{url}/api/v1/live"), token).await? {
                (200, v) => {
                    p.policy = v["policy"].as_str().map(str::to_string);
                    for (i, r) in p.routes.iter().enumerate() {
                        let m = v["models"].as_array().into_iter().flatten().find(|m| m["model"] == r.model.as_str());
                        p.served[i] = m.and_then(|m| m["tenant"].as_str()).map(str::to_string);
                    }
                    p.live_before = Some(engines(&v, &p.served));
                    p.live = Some(json!({
                        "id": v["id"], "policy": v["policy"], "started_at": v["started_at"],
                        "devices": v["config"]["devices"], "models": v["models"],
                    }));
                    let devices = v["config"]["devices"].as_str().unwrap_or("");
                    let n = scn.cluster.gpus.len();
                    if devices != format!("cpu:{n}") {
                        p.warnings.push(format!("the server runs `{devices}`, the scenario has {n} devices"));
                    }
                }
                (s, v) => {
                    p.warnings.push(format!("GET /api/v1/live answered {s} ({v}): the server's policy is unknown"))
                }
            }
        }
        Ok(p)
    })
}

/// (KV blocks, preemptions) of each scenario tenant's served tenant.
fn engines(live: &Value, served: &[Option<String>]) -> Vec<(u32, u64)> {
    served
        .iter()
        .map(|name| {
            let t =
                live["now"]["tenants"].as_array().into_iter().flatten().find(|t| name.as_deref() == t["name"].as_str());
            t.map_or((0, 0), |t| {
                (t["kv_blocks_total"].as_u64().unwrap_or(0) as u32, t["preemptions"].as_u64().unwrap_or(0))
            })
        })
        .collect()
}

/// The engines' figures now (after the load).
pub fn live_tenants(url: &str, token: &str, p: &Probe) -> Result<Vec<(u32, u64)>> {
    block(async {
        match get(&client()?, &format!("{url}/api/v1/live"), token).await? {
            (200, v) => Ok(engines(&v, &p.served)),
            (s, v) => bail!("GET /api/v1/live answered {s}: {v}"),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_reaches_its_own_model_or_the_one_named_for_its_tenant() {
        let one = json!({"data": [{"id": "m1", "owned_by": "acme", "max_model_len": 512}]});
        assert_eq!(pick_model(&one, "chat", "tiny-2l"), Some(("m1".into(), Some(512))));
        let two = json!({"data": [{"id": "tiny-2l", "owned_by": "x"}, {"id": "tiny-4l", "owned_by": "code"}]});
        assert_eq!(pick_model(&two, "code", "tiny-2l").unwrap().0, "tiny-4l");
        assert_eq!(pick_model(&two, "chat", "tiny-2l").unwrap().0, "tiny-2l");
        assert_eq!(pick_model(&two, "chat", "llama"), None);
        assert_eq!(pick_model(&json!({"data": []}), "chat", "x"), None);
    }
}
