"""The bundled ``repo-audit`` example: its helpers on a real directory, and its steps called directly."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

import pytest

from relaypoint.examples import audit
from relaypoint.workflow import Context, InputRequested

CORE = '''"""Core module."""

# TODO: split this module
NOTE = "TODO inside a string must not count"


class Engine:
    """An engine."""

    def start(self):
        """Start."""
        return 1

    async def stop(self):
        return 0


def helper():
    x = 1  # FIXME handle errors
    return NOTE
'''
LONG = "def long_one():\n" + "    x = 1\n" * 59  # 60 lines
FILES = {
    "pkg/__init__.py": '"""Package."""\n',
    "pkg/core.py": CORE,
    "long.py": LONG,
    "broken.py": "def broken(:\n    pass\n",
    "README.md": "# Project\n",
}
SKIPPED = [
    ".git/hooks/pre.py",
    "node_modules/m/index.py",
    ".hidden/h.py",
    "build/b.py",
    "dist/d.py",
    "venv/v.py",
    "pkg/__pycache__/core.cpython-311.pyc",
    "thing.egg-info/PKG-INFO",
]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    for rel in SKIPPED:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x = 1  # TODO skipped\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "linked.py").write_text("x = 1\n")
    os.symlink(outside, root / "linkdir")
    os.symlink(outside / "linked.py", root / "link.py")
    return root


def ctx(step: str, input: dict, results: dict | None = None, responses: list | None = None) -> Context:
    return Context(
        run_id="r1",
        step=step,
        attempt=1,
        idempotency_key="k",
        input=input,
        results=results or {},
        responses=responses or [],
    )


def test_scan_directory_counts_and_skips(project: Path) -> None:
    found = audit.scan_directory(str(project))
    assert found == {
        "root": str(project),
        "files": 5,
        "bytes": sum(len(t.encode()) for t in FILES.values()),
        "by_extension": {".py": 4, ".md": 1},
        "python_files": ["broken.py", "long.py", "pkg/__init__.py", "pkg/core.py"],
        "truncated": False,
    }


def test_scan_directory_resolves_relative_root(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project / "pkg")
    assert audit.scan_directory("..")["root"] == str(project)


def test_scan_directory_caps_python_files(project: Path) -> None:
    found = audit.scan_directory(str(project), max_files=2)
    assert found["python_files"] == ["broken.py", "long.py"]
    assert found["truncated"] is True
    assert found["files"] == 5


def test_scan_directory_rejects_missing_or_file_root(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(FileNotFoundError, match=str(missing)):
        audit.scan_directory(str(missing))
    a_file = tmp_path / "f.txt"
    a_file.write_text("x")
    with pytest.raises(FileNotFoundError, match="not a directory"):
        audit.scan_directory(str(a_file))


def test_analyze_files_figures(project: Path) -> None:
    paths = audit.scan_directory(str(project))["python_files"]
    result = audit.analyze_files(str(project), paths)
    unparsable = result.pop("unparsable")
    assert result == {
        "files_analyzed": 3,
        "functions": 4,  # start, stop (async), helper, long_one
        "classes": 1,
        "docstring_coverage": 0.5,  # 4 of 8: pkg and core modules, Engine, Engine.start
        "todos": [
            {"path": "pkg/core.py", "line": 3, "text": "TODO: split this module"},
            {"path": "pkg/core.py", "line": 19, "text": "FIXME handle errors"},
        ],
        "todo_count": 2,
        "long_functions": [{"path": "long.py", "name": "long_one", "lines": 60}],
        "long_function_count": 1,
        "long_function_lines": 50,
    }
    assert [u["path"] for u in unparsable] == ["broken.py"]
    assert unparsable[0]["error"].startswith("SyntaxError: ")


def test_analyze_files_threshold_and_qualified_names(project: Path) -> None:
    result = audit.analyze_files(str(project), ["pkg/core.py", "long.py"], long_lines=2)
    assert result["long_functions"] == [
        {"path": "long.py", "name": "long_one", "lines": 60},
        {"path": "pkg/core.py", "name": "Engine.start", "lines": 3},
        {"path": "pkg/core.py", "name": "helper", "lines": 3},
    ]
    assert result["long_function_count"] == 3


def test_analyze_files_lists_unreadable_files_without_failing(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_bytes(b'x = "\xff"\n')
    result = audit.analyze_files(str(tmp_path), ["bad.py", "gone.py"])
    assert result["files_analyzed"] == 0
    assert [(u["path"], u["error"].split(":")[0]) for u in result["unparsable"]] == [
        ("bad.py", "SyntaxError"),
        ("gone.py", "FileNotFoundError"),
    ]


def test_analyze_files_survives_deeply_nested_expressions(tmp_path: Path) -> None:
    # Python 3.11 and 3.12 cannot parse this (RecursionError); 3.13 can.
    (tmp_path / "deep.py").write_text("x = " + "+".join(["1"] * 5000) + "\n")
    result = audit.analyze_files(str(tmp_path), ["deep.py"])
    assert result["files_analyzed"] + len(result["unparsable"]) == 1


def test_analyze_files_with_nothing_to_measure() -> None:
    result = audit.analyze_files("/nonexistent", [])
    assert result["files_analyzed"] == 0
    assert result["docstring_coverage"] is None
    assert result["unparsable"] == []


def test_analyze_files_delay_sleeps_even_without_files() -> None:
    started = time.monotonic()
    audit.analyze_files("/nonexistent", [], delay=0.25)
    assert time.monotonic() - started >= 0.25


def test_analyze_source_honours_encoding_cookie() -> None:
    source = '# -*- coding: latin-1 -*-\n"""Caf\xe9."""\n# TODO \xe9t\xe9\n'.encode("latin-1")
    stats = audit.analyze_source(source, "m.py")
    assert stats["documented"] == 1
    assert stats["todos"] == [{"path": "m.py", "line": 3, "text": "TODO \xe9t\xe9"}]


def test_render_report_sections(project: Path) -> None:
    found = audit.scan_directory(str(project))
    analysis = audit.analyze_files(str(project), found["python_files"])
    report = audit.render_report("My audit", found, analysis)
    assert report.startswith("# My audit\n")
    assert report.endswith("\n")
    for line in [
        "| Files | 5 |",
        "| Docstring coverage | 50.0% |",
        "| Long functions (> 50 lines) | 1 |",
        "| `long_one` | long.py | 60 |",
        "- `pkg/core.py:3` TODO: split this module",
        "## Unparsable files",
    ]:
        assert line in report.splitlines()


def test_steps_run_directly(project: Path, tmp_path: Path) -> None:
    input = {"root": str(project), "report_path": str(tmp_path / "out" / "report.md")}
    results: dict = {}
    for step in audit.workflow.steps:
        output = step.fn(ctx(step.name, input, dict(results)))
        assert json.loads(json.dumps(output)) == output
        results[step.name] = output

    assert results["scan"] == audit.scan_directory(str(project))
    assert results["analyze"]["files_analyzed"] == 3
    draft = results["draft"]
    assert draft["title"] == "Audit of proj"
    assert draft["lines"] == len(draft["markdown"].splitlines())
    data = draft["markdown"].encode()
    assert results["publish"] == {
        "path": str(tmp_path / "out" / "report.md"),
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    assert (tmp_path / "out" / "report.md").read_bytes() == data


def test_workflow_definition() -> None:
    assert audit.workflow.name == "repo-audit"
    assert audit.workflows == [audit.workflow]
    assert [(s.name, s.approval) for s in audit.workflow.steps] == [
        ("scan", False),
        ("analyze", False),
        ("draft", True),
        ("publish", False),
    ]


def test_draft_title_from_input_or_request(project: Path) -> None:
    found = audit.scan_directory(str(project))
    results = {"scan": found, "analyze": audit.analyze_files(str(project), found["python_files"])}
    assert audit.draft(ctx("draft", {"title": "Given"}, results))["title"] == "Given"

    asking = {"ask_title": True}
    with pytest.raises(InputRequested) as raised:
        audit.draft(ctx("draft", asking, results))
    assert raised.value.prompt == "Title for the audit report?"
    answered = audit.draft(ctx("draft", asking, results, responses=["My title"]))
    assert answered["title"] == "My title"
    assert answered["markdown"].startswith("# My title\n")


def test_publish_uses_edited_draft_and_is_idempotent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    step = ctx("publish", {}, {"draft": {"title": "T", "markdown": "# Edited\n", "lines": 1}})
    first = audit.publish(step)
    assert first["path"] == str(tmp_path / "relaypoint-audit-r1.md")
    assert audit.publish(step) == first
    assert (tmp_path / "relaypoint-audit-r1.md").read_text() == "# Edited\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["relaypoint-audit-r1.md"]


def test_publish_refuses_draft_without_markdown(tmp_path: Path) -> None:
    step = ctx("publish", {"report_path": str(tmp_path / "r.md")}, {"draft": {"title": "T"}})
    with pytest.raises(ValueError, match="markdown"):
        audit.publish(step)
