//! Prometheus metrics of live serving, per tenant, with vLLM's names where the meaning
//! is the same (`vllm:time_to_first_token_seconds`, ...; labels `model_name` and
//! `tenant`). Latencies are observed when a request ends; queue and KV gauges are
//! refreshed from the loop's snapshot at every scrape.

use prometheus::{GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};

pub struct LiveMetrics {
    pub ttft: HistogramVec,
    pub tpot: HistogramVec,
    pub e2e: HistogramVec,
    pub success: IntCounterVec,
    pub prompt_tokens: IntCounterVec,
    pub generation_tokens: IntCounterVec,
    pub sla_violations: IntCounterVec,
    pub running: IntGaugeVec,
    pub waiting: IntGaugeVec,
    pub kv_usage: GaugeVec,
    pub kv_blocks: IntGaugeVec,
    pub preemptions: IntGaugeVec,
    pub offered: GaugeVec,
}

const LABELS: &[&str] = &["model_name", "tenant"];

fn hist(name: &str, help: &str, buckets: &[f64]) -> HistogramVec {
    HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets.to_vec()), LABELS).expect("valid metric")
}

fn counter(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric")
}

fn gauge(name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric")
}

impl LiveMetrics {
    pub fn new(registry: &Registry) -> Self {
        // vLLM's buckets.
        let ttft_b = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0];
        let tpot_b = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5];
        let e2e_b = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0];
        let with_reason = &["model_name", "tenant", "finished_reason"];
        let m = LiveMetrics {
            ttft: hist("vllm:time_to_first_token_seconds", "Time to first token, live requests", &ttft_b),
            tpot: hist("vllm:time_per_output_token_seconds", "Mean time per output token, live requests", &tpot_b),
            e2e: hist("vllm:e2e_request_latency_seconds", "End-to-end latency, live requests", &e2e_b),
            success: counter("vllm:request_success_total", "Live requests that ended, by reason", with_reason),
            prompt_tokens: counter("vllm:prompt_tokens_total", "Prompt tokens of ended live requests", LABELS),
            generation_tokens: counter("vllm:generation_tokens_total", "Generated tokens of live requests", LABELS),
            sla_violations: counter(
                "slicesched_live_sla_violations_total",
                "Live requests whose wall-clock TTFT or mean TPOT missed the tenant's SLA",
                LABELS,
            ),
            running: gauge("vllm:num_requests_running", "Live requests running (admitted to a batch)", LABELS),
            waiting: gauge("vllm:num_requests_waiting", "Live requests waiting for their first batch", LABELS),
            kv_usage: GaugeVec::new(Opts::new("vllm:kv_cache_usage_perc", "KV-cache use, 0 to 1"), LABELS)
                .expect("valid metric"),
            kv_blocks: gauge(
                "slicesched_live_kv_blocks",
                "KV-cache blocks by state",
                &["model_name", "tenant", "state"],
            ),
            preemptions: gauge("slicesched_live_preemptions", "Preemptions since the cluster started", LABELS),
            offered: GaugeVec::new(
                Opts::new(
                    "slicesched_live_offered_load",
                    "Offered load per second (what: requests, prompt_tokens, output_tokens; window: \
                     average, the ~50-s moving average, or forecast, the higher of it and the last minute's busiest 10 s)",
                ),
                &["model_name", "tenant", "what", "window"],
            )
            .expect("valid metric"),
        };
        for c in [
            Box::new(m.ttft.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(m.tpot.clone()),
            Box::new(m.e2e.clone()),
            Box::new(m.success.clone()),
            Box::new(m.prompt_tokens.clone()),
            Box::new(m.generation_tokens.clone()),
            Box::new(m.sla_violations.clone()),
            Box::new(m.running.clone()),
            Box::new(m.waiting.clone()),
            Box::new(m.kv_usage.clone()),
            Box::new(m.kv_blocks.clone()),
            Box::new(m.preemptions.clone()),
            Box::new(m.offered.clone()),
        ] {
            registry.register(c).expect("metric names are unique");
        }
        m
    }

    /// A request ended: its latencies, tokens and SLA verdict.
    pub fn ended(&self, model: &str, tenant: &str, f: &super::Finished, sla: &slicesched_engine::Sla) {
        let l = [model, tenant];
        self.success.with_label_values(&[model, tenant, f.reason]).inc();
        self.prompt_tokens.with_label_values(&l).inc_by(f.prompt_tokens as u64);
        self.generation_tokens.with_label_values(&l).inc_by(f.completion_tokens as u64);
        if f.completion_tokens == 0 {
            return;
        }
        self.ttft.with_label_values(&l).observe(f.ttft_s);
        self.e2e.with_label_values(&l).observe(f.e2e_s);
        let tpot = (f.completion_tokens > 1).then(|| (f.e2e_s - f.ttft_s) / (f.completion_tokens - 1) as f64);
        if let Some(t) = tpot {
            self.tpot.with_label_values(&l).observe(t);
        }
        let late_first = f.ttft_s * 1e9 > sla.ttft_target_ns(f.prompt_tokens) as f64;
        let slow = tpot.is_some_and(|t| t * 1e9 > sla.tpot_target_ns() as f64);
        if late_first || slow {
            self.sla_violations.with_label_values(&l).inc();
        }
    }

    /// Queue and KV gauges from the loop's snapshot.
    pub fn refresh(&self, c: &super::Cluster) {
        let s = c.snapshot();
        for (t, now) in c.tenants.iter().zip(&s.tenants) {
            let l = [t.model_id.as_str(), t.name.as_str()];
            self.running.with_label_values(&l).set(now.running as i64);
            self.waiting.with_label_values(&l).set(now.waiting as i64);
            let used = now.kv_blocks_total.saturating_sub(now.kv_blocks_free);
            self.kv_usage.with_label_values(&l).set(used as f64 / now.kv_blocks_total.max(1) as f64);
            self.kv_blocks.with_label_values(&[&t.model_id, &t.name, "used"]).set(used as i64);
            self.kv_blocks.with_label_values(&[&t.model_id, &t.name, "free"]).set(now.kv_blocks_free as i64);
            self.preemptions.with_label_values(&l).set(now.preemptions as i64);
            for (window, rates) in [
                (
                    "average",
                    [now.offered_requests_per_s, now.offered_prompt_tokens_per_s, now.offered_output_tokens_per_s],
                ),
                (
                    "forecast",
                    [now.forecast_requests_per_s, now.forecast_prompt_tokens_per_s, now.forecast_output_tokens_per_s],
                ),
            ] {
                for (what, v) in ["requests", "prompt_tokens", "output_tokens"].into_iter().zip(rates) {
                    self.offered.with_label_values(&[&t.model_id, &t.name, what, window]).set(v);
                }
            }
        }
    }
}
