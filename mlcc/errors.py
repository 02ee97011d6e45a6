"""The errors mlcc reports to users.

Every failure a user can cause (a bad model, a bad target file, bad inputs) is an MlccError: the
CLI prints its one-line message (and `detail` under --verbose) and exits non-zero. Anything else
that escapes is a bug in mlcc and is reported as such.
"""


class MlccError(Exception):
    """A failure caused by the user's input, reported without a traceback."""

    exit_code = 1

    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.message = message
        self.detail = detail


class ModelError(MlccError):
    """The ONNX file is malformed, inconsistent or cannot be specialized to static shapes."""


class UnsupportedError(MlccError):
    """The model uses an operator, attribute or type that mlcc cannot compile correctly."""

    exit_code = 3


class TargetError(MlccError):
    """The target description is invalid or its toolchain is missing."""


class BuildError(MlccError):
    """The C toolchain failed on the generated code."""


class DoesNotFit(MlccError):
    """The compiled model needs more RAM or flash than the target declares (or --max-arena)."""


class InputError(MlccError):
    """Inputs given at run time (npz files, arrays) do not match the model."""


class RuntimeStatusError(MlccError):
    """The compiled model returned a non-zero status."""
