"""A Griffe extension for the API reference: relaypoint's docstrings are written for people reading
the source, with reST roles (``:class:`Workflow```, ``:func:`human```); shown by mkdocstrings, a role
would print as text. Each role becomes a code span of its target (``~`` shortened as Sphinx does)."""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|data|attr|exc|obj|const):`~?([^`]+)`")


def plain(text: str) -> str:
    return ROLE.sub(lambda m: f"`{m.group(1).rsplit('.', 1)[-1] if m.group(0).count('~') else m.group(1)}`", text)


class RstRoles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain(obj.docstring.value)
