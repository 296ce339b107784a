"""The distinct shapes of the channels' landed events and how often each landed (the events table, delta-rs).

A filter decision depends only on an event's shape (channel; database and table of a row event; command,
default database and tables of a statement), and a channel's events have few shapes however many events it
has. So lint's "never matched" warning (RPL008) and the impact of a filter change (EXPLAIN CHANGE
REPLICATION FILTER) read the shape columns in one columnar scan, count per shape with Arrow, and decide each
shape once with the reference evaluator: exact over all landed events, with no per-event Python.
"""
from __future__ import annotations

import os

from rpl_sql.storage.delta import archive
from rpl_sql.errors import MySQLError
from rpl_sql.filters.evaluate import Event, RowEvent, decide, decision_key, statement_event_of
from rpl_sql.filters.state import ServerState

ROW_TYPES = ("write_rows", "update_rows", "delete_rows")
Landed = dict[str, list[tuple[Event, int]]]  # channel -> [(evaluator event, events landed with that shape)]


def shapes(warehouse: str, channels: list[str] | None = None, last: int | None = None,
           since: str | None = None) -> Landed:
    """Each channel's shapes and counts (gtid markers left out): all landed events, or each channel's `last`
    events, or those logged at or after `since` ('YYYY-MM-DD hh:mm:ss', UTC unless it has an offset)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds
    from deltalake.exceptions import TableNotFoundError

    from rpl_sql.storage.store import utc_time  # with delta-rs: loaded when events are read

    try:
        dt = archive.open_table(os.path.join(os.fspath(warehouse), "events"))
    except TableNotFoundError:
        return {}
    cond = None
    if channels is not None:
        names = [c for c in channels if c]
        cond = ds.field("channel").isin(names) if names else None
        if "" in channels:  # the default channel's partition value reads back NULL
            cond = ds.field("channel").is_null() if cond is None else cond | ds.field("channel").is_null()
    if since is not None:
        at = pa.scalar(utc_time(since, "SINCE"), pa.timestamp("us", tz="UTC"))
        cond = ds.field("event_time") >= at if cond is None else cond & (ds.field("event_time") >= at)
    cols = ["channel", "seq", "event_type", "db_name", "table_name", "command", "default_db", "tables"]
    t = dt.to_pyarrow_dataset().to_table(columns=cols, filter=cond)
    t = t.set_column(0, "channel", pc.fill_null(t.column("channel").cast(pa.string()), ""))
    if last is not None and t.num_rows:
        tops = t.group_by(["channel"], use_threads=False).aggregate([("seq", "max")])
        floor = dict(zip(tops.column("channel").to_pylist(), tops.column("seq_max").to_pylist()))
        lows = pa.array([floor[c] - last for c in t.column("channel").to_pylist()], pa.int64()) \
            if len(floor) > 1 else pa.scalar(next(iter(floor.values())) - last, pa.int64())
        t = t.filter(pc.greater(t.column("seq"), lows))
    out: Landed = {}
    etype = t.column("event_type").cast(pa.string())
    rows = t.filter(pc.is_in(etype, value_set=pa.array(ROW_TYPES))).select(["channel", "db_name", "table_name"])
    rows = rows.cast(pa.schema([(n, pa.string()) for n in rows.column_names]))
    for r in rows.group_by(rows.column_names, use_threads=False).aggregate([([], "count_all")]).to_pylist():
        if r["db_name"] is not None and r["table_name"] is not None:
            out.setdefault(r["channel"], []).append((RowEvent(r["db_name"], r["table_name"]), r["count_all"]))
    q = t.filter(pc.equal(etype, "query"))
    if q.num_rows:
        tables = q.column("tables").combine_chunks()
        keyed = pa.table({"channel": q.column("channel"), "command": q.column("command").cast(pa.string()),
                          "default_db": q.column("default_db").cast(pa.string()), "tables": _tables_key(tables),
                          "i": pc.indices_nonzero(pa.repeat(pa.scalar(True), q.num_rows)).cast(pa.int64())})
        groups = keyed.group_by(["channel", "command", "default_db", "tables"], use_threads=False).aggregate(
            [([], "count_all"), ("i", "min")])
        for r in groups.select(["channel", "command", "default_db", "i_min", "count_all"]).to_pylist():
            out.setdefault(r["channel"], []).append(
                (statement_event_of(r["command"], r["default_db"], tables[r["i_min"]].as_py()), r["count_all"]))
    return out


def _tables_key(tables):
    """One string per statement's `tables` list, equal exactly when the lists are (NULLs, order and all), built
    with Arrow kernels: each element as length-prefixed fields, so no name can fake a boundary."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def field(values, null_tag):
        text = pc.if_else(pc.is_null(values), null_tag, pc.binary_join_element_wise("=", values.cast(pa.string()), ""))
        return pc.binary_join_element_wise(pc.utf8_length(text).cast(pa.string()), text, ":")

    elems = tables.flatten()
    parts = [field(elems.field("db"), "N"), field(elems.field("name"), "N"), field(elems.field("updating"), "N")]
    elem = pc.binary_join_element_wise(*parts, "")
    lengths = pc.fill_null(pc.list_value_length(tables), 0)
    offsets = pa.array([0], pa.int32()) if len(lengths) == 0 else pa.concat_arrays(
        [pa.array([0], pa.int32()), pc.cumulative_sum(lengths).cast(pa.int32())])
    joined = pc.binary_join(pa.ListArray.from_arrays(offsets, elem), "")
    return pc.if_else(pc.is_null(tables), "NULL", pc.binary_join_element_wise("[", joined, ""))


def rule_hits(state: ServerState, landed: Landed) -> tuple[dict[str, dict[tuple[str, str], int]], dict[str, int]]:
    """(channel -> {(filter type, rule): events it matched}, channel -> events) under the state's filters."""
    hits: dict[str, dict[tuple[str, str], int]] = {}
    totals: dict[str, int] = {}
    for ch in state.configured_channels():
        mine = hits.setdefault(ch.name, {})
        matched: dict[tuple, list] = {}  # decision_key -> the rules its trace matched (equal keys, equal steps)
        for ev, n in landed.get(ch.name, []):
            totals[ch.name] = totals.get(ch.name, 0) + n
            k = decision_key(ev)
            if k not in matched:
                trace: list = []
                try:
                    decide(ch.filters, ev, state.matching, trace=trace)
                except MySQLError:  # an XA refusal decides nothing
                    trace = []
                matched[k] = [(step.check, step.rule) for step in trace if step.rule is not None and (
                    step.outcome.startswith("matched") or step.outcome.startswith("rewritten"))]
            for key in matched[k]:
                mine[key] = mine.get(key, 0) + n
    return hits, totals
