-- Live traffic is stored as a run of kind `live`: the requests a live cluster served
-- (per-request records, per-second series, latency histograms), written when it stops.
-- Never edit an applied migration: add a new file.
alter table runs drop constraint runs_kind_check;
alter table runs add constraint runs_kind_check check (kind in ('replay', 'sweep', 'live'));
