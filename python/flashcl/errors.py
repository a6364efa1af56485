"""FlashCL's exceptions.

Arguments the package can check itself (shapes, dtypes, layouts, devices)
raise ValueError before anything runs. A call the C library rejects or that
fails on the device raises Error, which carries the status name
(``"FLASHCL_ERR_INVALID_HEADS"``, ``"CL_OUT_OF_RESOURCES"``), its number and
the library's message, which names the field (``heads_kv (3) must divide
heads_q (8)``). The library's invalid-argument statuses (-10000 to -10099)
raise InvalidArgumentError, which is both an Error and a ValueError. Nothing
has been written to the outputs when either is raised for an argument. An
argument of the wrong type (softmax_scale="0.1", a float window size,
causal="no", a list or None for an array) raises ArgumentTypeError, both a
TypeError and a ValueError.
"""


class Error(RuntimeError):
    """A FlashCL or OpenCL status other than success."""

    def __init__(self, name, message, status):
        super().__init__(f"{name}: {message}" if message else name)
        self.name = name  # e.g. "FLASHCL_ERR_INVALID_HEADS"
        self.status = status  # the flashcl_status number
        self.message = message  # flashcl_last_error's text


class InvalidArgumentError(Error, ValueError):
    """The library rejected an argument (status -10000 to -10099)."""


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type, named in the message: a scalar that is not a number (or not an integer
    where one is needed), a flag that is no bool, an array that is no numpy array or torch tensor.
    A TypeError, as Python's own functions raise for such arguments, and a ValueError, as the package's other
    argument checks (which raised a ValueError for these too)."""


def _from_status(status, name, message):
    """The exception for a status (called by the extension module)."""
    cls = InvalidArgumentError if -10099 <= status <= -10000 else Error
    return cls(name, message, status)
