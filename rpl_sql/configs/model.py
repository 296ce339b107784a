"""The one shape every format is read into and written from: rules per filter object, as MySQL keeps them."""
from __future__ import annotations

from dataclasses import dataclass, field

from rpl_sql.errors import MySQLError
from rpl_sql.filters.rules import TYPES, FilterType
from rpl_sql.filters.state import ServerState

Rules = tuple[tuple[FilterType, tuple], ...]  # (type, values) in FilterType order, only the types given


class NotExpressibleError(MySQLError):
    """The target format cannot state this rule set exactly; the message names the rule and why."""

    def __init__(self, message: str):
        super().__init__(1235, "42000", "ER_NOT_SUPPORTED_YET", message)


def rules_of(mapping: dict[FilterType, list | tuple]) -> Rules:
    return tuple((t, tuple(mapping[t])) for t in TYPES if t in mapping)


@dataclass(frozen=True)
class FilterConfig:
    """Global rules, each channel's own rules, and the matching settings a format may carry.

    A channel's rules are what it adds on top of the global ones under MySQL's copy rule (a type the channel
    leaves out takes the global values); `notes` are the assumptions a translation made, for the reader.
    """

    global_rules: Rules = ()
    channels: tuple[tuple[str, Rules], ...] = ()
    lower_case_table_names: int | None = None
    filter_mode: str | None = None
    notes: tuple[str, ...] = field(default=(), compare=False)

    def channel(self, name: str) -> dict[FilterType, tuple]:
        return dict(next((r for n, r in self.channels if n == name), ()))


def channel_rules(state: ServerState, name: str) -> dict[FilterType, tuple]:
    """The rules a channel decides with (evaluation only ever reads the channel's own filter object)."""
    ch = state.channel(name)
    if ch is None:
        raise MySQLError.of("ER_REPLICA_CHANNEL_DOES_NOT_EXIST", name)
    return {t: ch.filters.values(t) for t in TYPES if ch.filters.values(t)}


def from_state(state: ServerState) -> FilterConfig:
    """The state's filters as a config: the global rules, and per channel the types that differ from them.

    A channel type equal to the global one is left to the copy rule; one the channel emptied while the global
    type has values is kept as an explicit empty list (formats without one refuse it)."""
    glob = {t: state.global_filters.values(t) for t in TYPES if state.global_filters[t].has_row}
    channels = []
    for ch in state.configured_channels():  # Group Replication channels take no filters
        own = {}
        for t in TYPES:
            v = ch.filters.values(t)
            g = glob.get(t, ())
            if tuple(v) != tuple(g) and (v or g):
                own[t] = v
        channels.append((ch.name, rules_of(own)))
    return FilterConfig(rules_of(glob), tuple(channels), state.lower_case_table_names, state.filter_mode)
