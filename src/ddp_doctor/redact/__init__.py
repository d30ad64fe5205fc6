"""Removing secrets (always) and identities (``--anonymize``) from everything the doctor writes.

``secrets`` holds the secret patterns, ``anonymize`` the identity patterns and their
placeholders, ``redactor`` the ``Redactor`` that applies both to a run's artifacts. The
few public names are re-exported here for convenience; the project's own modules import
them from the module that defines them.
"""

from __future__ import annotations

from ddp_doctor.redact.redactor import Redactor
from ddp_doctor.redact.secrets import REDACTED, is_secret_name, redact_text

__all__ = ["REDACTED", "Redactor", "is_secret_name", "redact_text"]
