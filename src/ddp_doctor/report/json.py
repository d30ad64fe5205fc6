"""The JSON report: versioned, enums as strings, documented by docs/report.schema.json."""

from __future__ import annotations

import json

from ddp_doctor.model import Report


def render_json(report: Report, strict: bool = False) -> str:
    return json.dumps(report.to_dict(strict=strict), indent=2, ensure_ascii=False) + "\n"
