"""The state as one Arrow table (one row per server, channel and filter) and back: the state table's rows."""
from __future__ import annotations

import functools
import json
from typing import Any

from arro3.core import Array, DataType, Field, Schema, Table

from rpl_sql.filters.rules import TYPES, Filters, FilterType, Slot, format_rule
from rpl_sql.filters.state import ApplierPosition, Channel, ServerState

SERVER, CHANNEL, GLOBAL_FILTER, CHANNEL_FILTER = "server", "channel", "global_filter", "channel_filter"

# arro3 (deltalake's own Arrow library), not pyarrow: a control-plane statement then never loads pyarrow and
# numpy, a third of its time (bench/bench_control_plane.py)
_TIMESTAMP = DataType.timestamp("us", tz="UTC")
SCHEMA = Schema([
    Field("seq", DataType.int32(), nullable=False),          # row order: channel order survives the round trip
    Field("kind", DataType.string(), nullable=False),        # server | channel | global_filter | channel_filter
    Field("channel_name", DataType.string()),                # NULL for server and global filter rows
    Field("filter_name", DataType.string()),                 # REPLICATE_DO_DB, ...
    Field("filter_rule", DataType.string()),                 # P_S FILTER_RULE text, for people and Spark
    Field("filter_values", DataType.string()),               # JSON list: the exact values; pairs as 2-lists
    Field("configured_by", DataType.string()),
    Field("active_since", _TIMESTAMP),                       # NULL = never configured (no P_S row)
    Field("counter", DataType.int64()),
    Field("payload", DataType.string()),                     # JSON object: server / channel fields
])


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _jsonable(value: Any) -> Any:
    """Tuples become lists (and come back as tuples); anything JSON cannot keep exactly is refused."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    raise TypeError(f"cannot store {type(value).__name__} value {value!r} in the state table")


def _tuples(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return value


def _options_json(ch: Channel) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in ch.options:
        if key in out:
            raise ValueError(f"channel {ch.name!r}: option {key!r} is set twice")
        out[key] = _jsonable(value)
    return out


# A slot's texts by (type, values), and its values by their JSON text, kept for 64 slots (a server holds a few
# per channel): every commit writes the whole state and compares it with the one it replaces, and every load
# reads it all; at 10,000 rules a channel encoding the rules took 7-11 ms a state (twice a commit) and decoding
# them most of a load, for rules that rarely change.
@functools.lru_cache(maxsize=64)
def _slot_texts_of(ftype: FilterType, values: tuple) -> tuple[str, str]:
    """A slot's FILTER_RULE text and its values as JSON."""
    return format_rule(ftype, values), _dumps(_jsonable(values))


@functools.lru_cache(maxsize=64)
def _slot_values_of(text: str) -> tuple:
    """A slot's values from their JSON text (the same tuple for the same text while it is kept)."""
    return _tuples(json.loads(text))


def state_to_table(state: ServerState) -> Table:
    """The state as rows of `SCHEMA`; `state_from_table` inverts it exactly.

    >>> state_to_table(initial_state()).column("kind").to_pylist()
    ['server', 'channel']
    """
    rows: list[dict[str, Any]] = []

    def add(**row: Any) -> None:
        row["seq"] = len(rows)
        rows.append(row)

    def add_filters(kind: str, channel: str | None, filters: Filters) -> None:
        for ftype, slot in zip(TYPES, filters.slots):
            if slot == Slot():
                continue
            payload = _dumps({"rule_hits": _jsonable(slot.rule_hits)}) if slot.rule_hits else None
            rule, values = _slot_texts_of(ftype, slot.values)
            add(kind=kind, channel_name=channel, filter_name=ftype.filter_name, filter_rule=rule, filter_values=values,
                configured_by=slot.configured_by, active_since=slot.active_since or None, counter=slot.counter,
                payload=payload)  # no payload without hits: older tables stay byte-identical

    server = {"lower_case_table_names": state.lower_case_table_names, "startup_options": list(state.startup_options),
              "started_at": state.started_at, "filter_mode": state.filter_mode}
    if state.skip_counter:  # only when set: older tables stay byte-identical
        server["skip_counter"] = state.skip_counter
    add(kind=SERVER, payload=_dumps(server))
    add_filters(GLOBAL_FILTER, None, state.global_filters)
    seen: set[str] = set()
    for ch in state.channels:
        if ch.name in seen:
            raise ValueError(f"channel {ch.name!r} appears twice")
        seen.add(ch.name)
        payload = {"options": _options_json(ch), "io_running": ch.io_running, "sql_running": ch.sql_running}
        if ch.applier != ApplierPosition():  # only written once the applier ran: older tables stay byte-identical
            payload["applier"] = {"seq": ch.applier.seq, "executed_gtid_set": ch.applier.executed_gtid_set,
                                  "source_log_file": ch.applier.source_log_file,
                                  "source_log_pos": ch.applier.source_log_pos}
            if ch.applier.reset_at:
                payload["applier"]["reset_at"] = ch.applier.reset_at
        if ch.skip_counter:
            payload["skip_counter"] = ch.skip_counter
        if ch.reset_at:
            payload["reset_at"] = ch.reset_at
        if ch.resync:
            payload["resync"] = [list(r) for r in ch.resync]
        add(kind=CHANNEL, channel_name=ch.name, payload=_dumps(payload))
        add_filters(CHANNEL_FILTER, ch.name, ch.filters)

    return Table.from_arrays([_array([r.get(f.name) for r in rows], f.type) for f in SCHEMA], schema=SCHEMA)


def _array(values: list[Any], type: DataType) -> Array:
    if type == _TIMESTAMP:
        return Array(values, DataType.int64()).cast(type)
    return Array(values, type)


def sorted_rows(table: Any) -> list[dict[str, Any]]:
    """Rows of any Arrow table (arro3, pyarrow) as dicts in `seq` order; timestamps as int µs (never through
    datetime: that cannot hold every int64)."""
    table = Table.from_arrow(table)
    columns = []
    for name in table.column_names:
        col = table.column(name)
        if DataType.is_timestamp(col.type):
            if col.type != _TIMESTAMP:
                col = col.cast(_TIMESTAMP)
            columns.append(col.cast(DataType.int64()).to_pylist())
        else:
            columns.append(col.to_pylist())
    rows = [dict(zip(table.column_names, values)) for values in zip(*columns)]
    if "seq" in table.column_names:
        rows.sort(key=lambda r: r["seq"])
    return rows


def _slot(row: dict[str, Any]) -> tuple[FilterType, Slot]:
    ftype = FilterType(row["filter_name"])
    hits = json.loads(row["payload"]).get("rule_hits", []) if row.get("payload") else []
    return ftype, Slot(values=_slot_values_of(row["filter_values"]), configured_by=row["configured_by"],
                       active_since=row["active_since"] or 0, counter=row["counter"] or 0,
                       rule_hits=_tuples(hits))


def state_from_table(table: Any) -> ServerState:
    """Rebuild the state from the rows `state_to_table` wrote (in any row order: `seq` orders them)."""
    server: dict[str, Any] | None = None
    global_filters = Filters()
    channels: dict[str, dict[str, Any]] = {}
    channel_filters: dict[str, Filters] = {}
    for row in sorted_rows(table):
        kind = row["kind"]
        if kind == SERVER:
            server = json.loads(row["payload"])
        elif kind == CHANNEL:
            channels[row["channel_name"]] = json.loads(row["payload"])
        elif kind == GLOBAL_FILTER:
            global_filters = global_filters.with_slot(*_slot(row))
        elif kind == CHANNEL_FILTER:
            name = row["channel_name"]
            channel_filters[name] = channel_filters.get(name, Filters()).with_slot(*_slot(row))
        else:
            raise ValueError(f"unknown row kind {kind!r} in the state table")
    if server is None:
        raise ValueError("the state table has no server row")
    orphans = set(channel_filters) - set(channels)
    if orphans:
        raise ValueError(f"filters for missing channels {sorted(orphans)!r} in the state table")
    return ServerState(
        lower_case_table_names=server["lower_case_table_names"],
        global_filters=global_filters,
        channels=tuple(
            Channel(name=name,
                    options=tuple((k, _tuples(v)) for k, v in p["options"].items()),
                    io_running=p["io_running"], sql_running=p["sql_running"],
                    filters=channel_filters.get(name, Filters()),
                    applier=ApplierPosition(**p["applier"]) if "applier" in p else ApplierPosition(),
                    skip_counter=p.get("skip_counter", 0), reset_at=p.get("reset_at", 0),
                    resync=tuple(tuple(r) for r in p.get("resync", ())))
            for name, p in channels.items()),
        startup_options=tuple(server["startup_options"]),
        started_at=server["started_at"],
        filter_mode=server["filter_mode"],
        skip_counter=server.get("skip_counter", 0),
    )
