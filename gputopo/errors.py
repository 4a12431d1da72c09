"""Errors that end a command with a known exit code and a one-line message (no traceback).

Exit codes (README.md): 0 good, 1 findings fail the spec, 2 usage/input error,
3 no GPU/driver where one is needed, 4 internal error.
"""

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_NO_HARDWARE = 3
EXIT_INTERNAL = 4


class GputopoError(Exception):
    """An error the user can act on; ``str(err)`` is the one line shown."""

    exit_code = EXIT_INTERNAL


class UsageError(GputopoError):
    """Bad arguments or bad input files (exit 2)."""

    exit_code = EXIT_USAGE


class InputFileError(UsageError):
    """A file the user gave cannot be read; names the file and where in it."""

    def __init__(self, path, message, line=None, key=None):
        where = str(path)
        if line is not None:
            where += f":{line}"
        if key is not None:
            where += f" [{key}]"
        super().__init__(f"{where}: {message}")
        self.path, self.line, self.key = path, line, key


class MissingTorchError(GputopoError):
    """PyTorch is not installed where a command moves bytes through it (exit 3, like a missing
    driver: the machine lacks what the command needs; nothing was written)."""

    exit_code = EXIT_NO_HARDWARE

    def __init__(self, what: str):
        super().__init__(
            f"{what} needs PyTorch, which is not installed: pip install torch==2.13.0 (CPU build, "
            "enough for --sim and --fabric cpu) or the CUDA build for your driver "
            "(https://pytorch.org/get-started/locally/)")


def require_torch(what: str) -> None:
    """MissingTorchError unless ``import torch`` can find the package; checked before a run
    folder is made, without importing torch (seconds) here."""
    import importlib.util

    try:
        found = importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise MissingTorchError(what)


class NoHardwareError(GputopoError):
    """No NVIDIA driver or GPU where the command needs one (exit 3)."""

    exit_code = EXIT_NO_HARDWARE

    def __init__(self, reason):
        super().__init__(
            f"{reason}; to try gputopo without GPUs use --sim NAME (see `gputopo sims`)"
            " or, for benchmarks, --fabric cpu"
        )
