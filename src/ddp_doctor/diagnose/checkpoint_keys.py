"""A checkpoint saved through the DDP wrapper loaded into the bare model, or the reverse.

DistributedDataParallel and DataParallel keep the model as their ``.module``, so the wrapper's
state_dict names each weight "module.<name>". torch's ``Module.load_state_dict``
(torch/nn/modules/module.py) reports what it could not place on lines of their own after its
RuntimeError: "Missing key(s) in state_dict: "conv1.weight", ..." and "Unexpected key(s) in
state_dict: "module.conv1.weight", ..."; OpenMMLab's loader (mmcv, mmengine) the same lists,
unquoted, as "missing keys in source state_dict: ..." and "unexpected key in source state_dict:
...". A prefix on one list alone is not the sign: a wrapped
model's own keys all carry it, and an architecture change then lists "module." keys on both
sides. The sign is one list prefixed and the other not, naming the same weights once the prefix
is taken off; ``torch.nn.modules.utils.consume_prefix_in_state_dict_if_present`` (torch 1.9
and later) exists for exactly that. Read from the whole log (the two lines hold no gate word),
where no rule read an error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.diagnose.rank_prefixes import split_rank

CHECKPOINT_WRAPPER_PREFIX = declare(
    "DIAG027", Category.DDP_USAGE_ERROR,
    "A checkpoint saved through the DDP wrapper ('module.' keys) was loaded into the bare "
    "model, or the reverse",
    what="DistributedDataParallel and DataParallel keep the model as their .module, so the "
         "state_dict of the wrapper names every weight 'module.<name>'. Loaded into a model "
         "without the wrapper (evaluation, a single-GPU resume) every key is unexpected and "
         "every weight missing; a bare model's checkpoint loaded into the wrapper fails the "
         "other way.",
    why="load_state_dict stops (strict=True), or loads nothing (strict=False) and the job "
        "trains or evaluates from random weights.",
    fix="Save model.module.state_dict() from the wrapped model, or strip the prefix when "
        "loading (torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(sd, "
        "'module.')); load into model.module when the model is wrapped.",
    docs_url="https://pytorch.org/docs/stable/generated/torch.nn.modules.utils."
             "consume_prefix_in_state_dict_if_present.html")

PREFIX = "module."
# torch's "Missing key(s) in state_dict: "a", "b"." and OpenMMLab's loader (mmcv
# mmcv/runner/checkpoint.py, mmengine mmengine/runner/checkpoint.py, load_state_dict): "missing
# keys in source state_dict: a, b" and "unexpected key in source state_dict: a, b", unquoted.
_KEY_LIST = re.compile(r"\b(missing|unexpected) key(?:\(s\)|s)? in (?:source )?state_dict: (.+)",
                       re.IGNORECASE)
_KEY = re.compile(r"[\"']([^\"'\s]+)[\"']")
_BARE_KEY = re.compile(r"[\w.]+")


def _keys(listed: str) -> set[str]:
    """The keys of a list: torch quotes each one, OpenMMLab separates them by commas."""
    return set(_KEY.findall(listed)) or set(_BARE_KEY.findall(listed))


def prefix_mismatch(lines: Iterable[tuple[int, str]]) -> list[tuple[int, str]]:
    """The (line number, text) of the "Missing key(s)" and "Unexpected key(s)" lines of one
    load_state_dict error whose lists differ only by the wrapper's prefix; empty when the
    numbered lines, in order, show no such pair."""
    seen: dict[str, tuple[int, str, set[str]]] = {}
    for number, line in lines:
        found = _KEY_LIST.search(split_rank(line)[1])
        if found is None:
            continue
        seen[found.group(1).lower()] = (number, line.strip(), _keys(found.group(2)))
        if len(seen) < 2:
            continue
        missing, unexpected = seen["missing"][2], seen["unexpected"][2]
        prefixed_missing = bool(missing) and all(k.startswith(PREFIX) for k in missing)
        prefixed_unexpected = bool(unexpected) and all(k.startswith(PREFIX) for k in unexpected)
        if missing and unexpected and prefixed_missing != prefixed_unexpected:
            bare = {k.removeprefix(PREFIX) for k in (missing if prefixed_missing else unexpected)}
            if bare & (unexpected if prefixed_missing else missing):
                return [seen["missing"][:2], seen["unexpected"][:2]]
        seen.clear()
    return []
