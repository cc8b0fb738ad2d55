"""The one error of model inspection: a message that names the file (the CLI prints it and exits 2)."""

from __future__ import annotations


class InspectError(ValueError):
    """The artifact cannot be read as a model: missing, corrupt or of an unknown format. The message names the file."""
