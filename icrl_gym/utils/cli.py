"""One command-line style for every entry point: a typed configuration dataclass becomes a parser.

    python -m MODULE [CONFIG.json] [--set key=value ...] [the entry point's own flags]

CONFIG.json holds fields of the configuration; ``--set`` overrides them one by one, each value
parsed by the field's type (``steps=2000``, ``lr=3e-4``, ``normalize_reward=false``,
``expert=none``, ``model={}``; a string as written, ``out_dir=runs/x`` or ``out_dir="runs/x"``),
and ``--set env.horizon=50`` changes one entry of a dict field.
``--help`` lists every field with its type, its default and the docstring written under it in
the dataclass (read once from the source).  An unknown field, a value of the wrong type or a
configuration the dataclass refuses (its ``__post_init__`` raises ``ValueError``) ends in an
argparse error (exit status 2) that names the field, the value and what is allowed, before any
work starts.  Flags that are themselves fields (the harness's ``--runs``) come from
:func:`add_field_flags`.

Docstrings are reStructuredText, written for readers of the source and the API docs; ``--help``
shows them as plain text (:func:`plain_text`: no backquotes, roles or ``::``), laid out as written.
Commands with flags of their own build their parser with :func:`doc_parser`, which does the same
for the module docstring it shows.
"""

from __future__ import annotations

import argparse
import ast
import copy
import dataclasses
import functools
import inspect
import json
import logging
import re
import sys
import textwrap
import types
import typing
from pathlib import Path
from typing import Any, Generic, TypeVar

from icrl_gym.utils.names import did_you_mean
from icrl_gym.utils.progress import set_quiet

T = TypeVar("T")

_NONE_WORDS = ("none", "null")
_BOOL_WORDS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`~?([^`<]*?)\s*(?:<[^`>]*>)?`")
"""A Sphinx role, ``:func:`name```, ``:class:`~pkg.Name``` or ``:ref:`title <target>```."""
_LITERAL = re.compile(r"``(.+?)``")
_INTERPRETED = re.compile(r"(?<![\w`])`([^`]+)`_{0,2}(?![\w`])")
_STRONG = re.compile(r"(?<![\w*])\*\*(?=\S)(.+?)(?<=\S)\*\*(?![\w*])")


def _role_text(match: re.Match[str]) -> str:
    """The text a role shows: its title, or its target with ``~`` keeping only the last dotted part."""
    whole, text = match.group(0), match.group(1)
    return text.rsplit(".", 1)[-1] if "`~" in whole else text


def plain_text(doc: str | None) -> str:
    """A reStructuredText docstring as plain text for ``--help``, with its lines and paragraphs kept.

    Roles (``:func:`x```, ``:class:`~a.B``` -> ``B``), inline literals (````x````), interpreted text
    and links (```x```, ```x`_``) and ``**strong**`` lose their markup; a literal-block marker ``::``
    ending a line becomes one colon (``Run as::`` -> ``Run as:``, a lone `` ::`` goes).  The docstring's
    common indentation is removed, so that a module's or a function's docstring reads the same.
    """
    text = inspect.cleandoc(doc or "")
    text = _ROLE.sub(_role_text, text)
    text = _LITERAL.sub(r"\1", text)
    text = _INTERPRETED.sub(r"\1", text)
    text = _STRONG.sub(r"\1", text)
    lines = []
    for line in text.splitlines():
        if line.rstrip().endswith("::"):
            stem = line.rstrip()[:-2]
            line = stem.rstrip() if stem.endswith(" ") or not stem.strip() else stem + ":"
        lines.append(line)
    return "\n".join(lines)


class PlainHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The help layout of every command: the description and epilog as written, the flags' help wrapped.

    Flag help is wrapped without breaking at hyphens, so that names such as ``in-range`` or
    ``bernoulli-beta`` stay whole.
    """

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


def parse_agent(text: str) -> tuple[str, dict[str, Any]]:
    """``LABEL=JSON`` -> (label, agent specification), an ``--agent`` flag's value, with an error naming what is wrong.

    The specification is what :func:`agents.make_agent` takes (a ``"name"`` and its keywords); the label names the
    row it plays in a harness's table.
    """
    label, sep, spec = text.partition("={")  # the label may hold "=" itself: "LinUCB (alpha=2)={...}"
    spec = "{" + spec
    if not sep or not label.strip():
        raise argparse.ArgumentTypeError(f"--agent takes LABEL=JSON (a JSON object after the first =), got {text!r}")
    try:
        parsed = json.loads(spec)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"--agent {label!r}: the specification is not JSON ({err})") from err
    if not isinstance(parsed, dict) or "name" not in parsed:
        raise argparse.ArgumentTypeError(f'--agent {label!r}: the specification needs a "name", got {spec!r}')
    return label.strip(), parsed


def doc_parser(doc: str | None, **kwargs: Any) -> argparse.ArgumentParser:
    """An ``ArgumentParser`` whose description is ``doc`` as plain text (:func:`plain_text`).

    Its ``prog`` is ``python -m MODULE``, the way the command is run (argparse would show the
    script's file name); the other keyword arguments go to ``ArgumentParser``.
    """
    kwargs.setdefault("prog", _command_prog())
    kwargs.setdefault("formatter_class", PlainHelpFormatter)
    return argparse.ArgumentParser(description=plain_text(doc), **kwargs)


def _command_prog() -> str:
    """``python -m MODULE`` for the module run as ``__main__``, else the script's name as argparse writes it."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = getattr(spec, "name", None)
    if name:
        return f"python -m {name.removesuffix('.__main__')}"
    return Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of dataclass ``cls`` (and of its dataclass bases), from the source."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):  # no source (an interactive definition): no docstrings
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, after in zip(body, body[1:], strict=False):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[node.target.id] = " ".join(inspect.cleandoc(after.value.value).split())
    return docs


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """The resolved type of each field of dataclass ``cls`` (annotations are strings under PEP 563)."""
    return typing.get_type_hints(cls)


def type_name(hint: Any) -> str:
    """How a type reads in messages and ``--help``: ``int``, ``dict[str, Any] | None``."""
    if isinstance(hint, type) and not typing.get_args(hint):
        return "None" if hint is type(None) else hint.__name__
    return str(hint).replace("typing.", "").replace("NoneType", "None")


def matches(value: Any, hint: Any) -> bool:
    """Whether a JSON value fits the type ``hint`` (an int is a float; a bool is not a number)."""
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(matches(value, arm) for arm in args)
    if origin is list:
        return isinstance(value, list) and all(matches(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(matches(v, args[1]) for v in value.values())
    return isinstance(value, origin or hint)


def parse_value(text: str, hint: Any) -> Any:
    """The value of ``--set key=TEXT`` for a field of type ``hint``; a ``ValueError`` saying why it does not fit."""
    if hint is str:  # as written, or a JSON string literal ("runs/x") as the string it quotes
        return _json_or_word(text) if len(text) >= 2 and text[0] == text[-1] == '"' else text
    if hint is Any:
        return _json_or_word(text)
    if hint is bool:
        if text.lower() not in _BOOL_WORDS:
            raise ValueError("write true or false")
        return _BOOL_WORDS[text.lower()]
    if hint is int or hint is float:
        try:
            return hint(text)
        except ValueError:
            raise ValueError("not an integer" if hint is int else "not a number") from None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return comma_list(text, args[0])
    if origin in (typing.Union, types.UnionType):
        if type(None) in args and text.lower() in _NONE_WORDS:
            return None
        reasons = []
        for arm in (a for a in args if a is not type(None)):
            try:
                return parse_value(text, arm)
            except ValueError as err:
                reasons.append(str(err))
        raise ValueError("; ".join(reasons) + ("; or none" if type(None) in args else ""))
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"not JSON: {err.msg}") from None
    if not matches(value, hint):
        raise ValueError(f"JSON of another type: {type(value).__name__}")
    return value


def comma_list(text: str, item: Any) -> tuple[Any, ...]:
    """A field of type ``tuple[item, ...]`` written as comma-separated values (``2,5,10``; empty: ``()``)."""
    values = []
    for part in (p.strip() for p in text.split(",")):
        if part:
            try:
                values.append(parse_value(part, item))
            except ValueError as err:
                raise ValueError(f"{part!r}: {err}") from None
    return tuple(values)


def _is_dict_type(hint: Any) -> bool:
    """Whether a field of type ``hint`` may hold a dict (so that ``--set key.entry=value`` makes sense)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return any(_is_dict_type(arm) for arm in typing.get_args(hint))
    return hint is dict or typing.get_origin(hint) is dict


def _json_or_word(text: str) -> Any:
    """An entry of a dict field: JSON where it parses, else the bare word as a string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _parse_like(text: str, current: Any) -> Any:
    """An entry inside a dict field, of the kind of the value it replaces (a number stays a number)."""
    if isinstance(current, bool):
        return parse_value(text, bool)
    if isinstance(current, int | float):
        try:
            return int(text)
        except ValueError:
            return parse_value(text, float)
    if isinstance(current, str):
        return text
    return _json_or_word(text)  # a new entry, None, a list or a dict: JSON or a bare word


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def fields_help(cls: type) -> str:
    """Every field of ``cls`` as ``name: type = default`` and its docstring (the ``--help`` epilog)."""
    docs, hints = field_docs(cls), field_types(cls)
    lines = [f"{cls.__name__} fields (in CONFIG.json, or --set key=value; --set key.entry=value inside a dict):"]
    for f in dataclasses.fields(cls):
        default = _default(f)
        shown = "required" if default is dataclasses.MISSING else json.dumps(default)
        lines.append(f"  {f.name}: {type_name(hints[f.name])} = {shown}")
        doc = plain_text(docs.get(f.name, ""))
        lines.extend(textwrap.wrap(doc, 96, initial_indent=" " * 6, subsequent_indent=" " * 6, break_on_hyphens=False))
    return "\n".join(lines)


class ConfigParser(argparse.ArgumentParser, Generic[T]):
    """The parser of ``[CONFIG.json] [--set key=value ...]`` for the configuration dataclass ``config_cls``.

    Add the entry point's own flags with ``add_argument``, then call :meth:`parse_config`.
    ``config_cls`` must build from a dict (``from_dict``, see :class:`icrl_gym.config.DictConfig`) and
    raise ``ValueError`` for impossible values; ``config_required`` makes CONFIG.json positional
    and mandatory where the defaults make no run of their own.
    """

    def __init__(self, config_cls: type[T], module: str, description: str, config_required: bool = False) -> None:
        super().__init__(
            prog=f"python -m {module}",
            description=plain_text(description),
            epilog=fields_help(config_cls),
            formatter_class=PlainHelpFormatter,
        )
        self.config_cls, self.module = config_cls, module
        self.add_argument(
            "config",
            nargs=None if config_required else "?",
            metavar="CONFIG.json",
            help=f"JSON file of {config_cls.__name__} fields; an 'extends' key names a file (relative to this one) "
            "whose fields it starts from" + ("" if config_required else " (default: the defaults)"),
        )
        self.add_argument(
            "--set",
            nargs="+",
            action="extend",
            default=[],
            metavar="KEY=VALUE",
            help="override fields, each value parsed by the field's type, e.g. steps=2000 out_dir=runs/x "
            "expert=none model={} env.horizon=50",
        )
        self.add_argument("--quiet", action="store_true", help="no progress bars (they show only on a terminal)")

    def parse_config(self, argv: list[str] | None = None) -> tuple[T, argparse.Namespace]:
        """The validated configuration and the other arguments; an argparse error (exit 2) for bad input."""
        args = self.parse_args(argv)
        set_quiet(args.quiet)
        # the library logs artefact sizes ("wrote x.safetensors (1.2 MB)") at INFO; a command line shows them
        logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO, format="%(message)s")
        data = self._read(args.config) if args.config is not None else {}
        for item in args.set:
            self._override(data, item)
        try:
            cfg = self.config_cls.from_dict(data)  # type: ignore[attr-defined]
        except (ValueError, TypeError) as err:  # __post_init__ checks; TypeError from a nested config's fields
            name = self.config_cls.__name__
            self.error(str(err) if str(err).startswith(f"{name}.") else f"invalid {name}: {err}")
        return cfg, args

    def command(self, argv: list[str] | None = None) -> str:
        """The command as typed, saved with the run's record."""
        return f"python -m {self.module} " + " ".join(argv if argv is not None else sys.argv[1:])

    def _fields(self) -> dict[str, dataclasses.Field]:
        return {f.name: f for f in dataclasses.fields(self.config_cls)}  # type: ignore[arg-type]

    def _hints(self) -> dict[str, Any]:
        return field_types(typing.cast(type, self.config_cls))

    def _current_name(self, key: str) -> str:
        """A field's name today: the configuration's ``renamed_fields`` (older name -> new) still read."""
        return getattr(self.config_cls, "renamed_fields", {}).get(key, key)

    def _unknown(self, key: str, where: str) -> typing.NoReturn:
        known = list(self._fields())
        hint = did_you_mean(key, known)
        self.error(f"{where}: unknown {self.config_cls.__name__} field {key!r}{hint}; known fields: {', '.join(known)}")

    def _read(self, path: str, chain: tuple[str, ...] = ()) -> dict[str, Any]:
        """The fields of the file at ``path``, over those of the file its ``extends`` key names, if any.

        ``{"extends": "other.json", ...}`` (a path relative to this file) starts from ``other.json``'s fields
        (which may extend a third file) and replaces each top-level field this file gives, a dict field
        whole: a run that differs from another in a few fields states only those.  ``chain``: the files
        already being read, so that a loop of ``extends`` is an error, not a recursion.
        """
        where = " (extended by " + " <- ".join(reversed(chain)) + ")" if chain else ""
        if path in chain:
            self.error(f"{path}: its 'extends' chain comes back to it{where}")
        try:
            data = json.loads(Path(path).read_text())
        except OSError as err:
            self.error(f"cannot read CONFIG.json {path!r}{where}: {err.strerror}")
        except json.JSONDecodeError as err:
            self.error(f"{path} is not valid JSON{where}: {err}")
        if not isinstance(data, dict):
            self.error(f"{path} must hold a JSON object of {self.config_cls.__name__} fields")
        parent: dict[str, Any] = {}
        if "extends" in data:
            base = data.pop("extends")
            if not isinstance(base, str) or not base:
                self.error(f"{path}: 'extends' names the JSON file to start from, got {json.dumps(base)}")
            parent = self._read(str(Path(path).parent / base), (*chain, path))
        hints = self._hints()
        data = {self._current_name(key): value for key, value in data.items()}
        for key, value in data.items():
            if key not in hints:
                self._unknown(key, path)
            if not matches(value, hints[key]):
                self.error(f"{path}: field {key!r} expects {type_name(hints[key])}, got {json.dumps(value)}")
        return {**parent, **data}

    def _override(self, data: dict[str, Any], item: str) -> None:
        key, sep, text = item.partition("=")
        if not sep or not key:
            hint = " (CONFIG.json goes before --set)" if item.endswith(".json") else ""
            self.error(f"--set {item!r}: expected key=value, e.g. steps=2000{hint}")
        name, *path = key.split(".")
        name = self._current_name(name)
        fields, hints = self._fields(), self._hints()
        if name not in fields:
            self._unknown(name, f"--set {item}")
        hint = hints[name]
        if not path:
            try:
                data[name] = parse_value(text, hint)
            except ValueError as err:
                self.error(f"--set {item}: field {name!r} expects {type_name(hint)}, got {text!r} ({err})")
            return
        if not _is_dict_type(hint):
            self.error(f"--set {item}: field {name!r} has type {type_name(hint)}, not a dict with entries")
        current = data.get(name, _default(fields[name]))
        node = data[name] = copy.deepcopy(current) if isinstance(current, dict) else {}
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                self.error(f"--set {item}: {name}.{part} is not a dict")
        try:
            node[path[-1]] = _parse_like(text, node.get(path[-1]))
        except ValueError as err:
            self.error(f"--set {item}: entry {key!r} holds {node[path[-1]]!r}, so {text!r} does not fit ({err})")


def _flag_type(hint: Any) -> Any:
    """The argparse ``type`` of a flag of type ``hint``: its value, or an error that says why it does not fit."""

    def convert(text: str) -> Any:
        try:
            return parse_value(text, hint)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    return convert


def add_field_flags(parser: argparse.ArgumentParser, cls: type, skip: tuple[str, ...] = ()) -> None:
    """One flag ``--field-name`` per field of dataclass ``cls``, typed, with its docstring and default as help.

    A bool field is a switch (``store_true``), a ``tuple[X, ...]`` field takes comma-separated values
    (``--grid-arms 2,5,10``); ``skip`` leaves fields out.
    """
    docs, hints = field_docs(cls), field_types(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        flag, hint, doc = "--" + f.name.replace("_", "-"), hints[f.name], plain_text(docs.get(f.name, ""))
        if hint is bool:
            parser.add_argument(flag, action="store_true", help=doc)
        elif typing.get_origin(hint) is tuple:
            item = typing.get_args(hint)[0]
            default = _default(f)
            parser.add_argument(
                flag,
                type=_flag_type(hint),
                default=default,
                metavar=f"{type_name(item).upper()},...",
                help=f"{doc} (default: {','.join(map(str, default)) or 'none'})",
            )
        else:
            default = _default(f)
            shown = "''" if default == "" else default  # an empty default is visible as ''
            parser.add_argument(
                flag, type=hint, default=default, metavar=type_name(hint).upper(), help=f"{doc} (default: {shown})"
            )
