"""Help without Python type names: typer 0.29 labels every parameter with its annotation
(``<list[Path]>``, ``<str>``, ``<bool>`` on a flag). `plain_help` relabels a command tree the way
click-based tools print it: ``TEXT``, ``INTEGER``, ``PATH``, the choices (``trio|asyncio``), or the
option's metavar; nothing for a flag or an argument (its name is shown already). A long list of
choices goes into the help text, so that a narrow terminal never folds it mid-word."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args, get_origin

#: Labels by annotation (a list option: its item's label, the option repeatable).
_LABELS: dict[Any, str] = {str: "TEXT", int: "INTEGER", float: "NUMBER", Path: "PATH"}

#: Choices longer than this (joined by ``|``) go into the help text under the option's name.
MAX_INLINE_CHOICES = 24


def _label(param: Any) -> str:
    if getattr(param, "is_flag", False) or type(param).__name__ == "TyperArgument":
        return ""
    if param.metavar:
        return str(param.metavar)
    desc = param.type_descriptor
    if desc.is_choice and desc.choices:
        values = [str(getattr(c, "value", c)) for c in desc.choices]
        inline = "|".join(values)
        if len(inline) <= MAX_INLINE_CHOICES:
            return inline
        param.help = f"{param.help or ''} One of: {', '.join(values)}.".strip()
        return str(param.name).upper()
    annotation = desc.annotation
    if get_origin(annotation) is list:
        annotation = get_args(annotation)[0]
    return _LABELS.get(annotation, str(getattr(annotation, "__name__", annotation)).upper())


def _relabel(param: Any) -> Any:
    label = _label(param)
    param.display_type_rich = lambda ctx, label=label: label  # (the instance's, over the class's)
    if type(param).__name__ == "TyperArgument":  # usage: PATH... (typer 0.29 prints {PATH}...)
        usage = str(param.display_name_raw) + ("..." if param.nargs != 1 else "")
        param._usage_display_name = lambda: usage if param.required else f"[{usage}]"
    return param


def plain_help(command: Any) -> Any:
    """``command`` and its subcommands with plain parameter labels (see the module docstring),
    ``--help`` included."""
    for param in command.params:
        _relabel(param)
    help_option = command.get_help_option
    command.get_help_option = lambda ctx: None if (opt := help_option(ctx)) is None else _relabel(opt)
    for sub in getattr(command, "commands", {}).values():
        plain_help(sub)
    return command
