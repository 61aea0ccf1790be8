//! Logs and spans (`tracing`), OTLP export of spans and metrics when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set, and the Prometheus registry behind `/metrics`.
//!
//! Call [`init`] before starting the tokio runtime: the OTLP exporters use blocking
//! HTTP clients on their own threads, which must not be created or dropped inside it.

use opentelemetry::metrics::{Counter, Gauge};
use opentelemetry::KeyValue;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder,
};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

/// What [`init`] installed; dropping it without [`Telemetry::shutdown`] loses the last batch.
pub struct Telemetry {
    tracer: Option<SdkTracerProvider>,
    meter: Option<SdkMeterProvider>,
}

impl Telemetry {
    pub fn shutdown(self) {
        if let Some(t) = self.tracer {
            let _ = t.shutdown();
        }
        if let Some(m) = self.meter {
            let _ = m.shutdown();
        }
    }
}

/// Installs the global subscriber (fmt to stderr, `RUST_LOG` filter, default `info`) and,
/// when `OTEL_EXPORTER_OTLP_ENDPOINT` is set, OTLP/HTTP span and metric exporters.
pub fn init() -> Result<Telemetry, String> {
    let endpoint = std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").ok().filter(|e| !e.is_empty());
    init_with(endpoint.as_deref())
}

/// [`init`] with the collector's base URL given (`/v1/traces` and `/v1/metrics` are
/// appended, as for `OTEL_EXPORTER_OTLP_ENDPOINT`); None: no export.
pub fn init_with(endpoint: Option<&str>) -> Result<Telemetry, String> {
    let Some(endpoint) = endpoint else {
        subscriber(None).try_init().map_err(|e| e.to_string())?;
        return Ok(Telemetry { tracer: None, meter: None });
    };
    let tracer = otlp_tracer(endpoint)?;
    let meter = otlp_meter(endpoint)?;
    opentelemetry::global::set_meter_provider(meter.clone());
    subscriber(Some(&tracer)).try_init().map_err(|e| e.to_string())?;
    Ok(Telemetry { tracer: Some(tracer), meter: Some(meter) })
}

fn resource() -> Resource {
    Resource::builder().with_service_name("slicesched").build()
}

fn signal_url(base: &str, signal: &str) -> String {
    format!("{}/v1/{signal}", base.trim_end_matches('/'))
}

/// Spans batched and sent over OTLP/HTTP (protobuf) to `base`/v1/traces.
pub fn otlp_tracer(base: &str) -> Result<SdkTracerProvider, String> {
    use opentelemetry_otlp::WithExportConfig;
    let spans = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(signal_url(base, "traces"))
        .build()
        .map_err(|e| e.to_string())?;
    Ok(SdkTracerProvider::builder().with_resource(resource()).with_batch_exporter(spans).build())
}

/// Metrics sent periodically over OTLP/HTTP (protobuf) to `base`/v1/metrics.
pub fn otlp_meter(base: &str) -> Result<SdkMeterProvider, String> {
    use opentelemetry_otlp::WithExportConfig;
    let metrics = opentelemetry_otlp::MetricExporter::builder()
        .with_http()
        .with_endpoint(signal_url(base, "metrics"))
        .build()
        .map_err(|e| e.to_string())?;
    Ok(SdkMeterProvider::builder().with_resource(resource()).with_periodic_exporter(metrics).build())
}

/// The subscriber [`init`] installs: fmt to stderr under the `RUST_LOG` filter (default
/// `info`), and every span to `tracer` when one is given. Tests install it per thread.
pub fn subscriber(tracer: Option<&SdkTracerProvider>) -> impl tracing::Subscriber + Send + Sync + 'static {
    use opentelemetry::trace::TracerProvider as _;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let otel = tracer.map(|t| tracing_opentelemetry::layer().with_tracer(t.tracer("slicesched")));
    tracing_subscriber::registry().with(filter).with(fmt).with(otel)
}

/// The service's metrics, exposed in Prometheus text format and, through the global
/// meter (a no-op unless OTLP is configured), over OTLP.
pub struct Metrics {
    registry: Registry,
    pub http_requests: IntCounterVec,
    pub http_latency: HistogramVec,
    pub runs: IntCounterVec,
    pub runs_in_flight: IntGaugeVec,
    pub decisions: IntCounterVec,
    pub decision_latency_us: GaugeVec,
    pub sla_violations: IntCounterVec,
    pub gpu_busy: GaugeVec,
    /// Live serving's, per tenant (vLLM's names).
    pub live: crate::live::metrics::LiveMetrics,
    otel_decisions: Counter<u64>,
    otel_violations: Counter<u64>,
    otel_gpu_busy: Gauge<f64>,
    otel_decision_us: Gauge<f64>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let reg = |c: Box<dyn prometheus::core::Collector>| registry.register(c).expect("metric names are unique");
        let http_requests = IntCounterVec::new(
            Opts::new("slicesched_http_requests_total", "HTTP requests by method, route and status"),
            &["method", "route", "status"],
        )
        .expect("valid metric");
        let http_latency = HistogramVec::new(
            HistogramOpts::new("slicesched_http_request_duration_seconds", "HTTP request latency")
                .buckets(vec![0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0]),
            &["method", "route"],
        )
        .expect("valid metric");
        let runs = IntCounterVec::new(
            Opts::new("slicesched_runs_total", "Finished runs by kind and status"),
            &["kind", "status"],
        )
        .expect("valid metric");
        let runs_in_flight =
            IntGaugeVec::new(Opts::new("slicesched_runs_in_flight", "Runs queued or running"), &["state"])
                .expect("valid metric");
        let decisions = IntCounterVec::new(
            Opts::new("slicesched_scheduling_decisions_total", "Policy decision batches of finished replays"),
            &["policy"],
        )
        .expect("valid metric");
        let decision_latency_us = GaugeVec::new(
            Opts::new("slicesched_decision_latency_microseconds", "Decision batch latency of the latest replay"),
            &["policy", "quantile"],
        )
        .expect("valid metric");
        let sla_violations = IntCounterVec::new(
            Opts::new("slicesched_sla_violations_total", "Requests that missed their SLA in finished replays"),
            &["policy", "tenant"],
        )
        .expect("valid metric");
        let gpu_busy = GaugeVec::new(
            Opts::new("slicesched_gpu_busy_fraction", "GPU busy fraction of the latest replay"),
            &["policy", "gpu"],
        )
        .expect("valid metric");
        reg(Box::new(http_requests.clone()));
        reg(Box::new(http_latency.clone()));
        reg(Box::new(runs.clone()));
        reg(Box::new(runs_in_flight.clone()));
        reg(Box::new(decisions.clone()));
        reg(Box::new(decision_latency_us.clone()));
        reg(Box::new(sla_violations.clone()));
        reg(Box::new(gpu_busy.clone()));
        let meter = opentelemetry::global::meter("slicesched");
        let live = crate::live::metrics::LiveMetrics::new(&registry);
        Metrics {
            live,
            registry,
            http_requests,
            http_latency,
            runs,
            runs_in_flight,
            decisions,
            decision_latency_us,
            sla_violations,
            gpu_busy,
            otel_decisions: meter.u64_counter("slicesched.scheduling.decisions").build(),
            otel_violations: meter.u64_counter("slicesched.sla.violations").build(),
            otel_gpu_busy: meter.f64_gauge("slicesched.gpu.busy_fraction").build(),
            otel_decision_us: meter.f64_gauge("slicesched.decision.latency_us").build(),
        }
    }

    /// Records what a finished replay measured.
    pub fn record_replay(&self, s: &slicesched_sim::Summary) {
        let policy = s.policy.as_str();
        self.decisions.with_label_values(&[policy]).inc_by(s.scheduling.decisions);
        self.otel_decisions.add(s.scheduling.decisions, &[KeyValue::new("policy", policy.to_string())]);
        for (q, v) in [("0.5", s.timing.decision_p50_us), ("0.99", s.timing.decision_p99_us)] {
            self.decision_latency_us.with_label_values(&[policy, q]).set(v);
            self.otel_decision_us
                .record(v, &[KeyValue::new("policy", policy.to_string()), KeyValue::new("quantile", q)]);
        }
        for t in &s.tenants {
            let violated = (t.violation_rate * t.requests as f64).round() as u64;
            self.sla_violations.with_label_values(&[policy, &t.name]).inc_by(violated);
            self.otel_violations
                .add(violated, &[KeyValue::new("policy", policy.to_string()), KeyValue::new("tenant", t.name.clone())]);
        }
        for g in &s.gpus {
            let gpu = g.gpu.to_string();
            self.gpu_busy.with_label_values(&[policy, &gpu]).set(g.busy_fraction);
            self.otel_gpu_busy
                .record(g.busy_fraction, &[KeyValue::new("policy", policy.to_string()), KeyValue::new("gpu", gpu)]);
        }
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut buf).expect("text encoding cannot fail");
        String::from_utf8(buf).expect("the text format is UTF-8")
    }
}
