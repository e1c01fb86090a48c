"""A command's arguments read from argv as click reads them, in their plain forms only: for the
commands `sanbox` runs without typer (sanbox.cli.quick, and `exec`'s fast path).

`read` takes options before, between and after the arguments until `--` (after it, everything is
an argument), each spelled as declared and its value the next word. It gives up, returning None,
on anything else: `--help`, `--opt=value`, `-nNAME`, an unknown option, a value-taking option
repeated (unless it repeats by design) or without its value, a value that starts with `-`, a
number out of its range or not written plainly, too few or too many arguments, a required option
left out. The typer app then reads the same argv and does (or refuses) what it always did.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

_NUMBER = re.compile(r"0|[1-9][0-9]{0,8}")


@dataclass(frozen=True)
class Grammar:
    """One command's arguments and options.

    `arguments` names the positional arguments in order; with `rest`, the last takes one or
    more words. `options` maps each spelling (`--name`, `-n`) to its destination; destinations in
    `flags` take no value, those in `many` repeat, those in `numbers` are integers within
    (min, max), either bound None for none; a value its destination's `checks` refuses is left to
    the typer command, which says what is wrong with it. `numbers` and `checks` name arguments
    too (not the last with `rest`). When `needed` names destinations, at least one of them must
    be given (a required option, or one of those a command asks for)."""

    arguments: tuple[str, ...] = ()
    options: Mapping[str, str] = field(default_factory=dict)
    flags: frozenset[str] = frozenset()
    many: frozenset[str] = frozenset()
    numbers: Mapping[str, tuple[int | None, int | None]] = field(default_factory=dict)
    checks: Mapping[str, Callable[[str], bool]] = field(default_factory=dict)
    rest: bool = False
    needed: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Args:
    """What `read` found: the arguments by name, the options by destination."""

    arguments: Mapping[str, str]
    rest: list[str]
    values: Mapping[str, str]
    repeated: Mapping[str, list[str]]
    set_flags: frozenset[str]
    numbers: Mapping[str, int]

    def __getitem__(self, name: str) -> str:
        return self.arguments[name]

    def value(self, dest: str) -> str | None:
        return self.values.get(dest)

    def all(self, dest: str) -> list[str]:
        return list(self.repeated.get(dest, []))

    def pairs(self, dest: str) -> dict[str, str]:
        """KEY=VALUE values (checked by `is_pair`) as a dict: a later key wins, as in the SDK."""
        return {key: rest for key, _, rest in (value.partition("=") for value in self.all(dest))}

    def flag(self, dest: str) -> bool:
        return dest in self.set_flags

    def number(self, dest: str) -> int | None:
        return self.numbers.get(dest)


def read(argv: list[str], grammar: Grammar) -> Args | None:
    """`argv` (the words after the command's name) as `grammar` reads it, or None."""
    words: list[str] = []
    values: dict[str, str] = {}
    repeated: dict[str, list[str]] = {}
    flags: set[str] = set()
    numbers: dict[str, int] = {}
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            words += argv[i + 1 :]
            break
        if not word.startswith("-") or word == "-":
            words.append(word)
            i += 1
            continue
        dest = grammar.options.get(word)
        if dest is None:
            return None
        if dest in grammar.flags:
            flags.add(dest)
            i += 1
            continue
        if i + 1 == len(argv) or argv[i + 1].startswith("-"):
            return None
        value = argv[i + 1]
        check = grammar.checks.get(dest)
        if check is not None and not check(value):
            return None
        if dest in grammar.many:
            repeated.setdefault(dest, []).append(value)
        elif dest in values or dest in numbers:
            return None
        elif dest in grammar.numbers:
            number = _number(value, *grammar.numbers[dest])
            if number is None:
                return None
            numbers[dest] = number
        else:
            values[dest] = value
        i += 2
    fixed = len(grammar.arguments) - 1 if grammar.rest else len(grammar.arguments)
    if len(words) < len(grammar.arguments) or (not grammar.rest and len(words) > fixed):
        return None
    named = dict(zip(grammar.arguments[:fixed], words, strict=False))
    for name, word in named.items():
        check = grammar.checks.get(name)
        if check is not None and not check(word):
            return None
        if name in grammar.numbers:
            number = _number(word, *grammar.numbers[name])
            if number is None:
                return None
            numbers[name] = number
    given = {*values, *repeated, *flags, *numbers}
    if grammar.needed and not grammar.needed & given:
        return None
    rest = words[fixed:] if grammar.rest else []
    return Args(named, rest, values, repeated, frozenset(flags), numbers)


def _number(text: str, low: int | None, high: int | None) -> int | None:
    if _NUMBER.fullmatch(text) is None:
        return None
    number = int(text)
    if (low is not None and number < low) or (high is not None and number > high):
        return None
    return number


def is_pair(value: str) -> bool:
    """KEY=VALUE, KEY not empty (what `--env` and `--label` take)."""
    key, sep, _ = value.partition("=")
    return bool(sep and key)
