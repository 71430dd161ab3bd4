"""The SQLite store's migrations: the statements that bring a store of version N - 1 to version N.

The tables they arrive at are :mod:`relaypoint.store.schema`'s; ``meta`` (the app's name and the
schema version) is written by :class:`~relaypoint.store.sqlite.SqliteStore` itself.
"""

from __future__ import annotations

from ..sql import PAUSED, UNANNOUNCED, UNDECIDED
from . import paused_seq_derived


def _migrate_1() -> list[str]:
    """The first tables, as sqlite-utils wrote them (a store's ``sqlite_master`` keeps the text)."""
    return [
        """CREATE TABLE "runs" (
   "run_id" TEXT PRIMARY KEY,
   "workflow" TEXT NOT NULL,
   "status" TEXT NOT NULL,
   "input" TEXT NOT NULL,
   "parent_run_id" TEXT,
   "forked_from_step" TEXT,
   "definition" TEXT,
   "fingerprint" TEXT,
   "created_at" TEXT NOT NULL,
   "updated_at" TEXT NOT NULL,
   "current_step" TEXT,
   "steps_done" INTEGER NOT NULL DEFAULT 0,
   "steps_total" INTEGER NOT NULL DEFAULT 0,
   "error" TEXT,
   "lease_token" TEXT,
   "lease_pid" INTEGER,
   "lease_host" TEXT,
   "lease_expires_at" TEXT,
   "heartbeat_at" TEXT
)""",
        """CREATE TABLE "steps" (
   "run_id" TEXT REFERENCES "runs"("run_id"),
   "position" INTEGER,
   "name" TEXT NOT NULL,
   "status" TEXT NOT NULL,
   "attempts" INTEGER NOT NULL DEFAULT 0,
   "options" TEXT NOT NULL DEFAULT '{}',
   "output" TEXT,
   "error" TEXT,
   "traceback" TEXT,
   "started_at" TEXT,
   "finished_at" TEXT,
   "idempotency_key" TEXT NOT NULL,
   PRIMARY KEY ("run_id", "position")
)""",
        """CREATE TABLE "checkpoints" (
   "checkpoint_id" INTEGER PRIMARY KEY,
   "run_id" TEXT NOT NULL REFERENCES "runs"("run_id"),
   "position" INTEGER NOT NULL,
   "step" TEXT,
   "kind" TEXT NOT NULL,
   "created_at" TEXT NOT NULL,
   "reason" TEXT,
   "state" TEXT,
   "decision" TEXT,
   "decided_by" TEXT,
   "decided_at" TEXT,
   "comment" TEXT,
   "value" TEXT,
   "deadline_at" TEXT
)""",
        """CREATE TABLE "events" (
   "event_id" INTEGER PRIMARY KEY,
   "run_id" TEXT NOT NULL REFERENCES "runs"("run_id"),
   "at" TEXT NOT NULL,
   "kind" TEXT NOT NULL,
   "step" TEXT,
   "actor" TEXT,
   "detail" TEXT
)""",
        # The console's newest-first keyset pages, filtered by status or workflow; the orphan sweep
        # (status = running); forks of a run; per-run chains.
        'CREATE INDEX "runs_by_created" ON "runs" ("created_at", "run_id")',
        'CREATE INDEX "runs_by_status" ON "runs" ("status", "created_at", "run_id")',
        'CREATE INDEX "runs_by_workflow" ON "runs" ("workflow", "created_at", "run_id")',
        'CREATE INDEX "runs_by_parent" ON "runs" ("parent_run_id")',
        'CREATE UNIQUE INDEX "steps_by_name" ON "steps" ("run_id", "name")',
        'CREATE INDEX "checkpoints_by_run" ON "checkpoints" ("run_id", "checkpoint_id")',
        'CREATE INDEX "events_by_run" ON "events" ("run_id", "event_id")',
        'CREATE INDEX "checkpoints_by_deadline" ON "checkpoints" ("deadline_at")',
    ]


# The runs indexes (made by migration 1; remade by 3, which rebuilds runs). They serve the
# console: newest-first keyset pages, filtered by status or workflow, the orphan sweep (status =
# running), forks of a run; and the removal of a definition no run uses any more.
RUN_INDEXES = (
    "CREATE INDEX runs_by_created ON runs (created_at, run_id)",
    "CREATE INDEX runs_by_status ON runs (status, created_at, run_id)",
    "CREATE INDEX runs_by_workflow ON runs (workflow, created_at, run_id)",
    "CREATE INDEX runs_by_parent ON runs (parent_run_id)",
    "CREATE INDEX runs_by_fingerprint ON runs (fingerprint)",
)
# Triggers keeping run_counts (made by migration 2; remade by 3, which rebuilds runs).
RUN_COUNT_TRIGGERS = (
    """CREATE TRIGGER run_counts_insert AFTER INSERT ON runs BEGIN
           INSERT INTO run_counts (status, runs) VALUES (new.status, 1)
               ON CONFLICT (status) DO UPDATE SET runs = runs + 1;
       END""",
    """CREATE TRIGGER run_counts_delete AFTER DELETE ON runs BEGIN
           UPDATE run_counts SET runs = runs - 1 WHERE status = old.status;
       END""",
    """CREATE TRIGGER run_counts_update AFTER UPDATE OF status ON runs WHEN old.status IS NOT new.status BEGIN
           UPDATE run_counts SET runs = runs - 1 WHERE status = old.status;
           INSERT INTO run_counts (status, runs) VALUES (new.status, 1)
               ON CONFLICT (status) DO UPDATE SET runs = runs + 1;
       END""",
)


def _migrate_2() -> list[str]:
    return [
        # The owner process's start (boot id and start time): on its own host a lease belongs to a
        # live process, and a pid reused by another process is told apart from the owner.
        'ALTER TABLE "runs" ADD COLUMN "lease_pid_start" TEXT',
        # Runs per status, kept by triggers in the transaction that changes a run, so the console's
        # status line reads a few rows instead of counting the runs table.
        "CREATE TABLE run_counts (status TEXT PRIMARY KEY, runs INTEGER NOT NULL)",
        "INSERT INTO run_counts (status, runs) SELECT status, count(*) FROM runs GROUP BY status",
        *RUN_COUNT_TRIGGERS,
    ]


def _migrate_3() -> list[str]:
    # Step executions keyed by (run, seq): a name may repeat (iterations, agents); outputs move to
    # their own append-only table so step rows stay small and are updated in place.
    return [
        """CREATE TABLE steps_v3 (
               run_id TEXT NOT NULL REFERENCES runs(run_id),
               seq INTEGER NOT NULL,
               name TEXT NOT NULL,
               iteration INTEGER NOT NULL DEFAULT 1,
               agent TEXT,
               parent_seq INTEGER,
               status TEXT NOT NULL,
               attempts INTEGER NOT NULL DEFAULT 0,
               options TEXT NOT NULL DEFAULT '{}',
               error TEXT,
               traceback TEXT,
               started_at TEXT,
               finished_at TEXT,
               idempotency_key TEXT NOT NULL,
               PRIMARY KEY (run_id, seq)
           )""",
        """INSERT INTO steps_v3 (run_id, seq, name, status, attempts, options, error, traceback, started_at,
                                 finished_at, idempotency_key)
           SELECT run_id, position, name, status, attempts, options, error, traceback, started_at, finished_at,
                  idempotency_key
           FROM steps""",
        """CREATE TABLE outputs (
               run_id TEXT NOT NULL REFERENCES runs(run_id),
               seq INTEGER NOT NULL,
               value TEXT,
               PRIMARY KEY (run_id, seq)
           )""",
        "INSERT INTO outputs (run_id, seq, value) SELECT run_id, position, output FROM steps "
        "WHERE output IS NOT NULL ORDER BY run_id, position",
        "DROP TABLE steps",
        "ALTER TABLE steps_v3 RENAME TO steps",
        "CREATE INDEX steps_by_name ON steps (run_id, name, iteration)",
        "ALTER TABLE checkpoints RENAME COLUMN position TO seq",
        # Every boundary inserts a checkpoint: the indexes it must update are the table's and
        # checkpoints_by_run; pauses and deadlines are in partial indexes a boundary does not touch
        # (the queries repeat the indexes' conditions word for word, so SQLite can use them).
        "DROP INDEX checkpoints_by_deadline",
        f"CREATE INDEX checkpoints_due ON checkpoints (deadline_at) WHERE deadline_at IS NOT NULL AND {UNDECIDED}",
        f"CREATE INDEX checkpoints_paused ON checkpoints (run_id, checkpoint_id) WHERE {PAUSED}",
        # The runs row, rewritten at every boundary, keeps only small columns: the input moves to
        # run_inputs (written once), the definition to definitions, shared by the runs of one
        # definition (keyed by its fingerprint, a hash of it). Rebuilt rather than altered (DROP
        # COLUMN needs SQLite 3.35); foreign keys are off during migrations, so the children's
        # references follow the rebuilt table by name.
        """CREATE TABLE definitions (
               fingerprint TEXT PRIMARY KEY,
               definition TEXT NOT NULL
           )""",
        "INSERT OR IGNORE INTO definitions (fingerprint, definition) SELECT fingerprint, definition FROM runs "
        "WHERE fingerprint IS NOT NULL AND definition IS NOT NULL ORDER BY created_at",
        """CREATE TABLE run_inputs (
               run_id TEXT PRIMARY KEY REFERENCES runs(run_id),
               input TEXT NOT NULL
           )""",
        "INSERT INTO run_inputs (run_id, input) SELECT run_id, input FROM runs WHERE input IS NOT NULL",
        """CREATE TABLE runs_v3 (
               run_id TEXT PRIMARY KEY,
               workflow TEXT NOT NULL,
               status TEXT NOT NULL,
               parent_run_id TEXT,
               forked_from_step TEXT,
               fingerprint TEXT,
               created_at TEXT NOT NULL,
               updated_at TEXT NOT NULL,
               current_step TEXT,
               steps_done INTEGER NOT NULL DEFAULT 0,
               steps_total INTEGER NOT NULL DEFAULT 0,
               suspect_deaths INTEGER NOT NULL DEFAULT 0,
               error TEXT,
               lease_token TEXT,
               lease_pid INTEGER,
               lease_pid_start TEXT,
               lease_host TEXT,
               lease_expires_at TEXT,
               heartbeat_at TEXT
           )""",
        # Deaths charged to each run so far: the suspect interruptions its events recorded.
        """INSERT INTO runs_v3 (run_id, workflow, status, parent_run_id, forked_from_step, fingerprint, created_at,
                                updated_at, current_step, steps_done, steps_total, suspect_deaths, error, lease_token,
                                lease_pid, lease_pid_start, lease_host, lease_expires_at, heartbeat_at)
           SELECT run_id, workflow, status, parent_run_id, forked_from_step, fingerprint, created_at, updated_at,
                  current_step, steps_done, steps_total,
                  (SELECT count(*) FROM events e WHERE e.run_id = runs.run_id AND e.kind = 'interruption_detected'
                   AND CASE WHEN json_valid(e.detail) THEN json_extract(e.detail, '$.suspect') END = 1),
                  error, lease_token, lease_pid, lease_pid_start, lease_host, lease_expires_at, heartbeat_at
           FROM runs ORDER BY rowid""",
        "DROP TABLE runs",
        "ALTER TABLE runs_v3 RENAME TO runs",
        *RUN_INDEXES,
        *RUN_COUNT_TRIGGERS,
    ]


def _migrate_4() -> list[str]:
    # When a worker with --on-pause announced a pause (NULL: not yet), and the pauses waiting for
    # that in a partial index of their own (empty when all are announced: a worker's poll reads
    # nothing). The pauses open at the upgrade count as announced: the relaypoint before may have
    # announced them already (a worker's --on-pause announced the pauses its execution made), and a
    # pause is announced at most once; nor is a hook first run on a store flooded with its backlog.
    return [
        "ALTER TABLE checkpoints ADD COLUMN announced_at TEXT",
        f"UPDATE checkpoints SET announced_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE {PAUSED} AND {UNDECIDED}",
        f"CREATE INDEX checkpoints_unannounced ON checkpoints (checkpoint_id) WHERE {UNANNOUNCED}",
    ]


def _migrate_5() -> list[str]:
    # What each pause is about, as a column of its own (see relaypoint.models.Checkpoint.paused_seq).
    return [
        *paused_seq_derived(""),
    # An announcement is marked once a hook's attempt succeeded: until then a worker's claim holds the
    # pause (announcing_until: another worker takes it after that, its claimer having died), and a
    # pause whose every attempt failed is left alone (announce_failed_at) until `relaypoint
    # announce` asks again. Neither is in the index: they narrow its few rows.
        'ALTER TABLE "checkpoints" ADD COLUMN "announcing_until" TEXT',
        'ALTER TABLE "checkpoints" ADD COLUMN "announce_failed_at" TEXT',
    ]


def _migrate_6() -> list[str]:
    # The calls a step execution recorded (Context.call), keyed by the execution and their order in
    # it; and the line a running execution last gave ctx.progress.
    return [
        'ALTER TABLE "steps" ADD COLUMN "progress" TEXT',
        """CREATE TABLE calls (
               run_id TEXT NOT NULL REFERENCES runs(run_id),
               seq INTEGER NOT NULL,
               position INTEGER NOT NULL,
               name TEXT NOT NULL,
               kind TEXT NOT NULL,
               status TEXT NOT NULL,
               attempt INTEGER NOT NULL,
               value TEXT,
               error TEXT,
               detail TEXT,
               model TEXT,
               requests INTEGER,
               input_tokens INTEGER,
               output_tokens INTEGER,
               started_at TEXT NOT NULL,
               finished_at TEXT NOT NULL,
               PRIMARY KEY (run_id, seq, position)
           )""",
    ]


MIGRATIONS: list[list[str]] = [_migrate_1(), _migrate_2(), _migrate_3(), _migrate_4(), _migrate_5(), _migrate_6()]
"""The steps in order: version N is reached by running the statements of ``MIGRATIONS[N - 1]``."""
SCHEMA_VERSION = len(MIGRATIONS)
