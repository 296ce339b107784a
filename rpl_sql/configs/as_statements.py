"""A config as the CHANGE REPLICATION FILTER statements that set it (what `import-filters` prints and runs)."""
from __future__ import annotations

from rpl_sql.language.quoting import ident, mysql_str
from rpl_sql.configs.model import FilterConfig, NotExpressibleError, Rules
from rpl_sql.filters.rules import FilterType

T = FilterType


def _value(ftype: FilterType, v) -> str:
    if ftype is T.REWRITE_DB:
        return f"({ident(v[0])}, {ident(v[1])})"
    if ftype in (T.DO_TABLE, T.IGNORE_TABLE):
        db, _, table = v.partition(".")
        return f"{ident(db)}.{ident(table)}"
    if ftype in (T.WILD_DO_TABLE, T.WILD_IGNORE_TABLE):
        if "\n" in v:
            raise NotExpressibleError(
                f"{ftype.filter_name} rule {v!r}: MySQL's parser refuses a line feed in a pattern "
                "string (a start-up option can hold one: keep it in the option file)")
        return mysql_str(v)
    return ident(v)


def change_filter(rules: Rules, channel: str | None) -> str:
    parts = [f"{t.filter_name} = ({', '.join(_value(t, v) for v in values)})" for t, values in rules]
    suffix = "" if channel is None else f" FOR CHANNEL {mysql_str(channel)}"
    text = "CHANGE REPLICATION FILTER " + ",\n    ".join(parts) + suffix + ";"
    if "\0" in text:
        raise NotExpressibleError(f"{'global rules' if channel is None else f'channel {channel!r}'}: a name or pattern "
                                  "holds a NUL, which no statement can carry (ERROR 1300)")
    return text


def write_statements(config: FilterConfig) -> str:
    """Global rules first, then each channel's: a later global statement would overwrite the channels' types."""
    lines = [f"-- {n}" for n in config.notes]
    if config.lower_case_table_names:
        lines.append(f"-- lower_case_table_names = {config.lower_case_table_names} is a start-up setting: start the "
                     f"warehouse with `rpl-sql --start --lower-case-table-names={config.lower_case_table_names}`")
    if config.filter_mode and config.filter_mode != "mysql":
        lines.append(f"-- filter mode {config.filter_mode} is a start-up setting: `rpl-sql --start "
                     f"--rpl-sql-filter-mode={config.filter_mode}`")
    if config.global_rules:
        lines.append(change_filter(config.global_rules, None))
    for name, rules in config.channels:
        if rules:
            lines.append(change_filter(rules, name))
    return "\n".join(lines) + "\n"
