"""The table rules of every channel as the text the JVM table code (rpl_sql/jvm/java, TableRules) reads:
lines joined by `|` (one line of text, to sit in a SQL string literal):

    rpl_sql table rules 3
    units bytes | units codepoints        lower_case_table_names 0: `_` is one UTF-8 byte (rules.like)
    channels by index | channels by name  what the table code helper's `c` holds: an INT index or a name
    tx / dbcmd / exempt <command> ...     the statement commands of transaction control, on databases, exempt
    trigger <command>                     DROP TRIGGER's command
    fold <from> <to>                      lower_case_table_names' fold: code point i of <from> to that of <to>
    channel <key> <table rules 0|1> <default true 0|1> <do_db 0|1> <database rules 0|1>
    pdb <db> ...  /  rdb <db> ...         event databases that pass do_db / that ignore_db ignores, folded,
                                          the rewrite applied (ChannelRules.pass_db / rej_db)
    kmap <source> <target> ...            the rewrite of the table keys' database (ChannelRules.key_map)
    omap <source> <target> ...            rewrite_db's result where it is not the folded db (ChannelRules.out_map)
    dot <key> ...  /  igt <key> ...       exact do/ignore table keys, folded
    wdo <pattern> ...  /  wig <pattern> ...   wild patterns in LIKE syntax (backslash escapes), folded

Every name is hex of its UTF-8 bytes, so no name can break the format; a channel's key is its index in
decimal or its stored name. Pure text, no Spark.
"""
from __future__ import annotations

from rpl_sql.compile.channels import ChannelRules
from rpl_sql.compile.patterns import ANY, ONE
from rpl_sql.filters.evaluate import DATABASE_COMMANDS, DROP_TEMPORARY_IF_EXISTS, TRANSACTION_CONTROL
from rpl_sql.filters.rules import fold_translation

VERSION = "rpl_sql table rules 3"


def _hex(s: str) -> str:
    return s.encode("utf-8", "surrogatepass").hex()


def _like(toks: tuple) -> str:
    return "".join("%" if t == ANY else "_" if t == ONE else ("\\" + t if t in "%_\\" else t) for t in toks)


def table_rules_spec(chans: list[tuple[str, ChannelRules]], lctn: int, by_index: bool) -> str:
    """`chans`: (the key `c` holds, the channel's rules), for every channel the helper can be asked about."""
    lines = [VERSION, "units bytes" if lctn == 0 else "units codepoints",
             "channels by index" if by_index else "channels by name",
             " ".join(["tx"] + [_hex(c) for c in sorted(TRANSACTION_CONTROL)]),
             " ".join(["dbcmd"] + [_hex(c) for c in sorted(DATABASE_COMMANDS)]),
             " ".join(["exempt"] + [_hex(c) for c in ("SET_OPTION", DROP_TEMPORARY_IF_EXISTS)]),
             f"trigger {_hex('DROP_TRIGGER')}"]
    if lctn:
        lines.append(" ".join(["fold"] + [_hex(x) for x in fold_translation()]))
    for key, ch in chans:
        lines.append(f"channel {_hex(key)} {int(ch.table_rules)} {int(ch.default_true)} {int(ch.do_db)} "
                     f"{int(ch.has_db_rules)}")
        for tag, values in (("pdb", sorted(ch.pass_db)), ("rdb", sorted(ch.rej_db))):
            if values:
                lines.append(" ".join([tag] + [_hex(v) for v in values]))
        for tag, mapping in (("kmap", ch.key_map), ("omap", ch.out_map)):
            if mapping:
                lines.append(" ".join([tag] + [_hex(x) for s, d in sorted(mapping.items()) for x in (s, d)]))
        for tag, values in (("dot", sorted(ch.dot)), ("igt", sorted(ch.igt))):
            if values:
                lines.append(" ".join([tag] + [_hex(v) for v in values]))
        for tag, pats in (("wdo", ch.wdo), ("wig", ch.wig)):
            if pats:
                lines.append(" ".join([tag] + [_hex(_like(p)) for p in pats]))
    return "|".join(lines)
