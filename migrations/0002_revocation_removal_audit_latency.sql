-- Key revocation, soft removal of tenants, the audit log's read filters, and the whole-run
-- latency histograms. Never edit an applied migration: add a new file.

-- A revoked key answers 401 from the moment it is revoked; the row stays for the record.
alter table api_keys add column revoked_at timestamptz;
alter table api_keys add column revoked_by text;

-- A removed tenant keeps its SLA history and its runs' records; its keys are revoked and
-- its routes answer 404. Its name may be given to a new tenant.
alter table tenants add column removed_at timestamptz;
alter table tenants add column removed_by text;
alter table tenants drop constraint tenants_name_key;
-- Same name as the old constraint: error.rs maps it to a 409 naming `name`.
create unique index tenants_name_key on tenants (name) where removed_at is null;

-- GET /api/v1/audit pages newest first on id, optionally filtered by actor, action or
-- target: each filter has an index that serves the page in id order.
create index audit_log_actor_idx on audit_log (actor, id desc);
create index audit_log_action_idx on audit_log (action, id desc);
create index audit_log_target_idx on audit_log (target, id desc);

-- The whole-run latency histograms (GET /api/v1/runs/{id}/latency) scan one run's
-- records: a covering index lets that be an index-only scan.
create index run_requests_latency_idx on run_requests (run_id, tenant)
    include (ttft_ms, tpot_ms, arrival_ns, finish_ns);

-- The histograms of a finished run, computed once on first read (a run's records never
-- change once it succeeded). `tenant` is '' for all tenants.
create table run_latency (
    run_id     uuid not null references runs (id) on delete cascade,
    tenant     text not null,
    latency    jsonb not null,
    created_at timestamptz not null default now(),
    primary key (run_id, tenant)
);
