"""``diagnose``: a failure log, a pasted ticket or a support bundle in, causes and fixes out.
"""

from __future__ import annotations

import sys

from ddp_doctor.app.outputs import emit
from ddp_doctor.app.requests import Common, check_common
from ddp_doctor.diagnose import InputError, diagnose
from ddp_doctor.usage import (
    UsageError,
)


def run_diagnose(common: Common, source: str) -> int:
    """Read a failure log (a file, stdin, a .gz, a support bundle) and name the causes."""
    check_common(common)  # (--bundle and --config are not offered: cli.py omits them)
    if source == "-" and sys.stdin.isatty():
        raise UsageError("diagnose: give a log file, or pipe one in "
                         "(e.g. `ddp-doctor diagnose train.log`)")
    from ddp_doctor.codebook import all_codes  # every family, for a bundle's recorded codes

    try:
        diagnosis = diagnose(source, known_codes=all_codes)
    except InputError as exc:
        raise UsageError(str(exc)) from None
    emit(diagnosis.report, common, facts=diagnosis.facts)
    return diagnosis.report.exit_code(common.strict)
