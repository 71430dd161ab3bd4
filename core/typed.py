"""Typed outputs: a step (``@wf.step(output=Model)``) or a pattern's agent (:func:`relaypoint.typed`)
whose output is a pydantic model.

A typed execution's returned value (the model, or anything the model validates, such as a dict) is
validated where it is returned and stored as the model's JSON; ``ctx.results`` and ``ctx.history``
give the model back (:func:`read_back`). The definition records the model's name and JSON Schema
(:func:`described`), so an edited output given at an approval is checked against it even where
the app is not loaded (:func:`check_recorded`, with ``jsonschema``: types, required fields,
bounds, patterns, and the string formats pydantic writes, read as pydantic reads them); where it is
loaded, pydantic's validation counts (:func:`validated`), the model's own validators included.
Every refusal is one line naming the field: ``output does not fit Draft: field 'title': Field
required``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from datetime import date, datetime, time, timedelta
from typing import Any
from uuid import UUID

import jsonschema
from pydantic import AnyUrl, BaseModel, TypeAdapter, ValidationError
from referencing.exceptions import Unresolvable  # jsonschema's own reference resolution

from .calls import wrap
from .errors import DefinitionError, InvalidValue

MESSAGE_CHARS = 200
"""At most this many characters of a schema validator's message are quoted (it may quote the value)."""


def check_model(model: Any, owner: str) -> None:
    """Refuse, with a one-line ``DefinitionError`` naming ``owner`` (words like "step 'draft'"),
    an ``output=`` that is not a pydantic model class."""
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise DefinitionError(f"{owner}: output must be a pydantic model class (a BaseModel subclass), "
                              f"not {model!r}")


@functools.cache
def described(model: type[BaseModel]) -> dict[str, Any]:
    """What a definition records of ``model``: ``{"name": class name, "schema": its JSON Schema}``
    (computed once per class; callers must not change it)."""
    return {"name": model.__name__, "schema": model.model_json_schema()}


def _field(loc: Sequence[Any]) -> str:
    """A validation error's location as a path: ``sections[0].heading``."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}" if path else str(part)
    return path


def _line(what: str, name: str, loc: Sequence[Any], message: str, more: int) -> str:
    where = f"field '{_field(loc)}': " if loc else ""
    rest = f" (and {more} more)" if more else ""
    return f"{what} does not fit {name}: {where}{message}{rest}"


def validated(model: type[BaseModel], value: Any, what: str = "output") -> BaseModel:
    """``value`` as an instance of ``model`` (an instance is returned as it is; a dict or another
    model is validated). Raises ``InvalidValue``, one line naming ``what`` and the first field
    that does not fit, e.g. ``output does not fit Draft: field 'title': Field required``."""
    if type(value) is model:
        return value
    if isinstance(value, BaseModel):  # another model: what it would be stored as
        value = value.model_dump(mode="json")
    try:
        return model.model_validate(value)
    except ValidationError as e:
        errors = e.errors(include_url=False)
        first = errors[0]
        raise InvalidValue(_line(what, model.__name__, first["loc"], first["msg"], len(errors) - 1)) from None


def returning(fn: Callable[..., Any], model: type[BaseModel]) -> Callable[..., Any]:
    """``fn`` (def or async def, a function of ctx) whose returned value is :func:`validated`
    against ``model`` where it returns: a value that does not fit fails the execution with
    ``InvalidValue``, which is never retried (the same value would fail again)."""
    return wrap(fn, after=lambda value, ctx: validated(model, value))


def read_back(model: type[BaseModel] | None, value: Any, what: str) -> Any:
    """A stored output (JSON) as the code reads it: an instance of ``model`` (None: ``value`` as
    it is). Raises ``InvalidValue`` naming ``what`` (e.g. "the recorded output of 'draft'") when
    it does not fit (the model changed since it was recorded)."""
    return value if model is None else validated(model, value, what)


def _said(error: jsonschema.ValidationError) -> tuple[list[Any], str]:
    """A schema error's field path and message, worded as pydantic words them where it can (a
    missing field: ``Field required``)."""
    path = list(error.absolute_path)
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = next((k for k in error.validator_value if k not in error.instance), None)
        if missing is not None:
            return path + [missing], "Field required"
    if error.validator == "type":
        kinds = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        return path, f"Input should be of type {' or '.join(map(str, kinds))}"
    message = error.message
    return path, message if len(message) <= MESSAGE_CHARS else message[:MESSAGE_CHARS] + "…"


FORMATS = jsonschema.FormatChecker(formats=())
"""The string formats a recorded schema's values are checked for, each as pydantic parses the type
that writes it (``date-time`` as ``datetime``, so a time without an offset passes, as in pydantic)."""
for _format, _kind in {"date-time": datetime, "date": date, "time": time, "duration": timedelta, "uri": AnyUrl,
                       "uuid": UUID}.items():
    FORMATS.checks(_format, raises=ValidationError)(
        lambda value, adapter=TypeAdapter(_kind): not isinstance(value, str) or adapter.validate_python(value) is not None)


def check_recorded(entry: dict[str, Any], value: Any, what: str) -> None:
    """Refuse ``value`` (JSON) unless it fits the recorded model ``entry`` (``{"name", "schema"}``,
    see :func:`described`), checked with ``jsonschema`` (for where the model's class is not
    loaded). Raises ``InvalidValue`` in the shape of :func:`validated`; a recorded schema that is
    not a JSON Schema is refused the same way (fail closed)."""
    name = str(entry.get("name", "the recorded model"))
    schema = entry.get("schema")
    try:
        validator_class = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        validator_class.check_schema(schema)
        errors = sorted(validator_class(schema, format_checker=FORMATS).iter_errors(value), key=lambda e: [str(p) for p in e.absolute_path])
    except (jsonschema.SchemaError, Unresolvable, TypeError, AttributeError):
        raise InvalidValue(f"{what} cannot be checked: the schema recorded for {name} is not a valid JSON "
                           "Schema (edited by hand?); fork the run or load the app") from None
    if errors:
        path, message = _said(errors[0])
        raise InvalidValue(_line(what, name, path, message, len(errors) - 1))


def check_edit(entry: dict[str, Any], value: Any, model: type[BaseModel] | None, what: str) -> Any:
    """An edited ``value`` for an execution typed by the recorded ``entry``, checked: with the
    loaded ``model`` whose description is the recorded one, by pydantic (returns its JSON, as a
    returned value is stored); otherwise by the recorded schema (returns ``value``). Raises
    ``InvalidValue`` (see :func:`validated`)."""
    if model is not None and described(model) == entry:
        return validated(model, value, what).model_dump(mode="json")
    check_recorded(entry, value, what)
    return value


def fields(entry: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """The top-level fields of the recorded model ``entry`` as ``(name, type, required)``, in the
    schema's order; the type in JSON Schema's words (``string``, ``array of Sec``, ``integer or
    null``; ``any`` when the schema does not say). ``[]`` for a schema without properties."""
    schema = entry.get("schema")
    props = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(props, dict):
        return []
    required = schema.get("required") if isinstance(schema.get("required"), list) else []
    return [(str(name), _kind(prop), name in required) for name, prop in props.items()]


def _kind(prop: Any, depth: int = 0) -> str:
    """A property schema's type in words (see :func:`fields`)."""
    if not isinstance(prop, dict) or depth > 3:
        return "any"
    if isinstance(prop.get("$ref"), str):
        return prop["$ref"].rsplit("/", 1)[-1]
    options = prop.get("anyOf") or prop.get("oneOf")
    if isinstance(options, list) and options:
        return " or ".join(_kind(o, depth + 1) for o in options)
    if isinstance(prop.get("enum"), list):
        return "one of " + ", ".join(map(str, prop["enum"]))
    kind = prop.get("type")
    if kind == "array":
        return f"array of {_kind(prop.get('items'), depth + 1)}"
    if isinstance(kind, list):
        return " or ".join(map(str, kind))
    return str(kind) if kind is not None else "any"
