"""Option values as typer would coerce them, without loading pydantic for text and paths.

typer 0.2x coerces every option's value through a pydantic ``TypeAdapter``, built the
first time a parameter is processed, even for a value that is None. Building the first
one imports pydantic: about 0.2 s before any command can run, the longest single part of
``check``'s start before its torch probe. The doctor declares its options as text
(numbers too, parsed by ``usage``), paths, switches and lists of those, and for text and
paths typer's adapters do nothing pydantic is needed for: text stays the text typed, a
path becomes ``Path(text)`` (what pydantic returns for any string) and then goes through
typer's own path checks (``coerce_cli_path``), as before.

``plain_values`` (called on each command's parameters as click collects them for
parsing, the help option among them) gives each such parameter a coercion that does just
that, and keeps typer's own for anything else: a switch given a value that is not a
bool, or a type the doctor does not declare, builds typer's adapter when it first comes,
so the result and the error for every value stay typer's. On a typer without this
machinery (older versions use click's types, no pydantic) it changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, get_args, get_origin

if TYPE_CHECKING:
    from typer._click import Context
    from typer._coercion import RuntimeParam, TypeDescriptor, build_runtime_param
    from typer._param_types import coerce_cli_path
    from typer.core import _TyperParameter
else:
    try:  # typer 0.2x; older typer has no runtime coercion to replace
        from typer._coercion import RuntimeParam, TypeDescriptor, build_runtime_param
        from typer._param_types import coerce_cli_path
    except ImportError:
        RuntimeParam = None

P = TypeVar("P")


def _is_list(annotation: Any) -> bool:
    origin: Any = get_origin(annotation)
    return origin is list


def _leaf(annotation: Any) -> Any:
    """The element type of ``list[X]``, else the annotation itself."""
    return get_args(annotation)[0] if _is_list(annotation) else annotation


def _plain(descriptor: TypeDescriptor) -> bool:
    """Whether typer's adapter for this parameter does nothing but what ``_Plain`` does:
    text, or a path without a parser, a path type or a dash for stdin, or a list of one."""
    info = descriptor.parameter_info
    if descriptor.file_annotation is not None or info.parser is not None:
        return False
    annotation = descriptor.annotation
    if _is_list(annotation) and len(get_args(annotation)) != 1:
        return False
    leaf = _leaf(annotation)
    if leaf is str:
        return True
    return (leaf is Path and info.path_type is None and not info.allow_dash
            and not info.resolve_path)


if RuntimeParam is not None:
    @dataclass(frozen=True)
    class _Plain(RuntimeParam):
        """typer's coercion of text and paths, less the pydantic adapter around it;
        anything else is handed to typer's own coercion, built when first needed."""

        descriptor: TypeDescriptor

        def _coerce_value(self, value: Any, param: _TyperParameter, ctx: Context) -> Any:
            many = _is_list(self.annotation)
            items = (value if isinstance(value, (list, tuple)) else [value]) if many else [value]
            if not _plain(self.descriptor) or not all(isinstance(v, str) for v in items):
                typer_own: RuntimeParam = build_runtime_param(self.descriptor)
                param._runtime_param = typer_own  # built once, as typer would
                return typer_own._coerce_value(value, param=param, ctx=ctx)
            coerced = [self._one(item, param, ctx) for item in items]
            return coerced if many else coerced[0]

        def _one(self, text: str, param: _TyperParameter, ctx: Context) -> Any:
            if _leaf(self.annotation) is str:
                return text
            return coerce_cli_path(Path(text), self.parameter_info, path_type=Path,
                                   param=param, ctx=ctx)


def plain_values(params: list[P]) -> list[P]:
    """PARAMS, each of typer's given the plain coercion unless it has one already."""
    if RuntimeParam is None:
        return params
    for param in params:
        descriptor = getattr(param, "type_descriptor", None)
        if isinstance(descriptor, TypeDescriptor) and getattr(param, "_runtime_param",
                                                              False) is None:
            param._runtime_param = _Plain(  # type: ignore[attr-defined]
                parameter_info=descriptor.parameter_info, annotation=descriptor.annotation,
                descriptor=descriptor)
    return params
