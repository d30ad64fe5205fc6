"""A checkpoint saved through the DDP wrapper loaded into the bare model, or the reverse
(``diagnose/checkpoint_keys.py``, DIAG027): one key list prefixed "module.", the other not,
the same weights once the prefix is off."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddp_doctor.diagnose.checkpoint_keys import prefix_mismatch
from tests.support.rules import lead

HEADER = "RuntimeError: Error(s) in loading state_dict for {model}:\n"


def _log(missing: str, unexpected: str, model: str = "ResNet") -> str:
    return (HEADER.format(model=model) + f"\tMissing key(s) in state_dict: {missing}.\n"
            f"\tUnexpected key(s) in state_dict: {unexpected}.\n")


@pytest.mark.parametrize("missing,unexpected", [
    ('"conv1.weight", "bn1.weight"', '"module.conv1.weight", "module.bn1.weight"'),
    ('"module.conv1.weight", "module.bn1.weight"', '"conv1.weight", "bn1.weight"'),
])
def test_a_prefix_on_one_side_only_is_the_wrapper(tmp_path: Path, missing: str,
                                                  unexpected: str) -> None:
    found = lead(tmp_path, _log(missing, unexpected))
    assert found.code.id == "DIAG027"
    assert found.code.category.value == "ddp_usage_error"
    assert [e.label for e in found.evidence] == ["line 2", "line 3"]
    assert any("consume_prefix_in_state_dict_if_present" in (s.command or "")
               for s in found.remediation)


def test_a_wrapped_models_architecture_change_is_not_the_prefix(tmp_path: Path) -> None:
    # every key of a wrapped model carries the prefix: "module." on both sides is a changed head
    found = lead(tmp_path, _log('"module.head.fc.weight", "module.head.fc.bias"',
                                '"module.classifier.weight", "module.classifier.bias"',
                                model="DistributedDataParallel"))
    assert found.code.id != "DIAG027"


def test_other_weights_on_each_side_are_not_the_prefix() -> None:
    lines = [(2, 'Missing key(s) in state_dict: "head.weight".'),
             (3, 'Unexpected key(s) in state_dict: "module.classifier.weight".')]
    assert prefix_mismatch(lines) == []


def test_launcher_prefixes_and_single_quotes_are_read() -> None:
    lines = [(7, "[rank0]:     Missing key(s) in state_dict: 'fc.weight', 'fc.bias'."),
             (8, "[rank0]:     Unexpected key(s) in state_dict: 'module.fc.weight', "
                 "'module.fc.bias'.")]
    assert [number for number, _ in prefix_mismatch(lines)] == [7, 8]


def test_openmmlabs_unquoted_lists_are_read(tmp_path: Path) -> None:
    """mmcv's and mmengine's load_state_dict print the lists unquoted, comma-separated."""
    text = ("The model and loaded state dict do not match exactly\n\n"
            "unexpected key in source state_dict: module.backbone.conv1.weight, "
            "module.backbone.bn1.weight\n\n"
            "missing keys in source state_dict: backbone.conv1.weight, backbone.bn1.weight\n")
    found = lead(tmp_path, text)
    assert found.code.id == "DIAG027"
    assert [e.label for e in found.evidence] == ["line 5", "line 3"]


def test_openmmlabs_lists_of_other_weights_are_not_the_prefix() -> None:
    lines = [(1, "unexpected key in source state_dict: module.head.fc.weight"),
             (2, "missing keys in source state_dict: backbone.conv1.weight")]
    assert prefix_mismatch(lines) == []
