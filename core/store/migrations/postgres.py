"""The PostgreSQL store's migrations: the statements that bring a store's schema of version N - 1 to
version N, and the functions they create (``commit_change``, the run counters; ``commit_boundary`` and
``start_run`` before version 10).

The tables they arrive at are :mod:`relaypoint.store.schema`'s; ``meta`` holds the version.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from ...status import StepStatus
from ..schema import LEASE_COLUMNS
from ..commit import NEW_RUN_COLUMNS, OPEN_STEP_STATUSES
from ..sql import PAUSED, UNANNOUNCED, UNDECIDED
from . import paused_seq_derived

LOCK_CLASS = 0x52504E54
"""The first key of a schema's advisory lock ("RPNT"; the second is :func:`lock_key`)."""
FENCE_REFUSED = "RPF01"
"""The SQLSTATE a refused write raises, rolling back what it wrote (commit_boundary's run update;
commit_change's refusal after its run insert)."""


def lock_key(schema: str) -> int:
    """The second key of the schema's advisory lock: a stable 32-bit hash of its name."""
    return int.from_bytes(hashlib.blake2b(schema.encode(), digest_size=4).digest(), "big", signed=True)


_BOUNDARY_PARAMETERS = """
                p_run text, p_fence text, p_at timestamptz, p_fields text[],
                p_status text, p_updated_at timestamptz, p_current_step text, p_steps_done bigint,
                p_steps_total bigint, p_error text, p_fingerprint text, p_suspect_deaths bigint,
                p_lease_token text, p_lease_pid bigint, p_lease_pid_start text, p_lease_host text,
                p_lease_expires_at timestamptz, p_heartbeat_at timestamptz,
                p_end_seq bigint, p_end_status text, p_end_error text, p_end_traceback text, p_output text,
                p_start_seq bigint, p_start_attempt bigint, p_new boolean, p_new_name text, p_new_iteration bigint,
                p_new_agent text, p_new_parent bigint, p_new_options text, p_new_key text,
                p_cp_kind text, p_cp_run text, p_cp_seq bigint, p_cp_step text, p_cp_at timestamptz,
                p_cp_reason text, p_cp_state text, p_cp_deadline timestamptz,
                p_ev_kinds text[], p_ev_steps text[], p_ev_actors text[], p_ev_details text[],
                p_ev_names boolean[], p_lock1 integer, p_lock2 integer"""
"""The parameters of the schema's ``commit_boundary`` function of versions 1 to 6, in order (``start_run``
took them first); version 7 reads them from a document (``_BOUNDARY_TYPE``)."""


def _commit_boundary_function(schema: str, notify: str | None, document: bool = False,
                              listened: bool = False, paused: bool = False) -> str:
    """The schema's ``commit_boundary`` function (see ``_migrate_1``); with ``notify`` (a channel), it
    also notifies that channel (version 2), and replaces the one there. ``document`` (version 7): the
    boundary is one ``json`` argument read into the schema's ``boundary`` type, its output and its
    checkpoint's state two ``text`` ones; otherwise each field is an argument of its own.
    ``listened`` (version 8): it notifies only while a console listens (a row in ``listeners``).
    ``paused`` (version 9): the checkpoint's ``paused_seq`` is the document's ``cp_paused``."""
    p = "b." if document else "p_"
    header = (f"{schema}.commit_boundary(doc json, p_output text, p_cp_state text)" if document
              else f"{schema}.commit_boundary({_BOUNDARY_PARAMETERS})")
    declared = f"b {schema}.boundary := json_populate_record(NULL::{schema}.boundary, doc);" if document else ""
    paused_column, paused_value = (", paused_seq", f", {p}cp_paused") if paused else ("", "")
    return (
        f"""CREATE {'OR REPLACE ' if notify and not document else ''}FUNCTION {header} RETURNS bigint
            LANGUAGE plpgsql AS $$
            DECLARE{f'{chr(10)}                {declared}' if declared else ''}
                updated bigint;
                cp bigint;
            BEGIN
                PERFORM pg_advisory_xact_lock_shared({p}lock1, {p}lock2);
                UPDATE {schema}.runs SET
                    {_kept_unless_given(p)}
                WHERE run_id = {p}run AND ({p}fence IS NULL OR lease_token = {p}fence);
                GET DIAGNOSTICS updated = ROW_COUNT;
                IF updated <> 1 THEN
                    RAISE EXCEPTION 'relaypoint: the boundary''s run update was refused' USING ERRCODE = '{FENCE_REFUSED}';
                END IF;{_notification(schema, notify, listened)}
                IF {p}end_seq IS NOT NULL THEN
                    UPDATE {schema}.steps SET status = {p}end_status, finished_at = {p}at, error = {p}end_error,
                                              traceback = {p}end_traceback
                        WHERE run_id = {p}run AND seq = {p}end_seq;
                    IF p_output IS NOT NULL THEN
                        INSERT INTO {schema}.outputs (run_id, seq, value) VALUES ({p}run, {p}end_seq, p_output)
                            ON CONFLICT (run_id, seq) DO UPDATE SET value = excluded.value;
                    END IF;
                END IF;
                IF {p}new THEN
                    INSERT INTO {schema}.steps (run_id, seq, name, iteration, agent, parent_seq, status, attempts,
                                                options, started_at, idempotency_key)
                        VALUES ({p}run, {p}start_seq, {p}new_name, {p}new_iteration, {p}new_agent, {p}new_parent,
                                '{StepStatus.RUNNING.value}', {p}start_attempt, {p}new_options, {p}at, {p}new_key);
                ELSIF {p}start_seq IS NOT NULL THEN
                    UPDATE {schema}.steps SET status = '{StepStatus.RUNNING.value}', attempts = {p}start_attempt,
                                              started_at = {p}at, finished_at = NULL, error = NULL, traceback = NULL
                        WHERE run_id = {p}run AND seq = {p}start_seq;
                END IF;
                IF {p}cp_kind IS NOT NULL THEN
                    INSERT INTO {schema}.checkpoints (run_id, seq, step, kind, created_at, reason, state, deadline_at{
                                                          paused_column})
                        VALUES ({p}cp_run, {p}cp_seq, {p}cp_step, {p}cp_kind, {p}cp_at, {p}cp_reason, p_cp_state,
                                {p}cp_deadline{paused_value})
                        RETURNING checkpoint_id INTO cp;
                END IF;
                IF cardinality({p}ev_kinds) > 0 THEN
                    INSERT INTO {schema}.events (run_id, at, kind, step, actor, detail)
                        SELECT {p}run, {p}at, e.kind, e.step, e.actor,
                               CASE WHEN e.names THEN '{{"checkpoint_id": ' || cp || e.detail ELSE e.detail END
                        FROM unnest({p}ev_kinds, {p}ev_steps, {p}ev_actors, {p}ev_details, {p}ev_names)
                             WITH ORDINALITY AS e(kind, step, actor, detail, names, n)
                        ORDER BY e.n;
                END IF;
                RETURN cp;
            END $$""")


def _kept_unless_given(p: str) -> str:
    """The SET list of version 1 to 9's ``commit_boundary``: each run column takes the argument's value
    when its field is named in ``fields`` (the lease columns all together, as ``lease``), else keeps its own."""
    given = [(c, c) for c in ("status", "updated_at", "current_step", "steps_done", "steps_total", "error",
                              "fingerprint", "suspect_deaths")] + [(c, "lease") for c in LEASE_COLUMNS]
    return ",\n                    ".join(f"{c} = CASE WHEN '{f}' = ANY({p}fields) THEN {p}{c} ELSE {c} END"
                                         for c, f in given)


def _notification(schema: str, notify: str | None, listened: bool) -> str:
    """The lines of ``commit_boundary`` that notify (see :func:`_commit_boundary_function`)."""
    if not notify:
        return ""
    if not listened:
        return f"\n                PERFORM pg_notify('{notify}', '');"
    return (f"\n                IF EXISTS (SELECT 1 FROM {schema}.listeners) THEN"
            f"\n                    PERFORM pg_notify('{notify}', '');"
            "\n                END IF;")


def _migrate_1(schema: str) -> list[str]:
    """The tables, indexes and triggers of the SQLite store's schema 3 (this backend's version 1)."""
    c = 'COLLATE "C"'
    return [
        "CREATE TABLE meta (key text PRIMARY KEY, value text NOT NULL)",
        f"""CREATE TABLE runs (
               run_id text {c} PRIMARY KEY,
               workflow text {c} NOT NULL,
               status text {c} NOT NULL,
               parent_run_id text {c},
               forked_from_step text {c},
               fingerprint text {c},
               created_at timestamptz NOT NULL,
               updated_at timestamptz NOT NULL,
               current_step text {c},
               steps_done bigint NOT NULL DEFAULT 0,
               steps_total bigint NOT NULL DEFAULT 0,
               suspect_deaths bigint NOT NULL DEFAULT 0,
               error text,
               lease_token text {c},
               lease_pid bigint,
               lease_pid_start text {c},
               lease_host text {c},
               lease_expires_at timestamptz,
               heartbeat_at timestamptz
           )""",
        f"CREATE TABLE run_inputs (run_id text {c} PRIMARY KEY REFERENCES runs (run_id), input text NOT NULL)",
        f"CREATE TABLE definitions (fingerprint text {c} PRIMARY KEY, definition text NOT NULL)",
        f"""CREATE TABLE steps (
               run_id text {c} NOT NULL REFERENCES runs (run_id),
               seq bigint NOT NULL,
               name text {c} NOT NULL,
               iteration bigint NOT NULL DEFAULT 1,
               agent text {c},
               parent_seq bigint,
               status text {c} NOT NULL,
               attempts bigint NOT NULL DEFAULT 0,
               options text NOT NULL DEFAULT '{{}}',
               error text,
               traceback text,
               started_at timestamptz,
               finished_at timestamptz,
               idempotency_key text {c} NOT NULL,
               PRIMARY KEY (run_id, seq)
           )""",
        f"""CREATE TABLE outputs (
               run_id text {c} NOT NULL REFERENCES runs (run_id),
               seq bigint NOT NULL,
               value text,
               PRIMARY KEY (run_id, seq)
           )""",
        f"""CREATE TABLE checkpoints (
               checkpoint_id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
               run_id text {c} NOT NULL REFERENCES runs (run_id),
               seq bigint NOT NULL,
               step text {c},
               kind text {c} NOT NULL,
               created_at timestamptz NOT NULL,
               reason text,
               state text,
               decision text {c},
               decided_by text,
               decided_at timestamptz,
               comment text,
               value text,
               deadline_at timestamptz
           )""",
        f"""CREATE TABLE events (
               event_id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
               run_id text {c} NOT NULL REFERENCES runs (run_id),
               at timestamptz NOT NULL,
               kind text {c} NOT NULL,
               step text {c},
               actor text,
               detail text
           )""",
        f"CREATE TABLE run_counts (status text {c} PRIMARY KEY, runs bigint NOT NULL)",
        # The console's queries: newest-first keyset pages, filtered by status or workflow, forks of
        # a run, the removal of a definition no run uses any more; a run's executions by name.
        "CREATE INDEX runs_by_created ON runs (created_at, run_id)",
        "CREATE INDEX runs_by_status ON runs (status, created_at, run_id)",
        "CREATE INDEX runs_by_workflow ON runs (workflow, created_at, run_id)",
        "CREATE INDEX runs_by_parent ON runs (parent_run_id)",
        "CREATE INDEX runs_by_fingerprint ON runs (fingerprint)",
        "CREATE INDEX steps_by_name ON steps (run_id, name, iteration)",
        "CREATE INDEX checkpoints_by_run ON checkpoints (run_id, checkpoint_id)",
        # Pauses and deadlines in partial indexes a boundary's checkpoint does not touch.
        f"CREATE INDEX checkpoints_due ON checkpoints (deadline_at) WHERE deadline_at IS NOT NULL AND {UNDECIDED}",
        f"CREATE INDEX checkpoints_paused ON checkpoints (run_id, checkpoint_id) WHERE {PAUSED}",
        "CREATE INDEX events_by_run ON events (run_id, event_id)",
        # Runs per status, kept in the transaction that changes a run. A status change locks the two
        # counter rows in status order, so two boundaries never wait on each other in a cycle.
        f"""CREATE FUNCTION {schema}.run_counts_change(status_from text, status_to text) RETURNS void
            LANGUAGE plpgsql AS $$
            BEGIN
                IF status_from IS NOT NULL AND (status_to IS NULL OR status_from < status_to) THEN
                    UPDATE {schema}.run_counts SET runs = runs - 1 WHERE status = status_from;
                    status_from := NULL;
                END IF;
                IF status_to IS NOT NULL THEN
                    INSERT INTO {schema}.run_counts (status, runs) VALUES (status_to, 1)
                        ON CONFLICT (status) DO UPDATE SET runs = run_counts.runs + 1;
                END IF;
                IF status_from IS NOT NULL THEN
                    UPDATE {schema}.run_counts SET runs = runs - 1 WHERE status = status_from;
                END IF;
            END $$""",
        # A step boundary in one statement (its own transaction): the run update, fenced and checked
        # first (a refusal raises FENCE_REFUSED and nothing is written), the ended execution and its
        # output, the started one, the checkpoint, the events (those naming the checkpoint get its id).
        # Run fields not in p_fields keep their values. Plans are cached by PL/pgSQL per connection.
        _commit_boundary_function(schema, None),
        f"""CREATE FUNCTION {schema}.run_counts_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF TG_OP = 'INSERT' THEN
                    PERFORM {schema}.run_counts_change(NULL, NEW.status);
                ELSIF TG_OP = 'DELETE' THEN
                    PERFORM {schema}.run_counts_change(OLD.status, NULL);
                ELSE
                    PERFORM {schema}.run_counts_change(OLD.status, NEW.status);
                END IF;
                RETURN NULL;
            END $$""",
        f"CREATE TRIGGER run_counts_insert AFTER INSERT ON runs FOR EACH ROW EXECUTE FUNCTION {schema}.run_counts_trigger()",
        f"CREATE TRIGGER run_counts_delete AFTER DELETE ON runs FOR EACH ROW EXECUTE FUNCTION {schema}.run_counts_trigger()",
        f"""CREATE TRIGGER run_counts_update AFTER UPDATE OF status ON runs FOR EACH ROW
            WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION {schema}.run_counts_trigger()""",
    ]


def channel(schema: str) -> str:
    """The notification channel of the store in ``schema``: ``relaypoint_<schema>`` (a name of at most
    63 characters, PostgreSQL's limit: a longer one ends in a hash of the schema name)."""
    name = f"relaypoint_{schema}"
    return name if len(name) <= 63 else f"relaypoint_{schema[:43]}_{lock_key(schema) & 0xFFFFFFFF:08x}"


def _migrate_2(schema: str) -> list[str]:
    """Version 2: a boundary notifies the schema's channel (``commit_boundary`` calls ``pg_notify``; the
    other write transactions notify from :meth:`PostgresStore.transaction`). Statement triggers on the
    tables would notify for any writer, but cost a boundary more than the notification itself (each
    statement of a boundary would queue a trigger event). The version also keeps older relaypoints,
    whose writes would not notify, from writing to the store."""
    return [_commit_boundary_function(schema, channel(schema))]


def _migrate_3(schema: str) -> list[str]:
    """Version 3: ``commit_boundary`` plans each of its statements once per connection and keeps the
    plan (a generic plan: its writes by primary key never depend on the arguments). A later migration
    that replaces the function must set it again (``CREATE OR REPLACE`` drops it)."""
    return [f"ALTER FUNCTION {schema}.commit_boundary SET plan_cache_mode = force_generic_plan"]


COUNT_SLOTS = 16
"""Rows per status in ``run_counts`` (version 4): a transaction counts its status changes in its
connection's slot (the server process id modulo this)."""


def _migrate_4(schema: str) -> list[str]:
    """Version 4: runs per status are counted in ``COUNT_SLOTS`` rows per status, a connection's
    changes in its own slot, read as their sum, so the status changes of many workers do not queue
    on one counter row. A slot's count may go below zero (a run counted in one slot leaves from
    another); the sums are the counts."""
    return [
        f"ALTER TABLE {schema}.run_counts ADD COLUMN slot smallint NOT NULL DEFAULT 0",
        f"ALTER TABLE {schema}.run_counts DROP CONSTRAINT run_counts_pkey",
        f"ALTER TABLE {schema}.run_counts ADD PRIMARY KEY (status, slot)",
        f"ALTER TABLE {schema}.run_counts ALTER COLUMN slot DROP DEFAULT",
        # The two counter rows of a change are still locked in status order: no cycle of waits.
        f"""CREATE OR REPLACE FUNCTION {schema}.run_counts_change(status_from text, status_to text) RETURNS void
            LANGUAGE plpgsql AS $$
            DECLARE
                mine smallint := pg_backend_pid() % {COUNT_SLOTS};
            BEGIN
                IF status_from IS NOT NULL AND (status_to IS NULL OR status_from < status_to) THEN
                    INSERT INTO {schema}.run_counts (status, slot, runs) VALUES (status_from, mine, -1)
                        ON CONFLICT (status, slot) DO UPDATE SET runs = run_counts.runs - 1;
                    status_from := NULL;
                END IF;
                IF status_to IS NOT NULL THEN
                    INSERT INTO {schema}.run_counts (status, slot, runs) VALUES (status_to, mine, 1)
                        ON CONFLICT (status, slot) DO UPDATE SET runs = run_counts.runs + 1;
                END IF;
                IF status_from IS NOT NULL THEN
                    INSERT INTO {schema}.run_counts (status, slot, runs) VALUES (status_from, mine, -1)
                        ON CONFLICT (status, slot) DO UPDATE SET runs = run_counts.runs - 1;
                END IF;
            END $$""",
    ]


def _migrate_5(schema: str) -> list[str]:
    """Version 5: a run's start is one statement, a call of the schema's ``start_run`` function: the
    run's row, input and definition, its planned executions (given as arrays), its start checkpoint,
    then its first boundary (``commit_boundary``, with the same arguments), in one round trip."""
    return [
        f"""CREATE FUNCTION {schema}.start_run({_BOUNDARY_PARAMETERS},
                r_workflow text, r_status text, r_parent_run text, r_forked_from text, r_fingerprint text,
                r_created_at timestamptz, r_current_step text, r_steps_done bigint, r_steps_total bigint,
                r_lease_token text, r_lease_pid bigint, r_lease_pid_start text, r_lease_host text,
                r_lease_expires_at timestamptz, r_heartbeat_at timestamptz, r_input text, r_definition text,
                s_seqs bigint[], s_names text[], s_iterations bigint[], s_agents text[], s_parents bigint[],
                s_statuses text[], s_attempts bigint[], s_options text[], s_keys text[],
                c_run text, c_seq bigint, c_step text, c_kind text, c_at timestamptz, c_reason text, c_state text,
                c_deadline timestamptz) RETURNS bigint
            LANGUAGE plpgsql AS $$
            BEGIN
                PERFORM pg_advisory_xact_lock_shared(p_lock1, p_lock2);
                INSERT INTO {schema}.runs (run_id, workflow, status, parent_run_id, forked_from_step, fingerprint,
                                           created_at, updated_at, current_step, steps_done, steps_total,
                                           lease_token, lease_pid, lease_pid_start, lease_host, lease_expires_at,
                                           heartbeat_at)
                    VALUES (p_run, r_workflow, r_status, r_parent_run, r_forked_from, r_fingerprint, r_created_at,
                            r_created_at, r_current_step, r_steps_done, r_steps_total, r_lease_token, r_lease_pid,
                            r_lease_pid_start, r_lease_host, r_lease_expires_at, r_heartbeat_at);
                INSERT INTO {schema}.run_inputs (run_id, input) VALUES (p_run, r_input);
                INSERT INTO {schema}.definitions (fingerprint, definition) VALUES (r_fingerprint, r_definition)
                    ON CONFLICT (fingerprint) DO NOTHING;
                INSERT INTO {schema}.steps (run_id, seq, name, iteration, agent, parent_seq, status, attempts, options,
                                            idempotency_key)
                    SELECT p_run, s.* FROM unnest(s_seqs, s_names, s_iterations, s_agents, s_parents, s_statuses,
                                                  s_attempts, s_options, s_keys) AS s;
                INSERT INTO {schema}.checkpoints (run_id, seq, step, kind, created_at, reason, state, deadline_at)
                    VALUES (c_run, c_seq, c_step, c_kind, c_at, c_reason, c_state, c_deadline);
                RETURN {schema}.commit_boundary(
                    {", ".join(p.split()[0] for p in _BOUNDARY_PARAMETERS.split(","))});
            END $$""",
        f"ALTER FUNCTION {schema}.start_run SET plan_cache_mode = force_generic_plan",
    ]


def _migrate_6(schema: str) -> list[str]:
    """Version 6: when a worker with ``--on-pause`` announced a pause (``announced_at``, NULL: not
    yet), and the pauses waiting for that in a partial index of their own (empty when all are
    announced: a worker's poll reads nothing). The pauses open at the upgrade count as announced, as
    on SQLite (see its migration 4): a pause is announced at most once."""
    return [
        f"ALTER TABLE {schema}.checkpoints ADD COLUMN announced_at timestamptz",
        f"UPDATE {schema}.checkpoints SET announced_at = date_trunc('milliseconds', now()) "
        f"WHERE {PAUSED} AND {UNDECIDED}",
        f"CREATE INDEX checkpoints_unannounced ON {schema}.checkpoints (checkpoint_id) WHERE {UNANNOUNCED}",
    ]


_BOUNDARY_TYPE = ", ".join(p.strip()[len("p_"):] for p in _BOUNDARY_PARAMETERS.split(",")
                           if p.split()[0] not in ("p_output", "p_cp_state"))
"""The fields of a boundary's document (the schema's ``boundary`` type, version 7): the parameters
of the version 1 ``commit_boundary`` without their ``p_`` prefix, less the output and the
checkpoint's state (arguments of their own)."""


def _migrate_7(schema: str) -> list[str]:
    """Version 7: ``commit_boundary`` and ``start_run`` take a boundary as one ``json`` document (read
    into the ``boundary`` and ``run_start`` types; ``json``, not ``jsonb``: read once, it is not worth
    ``jsonb``'s conversion) and the values that may be long (an output, a state, a run's input and
    definition) as ``text`` arguments, instead of one argument per field.

    Also: a run's status change is counted (version 4's slots) by one statement of the trigger
    itself, instead of a second function."""
    return [
        f"""CREATE OR REPLACE FUNCTION {schema}.run_counts_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                -- OLD is NULL on INSERT, NEW on DELETE; the two counter rows locked in status order
                -- (no cycle of waits between two changes).
                INSERT INTO {schema}.run_counts (status, slot, runs)
                    SELECT v.status, pg_backend_pid() % {COUNT_SLOTS}, v.change
                    FROM (VALUES (OLD.status, -1), (NEW.status, 1)) AS v (status, change)
                    WHERE v.status IS NOT NULL ORDER BY v.status
                    ON CONFLICT (status, slot) DO UPDATE SET runs = run_counts.runs + excluded.runs;
                RETURN NULL;
            END $$""",
        f"DROP FUNCTION {schema}.run_counts_change",
        f"DROP FUNCTION {schema}.start_run",
        f"DROP FUNCTION {schema}.commit_boundary",
        f"CREATE TYPE {schema}.boundary AS ({_BOUNDARY_TYPE})",
        f"""CREATE TYPE {schema}.run_start AS (
                run text, workflow text, status text, parent_run text, forked_from text, fingerprint text,
                created_at timestamptz, current_step text, steps_done bigint, steps_total bigint,
                lease_token text, lease_pid bigint, lease_pid_start text, lease_host text,
                lease_expires_at timestamptz, heartbeat_at timestamptz,
                s_seqs bigint[], s_names text[], s_iterations bigint[], s_agents text[], s_parents bigint[],
                s_statuses text[], s_attempts bigint[], s_options text[], s_keys text[],
                c_run text, c_seq bigint, c_step text, c_kind text, c_at timestamptz, c_reason text,
                c_deadline timestamptz, lock1 integer, lock2 integer)""",
        _commit_boundary_function(schema, channel(schema), document=True),
        f"ALTER FUNCTION {schema}.commit_boundary SET plan_cache_mode = force_generic_plan",
        f"""CREATE FUNCTION {schema}.start_run(doc json, r_input text, r_definition text, c_state text,
                                              boundary json, p_output text, p_cp_state text) RETURNS bigint
            LANGUAGE plpgsql AS $$
            DECLARE
                r {schema}.run_start := json_populate_record(NULL::{schema}.run_start, doc);
            BEGIN
                PERFORM pg_advisory_xact_lock_shared(r.lock1, r.lock2);
                INSERT INTO {schema}.runs (run_id, workflow, status, parent_run_id, forked_from_step, fingerprint,
                                           created_at, updated_at, current_step, steps_done, steps_total,
                                           lease_token, lease_pid, lease_pid_start, lease_host, lease_expires_at,
                                           heartbeat_at)
                    VALUES (r.run, r.workflow, r.status, r.parent_run, r.forked_from, r.fingerprint, r.created_at,
                            r.created_at, r.current_step, r.steps_done, r.steps_total, r.lease_token, r.lease_pid,
                            r.lease_pid_start, r.lease_host, r.lease_expires_at, r.heartbeat_at);
                INSERT INTO {schema}.run_inputs (run_id, input) VALUES (r.run, r_input);
                INSERT INTO {schema}.definitions (fingerprint, definition) VALUES (r.fingerprint, r_definition)
                    ON CONFLICT (fingerprint) DO NOTHING;
                INSERT INTO {schema}.steps (run_id, seq, name, iteration, agent, parent_seq, status, attempts, options,
                                            idempotency_key)
                    SELECT r.run, s.* FROM unnest(r.s_seqs, r.s_names, r.s_iterations, r.s_agents, r.s_parents,
                                                  r.s_statuses, r.s_attempts, r.s_options, r.s_keys) AS s;
                INSERT INTO {schema}.checkpoints (run_id, seq, step, kind, created_at, reason, state, deadline_at)
                    VALUES (r.c_run, r.c_seq, r.c_step, r.c_kind, r.c_at, r.c_reason, c_state, r.c_deadline);
                RETURN {schema}.commit_boundary(boundary, p_output, p_cp_state);
            END $$""",
        f"ALTER FUNCTION {schema}.start_run SET plan_cache_mode = force_generic_plan",
    ]


def _migrate_8(schema: str) -> list[str]:
    """Version 8: a write notifies the schema's channel only while a console listens, as a row of
    ``listeners`` (the server process id of its listening connection; see
    :mod:`..pg_changes`). PostgreSQL serializes the commits of every transaction that
    notifies, on any database of the server, on one lock held until its WAL is on disk (so that
    notifications come in commit order), so notifying when nobody listens costs every writer.

    Every user of the schema may write ``listeners`` (granted to PUBLIC; the schema's USAGE guards
    it), so the console of a user who may only read, or of one granted the tables before this
    version, is notified too."""
    return [
        f"CREATE TABLE {schema}.listeners (pid integer PRIMARY KEY, since timestamptz NOT NULL DEFAULT now())",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.listeners TO PUBLIC",
        f"DROP FUNCTION {schema}.commit_boundary",
        _commit_boundary_function(schema, channel(schema), document=True, listened=True),
        f"ALTER FUNCTION {schema}.commit_boundary SET plan_cache_mode = force_generic_plan",
    ]


def _migrate_9(schema: str) -> list[str]:
    """Version 9: a checkpoint records the execution a pause is about in a column of its own,
    ``paused_seq`` (see :class:`relaypoint.models.Checkpoint`), derived for the pauses already
    recorded (:func:`relaypoint.store.sql.paused_seq_derived`); a boundary's document gives it as
    ``cp_paused``. The readers that resolved a pause by its ``seq`` (where the run continues) took a
    gate on a pattern's neighbour for one of the pattern's executions.

    Also: an announcement is marked once a hook's attempt succeeded; until then a worker's claim
    holds the pause (``announcing_until``: another worker takes it after that, its claimer having
    died), and a pause whose every attempt failed is left alone (``announce_failed_at``) until
    ``relaypoint announce`` asks again, as on SQLite (its migration 5)."""
    return [
        *paused_seq_derived(f"{schema}."),
        f"ALTER TYPE {schema}.boundary ADD ATTRIBUTE cp_paused bigint",
        f"DROP FUNCTION {schema}.commit_boundary",
        _commit_boundary_function(schema, channel(schema), document=True, listened=True, paused=True),
        f"ALTER FUNCTION {schema}.commit_boundary SET plan_cache_mode = force_generic_plan",
        f"ALTER TABLE {schema}.checkpoints ADD COLUMN announcing_until timestamptz",
        f"ALTER TABLE {schema}.checkpoints ADD COLUMN announce_failed_at timestamptz",
    ]


INSERTED_ARRAYS = ("i_seqs", "i_names", "i_iterations", "i_agents", "i_parents", "i_statuses", "i_attempts",
                    "i_options", "i_keys")
"""The fields of a change's document holding its inserted executions, one array per column."""
CHECKPOINT_ARRAYS = ("cp_runs", "cp_seqs", "cp_steps", "cp_kinds", "cp_ats", "cp_reasons", "cp_deadlines",
                      "cp_paused")
"""... and its new checkpoints (their states are an argument of their own)."""
_CHANGE_TYPE = """
    run text, fence text, at timestamptz,
    new boolean, n_workflow text, n_status text, n_parent_run text, n_forked_from text, n_fingerprint text,
    n_created_at timestamptz, n_current_step text, n_steps_done bigint, n_steps_total bigint, n_lease_token text,
    n_lease_pid bigint, n_lease_pid_start text, n_lease_host text, n_lease_expires_at timestamptz,
    n_heartbeat_at timestamptz,
    i_seqs bigint[], i_names text[], i_iterations bigint[], i_agents text[], i_parents bigint[], i_statuses text[],
    i_attempts bigint[], i_options text[], i_keys text[],
    d_checkpoint bigint, d_decision text, d_by text, d_comment text, d_value text,
    fields text[], status text, current_step text, steps_done bigint, steps_total bigint, error text,
    fingerprint text, suspect_deaths bigint, lease_token text, lease_pid bigint, lease_pid_start text,
    lease_host text, lease_expires_at timestamptz, heartbeat_at timestamptz,
    e_seqs bigint[], e_statuses text[], e_errors text[], e_tracebacks text[],
    m_seqs bigint[], m_statuses text[], cancel_open boolean,
    start_seq bigint, start_attempt bigint, start_new boolean, new_name text, new_iteration bigint, new_agent text,
    new_parent bigint, new_options text, new_key text,
    o_seqs bigint[], x_decision text, x_by text, reopen bigint,
    cp_runs text[], cp_seqs bigint[], cp_steps text[], cp_kinds text[], cp_ats timestamptz[], cp_reasons text[],
    cp_deadlines timestamptz[], cp_paused bigint[],
    ev_kinds text[], ev_steps text[], ev_actors text[], ev_details text[], ev_names boolean[]"""
"""The fields of a change's document (the schema's ``change`` type, version 10); see
:meth:`PostgresStore._change_params`."""


def _set_if(column: str, field: str | None = None) -> str:
    """A ``runs`` column set from the change's field when the run update names it."""
    return f"{column} = CASE WHEN '{field or column}' = ANY(c.fields) THEN c.{column} ELSE {column} END"


PROGRESS_ARRAYS = ("g_seqs", "g_texts")
"""The fields of a change's progress lines (version 11): the executions and their lines."""
CALL_ARRAYS = ("k_seqs", "k_positions", "k_names", "k_kinds", "k_statuses", "k_attempts", "k_values", "k_errors",
               "k_details", "k_models", "k_requests", "k_input_tokens", "k_output_tokens", "k_started")
"""The fields of a change's recorded calls (version 11), in the order of the ``calls`` table's columns
after ``run_id`` (the finish time is the change's)."""
_CALL_TYPES = ("bigint[]", "bigint[]", "text[]", "text[]", "text[]", "bigint[]", "text[]", "text[]", "text[]",
               "text[]", "bigint[]", "bigint[]", "bigint[]", "timestamptz[]")


def _calls_loop(schema: str) -> str:
    """``commit_change``'s statements writing the change's recorded calls (version 11), each by its
    key, a failed call run again replacing its row."""
    columns = ("seq", "position", "name", "kind", "status", "attempt", "value", "error", "detail", "model",
               "requests", "input_tokens", "output_tokens", "started_at")
    values = ", ".join(f"c.{a}[i]" for a in CALL_ARRAYS)
    updates = ", ".join(f"{col} = excluded.{col}" for col in (*columns[2:], "finished_at"))
    return f"""
                FOR i IN 1 .. coalesce(cardinality(c.k_seqs), 0) LOOP
                    INSERT INTO {schema}.calls (run_id, {", ".join(columns)}, finished_at)
                        VALUES (c.run, {values}, c.at)
                        ON CONFLICT (run_id, seq, position) DO UPDATE SET {updates};
                END LOOP;"""


def _progress_loop(schema: str) -> str:
    """``commit_change``'s statements setting the change's progress lines (version 11)."""
    return f"""
                FOR i IN 1 .. coalesce(cardinality(c.g_seqs), 0) LOOP
                    UPDATE {schema}.steps SET progress = c.g_texts[i] WHERE run_id = c.run AND seq = c.g_seqs[i];
                END LOOP;"""


def _commit_change_function(schema: str, calls: bool = False) -> str:
    """The schema's ``commit_change`` function (version 10; ``calls``: version 11's, which also
    writes recorded calls): a change (see :class:`~relaypoint.store.writes.Change`) in the order it
    gives. A refusal before its first write returns it (``o_refused``: 'decided', or the run's
    status, '' when there is no run) and writes nothing; after its run insert it raises
    ``FENCE_REFUSED`` with that in the detail.

    Executions, outputs and checkpoints are written one row per statement, each by its key (a join
    with the arrays would be planned, once per connection, as a hash of every execution of the run)."""
    run_columns = ", ".join(NEW_RUN_COLUMNS)
    lease = ", ".join(f"c.n_{col}" for col in LEASE_COLUMNS)
    run_sets = ",\n                    ".join(
        [_set_if(col) for col in ("status", "current_step", "steps_done", "steps_total", "error", "fingerprint",
                                  "suspect_deaths")]
        + [_set_if(col, "lease") for col in LEASE_COLUMNS]
        + ["updated_at = CASE WHEN 'updated_at' = ANY(c.fields) THEN c.at ELSE updated_at END"])
    refuse = ("IF c.new THEN RAISE EXCEPTION 'relaypoint: the change was refused' USING "
              f"ERRCODE = '{FENCE_REFUSED}', DETAIL = o_refused; END IF; RETURN;")
    return f"""CREATE OR REPLACE FUNCTION {schema}.commit_change(
                doc json, p_input text, p_definition text, p_outputs text[], p_states text[],
                OUT o_checkpoint bigint, OUT o_refused text)
            LANGUAGE plpgsql AS $$
            DECLARE
                c {schema}.change := json_populate_record(NULL::{schema}.change, doc);
                changed bigint;
            BEGIN
                PERFORM pg_advisory_xact_lock_shared({LOCK_CLASS}, {lock_key(schema)});
                IF c.new THEN
                    INSERT INTO {schema}.runs ({run_columns})
                        VALUES (c.run, c.n_workflow, c.n_status, c.n_parent_run, c.n_forked_from, c.n_fingerprint,
                                c.n_created_at, c.n_created_at, c.n_current_step, c.n_steps_done, c.n_steps_total,
                                {lease});
                    INSERT INTO {schema}.run_inputs (run_id, input) VALUES (c.run, p_input);
                END IF;
                IF c.i_seqs IS NOT NULL THEN
                    INSERT INTO {schema}.steps (run_id, seq, name, iteration, agent, parent_seq, status, attempts,
                                                options, idempotency_key)
                        SELECT c.run, s.* FROM unnest(c.i_seqs, c.i_names, c.i_iterations, c.i_agents, c.i_parents,
                                                      c.i_statuses, c.i_attempts, c.i_options, c.i_keys) AS s;
                END IF;
                IF c.d_checkpoint IS NOT NULL THEN
                    UPDATE {schema}.checkpoints SET decision = c.d_decision, decided_by = c.d_by, decided_at = c.at,
                                                    comment = c.d_comment, value = c.d_value
                        WHERE checkpoint_id = c.d_checkpoint AND {UNDECIDED};
                    GET DIAGNOSTICS changed = ROW_COUNT;
                    IF changed <> 1 THEN
                        o_refused := 'decided';
                        {refuse}
                    END IF;
                END IF;
                IF c.fields IS NOT NULL THEN
                    UPDATE {schema}.runs SET
                    {run_sets}
                    WHERE run_id = c.run AND (c.fence IS NULL OR lease_token = c.fence);
                    GET DIAGNOSTICS changed = ROW_COUNT;
                    IF changed <> 1 THEN
                        o_refused := coalesce((SELECT r.status FROM {schema}.runs r WHERE r.run_id = c.run), '');
                        {refuse}
                    END IF;
                END IF;
                IF p_definition IS NOT NULL THEN
                    INSERT INTO {schema}.definitions (fingerprint, definition)
                        VALUES (coalesce(c.n_fingerprint, c.fingerprint), p_definition)
                        ON CONFLICT (fingerprint) DO NOTHING;
                END IF;
                FOR i IN 1 .. coalesce(cardinality(c.e_seqs), 0) LOOP
                    UPDATE {schema}.steps SET status = c.e_statuses[i], finished_at = c.at, error = c.e_errors[i],
                                              traceback = c.e_tracebacks[i]
                        WHERE run_id = c.run AND seq = c.e_seqs[i];
                END LOOP;
                FOR i IN 1 .. coalesce(cardinality(c.m_seqs), 0) LOOP
                    UPDATE {schema}.steps SET status = c.m_statuses[i] WHERE run_id = c.run AND seq = c.m_seqs[i];
                END LOOP;
                IF c.cancel_open THEN
                    UPDATE {schema}.steps SET status = '{StepStatus.CANCELLED.value}',
                                              finished_at = coalesce(finished_at, c.at)
                        WHERE run_id = c.run AND status IN {OPEN_STEP_STATUSES!r};
                END IF;
                IF c.start_new THEN
                    INSERT INTO {schema}.steps (run_id, seq, name, iteration, agent, parent_seq, status, attempts,
                                                options, started_at, idempotency_key)
                        VALUES (c.run, c.start_seq, c.new_name, c.new_iteration, c.new_agent, c.new_parent,
                                '{StepStatus.RUNNING.value}', c.start_attempt, c.new_options, c.at, c.new_key);
                ELSIF c.start_seq IS NOT NULL THEN
                    UPDATE {schema}.steps SET status = '{StepStatus.RUNNING.value}', attempts = c.start_attempt,
                                              started_at = c.at, finished_at = NULL, error = NULL, traceback = NULL
                        WHERE run_id = c.run AND seq = c.start_seq;
                END IF;
                FOR i IN 1 .. coalesce(cardinality(c.o_seqs), 0) LOOP
                    INSERT INTO {schema}.outputs (run_id, seq, value) VALUES (c.run, c.o_seqs[i], p_outputs[i])
                        ON CONFLICT (run_id, seq) DO UPDATE SET value = excluded.value;
                END LOOP;{_calls_loop(schema) + _progress_loop(schema) if calls else ""}
                IF c.x_decision IS NOT NULL THEN
                    UPDATE {schema}.checkpoints SET decision = c.x_decision, decided_by = c.x_by, decided_at = c.at
                        WHERE run_id = c.run AND {PAUSED} AND {UNDECIDED};
                END IF;
                IF c.reopen IS NOT NULL THEN
                    UPDATE {schema}.checkpoints SET announced_at = NULL, announce_failed_at = NULL,
                                                    announcing_until = NULL
                        WHERE checkpoint_id = c.reopen;
                END IF;
                FOR i IN 1 .. coalesce(cardinality(c.cp_kinds), 0) LOOP
                    INSERT INTO {schema}.checkpoints (run_id, seq, step, kind, created_at, reason, state, deadline_at,
                                                      paused_seq)
                        VALUES (c.cp_runs[i], c.cp_seqs[i], c.cp_steps[i], c.cp_kinds[i], c.cp_ats[i], c.cp_reasons[i],
                                p_states[i], c.cp_deadlines[i], c.cp_paused[i])
                        RETURNING checkpoint_id INTO o_checkpoint;
                END LOOP;
                FOR i IN 1 .. coalesce(cardinality(c.ev_kinds), 0) LOOP
                    INSERT INTO {schema}.events (run_id, at, kind, step, actor, detail)
                        VALUES (c.run, c.at, c.ev_kinds[i], c.ev_steps[i], c.ev_actors[i],
                                CASE WHEN c.ev_names[i] THEN '{{"checkpoint_id": ' || o_checkpoint || c.ev_details[i]
                                     ELSE c.ev_details[i] END);
                END LOOP;{_notification(schema, channel(schema), True)}
            END $$"""


def _migrate_10(schema: str) -> list[str]:
    """Version 10: every write to a run is one change, one call of the schema's ``commit_change``
    (read into the ``change`` type), which replaces ``commit_boundary`` and ``start_run``: claims,
    decisions, pauses, forks and lease renewals too are one round trip each."""
    return [
        f"DROP FUNCTION {schema}.start_run",
        f"DROP FUNCTION {schema}.commit_boundary",
        f"DROP TYPE {schema}.run_start",
        f"DROP TYPE {schema}.boundary",
        f"CREATE TYPE {schema}.change AS ({_CHANGE_TYPE})",
        _commit_change_function(schema),
        f"ALTER FUNCTION {schema}.commit_change SET plan_cache_mode = force_generic_plan",
    ]


def _migrate_11(schema: str) -> list[str]:
    """Version 11: the calls a step execution recorded (``Context.call``), keyed by the execution and
    their order in it, and the line a running execution last gave ``ctx.progress``, written by
    ``commit_change``. Who was granted ``steps`` gets the same on
    ``calls``, so a user granted the tables before this version may go on using the schema."""
    c = 'COLLATE "C"'
    grants = f"""DO $$ DECLARE g record; BEGIN
            FOR g IN SELECT grantee, string_agg(privilege_type, ', ') AS privileges
                     FROM information_schema.role_table_grants
                     WHERE table_schema = '{schema}' AND table_name = 'steps' AND grantee <> current_user
                     GROUP BY grantee LOOP
                EXECUTE format('GRANT %s ON {schema}.calls TO %s', g.privileges,
                               CASE WHEN g.grantee = 'PUBLIC' THEN 'PUBLIC' ELSE quote_ident(g.grantee) END);
            END LOOP;
        END $$"""
    return [
        f"""CREATE TABLE {schema}.calls (
               run_id text {c} NOT NULL REFERENCES {schema}.runs (run_id),
               seq bigint NOT NULL,
               position bigint NOT NULL,
               name text {c} NOT NULL,
               kind text {c} NOT NULL,
               status text {c} NOT NULL,
               attempt bigint NOT NULL,
               value text,
               error text,
               detail text,
               model text {c},
               requests bigint,
               input_tokens bigint,
               output_tokens bigint,
               started_at timestamptz NOT NULL,
               finished_at timestamptz NOT NULL,
               PRIMARY KEY (run_id, seq, position)
           )""",
        f"ALTER TABLE {schema}.steps ADD COLUMN progress text",
        f"ALTER TYPE {schema}.change " + ", ".join(f"ADD ATTRIBUTE {a} {t}" for a, t in (
            *zip(CALL_ARRAYS, _CALL_TYPES), *zip(PROGRESS_ARRAYS, ("bigint[]", "text[]")))),
        _commit_change_function(schema, calls=True),
        f"ALTER FUNCTION {schema}.commit_change SET plan_cache_mode = force_generic_plan",
        grants,
    ]


MIGRATIONS: list[Callable[[str], list[str]]] = [_migrate_1, _migrate_2, _migrate_3, _migrate_4, _migrate_5,
                                                _migrate_6, _migrate_7, _migrate_8, _migrate_9, _migrate_10,
                                                _migrate_11]
"""The schema's migrations in order: version N is reached by running ``MIGRATIONS[N - 1]``."""
SCHEMA_VERSION = len(MIGRATIONS)
