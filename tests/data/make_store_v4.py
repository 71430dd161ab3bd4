"""How store_v4.db (SQLite, schema version 4) and store_pg_v8.sql (PostgreSQL, schema version 8) were
made: run with relaypoint at commit d9cd0d1, from the project root: `python tests/data/make_store_v4.py`
(with that commit's package first on the path).
Kept for the record; later releases cannot remake these versions. store_v4.json maps what each run
shows to its id (the same ids in both stores). The PostgreSQL store is the data of schema
``rp_fixture_v8`` as `pg_dump --data-only --inserts` wrote it, less the run counts (the tests make
a version-8 schema with relaypoint's own migrations, and its trigger counts the runs inserted)."""
import itertools, json, re, subprocess, sys
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).parent))
from v4_workflows import WORKFLOWS
from relaypoint import Runtime

DATA = Path(__file__).parent
SERVER = "postgresql://postgres@127.0.0.1:5432/test"
SCHEMA = "rp_fixture_v8"


def make(db: str) -> dict[str, str]:
    counter = itertools.count(1)
    ids = {}
    with Runtime(db, WORKFLOWS, id_factory=lambda: f"run-{next(counter):02d}") as rt:
        ids["gate_after_pattern"] = rt.start("gate_after_pattern")
        ids["gate_before_pattern"] = rt.start("gate_before_pattern", {"fail": True})
        r = rt.start("gate_before_pattern", {"fail": True})
        rt.approve(r, by="alice")
        rt.resume(r)  # pro fails: the run fails, and the pattern's row was marked cancelled
        ids["gate_before_pattern_failed"] = r
        ids["turn_approval"] = rt.start("turn_approval")
        ids["turn_input"] = rt.start("turn_input")
        ids["ask"] = rt.start("ask")
    return ids


for p in DATA.glob("store_v4.db*"):
    p.unlink()
ids = make(str(DATA / "store_v4.db"))
with psycopg.connect(SERVER, autocommit=True) as conn:
    conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
assert make(f"{SERVER}?schema={SCHEMA}") == ids
dump = subprocess.run(["pg_dump", "--data-only", "--inserts", f"--schema={SCHEMA}",
                       f"--exclude-table-data={SCHEMA}.run_counts", SERVER],
                      check=True, capture_output=True, text=True).stdout
# less psql's meta-commands (\restrict, \unrestrict): the rest is SQL a client runs as one script
kept = [line for line in dump.splitlines() if not re.match(r"\\(un)?restrict ", line)]
(DATA / "store_pg_v8.sql").write_text("\n".join(kept) + "\n")
with psycopg.connect(SERVER, autocommit=True) as conn:
    conn.execute(f"DROP SCHEMA {SCHEMA} CASCADE")
(DATA / "store_v4.json").write_text(json.dumps(ids, indent=2) + "\n")
