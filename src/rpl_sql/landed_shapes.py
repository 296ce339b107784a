"""The distinct shapes of a channel's landed events and how often each landed (the events table, delta-rs).

Lint's "never matched" warning (RPL008) decides each shape once with the reference evaluator's trace and
credits every rule the trace shows matching with the shape's count: exact over all landed events, at the
cost of one scan of six small columns.
"""
from __future__ import annotations

import json
import os

from rpl_sql.evaluate import RowEvent, TableRef, decide, statement_event
from rpl_sql.state import ServerState

_COLUMNS = ["channel", "event_type", "db_name", "table_name", "command", "default_db", "tables"]
ROW_TYPES = ("write_rows", "update_rows", "delete_rows")


def shapes(warehouse: str) -> dict[str, list[tuple[object, int]]]:
    """channel -> [(evaluator event, events landed with that shape)] (gtid markers left out)."""
    import pyarrow as pa
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        dt = DeltaTable(os.path.join(os.fspath(warehouse), "events"))
    except TableNotFoundError:
        return {}
    t = dt.to_pyarrow_dataset().to_table(columns=_COLUMNS)
    if t.num_rows == 0:
        return {}
    tables = pa.array([None if v is None else json.dumps(v, separators=(",", ":")) for v in
                       t.column("tables").to_pylist()], pa.string())
    t = t.set_column(t.schema.get_field_index("tables"), "tables", tables)
    t = t.cast(pa.schema([(n, pa.string()) for n in _COLUMNS]))
    grouped = t.group_by(_COLUMNS, use_threads=False).aggregate([([], "count_all")])
    out: dict[str, list[tuple[object, int]]] = {}
    for r in grouped.to_pylist():
        kind = r["event_type"]
        if kind in ROW_TYPES and r["db_name"] is not None and r["table_name"] is not None:
            ev = RowEvent(r["db_name"], r["table_name"])
        elif kind == "query":
            refs = [TableRef(x["db"], x["name"], bool(x["updating"])) for x in json.loads(r["tables"] or "[]")]
            ev = statement_event(r["command"] or "OTHER", r["default_db"], refs)
        else:
            continue
        out.setdefault(r["channel"] or "", []).append((ev, int(r["count_all"])))
    return out


def rule_hits(state: ServerState, landed: dict[str, list[tuple[object, int]]]
              ) -> tuple[dict[str, dict[tuple[str, str], int]], dict[str, int]]:
    """(channel -> {(filter type, rule): events it matched}, channel -> events) under the state's filters."""
    hits: dict[str, dict[tuple[str, str], int]] = {}
    totals: dict[str, int] = {}
    for ch in state.configured_channels():
        mine = hits.setdefault(ch.name, {})
        for ev, n in landed.get(ch.name, []):
            totals[ch.name] = totals.get(ch.name, 0) + n
            trace: list = []
            try:
                decide(ch.filters, ev, state.matching, trace=trace)
            except Exception:  # an XA refusal decides nothing
                continue
            for step in trace:
                if step.rule is not None and (step.outcome.startswith("matched") or
                                              step.outcome.startswith("rewritten")):
                    key = (step.check, step.rule)
                    mine[key] = mine.get(key, 0) + n
    return hits, totals
