"""The support bundle (``--bundle PATH``): one archive a user attaches to a ticket.

Everything in it comes from the run that wrote it: the already-redacted Report (as
``report.json`` and ``report.md``), the facts the checks ran on (``facts.json``, a valid
snapshot that ``ddp-doctor check --facts BUNDLE`` replays), the raw ``nvidia-smi`` text the
gather kept for it, the package list and the relevant environment variables from those
facts, and the smoke job's per-rank event files and logs. Nothing is gathered again.

Every text member goes through the run's ``Redactor`` (the same instance that redacted
the Report, so ``--anonymize`` placeholders agree across files), and ``MANIFEST`` lists
each file, what it is, what is missing and why, and what was redacted. ``ddp-doctor
diagnose BUNDLE`` reads the bundle back: it scans the logs and text files, uses
``facts.json`` as the facts, and skips ``report.*`` and ``MANIFEST`` (our own output).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ddp_doctor.bundle.archive import TOP, BundleError, Member, archive_kind, write_archive
from ddp_doctor.facts.environment_variables import is_relevant
from ddp_doctor.facts.snapshot import Facts
from ddp_doctor.model import Report
from ddp_doctor.redact.redactor import Redactor
from ddp_doctor.redact.secrets import REDACTED, is_secret_name

__all__ = ["BundleError", "bundle_members", "write_bundle"]

MAX_LOG_BYTES = 16 << 20  # per smoke file; the end of a runaway log is what matters
_SMOKE_ABOUT = {
    ".jsonl": "the smoke job's event file of this node's rank {rank} (JSON lines: its global "
              "rank, phases, steps, timings)",
    ".stderr": "the smoke job's stderr of this node's rank {rank}",
    ".stacks": "the stacks this node's rank {rank} dumped on SIGUSR1 (faulthandler)",
}
# Redactor.summary() kinds that are secrets (the rest are identities --anonymize replaced).
_SECRET_KINDS = ("secret", "credential", "token", "key", "password")
_LAUNCHER_ABOUT = {
    "launcher.stdout": "the smoke launcher's stdout (torchrun or spawn)",
    "launcher.stderr": "the smoke launcher's stderr (torchrun or spawn): rank tracebacks",
}


def write_bundle(path: Path, report: Report, facts: Facts | None, redactor: Redactor,
                 force: bool = False, *, strict: bool = False,
                 smoke_dir: str | None = None, run_log: str | None = None,
                 run_files: str | None = None) -> None:
    """Write the support bundle PATH (.zip or .tar.gz) from this run's Report and facts.

    ``report`` is the already-redacted Report; ``smoke_dir`` is the smoke run's directory
    as it is on disk (the Report's copy of the path may be anonymized), defaulting to
    ``report.smoke["run_dir"]``; ``run_log`` is the output of a command ``ddp-doctor run``
    supervised, ``run_files`` the folder of its hung ranks' stacks and Flight Recorder
    dumps. Raises BundleError (one line) when it cannot be written;
    then no file is left at PATH, and an existing one is replaced only with ``force``.
    """
    if archive_kind(path) is None:
        raise BundleError(f"--bundle {path}: name a .zip or .tar.gz file")
    if path.exists() and not force:  # checked before the run too; a run takes minutes
        raise BundleError(f"--bundle {path}: already exists (add --force to overwrite it)")
    members = bundle_members(report, facts, redactor, strict=strict, smoke_dir=smoke_dir,
                             run_log=run_log, run_files=run_files)
    write_archive(path, members, force=force)


def bundle_members(report: Report, facts: Facts | None, redactor: Redactor, *,
                   strict: bool = False, smoke_dir: str | None = None,
                   run_log: str | None = None, run_files: str | None = None
                   ) -> list[Member]:
    """Every member of the bundle, MANIFEST first, each text passed through the redactor."""
    from ddp_doctor.report.json import render_json
    from ddp_doctor.report.markdown import render_markdown

    members: list[Member] = []
    absent: list[tuple[str, str]] = []

    def add(name: str, text: str, about: str) -> None:
        members.append(Member(name, redactor.text(text).encode("utf-8"), about))

    add("report.md", render_markdown(report, strict), "the Markdown report of this run")
    add("report.json", render_json(report, strict),
        "the JSON report of this run (schema: docs/report.schema.json)")
    withheld: list[str] = []
    if facts is None:
        why = _no_facts(report)
        absent += [(name, why) for name in ("facts.json", "nvidia-smi-q.txt",
                                            "nvidia-smi-topo.txt", "packages.txt",
                                            "environment.txt")]
    else:
        snapshot, withheld = _facts_snapshot(facts, redactor)
        members.append(Member("facts.json", snapshot,
                              "the facts snapshot the checks ran on; replay it with "
                              "`ddp-doctor check --facts <this bundle>`"))
        _nvidia_smi(facts, add, absent)
        _packages(facts, add, absent)
        _environment(facts, add, absent)
    _smoke(report, smoke_dir, add, absent)
    if run_log is not None:  # the output of the user's own command (`ddp-doctor run`)
        text, cut = _tail(Path(run_log))
        add("run/output.log", text, "the supervised command's output, stdout and stderr as "
            "printed" + (f" (last {MAX_LOG_BYTES >> 20} MiB of {cut} B)" if cut else ""))
    if run_files is not None:  # a hung run's stacks and Flight Recorder dumps (forensics/)
        _forensics(Path(run_files), add, absent)
    manifest = _manifest(report, members, absent, redactor, withheld)
    return [Member("MANIFEST", manifest.encode("utf-8"), "this file"), *members]


def _no_facts(report: Report) -> str:
    """Why a bundle has no facts, in the words of the command that wrote it."""
    if report.kind == "compare":
        return ("`ddp-doctor compare` gathers no facts of its own: each node's are in the "
                "snapshots or bundles it compared")
    if report.kind == "run":
        return ("`ddp-doctor run` gathers this machine's facts only when the command fails "
                "(use `ddp-doctor doctor --bundle`)")
    return "`ddp-doctor smoke` gathers no machine facts (use `ddp-doctor doctor --bundle`)"


def _facts_snapshot(facts: Facts, redactor: Redactor) -> tuple[bytes, list[str]]:
    """facts.json: the snapshot with every string redacted (still a ddp-doctor-facts file).

    Variables with secret-looking names lose their value even when the facts came from a
    hand-made file that did not (gather already withholds them).
    """
    data: dict[str, Any] = json.loads(json.dumps(facts.to_dict(), default=str))  # a copy
    env_vars = (data["facts"].get("env_vars") or {}).get("value")
    withheld = []
    if isinstance(env_vars, dict):
        for name in sorted(env_vars):
            if is_secret_name(name):
                env_vars[name] = REDACTED
                withheld.append(name)
    cleaned = redactor.value(data)
    text = json.dumps(cleaned, indent=2, default=str) + "\n"
    return text.encode("utf-8"), withheld


def _nvidia_smi(facts: Facts, add: Any, absent: list[tuple[str, str]]) -> None:
    names = {"q": ("nvidia-smi-q.txt", "`nvidia-smi -q`: every GPU's full state"),
             "topo": ("nvidia-smi-topo.txt", "`nvidia-smi topo -m`: how GPUs, NICs and CPUs "
                                              "connect")}
    if not facts.available("nvidia_smi_text"):
        why = (facts.why_unavailable("nvidia_smi_text") if "nvidia_smi_text" in facts.records
               else "these facts were replayed from a file that has no nvidia-smi output "
                    "(it is kept only when facts are gathered with --bundle)")
        absent += [(name, why) for name, _ in names.values()]
        return
    value = facts["nvidia_smi_text"] or {}
    errors = value.get("errors") or {}
    for key, (name, about) in names.items():
        text = value.get(key)
        if isinstance(text, str):
            add(name, text, about)
        else:
            absent.append((name, str(errors.get(key) or "no output was kept")))


def _packages(facts: Facts, add: Any, absent: list[tuple[str, str]]) -> None:
    python = facts.get("python")
    if not isinstance(python, dict):
        absent.append(("packages.txt", facts.why_unavailable("python")))
        return
    packages = python.get("packages") or {}
    if not isinstance(packages, dict) or not packages:
        absent.append(("packages.txt", "the interpreter probe listed no packages"))
        return
    lines = [f"# Python packages of {python.get('executable')} "
             f"(Python {python.get('version')}), as the interpreter probe listed them",
             "# name==version  location (a name listed twice is installed twice)"]
    for name in sorted(packages, key=str.lower):
        installs = packages[name] if isinstance(packages[name], list) else [packages[name]]
        for install in installs:
            install = install if isinstance(install, dict) else {"version": install}
            lines.append(f"{name}=={install.get('version')}  {install.get('location') or ''}"
                         .rstrip())
    add("packages.txt", "\n".join(lines) + "\n",
        "the Python packages of the interpreter that trains (name==version, location)")


def _environment(facts: Facts, add: Any, absent: list[tuple[str, str]]) -> None:
    env_vars = facts.get("env_vars")
    if not isinstance(env_vars, dict):
        absent.append(("environment.txt", facts.why_unavailable("env_vars")))
        return
    lines = ["# Environment variables that change how CUDA, NCCL, torch and the launcher "
             "behave", "# (values of secret-looking names are withheld)"]
    for name in sorted(n for n in env_vars if is_relevant(n)):
        value = REDACTED if is_secret_name(name) else str(env_vars[name])
        lines.append(f"{name}={value}")
    add("environment.txt", "\n".join(lines) + "\n",
        "the relevant environment variables (CUDA_*, NCCL_*, TORCH_*, MASTER_*, SLURM_*, "
        "PATH, LD_LIBRARY_PATH, ...)")


def _smoke(report: Report, smoke_dir: str | None, add: Any,
           absent: list[tuple[str, str]]) -> None:
    data = report.smoke
    if data is None:
        absent.append(("smoke/", "the smoke job was not run by this command"))
        return
    if data.get("skipped"):
        absent.append(("smoke/", f"the smoke job was skipped: {data['skipped']}"))
        return
    where = smoke_dir or data.get("run_dir")
    folder = Path(where) if where else None
    if folder is None or not folder.is_dir():
        absent.append(("smoke/", "the smoke job left no run directory (it did not start)"
                       if folder is None else f"the smoke run directory is gone: {where}"))
        return
    try:
        files = sorted(p for p in folder.iterdir() if p.is_file() and not p.is_symlink())
    except OSError as exc:
        absent.append(("smoke/", f"the smoke run directory cannot be read: "
                                 f"{exc.strerror or exc}"))
        return
    if not files:
        absent.append(("smoke/", "the smoke run directory was empty"))
    for file in files:
        text, cut = _tail(file)
        about = _smoke_about(file.name) + (f" (last {MAX_LOG_BYTES >> 20} MiB of {cut} B)"
                                           if cut else "")
        add(f"smoke/{file.name}", text, about)


def _smoke_about(name: str) -> str:
    if name in _LAUNCHER_ABOUT:
        return _LAUNCHER_ABOUT[name]
    stem, _, suffix = name.partition(".")
    # Rank files are named by the rank's place on its node (train_smoke/events.py).
    if stem.startswith("local") and stem[5:].isdigit() and f".{suffix}" in _SMOKE_ABOUT:
        return _SMOKE_ABOUT[f".{suffix}"].format(rank=stem[5:])
    if stem.startswith("stack-rank") and stem[10:].isdigit():
        return (f"where rank {stem[10:]} waited when the job hung (py-spy dump or faulthandler, "
                "read before the job was stopped)")
    if stem.startswith("fr-rank") and stem[7:].isdigit():
        return (f"rank {stem[7:]}'s Flight Recorder dump (its collectives, with sequence ids "
                "and states), asked for before the job was stopped")
    return "a file the smoke job wrote"


def _forensics(folder: Path, add: Any, absent: list[tuple[str, str]]) -> None:
    """``run``'s hung ranks: ``stack-rank<R>.txt`` and ``fr-rank<R>.json``, redacted as
    text (an NCCL pickle was kept as JSON next to it: only text goes in, redacted)."""
    try:
        files = sorted(p for p in folder.iterdir() if p.is_file() and not p.is_symlink())
    except OSError as exc:
        absent.append(("run/", f"the stacks folder cannot be read: {exc.strerror or exc}"))
        return
    for file in files:
        stem = file.name.split(".")[0]
        if stem.startswith("stack-rank") and file.suffix == ".txt":
            about = (f"where rank {stem[10:]} waited when the job hung (py-spy dump or "
                     "faulthandler, read before the job was stopped)")
        elif stem.startswith("fr-rank") and file.suffix == ".json":
            about = (f"rank {stem[7:]}'s Flight Recorder dump (its collectives, with sequence "
                     "ids and states), asked for before the job was stopped")
        else:
            continue
        add(f"run/{file.name}", _tail(file)[0], about)


def _tail(file: Path) -> tuple[str, int]:
    """A smoke file as text; one over MAX_LOG_BYTES keeps its end, from a line start."""
    try:
        size = file.stat().st_size
        with file.open("rb") as handle:
            if size > MAX_LOG_BYTES:
                handle.seek(size - MAX_LOG_BYTES)
                data = handle.read()
                data = data[data.find(b"\n") + 1:]
            else:
                data = handle.read()
    except OSError as exc:
        return f"[ddp-doctor could not read this file: {exc.strerror or exc}]\n", 0
    return data.decode("utf-8", errors="replace"), size if size > MAX_LOG_BYTES else 0


def _redaction_lines(redactor: Redactor, withheld: list[str]) -> list[str]:
    lines = ["Secrets are always removed: values of variables with secret-looking names, "
             "credentials in URLs, and known token shapes (Hugging Face, Weights & Biases, "
             "AWS, GitHub, private keys).",
             "--anonymize: " + ("on (host and user names, home paths, IP and MAC addresses, "
                                "GPU UUIDs and serials replaced with stable placeholders)"
                                if redactor.anonymize else
                                "off (host names, addresses and GPU UUIDs are kept)")]
    counts = {kind: n for kind, n in redactor.summary().items() if n}
    secrets = {k: n for k, n in counts.items() if any(w in k for w in _SECRET_KINDS)}
    identities = {k: n for k, n in counts.items() if k not in secrets}
    for title, found in (("Secrets removed", secrets), ("Anonymized", identities)):
        if found:
            lines.append(f"{title}: " + ", ".join(f"{kind} ×{n}"
                                                  for kind, n in sorted(found.items())))
    if not counts:
        lines.append("Nothing needed redaction")
    if withheld:
        lines.append("Values withheld when the facts were gathered: " + ", ".join(withheld))
    return lines


def _manifest(report: Report, members: list[Member], absent: list[tuple[str, str]],
              redactor: Redactor, withheld: list[str]) -> str:
    width = max([len(m.name) for m in members] + [len(n) for n, _ in absent] + [8])
    lines = [f"ddp-doctor support bundle, written by ddp-doctor {report.tool_version} at "
             f"{report.created_at} (facts: {report.facts_source})",
             (f"Read it again: `ddp-doctor diagnose <bundle>` or "
              f"`ddp-doctor check --facts <bundle>`; every file is under {TOP}/."
              if any(m.name == "facts.json" for m in members) else
              f"Read it again: `ddp-doctor diagnose <bundle>` (it holds no facts.json to "
              f"replay with `check --facts`); every file is under {TOP}/."),
             "", "Files"]
    lines.append(f"  {'MANIFEST':<{width}}  {'':>10}  this file")
    for member in members:
        lines.append(f"  {member.name:<{width}}  {len(member.data):>8} B  {member.about}")
    if absent:
        lines += ["", "Not included"]
        lines += [f"  {name:<{width}}  {why}" for name, why in absent]
    lines += ["", "Redaction", *(f"  {line}" for line in _redaction_lines(redactor, withheld))]
    return redactor.text("\n".join(lines) + "\n")
