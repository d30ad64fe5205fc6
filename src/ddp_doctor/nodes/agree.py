"""Judge node summaries against each other: what differs, on which node, and does it matter.

Each field is compared by the part that matters (NCCL's major.minor, the driver's branch,
Python's minor version), against the majority of the nodes that report it; a tie goes to
the earliest node, so ``compare BASELINE OTHER`` judges OTHER against BASELINE. Between peers
(the nodes of one smoke job, ``fewer_is_odd``), a tie on a count (GPUs, ranks, active
InfiniBand ports) goes to the larger count instead: the node short of a GPU or a rail is
the one named, on every node alike. A value a
node does not report is shown as unknown and never counted as a difference. Differences
that break DDP are errors, those that often hurt are warnings, and those that rarely matter
are info; fields that agree are not findings at all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, cast

from ddp_doctor.model import Code, Evidence, Finding, Step
from ddp_doctor.nodes import codes
from ddp_doctor.nodes.summary import NO_TORCH, NodeSummary
from ddp_doctor.wording import count, human_bytes

UNKNOWN = "unknown"
UNSET = "(unset)"
NOT_INSTALLED = "(not installed)"
_LISTED_NODES = 6  # beyond this many nodes, evidence names the odd ones and "the others"


@dataclass(frozen=True)
class Row:
    """One compared field: each node's value as shown, and the nodes that differ."""

    label: str
    code: Code
    values: tuple[str, ...]
    odd: tuple[int, ...]
    baseline: str

    def to_dict(self, names: Sequence[str]) -> dict[str, Any]:
        return {"label": self.label, "code": self.code.id,
                "severity": self.code.severity.value, "baseline": self.baseline,
                "values": list(self.values),
                "differs": [names[i] for i in self.odd]}


@dataclass(frozen=True)
class Comparison:
    """The judgement of a set of nodes: the rows that differ and the findings they make."""

    names: tuple[str, ...]
    rows: tuple[Row, ...]
    findings: tuple[Finding, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {"nodes": list(self.names), "rows": [r.to_dict(self.names) for r in self.rows]}


Key = Callable[[NodeSummary], Optional[tuple[str, str]]]
"""A field's (compared key, shown text) on one node, or None when the node does not say."""


def _major_minor(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


def _nccl(s: NodeSummary) -> Optional[tuple[str, str]]:
    v = s.get("nccl")
    return (_major_minor(v), v) if v else None


def _torch(s: NodeSummary) -> Optional[tuple[str, str]]:
    v = s.get("torch")
    if not v:
        return None
    git = s.get("torch_git")
    return (f"{v} {git}" if git else v, v)


def _cuda_major(s: NodeSummary) -> Optional[tuple[str, str]]:
    if s.get("torch") in (None, NO_TORCH):
        return None
    cuda = s.get("torch_cuda")
    return (cuda.split(".")[0], f"CUDA {cuda}") if cuda else ("cpu", "CPU build")


def _gpu_count(s: NodeSummary) -> Optional[tuple[str, str]]:
    n = s.get("gpu_count")
    return None if n is None else (str(n), str(n))


def _driver_branch(s: NodeSummary) -> Optional[tuple[str, str]]:
    v = s.get("driver")
    return (v.split(".")[0], v) if v else None


def _gpu_model(s: NodeSummary) -> Optional[tuple[str, str]]:
    models = s.get("gpu_models")
    if not models:
        return None
    by_model = Counter(models)
    shown = ", ".join(f"{n}× {m}" for m, n in sorted(by_model.items()))
    return (" + ".join(sorted(by_model)), shown)


def _python_minor(s: NodeSummary) -> Optional[tuple[str, str]]:
    v = s.get("python")
    return (_major_minor(v), v) if v else None


def _text(name: str) -> Key:
    def key(s: NodeSummary) -> Optional[tuple[str, str]]:
        v = _field(s, name)
        return (str(v), str(v)) if v else None
    return key


def _kernel(s: NodeSummary) -> Optional[tuple[str, str]]:
    v = s.get("kernel")
    return (v, v) if v else None


def _bytes(name: str) -> Key:
    def key(s: NodeSummary) -> Optional[tuple[str, str]]:
        v = _field(s, name)
        return None if not v else (str(v), human_bytes(int(v)))
    return key


def _field(s: NodeSummary, name: str) -> Any:
    """A summary field named at run time (the typed dict's keys are literals)."""
    return cast(dict[str, Any], s).get(name)


def _ib(s: NodeSummary) -> Optional[tuple[str, str]]:
    """Compared by the number of active ports: a node that lost 7 of its 8 rails still has
    InfiniBand, and NCCL then drives one port where the others drive eight."""
    ports = s.get("ib_active")
    if ports is None:
        return None
    return (str(len(ports)), f"{count(len(ports), 'active port')}: {', '.join(ports)}"
            if ports else "none active")


def _ranks(s: NodeSummary) -> Optional[tuple[str, str]]:
    n = s.get("ranks")
    return None if n is None else (str(n), str(n))


FIXED: tuple[tuple[str, Code, Key], ...] = (
    ("NCCL", codes.NCCL_DIFFERS, _nccl),
    ("torch", codes.TORCH_DIFFERS, _torch),
    ("torch CUDA build", codes.CUDA_MAJOR_DIFFERS, _cuda_major),
    ("GPUs per node", codes.GPU_COUNT_DIFFERS, _gpu_count),
    ("ranks per node", codes.RANKS_DIFFER, _ranks),
    ("driver", codes.DRIVER_BRANCH_DIFFERS, _driver_branch),
    ("GPU model", codes.GPU_MODEL_DIFFERS, _gpu_model),
    ("Python", codes.PYTHON_DIFFERS, _python_minor),
    ("/dev/shm", codes.LIMITS_DIFFER, _bytes("shm_bytes")),
    ("memory limit", codes.LIMITS_DIFFER, _bytes("memory_limit")),
    ("InfiniBand", codes.IB_PARTIAL, _ib),
    ("NCCL net plugin", codes.NETWORK_DIFFERS, _text("net_plugin")),
    ("NCCL network", codes.NETWORK_DIFFERS, _text("nccl_network")),
    ("kernel", codes.KERNEL_DIFFERS, _kernel),
)


def _entries(summaries: Sequence[NodeSummary], name: str, missing: str
             ) -> list[tuple[str, Key]]:
    items = sorted({k for s in summaries for k in (_field(s, name) or {})})

    def entry(item: str) -> Key:
        def key(s: NodeSummary) -> Optional[tuple[str, str]]:
            table = _field(s, name)
            if table is None:
                return None
            value = table.get(item)
            return (value, value) if value is not None else (missing, missing)
        return key
    return [(item, entry(item)) for item in items]


# Rows whose compared value is a count, where between peers fewer is the odd one out.
COUNTS = ("GPUs per node", "ranks per node", "InfiniBand")


def _row(label: str, code: Code, key: Key, summaries: Sequence[NodeSummary],
         fewer_is_odd: bool = False) -> Optional[Row]:
    seen = [key(s) for s in summaries]
    known = [(i, k) for i, k in enumerate(seen) if k is not None]
    if len({k[0] for _, k in known}) < 2:
        return None
    tally = Counter(k[0] for _, k in known)
    best = max(tally.values())
    tied = [k for _, k in known if tally[k[0]] == best]
    baseline = tied[0]  # ties: the earliest node
    if fewer_is_odd and label in COUNTS:
        baseline = max(tied, key=lambda k: int(k[0]))
    odd = tuple(i for i, k in known if k[0] != baseline[0])
    values = tuple(k[1] if k is not None else UNKNOWN for k in seen)
    return Row(label, code, values, odd, baseline[1])


def _ifname_row(summaries: Sequence[NodeSummary]) -> Optional[Row]:
    """NCCL_SOCKET_IFNAME against each node's own interfaces (NCCL's matching rules)."""
    odd, values = [], []
    for i, s in enumerate(summaries):
        spec = (s.get("env") or {}).get("NCCL_SOCKET_IFNAME")
        names = s.get("interfaces")
        if not spec or names is None or spec.startswith("^"):
            values.append(UNKNOWN if names is None else ", ".join(names) or "none")
            continue
        exact = spec.startswith("=")
        wanted = [w.strip() for w in spec.lstrip("=").split(",") if w.strip()]
        hit = any((n == w) if exact else n.startswith(w) for n in names for w in wanted)
        values.append(", ".join(names) or "none")
        if not hit:
            odd.append(i)
    if not odd:
        return None
    return Row("interfaces (NCCL_SOCKET_IFNAME)", codes.IFNAME_MISSING, tuple(values),
               tuple(odd), "an interface NCCL_SOCKET_IFNAME matches")


def compare_nodes(names: Sequence[str], summaries: Sequence[NodeSummary],
                  fewer_is_odd: bool = False) -> Comparison:
    """Every difference between the nodes that matters, as rows and NOD findings.

    ``fewer_is_odd``: the nodes are peers (one job), so a tied count names the node with
    fewer, not the later one.
    """
    if len(names) != len(summaries):
        raise ValueError("one name per summary")
    rows: list[Row] = []
    for label, code, key in FIXED:
        row = _row(label, code, key, summaries, fewer_is_odd)
        if row is not None:
            rows.append(row)
    for variable, key in _entries(summaries, "env", UNSET):
        row = _row(variable, codes.NCCL_SETTINGS_DIFFER, key, summaries)
        if row is not None:
            rows.append(row)
    for package, key in _entries(summaries, "packages", NOT_INSTALLED):
        row = _row(package, codes.PACKAGES_DIFFER, key, summaries)
        if row is not None:
            rows.append(row)
    ifname = _ifname_row(summaries)
    if ifname is not None:
        rows.append(ifname)
    rows.sort(key=lambda r: -r.code.severity.rank)
    return Comparison(tuple(names), tuple(rows), _findings(tuple(names), rows, summaries))


def _findings(names: tuple[str, ...], rows: list[Row], summaries: Sequence[NodeSummary]
              ) -> tuple[Finding, ...]:
    grouped: dict[str, list[Row]] = {}
    for row in rows:
        grouped.setdefault(row.code.id, []).append(row)
    found = []
    for group in grouped.values():
        code = group[0].code
        odd = sorted({i for r in group for i in r.odd})
        what = ", ".join(r.label for r in group) if len(group) > 1 or code in (
            codes.NCCL_SETTINGS_DIFFER, codes.PACKAGES_DIFFER) else None
        title = code.summary + (f" ({what})" if what else "")
        title += f": {_names(names, odd)} differ{'s' if len(odd) == 1 else ''} from " \
                 f"{'the others' if len(names) > 2 else names[_first_not(odd, len(names))]}"
        evidence: list[Evidence] = []
        for row in group:
            evidence += _evidence(names, row)
        found.append(Finding(code=code, title=title, evidence=tuple(evidence),
                             remediation=_steps(code, group, names, summaries),
                             affects=tuple(names[i] for i in odd)))
    return tuple(found)


def _first_not(odd: list[int], n: int) -> int:
    return next(i for i in range(n) if i not in odd)


def _names(names: Sequence[str], picked: list[int]) -> str:
    shown = [names[i] for i in picked[:_LISTED_NODES]]
    rest = len(picked) - len(shown)
    return ", ".join(shown) + (f" and {count(rest, 'other node')}" if rest else "")


def _evidence(names: Sequence[str], row: Row) -> list[Evidence]:
    if len(names) <= _LISTED_NODES:
        return [Evidence(f"{row.label} on {name}", value,
                         "differs" if i in row.odd else "")
                for i, (name, value) in enumerate(zip(names, row.values))]
    out = [Evidence(f"{row.label} on {names[i]}", row.values[i], "differs") for i in row.odd]
    others = len(names) - len(row.odd)
    out.append(Evidence(f"{row.label} on {count(others, 'other node')}", row.baseline))
    return out


def _steps(code: Code, group: list[Row], names: Sequence[str],
           summaries: Sequence[NodeSummary]) -> tuple[Step, ...]:
    steps = [Step(code.fix)]
    odd = sorted({i for r in group for i in r.odd})
    good = [s for i, s in enumerate(summaries)
            if i not in odd and s.get("torch") not in (None, NO_TORCH)]
    same_torch = bool(good) and all(summaries[i].get("torch") == good[0].get("torch")
                                    for i in odd)
    if code is codes.NCCL_DIFFERS and same_torch and good[0].get("nccl"):
        # One torch everywhere, so NCCL comes from somewhere else on the odd nodes: the
        # nvidia-nccl wheel torch depends on, or an NCCL on LD_LIBRARY_PATH.
        cuda = str(good[0].get("torch_cuda") or "12").split(".")[0]
        steps.append(Step(f"On {_names(names, odd)}, install the NCCL the others load (and "
                          f"check LD_LIBRARY_PATH for another libnccl.so).",
                          command=f"pip install nvidia-nccl-cu{cuda}=={good[0]['nccl']}"))
    elif code in (codes.TORCH_DIFFERS, codes.CUDA_MAJOR_DIFFERS, codes.NCCL_DIFFERS) and good:
        steps.append(Step(f"On {_names(names, odd)}, install the torch the others run.",
                          command=pip_command(good[0]["torch"])))
    if code is codes.NCCL_SETTINGS_DIFFER:
        majority = [(r.label, r.baseline) for r in group]
        exports = "; ".join(f"unset {k}" if v == UNSET else f"export {k}={v}"
                            for k, v in majority)
        steps.append(Step("Set them as most nodes do, in the job script of every node.",
                          command=exports))
    return tuple(steps)


def pip_command(version: str) -> str:
    """The pip command that installs exactly this torch ("2.5.1+cu124" -> the cu124 index)."""
    base, _, local = version.partition("+")
    if local.startswith(("cu", "rocm")) or local == "cpu":
        return (f"pip install torch=={base} "
                f"--index-url https://download.pytorch.org/whl/{local}")
    return f"pip install torch=={base}"
