"""DBOS Transact's side of fanout.py, on a SQLite system database: an async workflow awaiting
``asyncio.gather`` of n steps, each step's output recorded as it completes.

``kind`` "async": ``async def`` steps; "sync": plain steps called through ``asyncio.to_thread``
(DBOS's way to call sync code from an async workflow). The kill figure's resume is DBOS's own
recovery: ``DBOS.launch()`` finds the workflow pending, re-enqueues it, and the workflow function
runs again, reading the recorded steps' outputs instead of calling them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from importlib.metadata import version as dist_version
from pathlib import Path
from typing import Any

from common import serve
from dbos import DBOS, DBOSConfig, SetWorkflowID
from fanout_calls import STAGGER, async_call, sync_call, use

WORKFLOW_ID = "fanout"


def _launch(path: Path, kind: str):
    """Configure and launch DBOS on a SQLite system database at ``path``; returns the workflow."""
    DBOS(config=DBOSConfig(name="fanout", system_database_url=f"sqlite:///{path}", log_level="WARNING"))
    logging.getLogger("dbos").setLevel(logging.WARNING)

    @DBOS.step()
    async def agent(i: int) -> str:
        return await async_call(i)

    @DBOS.step()
    def agent_sync(i: int) -> str:
        return sync_call(i)

    @DBOS.workflow()
    async def fan(n: int, kind: str) -> list[str]:
        calls = [agent(i) if kind == "async" else asyncio.to_thread(agent_sync, i) for i in range(n)]
        return list(await asyncio.gather(*calls))

    DBOS.launch()
    return fan


def _checked(out: list[str], n: int) -> None:
    if len(out) != n:
        raise RuntimeError(f"{len(out)} of {n} calls returned")


def round_(path: Path, n: int, kind: str) -> float:
    """Seconds of one call of the workflow."""
    async def main() -> float:
        fan = _launch(path, kind)
        t = time.perf_counter()
        out = await fan(n, kind)
        seconds = time.perf_counter() - t
        _checked(out, n)
        DBOS.destroy()
        return seconds
    return asyncio.run(main())


def crash(path: Path, n: int, kind: str) -> None:
    """The workflow with ``STAGGER`` delays and the call log; fanout.py kills it part-way."""
    use(STAGGER, path.with_name("calls.log"))

    async def main() -> None:
        fan = _launch(path, kind)
        with SetWorkflowID(WORKFLOW_ID):
            await fan(n, kind)
    asyncio.run(main())


def recover(path: Path, n: int, kind: str) -> dict[str, Any]:
    """Launch DBOS again (its recovery of pending workflows) and await the killed workflow's result:
    seconds from before the launch (recovery is dispatched through DBOS's internal queue)."""
    use(STAGGER, path.with_name("calls.log"))

    async def main() -> dict[str, Any]:
        t = time.perf_counter()
        _launch(path, kind)
        handle = await DBOS.retrieve_workflow_async(WORKFLOW_ID)
        out = await handle.get_result()
        seconds = time.perf_counter() - t
        _checked(out, n)
        DBOS.destroy()
        return {"seconds": seconds, "status": "completed"}
    return asyncio.run(main())


def version() -> dict[str, str]:
    return {"dbos": dist_version("dbos")}


if __name__ == "__main__":
    serve({**globals(), "round": round_})
