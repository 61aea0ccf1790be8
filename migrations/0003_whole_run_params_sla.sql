-- Whole-run timelines, runs that say how they ran, SLAs from the control plane.
-- Never edit an applied migration: add a new file.

-- How a run ran, resolved when it was accepted (scenario and its SHA-256, rate scale,
-- seed, the policy as resolved: plugin name, version, SHA-256, wasm or native; the
-- core's options) and completed when it starts (the registered tenants' SLAs applied).
-- Null for runs stored before this migration.
alter table runs add column params jsonb;
-- A run whose plugin failed or was quarantined: the fallback that decided instead and
-- how many decisions it took. Null when the policy decided every call itself.
alter table runs add column fallback jsonb;
-- Scenario tenant name → registered tenant id, as the run request named them.
alter table runs add column tenant_map jsonb;
-- The whole run's busy buckets (run_busy): their width and count.
alter table runs add column busy_bucket_ns bigint;
alter table runs add column busy_buckets int not null default 0;

-- Per (GPU, tenant) of a replay, dense arrays over the run's buckets: op time, the part
-- of it borrowed (run away from the op's home), ops started.
create table run_busy (
    run_id      uuid not null references runs (id) on delete cascade,
    gpu         int not null,
    tenant      int not null,
    busy_ns     int[] not null,
    borrowed_ns int[] not null,
    ops         int[] not null,
    primary key (run_id, gpu, tenant)
);

-- Windows of a replay whose ops are recorded one by one in run_ops: the start of the
-- run (recorded with it), the busiest stretch, the stretch before the worst violation
-- spike, and any window a user asks for (replayed again, deterministically, as a job).
create table run_windows (
    id             uuid primary key,
    run_id         uuid not null references runs (id) on delete cascade,
    reason         text not null check (reason in ('start', 'busiest', 'violations', 'requested')),
    from_ns        bigint not null check (from_ns >= 0),
    to_ns          bigint not null check (to_ns > from_ns),
    status         text not null default 'queued'
        check (status in ('queued', 'running', 'recorded', 'failed', 'cancelled', 'interrupted')),
    progress       double precision not null default 0 check (progress >= 0 and progress <= 1),
    -- Ops are recorded from from_ns up to recorded_to_ns (to_ns unless the op cap cut
    -- the window short): the timeline answers op by op only inside that span.
    recorded_to_ns bigint,
    ops            bigint not null default 0,
    created_by     text not null,
    created_at     timestamptz not null default now(),
    finished_at    timestamptz,
    error          text
);
create index run_windows_run_idx on run_windows (run_id, from_ns);

-- Runs stored before this migration recorded their first ops: that is their window.
insert into run_windows (id, run_id, reason, from_ns, to_ns, status, progress, recorded_to_ns, ops, created_by,
                         finished_at)
select gen_random_uuid(), id, 'start', ops_from_ns, greatest(ops_to_ns, ops_from_ns + 1), 'recorded', 1,
       greatest(ops_to_ns, ops_from_ns + 1), ops_count, created_by, finished_at
from runs where ops_count > 0 and ops_from_ns is not null;

-- Which registered tenant each scenario tenant of a run was, and the SLA version in
-- force when the run started (applied to its requests and recorded here).
create table run_tenants (
    run_id          uuid not null references runs (id) on delete cascade,
    scenario_tenant text not null,
    tenant_id       uuid not null references tenants (id),
    matched_by      text not null check (matched_by in ('request', 'name')),
    sla_version     int not null,
    ttft_ms         double precision not null,
    ttft_ms_per_1k  double precision not null,
    tpot_ms         double precision not null,
    primary key (run_id, scenario_tenant),
    foreign key (tenant_id, sla_version) references sla_versions (tenant_id, version)
);
create index run_tenants_tenant_idx on run_tenants (tenant_id, run_id);
