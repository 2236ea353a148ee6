"""Where the data files in ``schemas/`` and ``topics/`` are, installed or in a checkout.

A wheel carries them inside the package (``metastore/_schemas`` and
``metastore/_topics``, see pyproject's force-include); an editable install or a
checkout reads the repository's top-level ``schemas/`` and ``topics/`` folders.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path


@cache
def schemas_dir() -> Path:
    package = Path(__file__).resolve().parent.parent  # metastore/, above util/
    for candidate in (package / "_schemas", package.parent / "schemas"):
        if (candidate / "avro").is_dir():
            return candidate
    raise FileNotFoundError(f"schemas/ not found next to {package}")


@cache
def topics_dir() -> Path:
    package = Path(__file__).resolve().parent.parent  # metastore/, above util/
    for candidate in (package / "_topics", package.parent / "topics"):
        if (candidate / "metastore.json").is_file():
            return candidate
    raise FileNotFoundError(f"topics/ not found next to {package}")
