-- The control plane's schema. Never edit an applied migration: add a new file.

create table tenants (
    id          uuid primary key,
    name        text not null,
    created_at  timestamptz not null default now(),
    constraint tenants_name_key unique (name)
);

-- Bearer keys, stored as the sha256 of the token: the token itself is shown once.
create table api_keys (
    id           uuid primary key,
    token_sha256 bytea not null,
    role         text not null check (role in ('tenant', 'analyst')),
    name         text not null,
    tenant_id    uuid references tenants (id) on delete cascade,
    created_by   text not null,
    created_at   timestamptz not null default now(),
    constraint api_keys_token_key unique (token_sha256),
    constraint api_keys_tenant_role check ((role = 'tenant') = (tenant_id is not null))
);

-- Every SLA a tenant ever had; the current one is the highest version.
create table sla_versions (
    tenant_id      uuid not null references tenants (id) on delete cascade,
    version        int not null check (version > 0),
    ttft_ms        double precision not null check (ttft_ms > 0),
    ttft_ms_per_1k double precision not null check (ttft_ms_per_1k >= 0),
    tpot_ms        double precision not null check (tpot_ms > 0),
    changed_by     text not null,
    changed_at     timestamptz not null default now(),
    primary key (tenant_id, version)
);

create table models (
    id          uuid primary key,
    name        text not null,
    config      jsonb not null,
    created_by  text not null,
    created_at  timestamptz not null default now(),
    constraint models_name_key unique (name)
);

create table clusters (
    id          uuid primary key,
    name        text not null,
    spec        jsonb not null,
    created_by  text not null,
    created_at  timestamptz not null default now(),
    constraint clusters_name_key unique (name)
);

-- Policy plugins: uploaded Wasm components (bytes kept), or the built-in policies
-- the binary carries (no bytes).
create table plugins (
    id                uuid primary key,
    name              text not null,
    version           text not null,
    interface_version text not null,
    sha256_hex        text not null,
    size_bytes        bigint not null,
    bytes             bytea,
    builtin           boolean not null default false,
    state             text not null default 'active' check (state in ('active', 'disabled', 'quarantined')),
    uploaded_by       text not null,
    created_at        timestamptz not null default now(),
    updated_at        timestamptz not null default now(),
    constraint plugins_sha256_key unique (sha256_hex),
    constraint plugins_name_version_key unique (name, version)
);

create table runs (
    id                uuid primary key,
    kind              text not null check (kind in ('replay', 'sweep')),
    scenario          text not null,
    scenario_toml     text not null,
    policies          text[] not null,
    rate_scale        double precision,
    violation_targets double precision[],
    tenant_names      text[] not null default '{}',
    gpus              int not null default 0,
    -- The recorded op window (timeline): bounds, count and longest op, so a window
    -- query can bound its index scan.
    ops_from_ns       bigint,
    ops_to_ns         bigint,
    ops_count         bigint not null default 0,
    ops_max_ns        bigint not null default 0,
    status            text not null default 'queued'
        check (status in ('queued', 'running', 'succeeded', 'failed', 'cancelled', 'interrupted')),
    progress          double precision not null default 0 check (progress >= 0 and progress <= 1),
    cancel_requested  boolean not null default false,
    created_by        text not null,
    created_at        timestamptz not null default now(),
    started_at        timestamptz,
    finished_at       timestamptz,
    error             text,
    summary           jsonb
);
-- Run history is listed newest first with keyset pagination on (created_at, id).
create index runs_created_idx on runs (created_at desc, id desc);
create index runs_status_idx on runs (status, created_at desc, id desc);
create index runs_policies_idx on runs using gin (policies);

-- One row per request of a replay.
create table run_requests (
    run_id         uuid not null references runs (id) on delete cascade,
    request_id     int not null,
    tenant         text not null,
    arrival_ns     bigint not null,
    prompt_tokens  int not null,
    output_tokens  int not null,
    first_token_ns bigint,
    finish_ns      bigint,
    ttft_ms        double precision,
    tpot_ms        double precision,
    preemptions    int not null,
    dropped        text,
    violated       boolean not null,
    ttft_target_ms double precision not null,
    tpot_target_ms double precision not null,
    primary key (run_id, request_id)
);
-- The request list filters by tenant and/or violation and pages on request_id.
create index run_requests_tenant_idx on run_requests (run_id, tenant, request_id);
create index run_requests_violated_idx on run_requests (run_id, violated, request_id);

-- Per-second counters of a replay.
create table run_series (
    run_id        uuid not null references runs (id) on delete cascade,
    bucket        int not null,
    prompt_tokens bigint not null,
    output_tokens bigint not null,
    completed     bigint not null,
    violations    bigint not null,
    gpu_busy_ns   bigint[] not null,
    primary key (run_id, bucket)
);

-- Sampled scheduling decisions of a replay.
create table run_decisions (
    run_id    uuid not null references runs (id) on delete cascade,
    seq       int not null,
    at_ns     bigint not null,
    ready_ops int not null,
    borrowed  int not null,
    rejected  int not null,
    primary key (run_id, seq)
);

-- Recorded ops of a replay's window, for the per-GPU timeline.
create table run_ops (
    run_id         uuid not null references runs (id) on delete cascade,
    gpu            int not null,
    start_ns       bigint not null,
    end_ns         bigint not null,
    tenant         int not null,
    kind           text not null,
    layer          int,
    iteration      bigint not null,
    predicted_ns   bigint not null,
    transfer_ns    bigint not null,
    borrowed       boolean not null,
    prefill_tokens int not null,
    decodes        int not null
);
create index run_ops_window_idx on run_ops (run_id, gpu, start_ns);

-- Every change, who made it and when.
create table audit_log (
    id      bigserial primary key,
    at      timestamptz not null default now(),
    actor   text not null,
    action  text not null,
    target  text not null,
    detail  jsonb not null default '{}'
);
create index audit_log_at_idx on audit_log (at desc);
