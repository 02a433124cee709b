"""Whether an aspect's name can be a folder name: it names `aspect_models/<aspect>/` in every run.

`workbench.data.aspects` checks each aspect name with `folder_name_problem` when an aspect file
is loaded (by `workbench aspects FILE` and by every stage), so a name that no file system takes
is refused at once, naming the field, instead of failing in stage 02 with "File name too long".
The characters are checked before (lowercase letters, digits and `_`, starting with a letter).
"""

from __future__ import annotations

# The name becomes a folder, parts of file names beside it and a column name in every table. File
# systems allow 255 bytes per name and the stages add suffixes to it; 64 characters leave that room,
# keep tables readable, and are more than three times the longest shipped name ("hypothesis_general").
MAX_ASPECT_NAME = 64

# Names Windows keeps for devices: no folder can be called so there.
RESERVED_NAMES = frozenset({"con", "prn", "aux", "nul", *(f"com{i}" for i in range(1, 10)),
                            *(f"lpt{i}" for i in range(1, 10))})


def folder_name_problem(name: str) -> str | None:
    """What keeps `name` (a valid identifier) from being a folder name everywhere, or None."""
    if len(name) > MAX_ASPECT_NAME:
        shown = name if len(name) <= 40 else name[:37] + "..."
        return (f"aspect name {shown!r} is {len(name)} characters long; the limit is {MAX_ASPECT_NAME} (it "
                "becomes a folder name, aspect_models/<aspect>/): choose a shorter name")
    if name in RESERVED_NAMES:
        return (f"aspect name {name!r} is a device name on Windows and cannot be a folder there "
                f"(aspect_models/<aspect>/); choose another, e.g. {name + '_aspect'!r}")
    return None
