"""A Griffe extension for the API reference: relaypoint's docstrings are written for people reading
the source, with reST roles (``:class:`Workflow```, ``:func:`human```) and doctest examples; shown
as Markdown by mkdocstrings, a role would print as text and a ``>>>`` line as a quotation. Each role
becomes a code span of its target (``~`` shortened as Sphinx does), and each run of doctest lines a
``pycon`` code block."""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|data|attr|exc|obj|const):`(~?)([^`]+)`")
DOCTEST = re.compile(r"^\s*(>>>|\.\.\.)( |$)")


def plain(text: str) -> str:
    text = ROLE.sub(lambda m: f"`{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}`", text)
    out: list[str] = []
    inside = False
    for line in text.split("\n"):
        doctest = bool(DOCTEST.match(line))
        if doctest and not inside:
            out.append("```pycon")
        elif not doctest and inside:
            out.append("```")
        inside = doctest
        out.append(line)
    if inside:
        out.append("```")
    return "\n".join(out)


class RstRoles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain(obj.docstring.value)
