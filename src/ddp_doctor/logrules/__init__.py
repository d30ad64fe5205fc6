"""Failure text -> code: the signature table for what training jobs print when they fail.

One module per area (``driver``, ``packages``, ``cuda``, ``memory``, ``nccl``,
``distributed``, and ``trainers`` for what accelerate and the YOLO trainers check
themselves), each with its codes, the rules that find them, and the sources the texts
come from; then the message catalogues (``catalogue.py``, ``catalogues/*.toml``): what
NCCL, CUDA, torch, the dynamic loader and the kernel print, read from their source, one
rule per message, filling the lines no hand-written rule reads. The smoke job reads its
ranks' stderr with ``match_text``; ``ddp-doctor diagnose`` runs the same rules over pasted
logs through the streaming engine, which relies on the ``Rule`` fields documented in
``model``.

Precedence, in brief: a rule whose ``symptom_of`` names a code that was also found is
folded into that finding (``"*"``: into any other error finding); then error severity comes
first and categories follow ``CATEGORY_PRECEDENCE`` (root causes low in the stack - driver,
packages - before the effects higher up - NCCL, timeouts).
"""

from __future__ import annotations

from dataclasses import replace

from ddp_doctor.categories import Category
from ddp_doctor.logrules import (
    catalogue_codes,
    cuda,
    distributed,
    driver,
    memory,
    nccl,
    packages,
    remedies,
    trainers,
)
from ddp_doctor.logrules.catalogue import Entry, Source, catalogue_rules, load_catalogues
from ddp_doctor.logrules.rule import (
    ANY_ERROR,
    GATES,
    TRAINERS,
    Match,
    Rule,
    Variant,
    decided,
    is_fatal_line,
    is_warning_line,
    rx,
)
from ddp_doctor.model import Code, Severity


def _with_variants(rules: tuple[Rule, ...]) -> tuple[Rule, ...]:
    """Each rule with the remediation variants of its code (``remedies.VARIANTS``)."""
    return tuple(replace(rule, variants=(*rule.variants, *remedies.VARIANTS[rule.code.id]))
                 if rule.code.id in remedies.VARIANTS else rule for rule in rules)


WRITTEN: tuple[Rule, ...] = _with_variants((*driver.RULES, *packages.RULES, *cuda.RULES,
                                            *memory.RULES, *nccl.RULES, *distributed.RULES,
                                            *trainers.RULES))
"""The hand-written rules; within one category the more specific rule comes first."""

CATALOGUES: dict[str, tuple[Source, list[Entry]]] = load_catalogues(
    {c.id: c for c in (*(c for r in WRITTEN for c in (r.code, *(v.code for v in r.variants
                                                                 if v.code))),
                       *catalogue_codes.CODES)})
"""The message catalogues (``catalogues/*.toml``) by name: each one's source and entries."""

RULES: tuple[Rule, ...] = (*WRITTEN, *_with_variants(catalogue_rules(CATALOGUES.values())))
"""Every rule: the hand-written ones, then one per catalogue entry (``decided`` settles a
line both read). An entry carries its code's remediation variants too, so a line it reads in
a YOLO log gets the steps typed in that trainer's options."""
_INDEX = {id(rule): index for index, rule in enumerate(RULES)}

LOG_CODES: tuple[Code, ...] = tuple(sorted(
    {c.id: c for r in RULES for c in (r.code, *(v.code for v in r.variants if v.code))}.values(),
    key=lambda c: c.id))

CATEGORY_PRECEDENCE: tuple[Category, ...] = (
    Category.WSL_SETUP, Category.DRIVER_MISSING, Category.DRIVER_LIBRARY_MISMATCH,
    Category.DRIVER_TOO_OLD, Category.TORCH_MISSING, Category.TORCH_CPU_ONLY,
    Category.NCCL_UNAVAILABLE, Category.TORCH_ARCH_UNSUPPORTED, Category.PACKAGE_CONFLICT,
    Category.NODE_MISMATCH, Category.HARDWARE_FAULT, Category.CUDA_INIT_FAILURE,
    Category.GPU_NOT_VISIBLE,
    Category.HOST_OUT_OF_MEMORY, Category.GPU_OUT_OF_MEMORY, Category.NCCL_SHARED_MEMORY,
    Category.CUDNN_FAILURE, Category.RENDEZVOUS_PORT_IN_USE, Category.RENDEZVOUS_FAILURE,
    Category.DDP_USAGE_ERROR, Category.NCCL_P2P, Category.NCCL_NETWORK,
    Category.COLLECTIVE_TIMEOUT, Category.PERFORMANCE_DEGRADED,
    # ddp-doctor's own outcomes (a command that failed, a requirement left unchecked) come
    # after every cause a log can show.
    Category.COMMAND_FAILED, Category.REQUIREMENT_UNCHECKED, Category.UNKNOWN,
)
"""The order findings of equal severity are ranked in, a cause before its effects; the one
order both the smoke job's match_text and ``diagnose`` (diagnose/causal_order.py) use."""

__all__ = ["ANY_ERROR", "CATALOGUES", "CATEGORY_PRECEDENCE", "GATES", "LOG_CODES", "RULES",
           "TRAINERS", "WRITTEN", "Match", "Rule", "Variant", "decided", "folded",
           "is_fatal_line", "is_warning_line", "match_text", "rx"]


def folded(rule: Rule, found: set[str]) -> bool:
    """Whether ``rule``'s finding is a consequence of another code found in the same log.

    ``found`` holds the ids of every code found. ``"*"`` is satisfied by any other
    error-severity code whose own rule is not a ``"*"`` symptom (two generic symptoms do
    not explain each other away).
    """
    if any(code != rule.code.id and code in found for code in rule.symptom_of):
        return True
    if ANY_ERROR in rule.symptom_of:
        return any(code != rule.code.id and code in _ROOT_ERROR_IDS for code in found)
    return False


_ROOT_ERROR_IDS = frozenset(c.id for r in RULES if ANY_ERROR not in r.symptom_of
                            for c in (r.code, *(v.code for v in r.variants if v.code))
                            if c.severity is Severity.ERROR)
_RANK = {c: i for i, c in enumerate(CATEGORY_PRECEDENCE)}


def category_position(category: Category) -> int:
    """A category's place in ``CATEGORY_PRECEDENCE`` (causes first)."""
    return _RANK.get(category, len(CATEGORY_PRECEDENCE))


def code_of_line(line: str) -> str | None:
    """The code ``diagnose`` gives LINE (its first match's), or None: what the kernel-log
    probe records beside each Xid event (``facts.kernel_log``, handed this by its caller)."""
    matches = match_text(line)
    return matches[0].rule.code.id if matches else None


def match_text(text: str) -> list[Match]:
    """Every rule that matches ``text`` (its first matching line), causes first.

    Order: findings that are not symptoms of another match, error severity, then (when the
    text shows a process failing: an exception, a signal, an exit code) matches on lines
    that are not mere warnings, category precedence, then rule order. The smoke job
    reports the first.
    """
    lines = text.splitlines()
    found: list[tuple[int, Match]] = []
    seen: set[int] = set()
    for line in lines:
        low = line.lower()
        matched = [rule for rule in RULES
                   if any(a in low for a in rule.anchors) and rule.pattern.search(line)]
        # as in the scan: a hand-written rule decides its line, an entry fills the rest
        for rule in decided(matched):
            index = _INDEX[id(rule)]
            if index not in seen:
                seen.add(index)
                found.append((index, Match(rule.read(line), line.strip()[:300])))
    ids = {m.rule.code.id for _, m in found}
    fatal = any(is_fatal_line(line) for line in lines)

    def key(item: tuple[int, Match]) -> tuple[bool, bool, bool, int, int]:
        index, match = item
        code = match.rule.code
        return (folded(match.rule, ids), code.severity is not Severity.ERROR,
                fatal and is_warning_line(match.line), category_position(code.category), index)

    return [match for _, match in sorted(found, key=key)]
