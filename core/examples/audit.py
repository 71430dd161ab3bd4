"""``repo-audit``: scan a local directory, analyse its Python files, draft a Markdown report for
approval, then write the approved report to a file. Real work on real input; no network.

Run input (all optional): ``root`` (directory, default "."), ``max_files`` (default 2000),
``long_function_lines`` (default 50), ``delay`` (seconds the analyze step spends sleeping, for
demos that kill a process mid-step), ``title``, ``ask_title`` (ask for the title as run input),
``report_path`` (default: a file named after the run in the system temporary directory).

The step functions are thin; the work is in plain functions (:func:`scan_directory`,
:func:`analyze_files`, :func:`render_report`, :func:`write_report`) usable without the runtime.
"""

from __future__ import annotations

import ast
import hashlib
import io
import os
import re
import stat
import tempfile
import time
import tokenize
from collections import Counter
from typing import Any

from relaypoint.workflow import Context, Workflow

SKIPPED_DIRS = frozenset({".git", "__pycache__", ".venv", "venv", "node_modules", ".tox", "build", "dist"})
TODO_RE = re.compile(r"\b(TODO|FIXME|XXX)\b")
MAX_TODOS = 50
MAX_LONG_FUNCTIONS = 20
TOP_EXTENSIONS = 10
SLEEP_SLICE = 0.1

workflow = Workflow("repo-audit")
workflows = [workflow]


def _skip_dir(name: str) -> bool:
    return name in SKIPPED_DIRS or name.startswith(".") or name.endswith(".egg-info")


def scan_directory(root: str, max_files: int = 2000) -> dict[str, Any]:
    """Walk ``root`` and count its regular files; symlinks are neither followed nor counted.

    Skips hidden directories, ``*.egg-info`` and the usual tool directories (:data:`SKIPPED_DIRS`).
    Returns ``{"root": absolute path, "files": count, "bytes": total size in bytes,
    "by_extension": {".py": count, ...} (the 10 most common, most common first; "(none)" for
    files without one), "python_files": sorted relative POSIX paths of ``.py`` files (at most
    ``max_files``), "truncated": whether more Python files were found than listed}``.

    Raises ``FileNotFoundError`` if ``root`` does not exist or is not a directory.
    """
    base = os.path.realpath(root)
    if not os.path.isdir(base):
        raise FileNotFoundError(f"audit root {base} does not exist or is not a directory")
    files = size = 0
    extensions: Counter[str] = Counter()
    python_files: list[str] = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if not _skip_dir(d))
        for name in filenames:
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
            except OSError:  # vanished since listing
                continue
            if not stat.S_ISREG(st.st_mode):  # symlinks, sockets, fifos
                continue
            files += 1
            size += st.st_size
            ext = os.path.splitext(name)[1].lower() or "(none)"
            extensions[ext] += 1
            if ext == ".py":
                python_files.append(os.path.relpath(path, base).replace(os.sep, "/"))
    python_files.sort()
    top = sorted(extensions.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_EXTENSIONS]
    return {
        "root": base,
        "files": files,
        "bytes": size,
        "by_extension": dict(top),
        "python_files": python_files[:max_files],
        "truncated": len(python_files) > max_files,
    }


def analyze_source(source: bytes, path: str, long_lines: int = 50) -> dict[str, Any]:
    """Measure one Python file given as bytes (its encoding cookie is honoured).

    Returns ``{"functions": count of functions and methods (async included), "classes": count,
    "documentable": modules + classes + functions, "documented": those with a docstring,
    "todos": [{"path", "line", "text"}] for TODO/FIXME/XXX comments (comments only, not strings),
    "long_functions": [{"path", "name" (dotted, e.g. "Class.method"), "lines"}] longer than
    ``long_lines`` lines}``.

    Raises ``SyntaxError``, ``ValueError`` (``UnicodeDecodeError`` included), ``RecursionError``
    (nesting too deep) or ``tokenize.TokenError`` for a file that cannot be decoded or parsed.
    """
    tree = ast.parse(source, filename=path)
    module_documented = int(ast.get_docstring(tree) is not None)
    counts = {"functions": 0, "classes": 0, "documentable": 1, "documented": module_documented}
    long_functions: list[dict[str, Any]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                is_class = isinstance(child, ast.ClassDef)
                counts["classes" if is_class else "functions"] += 1
                counts["documentable"] += 1
                counts["documented"] += int(ast.get_docstring(child) is not None)
                qualname = prefix + child.name
                lines = (child.end_lineno or child.lineno) - child.lineno + 1
                if not is_class and lines > long_lines:
                    long_functions.append({"path": path, "name": qualname, "lines": lines})
                visit(child, qualname + ".")
            elif not isinstance(child, ast.expr):  # definitions are statements; skip deep expressions
                visit(child, prefix)

    visit(tree, "")
    todos: list[dict[str, Any]] = []
    if re.search(rb"TODO|FIXME|XXX", source):  # tokenizing is slow; most files have no marker
        todos = [
            {"path": path, "line": tok.start[0], "text": tok.string.lstrip("#").strip()}
            for tok in tokenize.tokenize(io.BytesIO(source).readline)
            if tok.type == tokenize.COMMENT and TODO_RE.search(tok.string)
        ]
    return {**counts, "todos": todos, "long_functions": long_functions}


def _sleep(seconds: float) -> None:
    """Sleep ``seconds`` in slices of at most :data:`SLEEP_SLICE`, so a kill lands promptly."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(left, SLEEP_SLICE))


def analyze_files(root: str, paths: list[str], long_lines: int = 50, delay: float = 0.0) -> dict[str, Any]:
    """Analyse the Python files ``paths`` (relative to ``root``) with :func:`analyze_source`.

    ``delay``: seconds to spend sleeping in total, spread across the files (the whole delay even
    with no files); demos use it to kill a process mid-step.

    Returns ``{"files_analyzed": files parsed, "functions", "classes", "docstring_coverage":
    documented / documentable over parsed files (0..1, rounded to 3 places; None if no file
    parsed), "todos": the first 50 in path and line order, "todo_count": all of them,
    "long_functions": the 20 longest, longest first, "long_function_count": all of them,
    "long_function_lines": ``long_lines``,
    "unparsable": [{"path", "error"}] for files that could not be read, decoded or parsed}``.
    """
    totals: Counter[str] = Counter()
    todos: list[dict[str, Any]] = []
    long_functions: list[dict[str, Any]] = []
    unparsable: list[dict[str, str]] = []
    share = delay / len(paths) if paths else 0.0
    for path in paths:
        try:
            with open(os.path.join(root, path), "rb") as f:
                stats = analyze_source(f.read(), path, long_lines)
        except (OSError, SyntaxError, ValueError, RecursionError, tokenize.TokenError) as e:
            unparsable.append({"path": path, "error": f"{type(e).__name__}: {e}"})
        else:
            totals.update({k: stats[k] for k in ("functions", "classes", "documentable", "documented")})
            totals["files_analyzed"] += 1
            todos += stats["todos"]
            long_functions += stats["long_functions"]
        _sleep(share)
    if not paths:
        _sleep(delay)
    long_functions.sort(key=lambda f: (-f["lines"], f["path"], f["name"]))
    documentable = totals["documentable"]
    return {
        "files_analyzed": totals["files_analyzed"],
        "functions": totals["functions"],
        "classes": totals["classes"],
        "docstring_coverage": round(totals["documented"] / documentable, 3) if documentable else None,
        "todos": todos[:MAX_TODOS],
        "todo_count": len(todos),
        "long_functions": long_functions[:MAX_LONG_FUNCTIONS],
        "long_function_count": len(long_functions),
        "long_function_lines": long_lines,
        "unparsable": unparsable,
    }


def _cell(value: Any) -> str:
    """``value`` as a Markdown table cell (pipes escaped, newlines flattened)."""
    return str(value).replace("|", "\\|").replace("\n", " ")


def _percent(fraction: float | None) -> str:
    return "n/a" if fraction is None else f"{fraction:.1%}"


def render_report(title: str, scan: dict[str, Any], analysis: dict[str, Any]) -> str:
    """The Markdown audit report for the outputs of :func:`scan_directory` and :func:`analyze_files`.

    Sections: title, summary table, file types, docstring coverage, long functions, TODO list
    (and unparsable files, when any). Ends with a newline.
    """
    count = len(scan["python_files"])
    listed = f"{count} listed (more not listed)" if scan["truncated"] else str(count)
    coverage = analysis["docstring_coverage"]
    out = [
        f"# {title}",
        "",
        f"Root: `{scan['root']}`",
        "",
        "## Summary",
        "",
        "| Measure | Value |",
        "|---|---:|",
        f"| Files | {scan['files']} |",
        f"| Size (bytes) | {scan['bytes']} |",
        f"| Python files | {listed} |",
        f"| Python files analysed | {analysis['files_analyzed']} |",
        f"| Unparsable files | {len(analysis['unparsable'])} |",
        f"| Functions and methods | {analysis['functions']} |",
        f"| Classes | {analysis['classes']} |",
        f"| Docstring coverage | {_percent(coverage)} |",
        f"| TODO/FIXME/XXX comments | {analysis['todo_count']} |",
        f"| Long functions (> {analysis['long_function_lines']} lines) | {analysis['long_function_count']} |",
        "",
        "## File types",
        "",
    ]
    if scan["by_extension"]:
        out += ["| Extension | Files |", "|---|---:|"]
        out += [f"| {_cell(ext)} | {n} |" for ext, n in scan["by_extension"].items()]
    else:
        out.append("No files.")
    out += ["", "## Docstring coverage", ""]
    if coverage is None:
        out.append("No Python modules, classes or functions to measure.")
    else:
        out.append(
            f"{_percent(coverage)} of modules, classes and functions have a docstring "
            f"(across {analysis['files_analyzed']} parsed files)."
        )
    out += ["", "## Long functions", ""]
    if analysis["long_functions"]:
        out += ["| Function | File | Lines |", "|---|---|---:|"]
        shown = analysis["long_functions"]
        out += [f"| `{_cell(f['name'])}` | {_cell(f['path'])} | {f['lines']} |" for f in shown]
        if analysis["long_function_count"] > len(shown):
            out += ["", f"The {len(shown)} longest of {analysis['long_function_count']} are shown."]
    else:
        out.append(f"No function is longer than {analysis['long_function_lines']} lines.")
    out += ["", "## TODO list", ""]
    if analysis["todos"]:
        out += [f"- `{t['path']}:{t['line']}` {t['text']}" for t in analysis["todos"]]
        if analysis["todo_count"] > len(analysis["todos"]):
            out.append(f"- … and {analysis['todo_count'] - len(analysis['todos'])} more")
    else:
        out.append("No TODO, FIXME or XXX comments.")
    if analysis["unparsable"]:
        out += ["", "## Unparsable files", ""]
        out += [f"- `{u['path']}`: {u['error']}" for u in analysis["unparsable"]]
    return "\n".join(out) + "\n"


def write_report(path: str, text: str) -> dict[str, Any]:
    """Write ``text`` (UTF-8) to ``path`` atomically, creating parent directories.

    Writes a temporary file beside ``path`` and renames it over ``path``, so a reader never sees
    a partial report and writing again is harmless. Returns ``{"path": absolute path, "bytes":
    size written, "sha256": hex digest of the bytes}``. Raises ``OSError`` if it cannot write.
    """
    target = os.path.abspath(os.path.expanduser(path))
    os.makedirs(os.path.dirname(target), exist_ok=True)
    data = text.encode("utf-8")
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".relaypoint-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise
    return {"path": target, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


@workflow.step
def scan(ctx: Context) -> dict[str, Any]:
    """Walk ``input.root`` and list its Python files (see :func:`scan_directory`)."""
    return scan_directory(ctx.input.get("root", "."), int(ctx.input.get("max_files", 2000)))


@workflow.step
def analyze(ctx: Context) -> dict[str, Any]:
    """Parse each Python file found by ``scan`` (see :func:`analyze_files`)."""
    found = ctx.results["scan"]
    return analyze_files(
        found["root"],
        found["python_files"],
        int(ctx.input.get("long_function_lines", 50)),
        float(ctx.input.get("delay") or 0),
    )


@workflow.step(approval=True)
def draft(ctx: Context) -> dict[str, Any]:
    """Draft the Markdown report for a reviewer to approve (or edit, then approve)."""
    found = ctx.results["scan"]
    if ctx.input.get("ask_title"):
        answer = ctx.request_input("Title for the audit report?")
    else:
        answer = ctx.input.get("title")
    title = str(answer or "").strip() or f"Audit of {os.path.basename(found['root'])}"
    markdown = render_report(title, found, ctx.results["analyze"])
    return {"title": title, "markdown": markdown, "lines": len(markdown.splitlines())}


@workflow.step
def publish(ctx: Context) -> dict[str, Any]:
    """Write the approved draft's ``markdown`` to ``input.report_path`` (see :func:`write_report`).

    The default path is ``relaypoint-audit-<run id>.md`` in the system temporary directory, so a
    demo never writes into the audited repository. Raises ``ValueError`` if the approved draft
    has no ``markdown`` text.
    """
    approved = ctx.results["draft"]
    markdown = approved.get("markdown") if isinstance(approved, dict) else None
    if not isinstance(markdown, str):
        raise ValueError("the approved draft has no 'markdown' text to publish")
    path = ctx.input.get("report_path") or os.path.join(tempfile.gettempdir(), f"relaypoint-audit-{ctx.run_id}.md")
    return write_report(path, markdown)
