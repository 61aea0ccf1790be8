// Shapes of the control plane's REST API (/api/openapi.json is the authority; only the
// fields the UI reads are typed, and every one is treated as possibly absent).

export type Role = 'admin' | 'tenant' | 'analyst';
export interface Me { role: Role; name: string; tenant_id: number | string | null }

export type RunStatus = 'queued' | 'running' | 'succeeded' | 'failed' | 'cancelled' | 'interrupted';

export interface Run {
  id: string | number;
  /** `live`: traffic a live cluster served (running while it serves). */
  kind: 'replay' | 'sweep' | 'live';
  scenario: string;
  policies: string[];
  status: RunStatus;
  progress: number;
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
  error: string | null;
  summary: Summary | SweepReport | null;
  /** A sweep's violation targets (fractions), when the API gives them. */
  violation_targets?: number[] | null;
  /** Replays: the arrival-rate multiplier asked for (null: 1×). */
  rate_scale?: number | null;
  /** How the run ran (null for runs stored before parameters were recorded). */
  params?: RunParams | null;
  /** Set when the policy's plugin failed and the fallback decided instead. */
  fallback?: Fallback | null;
}

export interface ResolvedPolicy { name: string; version: string; sha256: string; kind: 'wasm' | 'native' | string;
  interface_version: string; plugin_id: string;
  /** The run named this exact component (a trial of an uploaded plugin). */
  trial?: boolean }
export interface SlaFigures { ttft_ms: number; ttft_ms_per_1k: number; tpot_ms: number }
export interface AppliedSla extends SlaFigures { scenario_tenant: string; tenant_id: string; tenant: string;
  matched_by: 'request' | 'name' | string; sla_version: number; scenario_sla: SlaFigures }
export interface RunParams {
  scenario: string; scenario_sha256: string; seed: number; rate_scale: number | null;
  violation_targets: number[] | null; policies: ResolvedPolicy[]; core: Record<string, string | number | boolean>;
  /** Sweeps: draws replayed at every scale (absent on older runs: one). */
  seeds?: number;
  /** Replays: which draw of the scenario (0 or absent: its own seed). */
  draw?: number;
  tenants: AppliedSla[];
  /** The files the scenario names, hashed when the run was accepted (absent on older runs). */
  inputs?: InputFile[];
}
export interface InputFile { role: string; path: string; sha256: string; bytes: number }
export interface Fallback { policy: string; plugin: string; version: string; decisions: number; calls: number;
  failures: number; quarantined: boolean; cause: string | null }

export interface Page<T> { items: T[]; next_cursor: string | null }

export interface TenantStats {
  name: string; model: string; gpus: number[]; requests: number; completed: number; dropped: number;
  violation_rate: number; prompt_tokens_per_s: number; output_tokens_per_s: number;
  ttft_p50_ms: number; ttft_p90_ms: number; ttft_p99_ms: number;
  tpot_p50_ms: number; tpot_p90_ms: number; tpot_p99_ms: number;
  sla_ttft_ms: number; sla_ttft_ms_per_1k: number; sla_tpot_ms: number; preemptions: number;
}

export interface GpuStats {
  gpu: number; sku: string; busy_fraction: number; busy_s: number; idle_gaps: number;
  idle_gap_p50_ms: number; idle_gap_p90_ms: number; idle_gap_p99_ms: number;
  peak_memory_gb: number; capacity_gb: number; oom_events: number; ops: number; guest_busy_s: number;
  gap_histogram: { count: number[]; idle_ns: number[] };
}

export interface Summary {
  policy: string; scenario: string; requests: number; completed: number; dropped: number;
  violation_rate: number; duration_s: number; prompt_tokens_per_s: number; output_tokens_per_s: number;
  ttft_p50_ms: number; ttft_p90_ms: number; ttft_p99_ms: number;
  tpot_p50_ms: number; tpot_p90_ms: number; tpot_p99_ms: number;
  oom_events: number; op_events: number; gpu_busy_fraction: number;
  scheduling?: { borrowed_ops: number; recalled_ops?: number; transfers: number; transfer_gb: number; decisions: number };
  tenants: TenantStats[]; gpus: GpuStats[];
  /** The planner's what-if, when it had candidate plans to choose from. */
  plan?: PlanChoice;
}

export interface PlanChoice {
  chosen: string; window_start_s: number; window_s: number; window_requests: number;
  candidates: { order: string; violation_rate: number; stopped_early: boolean }[];
}

export interface SweepReport {
  scenario: string;
  results: { policy: string; target: number; rate_scale: number; prompt_tokens_per_s: number;
    output_tokens_per_s: number; violation_rate: number; oom_events: number; status?: string }[];
  ratios: { policy: string; target: number; goodput_vs_dedicated: number | null }[];
  points: { policy: string; rate_scale: number; violation_rate: number; prompt_tokens_per_s: number;
    output_tokens_per_s: number; oom_events: number }[];
  /** The draws' seeds when each point replayed several (absent for one). Past 2^53: for counting, not for showing. */
  seeds?: number[];
}

export interface Series {
  bucket_s: number;
  prompt_tokens: number[]; output_tokens: number[]; completed: number[]; violations: number[];
  gpu_busy_ns: number[][];
}

export interface RequestRow {
  id: number; tenant: string; arrival_ns: number; prompt_tokens: number; output_tokens: number;
  ttft_ms: number | null; tpot_ms: number | null; violated: boolean; dropped: string | null;
}

/** A span of a replay whose ops are (being) recorded one by one. */
export interface TimelineWindowInfo { id: string; run_id: string; reason: 'start' | 'busiest' | 'violations' | 'requested' | string;
  from_ns: number; to_ns: number; status: string; progress: number; recorded_to_ns: number | null; ops: number;
  created_by: string; created_at: string; finished_at: string | null; error: string | null }

/** `gpus`: the run's GPU indices (older answers gave a count). */
export interface TimelineMeta { from_ns: number; to_ns: number; ops: number; gpus: number[] | number; tenants: string[];
  run_end_ns?: number; whole_run?: boolean; bucket_ns?: number | null; windows?: TimelineWindowInfo[];
  version?: number; status?: string }

export interface OpsColumns {
  gpu: number[]; start_ns: number[]; end_ns: number[]; tenant: number[]; kind: (string | number)[];
  layer: number[]; predicted_ns: number[]; transfer_ns: number[]; borrowed: (boolean | number)[];
  prefill_tokens: number[]; decodes: number[]; kinds?: string[];
}

export interface BucketColumns { gpu: number[]; t0_ns: number[]; busy_ns: number[]; tenant_busy_ns: number[][];
  borrowed_ns?: number[]; ops?: number[] }

/** `recorded`: the spans of the window the answer covers (elsewhere: not recorded, not idle). */
export type TimelineWindow =
  | { mode: 'ops'; ops: OpsColumns; recorded?: [number, number][] }
  | { mode: 'buckets'; bucket_ns: number; buckets: BucketColumns; recorded?: [number, number][] };

export interface Tenant { id: number | string; name: string; model?: string; created_at?: string; sla?: Sla | null }
export interface Sla { ttft_ms: number; ttft_ms_per_1k?: number; tpot_ms: number; version?: number;
  changed_by?: string; changed_at?: string }
export interface Plugin { id: number | string; name: string; version: string; state: string; sha256_hex?: string;
  interface_version?: string; uploaded_by?: string; created_at?: string; size_bytes?: number; builtin?: boolean }
export type Scenario = string | { name: string };

/** One latency's whole-run histogram (GET /runs/{id}/latency): log-spaced bins. */
export interface LatencyHistogram {
  count: number; min_ms: number | null; max_ms: number | null; mean_ms: number | null;
  p50_ms: number | null; p90_ms: number | null; p99_ms: number | null;
  edges_ms: number[]; counts: number[];
}
export interface RunLatency {
  run_id: string; tenant: string | null; requests: number; bins_per_decade: number;
  ttft_ms: LatencyHistogram; tpot_ms: LatencyHistogram; e2e_ms: LatencyHistogram;
}

export interface ApiKey { id: string; name: string; role: Role; tenant_id: string | null; created_by: string;
  created_at: string; revoked_at: string | null; revoked_by: string | null }

export interface AuditEntry { id: number; at: string; actor: string; action: string; target: string;
  detail: Record<string, unknown> }
