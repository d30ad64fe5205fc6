"""Every test here keeps its temporary files (run directories, torchrun's torchelastic_*
folders) in a directory pytest owns: tests/support/private_tmpdir.py says why."""

from tests.support.private_tmpdir import private_tmpdir  # noqa: F401  (an autouse fixture)
