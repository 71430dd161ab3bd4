"""DBOS Transact on PostgreSQL: a workflow calling n ``@DBOS.step`` functions, called directly, with
its system database on the server and in the schema the URL names (``dbos_system_schema``), at the
server's ``synchronous_commit`` (on by default): each step's output is committed before the next
step starts.
"""

from __future__ import annotations

import logging
import time
from importlib.metadata import version as dist_version

from common import pg_target, serve
from dbos import DBOS, DBOSConfig


def chain(url: str, n: int) -> float:
    """Seconds of one call of an n-step workflow of no-op steps."""
    conninfo, schema = pg_target(url)
    DBOS(config=DBOSConfig(name="bench", system_database_url=conninfo, dbos_system_schema=schema,
                           log_level="WARNING"))
    logging.getLogger("dbos").setLevel(logging.WARNING)

    @DBOS.step()
    def step(i: int) -> None:
        return None

    @DBOS.workflow()
    def run(n: int) -> int:
        for i in range(n):
            step(i)
        return n

    DBOS.launch()
    t = time.perf_counter()
    run(n)
    elapsed = time.perf_counter() - t
    DBOS.destroy()
    return elapsed


def version() -> dict[str, str]:
    return {"dbos": dist_version("dbos")}


if __name__ == "__main__":
    serve(globals())
