"""my.cnf-style option files: MySQL's `replicate-*=[channel:]rule` and MariaDB's `[connection.]replicate_*`.

Readers take the (name, value) pairs `startup.read_option_file` returns; the writer returns the file's text.
"""
from __future__ import annotations

from collections import defaultdict

from rpl_sql.configs.model import FilterConfig, NotExpressibleError, rules_of
from rpl_sql.errors import StartupError
from rpl_sql.filters.rules import FilterType, format_rule
from rpl_sql.server.startup import is_startup_option, option_name, parse_rule, parse_startup

T = FilterType
MARIADB_SECTIONS = ("mysqld", "server", "mariadb", "mariadbd")


def read_mysql(pairs: list[tuple[str, str | None]]) -> FilterConfig:
    """mysqld's reading: unprefixed rules are global, `ch:rule` belongs to channel `ch`; repeats add up."""
    options = parse_startup([], pairs)
    glob: dict[FilterType, list] = defaultdict(list)
    channels: dict[str, dict[FilterType, list]] = defaultdict(lambda: defaultdict(list))
    for r in options.rules:
        (glob if r.channel is None else channels[r.channel])[r.ftype].append(r.value)
    notes = ()
    if channels:
        notes = ("mysqld attaches per-channel rules to the channels that exist at start-up and discards the rest; "
                 "here each is a CHANGE REPLICATION FILTER ... FOR CHANNEL, which fails (1794) on a channel not "
                 "configured: configure it first with CHANGE REPLICATION SOURCE",)
    return FilterConfig(rules_of(glob), tuple((n, rules_of(r)) for n, r in channels.items()),
                        options.lower_case_table_names, options.filter_mode, notes)


def is_mariadb_option(name: str) -> bool:
    return is_startup_option(name.rpartition(".")[2])


def read_mariadb(pairs: list[tuple[str, str | None]]) -> FilterConfig:
    """MariaDB's reading: `conn.replicate_x` is connection `conn`'s, an unprefixed one the default
    connection's (''); a value is one rule, never a `ch:` prefix or a comma list."""
    channels: dict[str, dict[FilterType, list]] = defaultdict(lambda: defaultdict(list))
    for name, value in pairs:
        conn, _, var = name.rpartition(".")
        if value is None:
            raise StartupError("ER_OPTION_REQUIRES_ARGUMENT", f"option '--{name}' requires an argument")
        rule = parse_rule(option_name(var), ":" + value)  # the empty prefix keeps a ':' in the value
        channels[conn.lower()][rule.ftype].append(rule.value)
    return FilterConfig((), tuple((n, rules_of(r)) for n, r in channels.items()))


# ---------------------------------------------------------------- writing

_ESCAPE = {"\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r", "\b": "\\b"}


def _quoted(value: str, where: str) -> str:
    quote = '"' if '"' not in value else "'"
    if quote in value:
        raise NotExpressibleError(f"{where}: a value with both quote characters cannot be written in an option file")
    return quote + "".join(_ESCAPE.get(c, c) for c in value) + quote


def _rule_text(ftype: FilterType, v, where: str) -> str:
    if ftype is not T.REWRITE_DB:
        return v
    src, dst = v
    if not src or not dst or src != src.rstrip() or dst != dst.lstrip() or "->" in src:
        raise NotExpressibleError(f"{where}: REPLICATE_REWRITE_DB ({src},{dst}) cannot be an option: mysqld splits "
                                  "`from->to` at the first '->', trims the space around it and refuses an empty side")
    return f"{src}->{dst}"


def write_mysql(config: FilterConfig) -> str:
    """A `[mysqld]` section whose start-up gives every configured channel the rules it decides with now."""
    out = ["# replication filters written by rpl-sql export-filters", "[mysqld]"]
    if config.lower_case_table_names:
        out.append(f"lower-case-table-names={config.lower_case_table_names}")
    glob = dict(config.global_rules)
    for ftype, values in config.global_rules:
        for v in values:
            where = f"global {ftype.filter_name} rule '{format_rule(ftype, (v,))}'"
            text = _rule_text(ftype, v, where)
            if ":" in text:
                raise NotExpressibleError(f"{where}: mysqld reads the part before ':' as a channel name; set this "
                                          "rule with CHANGE REPLICATION FILTER instead")
            out.append(f"{ftype.option}={_quoted(text, where)}")
    for name, rules in config.channels:
        if not rules:
            continue
        if ":" in name:
            raise NotExpressibleError(f"channel '{name}': a channel name with ':' cannot prefix a start-up rule")
        for ftype, values in rules:
            if not values and glob.get(ftype):
                raise NotExpressibleError(
                    f"channel '{name}' {ftype.filter_name}: the channel emptied a type the global "
                    "filters set, and at start-up it would copy the global rules")
            for v in values:
                where = f"channel '{name}' {ftype.filter_name} rule '{format_rule(ftype, (v,))}'"
                out.append(f"{ftype.option}={_quoted(name + ':' + _rule_text(ftype, v, where), where)}")
    if config.filter_mode and config.filter_mode != "mysql":
        out += ["", "[rpl_sql]", f"rpl-sql-filter-mode={config.filter_mode}"]
    return "\n".join(out) + "\n"

