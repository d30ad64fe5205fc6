"""What the option parser refuses, said the doctor's way: one line, exit code 2.

typer (through click) refuses unknown options, missing values and extra arguments itself,
with a usage box and wording that changes between its versions. ``DoctorGroup`` runs the
commands with click's standalone mode off and turns every refusal, the parser's and the
doctor's own ``UsageError``, into ``ddp-doctor: error: ...`` naming the option, the value
and what is allowed, with "did you mean" for a misspelt option or command.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

import typer
from typer.core import TyperCommand, TyperGroup

from ddp_doctor.option_values import plain_values
from ddp_doctor.usage import EXIT_PROBLEMS, EXIT_READY, EXIT_USAGE, UsageError

if TYPE_CHECKING:
    from typer._click import exceptions as click_errors
    from typer._click.core import Command, Context, Parameter
else:
    try:  # typer vendors click from 0.2x on; older typer depends on click itself
        from typer._click import exceptions as click_errors
        from typer._click.core import Command, Context, Parameter
    except ImportError:
        from click import exceptions as click_errors
        from click.core import Command, Context, Parameter

# Spellings retired because they meant different things in different commands.
RETIRED = {
    "--batch": {
        "check": "--global-batch B (the total batch the planned job splits over --gpus)",
        "doctor": "--global-batch B (the total batch the planned job splits over --gpus)",
        "smoke": "--batch-per-process B (images each smoke process trains on per step)",
    },
}


class DoctorGroup(TyperGroup):
    """The command group: whatever is refused, by typer's parser or by the doctor, is
    printed as one ``ddp-doctor: error:`` line with exit code 2."""

    def main(self, args: Optional[Sequence[str]] = None, prog_name: Optional[str] = None,
             complete_var: Optional[str] = None, standalone_mode: bool = True,
             windows_expand_args: bool = True, **extra: Any) -> Any:
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False,
                                windows_expand_args=windows_expand_args, **extra)
        except click_errors.UsageError as exc:
            code = _refuse(one_line(exc))
        except UsageError as exc:
            code = _refuse(str(exc))
        except typer.Abort:  # end of input at a prompt
            typer.echo("ddp-doctor: aborted", err=True)
            code = EXIT_PROBLEMS
        if not standalone_mode:
            return code
        sys.exit(code if isinstance(code, int) else EXIT_READY)

    def get_params(self, ctx: Context) -> list[Parameter]:
        return plain_values(super().get_params(ctx))

    def resolve_command(self, ctx: Context, args: list[str]
                        ) -> tuple[Optional[str], Optional[Command], list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            known = sorted(self.list_commands(ctx))
            raise click_errors.UsageError(f"unknown command {name!r}{_did_you_mean(name, known)}"
                                          f" (commands: {', '.join(known)})", ctx)
        return super().resolve_command(ctx, args)


class DoctorCommand(TyperCommand):
    """A command whose parse errors carry its context, so the one line can name it, and
    whose extra arguments are named with what the command takes."""

    allow_extra_args = True  # collected in ctx.args, refused below in the doctor's words

    def get_params(self, ctx: Context) -> list[Parameter]:
        return plain_values(super().get_params(ctx))

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        try:
            rest = super().parse_args(ctx, args)
        except click_errors.UsageError as exc:
            if exc.ctx is None:  # the option parser raises some without one
                exc.ctx, exc.cmd = ctx, self
            raise
        if ctx.args:
            takes = [_label(p) for p in self.params if not any(
                name.startswith("-") for name in p.opts)]
            raise click_errors.UsageError(
                f"unexpected argument {ctx.args[0]!r}: {ctx.info_name} takes "
                f"{' '.join(takes) if takes else 'options only'}", ctx)
        return rest


def _refuse(message: str) -> int:
    typer.echo(f"ddp-doctor: error: {message}", err=True)
    return EXIT_USAGE


def _did_you_mean(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def one_line(exc: click_errors.UsageError) -> str:
    """What typer's parser refused, in the doctor's words: option, value, what is allowed."""
    ctx = exc.ctx
    command = (ctx.info_name if ctx is not None and ctx.parent is not None else None
               ) or "ddp-doctor"
    params = list(ctx.command.params) if ctx is not None else []
    if isinstance(exc, click_errors.NoSuchOption):
        renamed = RETIRED.get(exc.option_name, {}).get(command)
        if renamed:
            return f"{exc.option_name} was renamed: use {renamed}"
        names = [name for p in params for name in (*p.opts, *p.secondary_opts)
                 if name.startswith("-")]
        hint = _did_you_mean(exc.option_name, names) or (
            f"; `ddp-doctor {command} --help` lists them")
        return f"{command} has no option {exc.option_name}{hint}"
    if isinstance(exc, click_errors.BadOptionUsage):
        param = next((p for p in params if exc.option_name in p.opts), None)
        if param is not None and getattr(param, "is_flag", False):
            return f"{exc.option_name} takes no value (it is a switch)"
        wanted = f" ({param.metavar})" if param is not None and param.metavar else ""
        return f"{exc.option_name} needs a value{wanted}"
    if isinstance(exc, click_errors.MissingParameter) and exc.param is not None:
        return f"{command} needs {_label(exc.param)}"
    text = " ".join(exc.format_message().split()).rstrip(".")
    return text[:1].lower() + text[1:]


def _label(param: Any) -> str:
    """An argument as the usage line shows it: its metavar, else its name in capitals."""
    return str(param.metavar or (param.name or "").upper())
