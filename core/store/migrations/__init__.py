"""Each backend's migrations, as plain ordered steps: version N of a store is reached by running the
statements of step N in one transaction, after those of every step before it.

:mod:`.sqlite` and :mod:`.postgres` hold one backend's steps each; what both run is here. The
tables they arrive at are :mod:`relaypoint.store.schema`'s.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..base import NotAStore, StoreDamaged

APP_ID = "relaypoint"  # the meta table's "app": what says a database is a relaypoint store


def stored_version(meta: Mapping[str, str], where: str, foreign: str) -> int:
    """The schema version a store's meta table (``meta``: key -> value) records. Raises
    ``NotAStore`` (message ``foreign``) when it is not relaypoint's, ``StoreDamaged`` naming
    ``where`` when the version is unreadable (meta and the first schema are written in one
    transaction: this is damage)."""
    if meta.get("app") != APP_ID:
        raise NotAStore(foreign)
    text = meta.get("schema_version")
    try:
        version = int(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        version = 0
    if version < 1:
        raise StoreDamaged(f"{where} has an unreadable schema version {text!r}; it cannot be opened safely")
    return version


def paused_seq_derived(prefix: str) -> list[str]:
    """The statements that give existing pauses their ``paused_seq`` (SQLite's version 5,
    PostgreSQL's version 9; ``prefix``: how table names are qualified, e.g. ``"relaypoint."``), as
    the readers that resolved them correctly did before: an input request, a held orphan and a
    person's turn (an approval whose step names a pattern: gates are never on patterns) are about
    the execution at their ``seq``; a gate is about the top-level step it names (its ``seq`` is the
    execution after it). A pause whose step the run no longer has names none (NULL).

    Also sets back to ``pending`` a pattern's row that a resume marked ``cancelled`` when it took a
    gate's ``seq`` (the pattern's row) for the execution the run had stopped at: nothing else
    cancels a pattern's row in a run that was neither cancelled nor rejected, and the row had not
    run (it records the pattern's result when the pattern ends)."""
    pattern = "g.options LIKE '%\"pattern\":%'"  # a pattern's row (compact JSON options)
    top = f"{prefix}steps g WHERE g.run_id = c.run_id AND g.parent_seq IS NULL AND g.name = c.step"
    return [
        f"ALTER TABLE {prefix}checkpoints ADD COLUMN paused_seq bigint",
        f"""UPDATE {prefix}checkpoints AS c SET paused_seq = seq WHERE kind IN ('input', 'orphan')
               OR (kind = 'approval' AND EXISTS (SELECT 1 FROM {top} AND {pattern}))""",
        f"""UPDATE {prefix}checkpoints AS c SET paused_seq = (SELECT min(g.seq) FROM {top})
               WHERE kind = 'approval' AND paused_seq IS NULL""",
        f"""UPDATE {prefix}steps AS g SET status = 'pending', finished_at = NULL
               WHERE status = 'cancelled' AND parent_seq IS NULL AND {pattern} AND run_id IN (
                   SELECT run_id FROM {prefix}runs WHERE status NOT IN ('completed', 'rejected', 'cancelled'))""",
    ]
