"""Running the ``ddp-doctor`` command in-process, as the tests of every area do."""

from __future__ import annotations

from typer.testing import CliRunner, Result

from ddp_doctor.cli import app, normalize_argv

runner = CliRunner()


def invoke(*args: str) -> Result:
    """Run ``ddp-doctor ARGS`` in-process, with the same argv rewriting as the real entry point."""
    return runner.invoke(app, normalize_argv(list(args)))
