-- A live run records a sample of its operators while it serves (the first seconds of
-- every period, with predicted and measured times): each sample that saw work is a
-- recorded window of reason `sampled`.
-- Never edit an applied migration: add a new file.
alter table run_windows drop constraint run_windows_reason_check;
alter table run_windows add constraint run_windows_reason_check
    check (reason in ('start', 'busiest', 'violations', 'requested', 'sampled'));
