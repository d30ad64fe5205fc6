"""``python -m ddp_doctor`` is the same as the ``ddp-doctor`` command."""

from ddp_doctor.cli import main

if __name__ == "__main__":
    main()
