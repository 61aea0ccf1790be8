-- An uploaded plugin is stored `inactive`: validated in the sandbox, but offered to no run
-- until an admin activates it (after a trial replay, if they like). Built-in policies
-- keep the column's default, `active`. Never edit an applied migration: add a new file.
alter table plugins drop constraint plugins_state_check;
alter table plugins add constraint plugins_state_check
    check (state in ('inactive', 'active', 'disabled', 'quarantined'));
