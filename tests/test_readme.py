"""The README's Python examples run as written (the workflow definition, then the API tour)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def section(title: str) -> str:
    """The README's ``## title`` section, up to the next ``## `` heading."""
    return README.read_text().split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_python_examples_run_as_written(tmp_path, monkeypatch):
    blocks = python_blocks(README.read_text().split("\n## Patterns\n", 1)[0])
    assert len(blocks) == 2, "expected the workflow definition and the API tour"
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)
    rt = namespace["rt"]
    run = rt.get(namespace["run_id"])
    assert run.status == "completed"
    assert run.tasks[-1].output["title"] == "Final title"
    assert rt.get(namespace["new_id"]).status == "cancelled"


def test_the_pattern_examples_run_as_written(tmp_path, monkeypatch):
    """The Patterns section's blocks, in order in one namespace: every pattern in one workflow, whose
    report is the JSON the section shows, then the nodes of independent calls, whose results are
    the comment under them, then a debate with a person answering two rounds."""
    text = section("Patterns")
    blocks = python_blocks(text)
    assert len(blocks) == 4, "expected the patterns tour, independent calls, async functions and a person as an agent"
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    (shown,) = re.findall(r"```json\n(.*?)```", text, flags=re.S)
    assert namespace["result"] == json.loads(shown)
    exec(compile(blocks[1], str(README), "exec"), namespace)
    commented = re.search(r"fanned = .*?\n((?:# .*\n)+)", blocks[1]).group(1)
    assert namespace["fanned"] == json.loads(re.sub(r"^# ?", "", commented, flags=re.M))
    exec(compile(blocks[2], str(README), "exec"), namespace)
    assert namespace["published"] == "published: ship"
    with namespace["Runtime"]("agents.db") as rt:
        voters = [t for t in rt.get(rt.list()[0].run_id).tasks if t.agent is not None]
    assert max(t.started_at for t in voters) < min(t.finished_at for t in voters), "the voters run at once"
    exec(compile(blocks[3], str(README), "exec"), namespace)
    run = namespace["rt"].get(namespace["run_id"])
    assert run.status == "completed"
    assert [t.output for t in run.tasks if t.agent == "con"] == ["Caching hides bugs.", "Still not convinced."]


def run_sh_block(marker: str, cwd: Path):
    """Run the README's ``sh`` block containing ``marker`` with bash in ``cwd`` (the test
    environment's ``relaypoint`` first on PATH, RELAYPOINT_* cleared); assert it succeeded."""
    import os
    import subprocess
    import sys

    (session,) = [b for b in re.findall(r"```sh\n(.*?)```", README.read_text(), flags=re.S) if marker in b]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env = {k: v for k, v in env.items() if not k.startswith("RELAYPOINT_")}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", session], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    return done


def test_the_cli_session_runs_as_written(tmp_path):
    assert "run_completed" in run_sh_block("RELAYPOINT_DB=demo.db", tmp_path).stdout


def test_running_your_own_module_works_as_written(tmp_path):
    """The README's last step for a user's own module: the workflow block saved as ``mywf.py``, the
    commands run from its directory."""
    definition = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)[0]
    (tmp_path / "mywf.py").write_text(definition)
    done = run_sh_block("--app mywf:workflows", tmp_path)
    assert done.stdout.strip().splitlines()[-1].endswith(" is completed")
    from relaypoint import Runtime

    with Runtime(str(tmp_path / "relaypoint.db"), create=False) as rt:
        (run,) = rt.list()
        assert run.status == "completed" and rt.step_output(run.run_id, "publish")["title"] == "Final title"


def test_the_traces_example_runs_as_written(tmp_path):
    """The Traces section's block, in a process of its own (it sets the global tracer provider, as
    an application does once), gives the spans its comment shows."""
    (block,) = python_blocks(section("Traces"))
    code = block + "\nimport json\nprint(json.dumps(tree))\n"
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    shown = re.search(r"\n((?:# .*\n)+)", block.split("tree = ", 1)[1]).group(1)
    assert json.loads(done.stdout) == json.loads(re.sub(r"^# ?", "", shown, flags=re.M))


def test_the_typed_outputs_example_runs_as_written(tmp_path, monkeypatch):
    """The Values section's "Typed outputs" block: an edit refused by the recorded schema with the
    line its comment shows, then a good one, which the next step reads as the model."""
    text = section("Values").split("\n### Typed outputs\n", 1)[1]
    (block,) = python_blocks(text)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(block, str(README), "exec"), namespace)
    shown = re.search(r"refused = str\(e\)  # (.*)", block).group(1)
    assert namespace["refused"] == shown
    assert namespace["published"] == re.search(r"published = .*# '(.*)'", block).group(1)


@pytest.mark.parametrize("title", ["Recorded calls inside a step", "A PydanticAI agent",
                                   "An OpenAI Agents SDK agent"])
def test_the_recorded_calls_examples_run_as_written(tmp_path, monkeypatch, title):
    """The block of each section: each model request sent once across a pause and a run again,
    the calls recorded as its comments show."""
    (block,) = python_blocks(section(title))
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(block, str(README), "exec"), namespace)
    for name in ("sent", "recorded"):
        shown = re.search(rf"^# {name} == (.*?)(?::.*)?$", block, flags=re.M).group(1)
        assert repr(namespace[name]) == shown, name
