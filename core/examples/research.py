"""``research``: a PydanticAI writer drafts a short post with a ``web_search`` tool, three reviewer
agents vote on it, the writer revises it when the vote says so, a person approves the revision
seeing the agent's calls and their usage, and ``publish`` writes it once per run. Every agent is a
:class:`~relaypoint.integrations.pydantic_ai.RelaypointAgent` on an offline ``FunctionModel``
(deterministic, no network) over a small canned corpus (:data:`CORPUS`); ``pip install
'relaypoint[pydantic-ai]'``.

1. ``draft`` (a step, ``output=Draft``): the writer searches twice, then writes a :class:`Draft`
   citing the top hit of each search: three model requests and two tool calls, each a recorded call.
2. ``review`` (a vote): the reviewers ``facts`` (asks for :data:`MIN_SOURCES` sources), ``editor``
   (a body of :data:`BODY_WORDS` words) and ``reader`` (says who approves before publishing) each
   return a :class:`Review`; the majority of their verdicts wins.
3. ``revise`` (a step, ``output=Draft``, approval gate): when the vote's verdict is "revise", the
   writer searches once more and rewrites the draft; else the draft as it was.
4. ``publish`` (a step): writes the approved draft to ``<published_dir>/<idempotency key>.json``,
   once (:func:`publish_post`): a step run again finds its post already there.

The models are named (``canned-writer``, ``canned-fact-checker``, ``canned-editor``,
``canned-reader``) and priced (:data:`PRICES`) as paid models would be; their token usage is
FunctionModel's estimate, so the cost shown is made up too.

Run input (all optional): ``topic`` (default :data:`TOPIC`), ``published_dir`` (default
``relaypoint-research-published`` in the system temporary directory), ``delay`` (seconds the
writer's third model request of ``draft`` waits on its first attempt, for demos that kill the
process mid-agent).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import tempfile
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from relaypoint import recorded
from relaypoint.integrations.pydantic_ai import RelaypointAgent
from relaypoint.patterns import typed
from relaypoint.workflow import Context, Workflow

TOPIC = "durable agent runs"
MIN_SOURCES = 3
BODY_WORDS = (40, 300)
"""The editor's accepted length of a body, in words (inclusive)."""
HITS = 2
"""The most hits one search returns."""

CORPUS = [
    {"url": "https://notes.example/checkpoints", "title": "Checkpoints at every step boundary",
     "text": "Durable agent runs record each step's output when the step ends, so a crashed process resumes "
             "at the first step that did not finish instead of starting over."},
    {"url": "https://notes.example/model-requests", "title": "Model requests are the expensive part of an agent",
     "text": "An agent run that crashes in its third model request has already paid for two; recording each "
             "request as it returns means only the one in flight is sent again."},
    {"url": "https://notes.example/idempotency", "title": "Idempotency keys for side effects",
     "text": "A step that publishes or pays passes a key that stays the same when the step runs again, so the "
             "service it calls does the work once."},
    {"url": "https://notes.example/approval", "title": "A person approves before anything is published",
     "text": "An approval gate pauses the run after a draft; a reviewer reads it, with what the agent searched "
             "and what it cost, and approves, edits or rejects it before anything goes out."},
    {"url": "https://notes.example/leases", "title": "Leases decide which process owns a run",
     "text": "A worker holds a lease on the run it drives; when the worker dies the lease expires and another "
             "process takes the run over."},
    {"url": "https://notes.example/forks", "title": "Forks replay a run from a chosen step",
     "text": "A fork copies a run's outputs up to a step and runs the rest again, under new idempotency keys."},
]
"""The canned documents :func:`web_search` searches: ``{"url", "title", "text"}``."""


class Draft(BaseModel):
    """A post: its title, Markdown body and the URLs it cites."""

    title: str
    body: str
    sources: list[str]


class Review(BaseModel):
    """One reviewer's verdict on a draft: a score of 1 to 5, "accept" or "revise", and why."""

    score: int
    verdict: Literal["accept", "revise"]
    notes: str


def search_corpus(query: str, limit: int = HITS) -> list[dict[str, str]]:
    """The :data:`CORPUS` documents sharing the most words (of 4 letters or more) with ``query``,
    best first (ties in corpus order), at most ``limit``; none when no word is shared. Each hit is
    ``{"url", "title", "snippet"}``."""
    words = set(re.findall(r"[a-z]{4,}", query.lower()))
    scored = [(len(words & set(re.findall(r"[a-z]{4,}", f"{d['title']} {d['text']}".lower()))), i)
              for i, d in enumerate(CORPUS)]
    best = sorted((s for s in scored if s[0] > 0), key=lambda s: -s[0])[:limit]
    return [{"url": CORPUS[i]["url"], "title": CORPUS[i]["title"], "snippet": CORPUS[i]["text"]} for _, i in best]


# ---- the writer ---------------------------------------------------------------------------------


def _prompt(messages: list[ModelMessage]) -> str:
    """The run's user prompt (the first request's)."""
    return next(p.content for p in messages[0].parts if isinstance(p, UserPromptPart))


def _hits(messages: list[ModelMessage]) -> list[list[dict[str, str]]]:
    """What each web_search the model asked for returned, in order."""
    return [p.content for m in messages if isinstance(m, ModelRequest) for p in m.parts
            if isinstance(p, ToolReturnPart) and p.tool_name == "web_search"]


def _search(query: str) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart("web_search", {"query": query})])


def _output(info: AgentInfo, value: BaseModel) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, value.model_dump(mode="json"))])


def draft_prompt(topic: str) -> str:
    """What the ``draft`` step asks the writer."""
    return f"Write a short post on {topic}, citing your sources.\nTOPIC: {topic}"


def revise_prompt(draft: Draft, notes: list[str]) -> str:
    """What the ``revise`` step asks the writer: the draft and the reviewers' notes, as JSON."""
    return "Revise this draft as the reviewers ask.\n" + json.dumps({"draft": draft.model_dump(), "notes": notes})


async def write(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The writer's model. Drafting (:func:`draft_prompt`): search the topic, then what a crash
    costs, then a :class:`Draft` citing the top hit of each. Revising (:func:`revise_prompt`):
    search who approves, then the draft with that paragraph and source added. The third request of
    a draft waits ``input.delay`` seconds on the step's first attempt."""
    prompt = _prompt(messages)
    sent = sum(isinstance(m, ModelResponse) for m in messages)
    if prompt.startswith("Revise"):
        asked = json.loads(prompt.split("\n", 1)[1])
        if sent == 0:
            return _search("who approves a post before it is published")
        old = Draft(**asked["draft"])
        hit = next(h for h in _hits(messages)[0] if h["url"] not in old.sources)
        return _output(info, Draft(title=old.title, sources=[*old.sources, hit["url"]],
                                   body=f"{old.body}\n\n{hit['snippet']} [{len(old.sources) + 1}]"))
    topic = prompt.rsplit("TOPIC: ", 1)[1]
    if sent < 2:
        return _search(topic if sent == 0 else "what a crash in a model request costs")
    ctx = recorded.current()
    if ctx.attempt == 1:
        await asyncio.sleep(float(ctx.input.get("delay") or 0))
    cited = [hits[0] for hits in _hits(messages) if hits]
    paragraphs = [f"{h['snippet']} [{n}]" for n, h in enumerate(cited, 1)]
    return _output(info, Draft(title=f"{topic[0].upper()}{topic[1:]}: what survives a crash",
                               body="\n\n".join(paragraphs), sources=[h["url"] for h in cited]))


WRITER_MODEL = FunctionModel(write, model_name="canned-writer")
_writer = Agent(WRITER_MODEL, output_type=Draft, name="writer",
                instructions="You write short, sourced posts. Search before you write.")


@_writer.tool_plain
def web_search(query: str) -> list[dict[str, str]]:
    """Search the canned corpus (:func:`search_corpus`)."""
    return search_corpus(query)


writer = RelaypointAgent(_writer)


# ---- the reviewers ------------------------------------------------------------------------------


def _draft_asked(messages: list[ModelMessage]) -> Draft:
    return Draft(**json.loads(_prompt(messages).split("\n", 1)[1]))


def check_facts(draft: Draft) -> Review:
    """Accept a draft citing at least :data:`MIN_SOURCES` sources."""
    n = len(draft.sources)
    if n >= MIN_SOURCES:
        return Review(score=min(5, n + 1), verdict="accept", notes=f"{n} sources cited")
    return Review(score=n + 1, verdict="revise", notes=f"cite at least {MIN_SOURCES} sources ({n} cited)")


def check_length(draft: Draft) -> Review:
    """Accept a body of :data:`BODY_WORDS` words."""
    words = len(draft.body.split())
    low, high = BODY_WORDS
    if low <= words <= high:
        return Review(score=4, verdict="accept", notes=f"{words} words reads well")
    return Review(score=2, verdict="revise", notes=f"{words} words: write {low} to {high}")


def check_reader(draft: Draft) -> Review:
    """Accept a draft that says who approves before anything is published."""
    if "approv" in draft.body.lower():
        return Review(score=5, verdict="accept", notes="says who signs off before publishing")
    return Review(score=2, verdict="revise", notes="say who approves the post before it is published")


def _reviewer(name: str, check: Callable[[Draft], Review]) -> RelaypointAgent:
    """A reviewer agent on the model ``canned-<name>``, whose review of the draft asked is ``check``'s."""

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return _output(info, check(_draft_asked(messages)))

    agent = Agent(FunctionModel(model, model_name=f"canned-{name}"), output_type=Review, name=name,
                  instructions="Review the draft: a score of 1 to 5, accept or revise, and one line why.")
    return RelaypointAgent(agent)


REVIEWERS = {"facts": _reviewer("fact-checker", check_facts), "editor": _reviewer("editor", check_length),
             "reader": _reviewer("reader", check_reader)}
"""The voters of ``review`` by name."""


# ---- publishing ---------------------------------------------------------------------------------


def publish_post(directory: str, key: str, draft: Draft) -> dict[str, Any]:
    """Publish ``draft`` under idempotency key ``key``: write ``{"key", "title", "body", "sources"}``
    to ``<directory>/<key, "/" as "-">.json``, unless that file exists (published before: kept as
    it is). The file appears whole or not at all (written beside it, then hard-linked into place,
    which fails if it exists). Returns ``{"path", "key", "published": False if it was there
    already}``. Raises ``OSError`` if it cannot write."""
    os.makedirs(directory, exist_ok=True)
    target = os.path.join(os.path.abspath(directory), key.replace("/", "-") + ".json")
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".relaypoint-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"key": key, **draft.model_dump()}, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, target)
            published = True
        except FileExistsError:
            published = False
    finally:
        os.unlink(tmp)
    return {"path": target, "key": key, "published": published}


# ---- the workflow -------------------------------------------------------------------------------

PRICES = {"canned-writer": (3.00, 15.00), "canned-fact-checker": (0.80, 4.00), "canned-editor": (0.80, 4.00),
          "canned-reader": (0.15, 0.60)}
"""US dollars per million input and output tokens of each canned model, as a paid model's are
priced (made up: the models are offline), so the run's cost is shown beside its tokens."""

workflow = Workflow("research", prices=PRICES)
workflows = [workflow]


@workflow.step(output=Draft)
async def draft(ctx: Context) -> Draft:
    """The writer's first draft on ``input.topic``."""
    return (await writer.run(draft_prompt(ctx.input.get("topic") or TOPIC))).output


async def review_draft(ctx: Context) -> Review:
    """Reviewer ``ctx.agent``'s review of the draft."""
    asked = "Review this draft.\n" + ctx.results["draft"].model_dump_json()
    return (await REVIEWERS[ctx.agent].run(asked)).output


def verdict_of(review: Review) -> str:
    """What the vote counts: the verdict."""
    return review.verdict


workflow.vote("review", voters={name: typed(review_draft, output=Review) for name in REVIEWERS}, key=verdict_of)


@workflow.step(output=Draft, approval=True)
async def revise(ctx: Context) -> Draft:
    """The draft rewritten by the writer with the notes of the reviewers asking for a revision, when
    the vote's verdict is "revise"; else the draft as it was."""
    old = ctx.results["draft"]
    vote = ctx.results["review"]
    if vote["result"]["winner"] != "revise":
        return old
    notes = [v["notes"] for v in vote["votes"].values() if v["verdict"] == "revise"]
    return (await writer.run(revise_prompt(old, notes))).output


@workflow.step
def publish(ctx: Context) -> dict[str, Any]:
    """Publish the approved draft once for this run (see :func:`publish_post`)."""
    directory = ctx.input.get("published_dir") or os.path.join(tempfile.gettempdir(), "relaypoint-research-published")
    return publish_post(directory, ctx.idempotency_key, ctx.results["revise"])
