"""Loading workflow definitions named by the operator with ``--app MODULE:ATTR``.

Only the operator's argument is ever imported: nothing stored in a run names code to import.
"""

from __future__ import annotations

import importlib
import os
import sys

from .errors import AppLoadError, quoted
from .workflow import Workflow


def load_workflows(spec: str) -> list[Workflow]:
    """Import ``MODULE`` (with the current directory on ``sys.path``) and return ``ATTR`` as a list
    of workflows. ``ATTR`` may be a :class:`Workflow` or a list/tuple of them.

    Raises ``AppLoadError`` with one line saying what is wrong and what to do.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise AppLoadError(f"--app {quoted(spec)} must look like MODULE:ATTR, e.g. myflows:workflows")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        raise AppLoadError(f"cannot import {quoted(module_name)} named by --app: no module named "
                           f"{quoted(e.name or module_name)}; run from the directory that holds it or set "
                           "PYTHONPATH") from None
    except Exception as e:  # the operator's module failed while importing
        raise AppLoadError(f"importing {quoted(module_name)} named by --app failed: {type(e).__name__}: {e}") from None
    try:
        value = getattr(module, attr)
    except AttributeError:
        raise AppLoadError(f"module {quoted(module_name)} has no attribute {quoted(attr)} (named by --app)") from None
    workflows = [value] if isinstance(value, Workflow) else value
    if not isinstance(workflows, (list, tuple)) or not all(isinstance(w, Workflow) for w in workflows):
        raise AppLoadError(f"--app {quoted(spec)} must name a Workflow or a list of Workflows, "
                           f"not {type(value).__name__}")
    return list(workflows)
