"""The doctor's option values are coerced as typer coerces them, without pydantic (issue 25:
building typer's first pydantic adapter imported pydantic, 0.2 s of ``check``'s start).

Each parameter of every command is given a value of each kind the command line carries,
and the plain coercion (``option_values``) must return what typer's own returns, of the
same type, or refuse it with the same message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import pytest
import typer
import typer.main

# typer 0.2x only: older typer coerces with click's types, and option_values leaves it be.
coercion = pytest.importorskip("typer._coercion")
from typer._click import Context  # noqa: E402
from typer._click.exceptions import BadParameter  # noqa: E402

from ddp_doctor.cli import app  # noqa: E402
from ddp_doctor.option_values import plain_values  # noqa: E402
from ddp_doctor.parse_errors import DoctorCommand, DoctorGroup  # noqa: E402

SOURCE = typer.Option(..., exists=True, dir_okay=False)
MAYBE = typer.Option(None, exists=True)
TEXTS = ("x", "", "-", "12", "a b", "--not-an-option", "ünïcode")


def params_of(group: Any) -> list[tuple[Any, Any]]:
    """(context, parameter) for every typer parameter of the group and its commands, the
    help options included (click makes them only when asked for a context's parameters)."""
    pairs = []
    for command in (group, *group.commands.values()):
        ctx = Context(command, info_name=command.name)
        pairs += [(ctx, p) for p in command.get_params(ctx)
                  if getattr(p, "type_descriptor", None) is not None]
    return pairs


def values_for(param: Any, tmp_path: Path) -> list[Any]:
    annotation = param.type_descriptor.annotation
    texts = [*TEXTS, str(tmp_path), str(tmp_path / "missing" / "file.json")]
    if annotation is bool:
        return [None, True, False, "true", "0"]
    if param.multiple or param.nargs == -1:
        return [None, (), tuple(texts), ("one",)]
    return [None, *texts]


def coerced(runtime: Any, value: Any, ctx: Any, param: Any) -> Any:
    try:
        return ("value", runtime.coerce(value, param=param, ctx=ctx))
    except BadParameter as exc:
        return ("refused", exc.format_message())


def plain_runtime(param: Any) -> Any:
    param._runtime_param = None
    plain_values([param])
    return param._runtime_param


def test_every_parameter_of_the_doctor_gets_typers_values_without_pydantic(tmp_path):
    group = typer.main.get_command(app)
    pairs = params_of(group)
    assert {str(p.type_descriptor.annotation) for _, p in pairs} >= {
        "<class 'str'>", "<class 'pathlib.Path'>", "<class 'bool'>", "list[pathlib.Path]",
        "list[str]"}
    for ctx, param in pairs:
        for value in values_for(param, tmp_path):
            ours = coerced(plain_runtime(param), value, ctx, param)
            theirs = coerced(coercion.build_runtime_param(param.type_descriptor), value, ctx,
                             param)
            assert ours == theirs, (ctx.info_name, param.name, value)
            assert type(ours[1]) is type(theirs[1]), (ctx.info_name, param.name, value)


def test_typers_path_checks_still_refuse_with_typers_words(tmp_path):
    """A path option declared with checks (none of the doctor's is, today) is refused as
    typer refuses it: the path checks are typer's own, only the pydantic step is gone."""
    demo = typer.Typer(cls=DoctorGroup)

    @demo.command(cls=DoctorCommand)
    def read(source: Path = SOURCE, maybe: Optional[list[Path]] = MAYBE) -> None:
        """Read."""

    @demo.command(cls=DoctorCommand)
    def other() -> None:
        """Another, so that the app stays a group."""

    present = tmp_path / "present.txt"
    present.write_text("x", encoding="utf-8")
    cases = [str(tmp_path), str(tmp_path / "absent"), str(present)]
    for ctx, param in params_of(typer.main.get_command(demo)):
        if param.name not in ("source", "maybe"):
            continue
        for value in (cases if param.name == "source" else [tuple(cases), (str(present),)]):
            ours = coerced(plain_runtime(param), value, ctx, param)
            theirs = coerced(coercion.build_runtime_param(param.type_descriptor), value, ctx,
                             param)
            assert ours == theirs, (param.name, value)
    ctx, source = next((c, p) for c, p in params_of(typer.main.get_command(demo))
                       if p.name == "source")
    assert coerced(plain_runtime(source), str(tmp_path / "absent"), ctx, source)[0] == "refused"
    assert coerced(plain_runtime(source), str(tmp_path), ctx, source)[0] == "refused"
    assert coerced(plain_runtime(source), str(present), ctx, source) == ("value", present)


def test_a_value_the_plain_coercion_does_not_know_goes_to_typers_own():
    """A switch given text (from an environment variable, say) is typer's to parse: the
    parameter then keeps typer's own coercion, built once."""
    group = typer.main.get_command(app)
    ctx, param = next((c, p) for c, p in params_of(group)
                      if p.type_descriptor.annotation is bool and p.name == "quiet")
    runtime = plain_runtime(param)
    assert runtime.coerce("yes", param=param, ctx=ctx) is True
    assert param._runtime_param is not runtime
    assert param._runtime_param.coerce("no", param=param, ctx=ctx) is False
