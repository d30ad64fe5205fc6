"""``python -m gpu_doctor`` is the same as the ``gpu-doctor`` command."""

from gpu_doctor.cli import main

if __name__ == "__main__":
    main()
