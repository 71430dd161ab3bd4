"""How store_v2.db was made: run with relaypoint at commit 2526454 (schema version 2), from the
project root: `python tests/data/make_store_v2.py`. Kept for the record; later releases cannot
remake a version-2 store. store_v2.json maps what each run shows to its id."""
import os, signal, subprocess, sys, time, sqlite3
from pathlib import Path
sys.path.insert(0, str(Path(__file__).parent))
from v2_workflows import WORKFLOWS
from relaypoint import Runtime
db = Path(__file__).parent / "store_v2.db"
for p in db.parent.glob("store_v2.db*"): p.unlink()
ids = {}
with Runtime(str(db), WORKFLOWS) as rt:
    ids["completed"] = rt.start("chain", {"n": 1})
    ids["failed"] = rt.start("chain", {"n": 2, "fail": True})
    ids["awaiting_approval"] = rt.start("gated", {"topic": "pending"})
    r = rt.start("gated", {"topic": "approved"}); rt.approve(r, by="alice", comment="ok"); rt.resume(r); ids["approved_completed"] = r
    r = rt.start("gated", {"topic": "approved-queued"}); rt.approve(r, by="alice", output={"reviewed": "edited"}); ids["approved_queued"] = r
    r = rt.start("gated", {"topic": "rejected"}); rt.reject(r, "no", by="bob"); ids["rejected"] = r
    r = rt.start("gated", {"topic": "cancelled"}); rt.cancel(r, by="carol"); ids["cancelled"] = r
    ids["awaiting_input"] = rt.start("ask")
    r = rt.start("ask"); rt.respond(r, "blue", by="dave"); ids["responded_queued"] = r
    ids["fork_queued"] = rt.fork(ids["completed"], "b", {"n": 5})
    ids["fork_of_approved"] = rt.fork(ids["approved_completed"], "publish")
# interrupted: a real process killed with SIGKILL inside step b
code = f"""
import sys; sys.path.insert(0, '/work/main/tests/data')
from v2_workflows import WORKFLOWS
from relaypoint import Runtime
rt = Runtime({str(db)!r}, WORKFLOWS)
rt.start('chain', {{'n': 3}}, on_created=lambda rid: print(rid, flush=True))
"""
p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env={**os.environ, "V2_SLOW_B": "1"})
rid = p.stdout.readline().strip()
conn = sqlite3.connect(db)
while conn.execute("SELECT status FROM steps WHERE run_id=? AND name='b'", (rid,)).fetchone()[0] != "running":
    time.sleep(0.05)
os.kill(p.pid, signal.SIGKILL); p.wait()
conn.close()
with Runtime(str(db), WORKFLOWS) as rt:
    rt.sweep()
    ids["interrupted"] = rid
    for k, v in ids.items():
        print(k, v, rt.get(v).status)
    rt.store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
import json; Path(__file__).parent / "store_v2.json".write_text(json.dumps(ids, indent=1) + "\n")
