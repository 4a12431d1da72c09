"""Click command classes and types that refuse what click lets through silently.

Click takes the last of a repeated option, the last of two flags that set the same value
(`--quick --full`), an empty string as a value, and NaN/inf for a float range. For a CI gate
each of these is a silent misreading of what the user asked, so every gputopo command is a
:class:`StrictCommand` (exit 2, one line naming the option) and float options are
:class:`FiniteFloat`.
"""

from __future__ import annotations

import math
from typing import Dict, Iterable, List, Sequence

import click
from click.core import ParameterSource

from gputopo.errors import UsageError


def _flag(param: click.Parameter) -> str:
    """How the user spells a parameter: its longest option name, or the argument's metavar."""
    if isinstance(param, click.Option):
        return max(param.opts, key=len)
    return (param.name or "ARG").upper()


def _empty(value) -> bool:
    values = value if isinstance(value, (list, tuple)) else [value]
    return any(isinstance(v, str) and not v.strip() for v in values)


class StrictCommand(click.Command):
    """A command that refuses repeated options, two flags of one setting, and empty values."""

    def parse_args(self, ctx: click.Context, args: List[str]) -> List[str]:
        if not ctx.resilient_parsing and not any(a in ctx.help_option_names for a in args):
            opts, _, order = self.make_parser(ctx).parse_args(args=list(args))
            _refuse_repeats(order)
            _refuse_empty(order, opts)
        return super().parse_args(ctx, args)


def _refuse_repeats(order: List[click.Parameter]) -> None:
    seen: Dict[str, click.Parameter] = {}  # parameter name -> the parameter given first
    for param in order:
        if not isinstance(param, click.Option) or param.multiple or param.count:
            continue
        first = seen.setdefault(param.name, param)
        if first is param and sum(p is param for p in order) > 1:
            raise UsageError(f"{_flag(param)} is given more than once; give it once")
        if first is not param:
            raise UsageError(f"{_flag(first)} and {_flag(param)} are exclusive; give one")


def _refuse_empty(order: List[click.Parameter], opts: dict) -> None:
    for param in dict.fromkeys(order):  # each parameter once, in the order given
        if isinstance(param, click.Option) and param.is_flag:
            continue
        if _empty(opts.get(param.name)):
            fix = "leave the option out" if isinstance(param, click.Option) else "name one"
            raise UsageError(f"{_flag(param)}: empty value; give a value or {fix}")


def raw_option(args: List[str], option: str, choices: Sequence[str], default: str) -> str:
    """The value of ``option`` among raw, unparsed arguments (``--as X`` or ``--as=X``), ``default``
    when absent or not one of ``choices``: what a command must know before click has parsed them."""
    for k, a in enumerate(args):
        value = (args[k + 1] if a == option and k + 1 < len(args)
                 else a[len(option) + 1:] if a.startswith(option + "=") else None)
        if value is not None and value in choices:
            return value
    return default


class DialectCommand(StrictCommand):
    """A command that answers in its consumer's terms (``--as``: health, gate): a refused option
    answers in the dialect's terms too (NPD's Unknown, Nagios' UNKNOWN, Slurm's 0 and a log line),
    never with a code the consumer reads as a verdict; json keeps click's own error. A subclass
    names its ``dialects`` and says the refusal (:meth:`refuse`, which raises its exit)."""

    dialects: Sequence[str] = ()

    def refuse(self, dialect: str, message: str, args: List[str]) -> None:
        raise NotImplementedError

    def parse_args(self, ctx: click.Context, args: List[str]) -> List[str]:
        dialect = raw_option(args, "--as", self.dialects, "json")
        try:
            return super().parse_args(ctx, args)
        except (click.UsageError, UsageError) as e:
            if dialect == "json":
                raise
            text = e.format_message() if isinstance(e, click.ClickException) else str(e)
            self.refuse(dialect, " ".join(text.split()), args)
            raise  # not reached: refuse raises


class StrictGroup(click.Group):
    """A group whose commands (and sub-groups) are strict."""

    command_class = StrictCommand
    group_class = type  # sub-groups are StrictGroups too


class FiniteFloat(click.FloatRange):
    """A float range that also refuses NaN and infinity (NaN passes every comparison)."""

    def convert(self, value, param, ctx):
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return rv


def given(ctx: click.Context, *names: str) -> List[str]:
    """The options among ``names`` (parameter names) that the user gave on the command line,
    spelled as the user spells them."""
    out = []
    for name in names:
        if ctx.get_parameter_source(name) not in (ParameterSource.COMMANDLINE,
                                                  ParameterSource.ENVIRONMENT):
            continue
        params = [p for p in ctx.command.params if p.name == name]
        # flags sharing one setting (--quick/--full): the one whose value was taken
        chosen = [p for p in params if getattr(p, "flag_value", None) == ctx.params.get(name)]
        out.append(_flag((chosen or params)[0]))
    return out


def refuse_unused(ctx: click.Context, names: Iterable[str], why: str) -> None:
    """Exit 2 naming the options of ``names`` that were given although ``why`` ignores them."""
    used = given(ctx, *names)
    if used:
        verb = "is" if len(used) == 1 else "are"
        raise UsageError(f"{', '.join(used)} {verb} ignored {why}; leave "
                         f"{'it' if len(used) == 1 else 'them'} out")
