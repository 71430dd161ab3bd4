"""The layout shows the design: the core never imports textual (the console is one front end over
it), only the store package (relaypoint.store) speaks SQL or imports a database driver, the front
ends use the `Runtime` facade and never its store, and only the views and the front ends render
text (rich): the engine imports no rendering library."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "core"
STORE = CORE / "store"
DRIVERS = {"sqlite3", "sqlite_utils", "psycopg", "psycopg_pool"}
# Bench files that drive relaypoint (the others time the raw SQLite floor and the peers, and may
# use sqlite3 themselves).
RELAYPOINT_BENCH = ["bench.py", "console_idle.py", "group_commit.py", "tool_relaypoint.py", "tool_fanout_relaypoint.py",
                    "worker_async.py"]
# The engine: the runtime and the modules behind it, the drivers, the patterns and the store. Every
# other module of relaypoint and the console is a front end (the CLI, the worker, MCP, the browser,
# the pause hook, the views, the console...), checked by default.
ENGINE = [CORE / name for name in ("runtime.py", "claims.py", "decisions.py", "execution.py", "flights.py", "runner.py",
                                   "recovery.py", "forks.py", "retention.py", "upstream.py", "lease.py", "drivers.py",
                                   "workflow.py", "patterns", "store")]
RENDERING = {"rich", "textual"}
# Where text is rendered for people: the views (relaypoint.views), the CLI and the console.
RENDERERS = [CORE / "views", CORE / "cli.py", ROOT / "tui"]
SQL = re.compile(r"\b(SELECT\s.+\sFROM|INSERT\s+(OR\s+\w+\s+)?INTO|DELETE\s+FROM|UPDATE\s+\w+\s+SET|CREATE\s+"
                 r"(TABLE|INDEX|TRIGGER)|PRAGMA\s+\w+|BEGIN\s+IMMEDIATE)\b", re.IGNORECASE | re.DOTALL)


def imported(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names += ([a.name for a in node.names] if isinstance(node, ast.Import)
                  else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
    return [n.split(".")[0] for n in names]


def within(path: Path, places: list[Path]) -> bool:
    return any(path == place or place in path.parents for place in places)


def modules() -> list[Path]:
    return [*CORE.rglob("*.py"), *(ROOT / "tui").rglob("*.py")]


def module_name(path: Path) -> str:
    parts = path.relative_to(CORE).with_suffix("").parts
    return ".".join(("relaypoint", *(parts[:-1] if parts[-1] == "__init__" else parts)))


def outside_the_store() -> list[Path]:
    files = [p for p in [*CORE.rglob("*.py"), *(ROOT / "tui").rglob("*.py")] if STORE not in p.parents]
    return files + [ROOT / "bench" / name for name in RELAYPOINT_BENCH if (ROOT / "bench" / name).exists()]


def test_no_core_module_imports_textual():
    offenders = [f"{p.name}: textual" for p in CORE.rglob("*.py") if "textual" in imported(p)]
    assert offenders == []


def test_importing_the_core_and_cli_loads_no_textual():
    code = ("import sys, relaypoint, relaypoint.cli, relaypoint.demo, relaypoint.examples.audit; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'textual'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_only_the_store_imports_a_database_driver():
    offenders = [f"{p.relative_to(ROOT)}: {n}" for p in outside_the_store() for n in imported(p) if n in DRIVERS]
    assert offenders == []
    # the scan sees imports (psycopg_pool: the heartbeats' shared connections); the store's own
    # migrations are SQL, so sqlite_utils is imported nowhere in the package
    assert {n for p in STORE.rglob("*.py") for n in imported(p)} & DRIVERS == DRIVERS - {"sqlite_utils"}


def test_no_sql_outside_the_store():
    def sql_strings(path: Path) -> list[str]:
        return [f"{path.relative_to(ROOT)}:{node.lineno}: {node.value[:60]!r}"
                for node in ast.walk(ast.parse(path.read_text(), str(path)))
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL.search(node.value)]

    assert [s for p in outside_the_store() for s in sql_strings(p)] == []
    assert sql_strings(STORE / "sqlite.py") and sql_strings(STORE / "postgres.py")  # the pattern finds SQL there


def test_only_tracing_imports_opentelemetry():
    """relaypoint.tracing holds everything OpenTelemetry (an optional extra): no other module
    imports it, so a missing API is one import guard in one place."""
    users = sorted(str(p.relative_to(ROOT)) for p in modules() if "opentelemetry" in imported(p))
    assert users == ["core/tracing.py"]


def test_only_the_pydantic_ai_integration_imports_pydantic_ai():
    """relaypoint.integrations.pydantic_ai holds everything PydanticAI (an optional extra): the rest
    of relaypoint runs without it installed. The research example is built with it, as an
    application is; the demo imports that example only where PydanticAI imports."""
    users = sorted(str(p.relative_to(ROOT)) for p in modules() if "pydantic_ai" in imported(p))
    assert users == ["core/examples/research.py", "core/integrations/pydantic_ai.py"]


def test_only_the_openai_agents_integration_imports_the_openai_agents_sdk():
    """relaypoint.integrations.openai_agents holds everything of the OpenAI Agents SDK (an optional
    extra, with the openai client it brings): the rest of relaypoint runs without it installed."""
    users = sorted(str(p.relative_to(ROOT)) for p in modules() if {"agents", "openai"} & set(imported(p)))
    assert users == ["core/integrations/openai_agents.py"]


def test_front_ends_use_the_runtime_never_its_store():
    def store_reads(path: Path) -> list[str]:
        return [f"{path.relative_to(ROOT)}:{node.lineno}: .store"
                for node in ast.walk(ast.parse(path.read_text(), str(path)))
                if isinstance(node, ast.Attribute) and node.attr == "store"]

    front_ends = [p for p in modules() if not within(p, ENGINE)]
    assert [s for p in front_ends for s in store_reads(p)] == []
    named = ["cli.py", "worker.py", "mcp_server.py", "browser.py", "pausehook.py", "views/display.py",
             "views/patterns.py"]
    assert {CORE / n for n in named} <= set(front_ends) and ROOT / "tui" / "data.py" in front_ends
    assert store_reads(CORE / "runtime.py")  # the scan sees the facade's own use


def test_the_engine_imports_no_rendering_library():
    # every module but the renderers is scanned, so a new engine module is checked by default
    offenders = [f"{p.relative_to(ROOT)}: {n}" for p in CORE.rglob("*.py") if not within(p, RENDERERS)
                 for n in imported(p) if n in RENDERING]
    assert offenders == []
    assert "rich" in imported(CORE / "views" / "display.py")  # the scan sees a rendering import
    engine = sorted({module_name(p) for place in ENGINE for p in ([place] if place.is_file() else place.rglob("*.py"))})
    code = (f"import sys, {', '.join(engine)}; print(sorted(m for m in sys.modules "
            "if m.split('.')[0] in {'rich', 'textual'} or m.startswith('relaypoint.views')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"  # nor through another module


def test_the_store_contract_is_small_and_documented():
    from relaypoint.store.base import RunStore

    abstract = sorted(RunStore.__abstractmethods__)
    assert len(abstract) <= 32, abstract  # 30 after the redesign (issue 20), + the recorded calls' read and usage
    undocumented = [name for name in abstract if not (getattr(RunStore, name).__doc__ or "").strip()]
    assert undocumented == [], undocumented
