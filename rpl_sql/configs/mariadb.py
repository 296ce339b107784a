"""MariaDB's statements: `SET GLOBAL [conn.]replicate_* = 'a,b'` under `@@default_master_connection`.

MariaDB keeps one filter object per connection and no global one, and a variable's value is a comma list.
"""
from __future__ import annotations

from collections import defaultdict

from rpl_sql.server import execute as server
from rpl_sql.configs.model import FilterConfig, NotExpressibleError, rules_of
from rpl_sql.language.quoting import mysql_str
from rpl_sql.language.parser import parse
from rpl_sql.filters.rules import TYPES, FilterType
from rpl_sql.filters.state import ServerState, is_gr_channel
from rpl_sql.language.statements import ChangeReplicationFilter

T = FilterType


def read_sql(text: str) -> FilterConfig:
    """The filters a script sets: MariaDB's SET GLOBAL forms and CHANGE REPLICATION FILTER; a later setting of
    a type replaces the earlier one, as on the server. Other statements are passed over (and counted)."""
    glob: dict[FilterType, tuple] = {}
    channels: dict[str, dict[FilterType, tuple]] = defaultdict(dict)
    skipped = 0
    for stmt in server.script_statements(parse(text)):
        if not isinstance(stmt, ChangeReplicationFilter):
            skipped += 1
            continue
        target = glob if stmt.channel is None else channels[stmt.channel]
        for ftype, values in stmt.filters:
            target[ftype] = tuple(values)
    notes = (f"{skipped} statement{'s' if skipped != 1 else ''} that set no filter left out",) if skipped else ()
    return FilterConfig(rules_of(glob), tuple((n, rules_of(r)) for n, r in channels.items()), notes=notes)


def _item(ftype: FilterType, v, where: str) -> str:
    text = f"{v[0]}->{v[1]}" if ftype is T.REWRITE_DB else v
    parts = v if ftype is T.REWRITE_DB else (v,)
    if "," in text or any(p != p.strip() or not p for p in parts) or (ftype is T.REWRITE_DB and "->" in v[0]):
        raise NotExpressibleError(f"{where} rule '{text}': MariaDB splits the variable's value at commas, trims "
                                  "each item" + (" at the first '->'" if ftype is T.REWRITE_DB else "")
                                  + " and drops empty ones")
    if ftype.is_table_rule and (text.startswith(".") or text.endswith(".")):
        raise NotExpressibleError(f"{where} rule '{text}': MariaDB refuses a table rule with an empty database or "
                                  "table part")
    return text


def write_sql(state: ServerState) -> str:
    """Every configured connection's seven variables, so running the script leaves each with exactly the rules
    it decides with here (empty ones included)."""
    out = ["-- replication filters written by rpl-sql export-filters, for MariaDB 10.11+ (replicate_rewrite_db is",
           "-- dynamic from 10.11); run with the connections' SQL threads stopped (STOP ALL SLAVES)."]
    if any(state.global_filters.values(t) for t in TYPES):
        out.append("-- rpl_sql's global filters have no MariaDB form: MariaDB keeps one filter set per connection; "
                   "each connection below carries the rules it has now, global copies included.")
    for ch in state.configured_channels():
        if is_gr_channel(ch.name):
            continue
        out.append(f"SET @@default_master_connection = {mysql_str(ch.name)};")
        for ftype in TYPES:
            where = f"channel '{ch.name}' {ftype.filter_name}"
            items = ",".join(_item(ftype, v, where) for v in ch.filters.values(ftype))
            out.append(f"SET GLOBAL {ftype.filter_name.lower()} = {mysql_str(items)};")
    out.append("SET @@default_master_connection = '';")
    text = "\n".join(out) + "\n"
    if "\0" in text:
        raise NotExpressibleError("a connection name or rule holds a NUL, which no statement can carry (ERROR 1300)")
    return text
