"""Tests for rpl_sql.filters.rules: the wildcard matcher (spec filter-evaluation.md §3), case folding (§2)
and the filter object basics (§1, performance-schema.md §3)."""
from __future__ import annotations

from functools import lru_cache

import pytest
from hypothesis import given, settings, strategies as st

from rpl_sql.filters.rules import (LONG_LIST, TABLE_TYPES, TYPES, Filters, FilterType, Slot, first_equal, first_like,
                           first_pair, fold, format_rule, like, like_tokens, normalize_values)

T = FilterType
FAST = settings(max_examples=200, deadline=None)


# ---------------------------------------------------------------- §3 wildcard matching, example based

@pytest.mark.parametrize("pattern, subject, expected", [
    # % : any sequence, including empty and including the dot
    ("db1.%", "db1.t1", True),
    ("db1.%", "db1.", True),                 # database key: % matches the empty table part
    ("db1.t%", "db1.", False),               # ... but t% needs a t
    ("db1.t%", "db1.t", True),
    ("db1.t%", "db1.t1x", True),
    ("%.%", "db1.t1", True),
    ("%.%", "db1.", True),
    ("%.%", ".", True),
    ("%.%", "nodot", False),
    ("db%t1", "db1.t1", True),               # % consumes the separating dot
    ("d%", "db.t", True),
    ("%", "", True),
    ("%%", "anything.at.all", True),
    ("foo%.bar%", "foo1.bar2", True),        # spec §10 row 61
    ("db%.t1%", "db1.t11", True),
    ("db%.t1%", "db1.t2", False),
    # _ : exactly one character, the dot included
    ("db_.t1", "db1.t1", True),
    ("db_.t1", "db12.t1", False),            # spec §10 row 62
    ("db_.t1", "db.t1", False),
    ("db1_t1", "db1.t1", True),              # _ consumes the dot
    ("db1._", "db1.", False),                # _ never matches nothing
    ("___", "a.b", True),
    ("___", "ab", False),
    # the dot is a literal
    ("db1.t1", "db1xt1", False),
    ("db1.t1", "db1.t1", True),
    ("db.x.y", "db.x.y", True),              # a table literally named x.y
    ("db.%", "db.x.y", True),
    ("db.x.%", "db.x.y", True),
    # regex metacharacters are ordinary characters
    ("db.t(1)+", "db.t(1)+", True),
    ("db.t.*", "db.tXYZ", False),
    ("db.t.*", "db.t.*", True),
    ("db.[ab]", "db.a", False),
    ("db.[ab]", "db.[ab]", True),
    ("db.a|b", "db.a", False),
    ("db.$^", "db.$^", True),
    ("db.t?", "db.t", False),
    # escapes
    ("my\\_own\\%db.%", "my_own%db.t", True),        # spec §10 row 59
    ("my\\_own\\%db.%", "my1ownAABCdb.t", False),    # spec §10 row 60
    ("db.a\\%", "db.a%", True),
    ("db.a\\%", "db.abc", False),
    ("db.a\\%", "db.a", False),
    ("db.a\\_", "db.a_", True),
    ("db.a\\_", "db.ax", False),
    ("db.a\\\\", "db.a\\", True),                    # \\ is one literal backslash
    ("db.a\\\\", "db.a\\\\", False),
    ("db.a\\\\%", "db.a\\xyz", True),
    ("db.a\\\\_", "db.a\\x", True),
    ("db.\\a", "db.a", True),                        # escaping an ordinary character
    ("db.\\a", "db.\\a", False),
    ("db\\.t", "db.t", True),                        # escaped dot is still a dot
    # trailing backslash: nothing to escape -> literal backslash
    ("db.a\\", "db.a\\", True),
    ("db.a\\", "db.a", False),
    ("db.a\\", "db.ab", False),
    ("db.\\\\\\", "db.\\\\", True),                  # \\ then trailing \ = two backslashes
    # quotes, backticks, commas are ordinary
    ("db.`t`,'x\"", "db.`t`,'x\"", True),
])
@pytest.mark.parametrize("lctn", [0, 1])
def test_like_examples(pattern, subject, expected, lctn):
    assert like(pattern, subject, lctn) is expected


@pytest.mark.parametrize("pattern, subject, lctn, expected", [
    # lctn = 0: `_` is one UTF-8 byte (binary comparison)
    ("db._x", "db.éx", 0, False),
    ("db.__x", "db.éx", 0, True),
    ("db.___x", "db.€x", 0, True),          # € is 3 bytes
    ("db._x", "db.€x", 0, False),
    ("db.____x", "db.😀x", 0, True),        # 4 bytes
    ("db.%x", "db.éx", 0, True),
    ("db.éx", "db.éx", 0, True),
    ("db.\\éx", "db.éx", 0, True),          # escaping a multibyte character
    # lctn != 0: `_` is one character
    ("db._x", "db.éx", 1, True),
    ("db.__x", "db.éx", 1, False),
    ("db._x", "db.€x", 1, True),
    ("db._x", "db.😀x", 1, True),
    ("db._x", "db.éx", 2, True),
    ("db.__x", "db.éx", 2, False),
])
def test_like_underscore_unit(pattern, subject, lctn, expected):
    assert like(pattern, subject, lctn) is expected


@pytest.mark.parametrize("pattern, subject, lctn, expected", [
    ("DB1.%", "db1.t", 0, False),
    ("DB1.%", "DB1.t", 0, True),
    ("db1.T1", "db1.t1", 0, False),
    ("Logs%.%", "Logs2024.x", 0, True),
    ("Logs%.%", "logs2024.x", 0, False),
    ("DB1.%", "db1.t", 1, True),
    ("db1.T1", "DB1.t1", 1, True),
    ("Logs%.%", "logs2024.x", 1, True),
    ("Logs%.%", "LOGS2024.X", 2, True),
    ("db.É%", "db.éx", 1, True),            # non-ASCII case folding
    ("db.É%", "db.éx", 0, False),
    ("db.e%", "db.éx", 1, False),           # accent sensitive (§2, UNCONFIRMED item kept as stated)
    ("MY\\_DB.%", "my_db.t", 1, True),      # escapes survive folding
    ("MY\\_DB.%", "myxdb.t", 1, False),
])
def test_like_case_rules(pattern, subject, lctn, expected):
    assert like(pattern, subject, lctn) is expected


def test_database_key_forms():
    """§3: database statements match key 'db.' -- 'db1.%' matches, 'db1.t%' does not."""
    assert like("db1.%", "db1.")
    assert not like("db1.t%", "db1.")
    assert like("db%.%", "db1.")
    assert like("db_.", "db1.")
    assert not like("db1.%", "db11.")
    assert like("db1%.%", "db11.")


def test_like_tokens():
    assert like_tokens("a%_\\%\\_\\\\b\\") == [
        ("lit", "a"), ("any", "%"), ("one", "_"), ("lit", "%"), ("lit", "_"), ("lit", "\\"), ("lit", "b"),
        ("lit", "\\")]
    assert like_tokens("") == []
    assert like_tokens("\\") == [("lit", "\\")]
    assert like_tokens("\\\\\\") == [("lit", "\\"), ("lit", "\\")]


def test_like_surrogates_do_not_raise():
    """Hostile subjects (lone surrogates) never make the matcher raise."""
    assert like("db.%", "db.\ud800") is True
    assert like("db._", "db.\ud800", 1) is True
    assert like("db.x", "db.\ud800") is False


# ---------------------------------------------------------------- §3 differential test against a tiny matcher

def _tokens(seq):
    """LIKE tokens over a sequence of units (bytes or characters)."""
    out, i = [], 0
    while i < len(seq):
        u = seq[i:i + 1]
        if u in (b"\\", "\\") and i + 1 < len(seq):
            out.append(("lit", seq[i + 1:i + 2]))
            i += 2
            continue
        out.append(("any", None) if u in (b"%", "%") else ("one", None) if u in (b"_", "_") else ("lit", u))
        i += 1
    return tuple(out)


def ref_like(pattern: str, subject: str, lctn: int) -> bool:
    if lctn == 0:
        p, s = pattern.encode(), subject.encode()
    else:
        p, s = pattern.lower(), subject.lower()
    toks = _tokens(p)

    @lru_cache(maxsize=None)
    def m(i, j):
        if i == len(toks):
            return j == len(s)
        kind, lit = toks[i]
        if kind == "any":
            return any(m(i + 1, k) for k in range(j, len(s) + 1))
        if j == len(s):
            return False
        if kind == "one" or s[j:j + 1] == lit:
            return m(i + 1, j + 1)
        return False

    return m(0, 0)


ALPHA = st.sampled_from(list("aAbB.%_\\éÉ€x"))
SUBJ_ALPHA = st.sampled_from(list("aAbB.%_\\éÉ€x"))


@FAST
@given(st.text(ALPHA, max_size=8), st.text(SUBJ_ALPHA, max_size=8), st.sampled_from([0, 1, 2]))
def test_like_matches_reference(pattern, subject, lctn):
    assert like(pattern, subject, lctn) == ref_like(pattern, subject, lctn)


def _escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


@FAST
@given(st.text(max_size=12), st.text(max_size=12))
def test_escaped_literal_matches_only_itself(a, b):
    assert like(_escape(a), a)
    assert like(_escape(a), b) == (a == b)
    assert like("%", b)
    assert like("_" * len(b.encode()), b, 0)
    if len(b.lower()) == len(b):          # U+0130 has its own test below
        assert like("_" * len(b), b, 1)


@FAST
@given(st.text(st.characters(codec="ascii"), max_size=12), st.text(st.characters(codec="ascii"), max_size=12))
def test_like_case_insensitive_iff_lctn(p, s):
    for lctn in (1, 2):
        assert like(p, s, lctn) == like(p.upper(), s.lower(), lctn) == like(p.lower(), s.swapcase(), lctn)
    assert like(p, s, 0) == ref_like(p, s, 0)


# ---------------------------------------------------------------- the first matching rule of a long list

HOSTILE_CHARS = st.sampled_from(list("aAbB.%_\\'`,\"éÉΣς€İx\u0000"))


@FAST
@given(st.lists(st.text(HOSTILE_CHARS, max_size=6), min_size=LONG_LIST, max_size=3 * LONG_LIST),
       st.lists(st.text(HOSTILE_CHARS, max_size=14), min_size=1, max_size=12), st.sampled_from([0, 1, 2]))
def test_first_like_is_the_first_pattern_that_matches(patterns, subjects, lctn):
    """Short subjects are looked up by their substrings, long ones (more substrings than patterns) scanned."""
    patterns = tuple(patterns)
    for subject in subjects + subjects:  # the second round answers from the index's memo
        assert first_like(patterns, subject, lctn) == next((p for p in patterns if like(p, subject, lctn)), None)


@FAST
@given(st.lists(st.text(HOSTILE_CHARS, max_size=5), min_size=LONG_LIST, max_size=3 * LONG_LIST),
       st.lists(st.text(HOSTILE_CHARS, max_size=5), min_size=1, max_size=12), st.sampled_from([0, 1, 2]))
def test_first_equal_is_the_first_value_equal_after_folding(values, subjects, lctn):
    values = tuple(values)
    for subject in subjects + list(values[:4]):
        want = next((v for v in values if fold(v, lctn) == fold(subject, lctn)), None)
        assert first_equal(values, subject, lctn) == want


@FAST
@given(st.lists(st.tuples(st.text(HOSTILE_CHARS, max_size=4), st.text(HOSTILE_CHARS, max_size=4)),
                min_size=LONG_LIST, max_size=3 * LONG_LIST),
       st.lists(st.text(HOSTILE_CHARS, max_size=4), min_size=1, max_size=12), st.sampled_from([0, 1, 2]))
def test_first_pair_is_the_first_rewrite_of_the_folded_database(pairs, dbs, lctn):
    pairs = tuple(pairs)
    for db in [fold(d, lctn) for d in dbs + [src for src, _ in pairs[:4]]]:
        assert first_pair(pairs, db, lctn) == next((p for p in pairs if fold(p[0], lctn) == db), None)


def test_an_equal_list_read_again_keeps_its_index_and_answers():
    from rpl_sql.filters.rules import _index

    patterns = tuple(f"app{i}.%" for i in range(LONG_LIST))
    reread = tuple(p.encode().decode() for p in patterns)  # equal, new objects: as after a state load
    assert reread is not patterns and _index(reread, 0, "wild") is _index(patterns, 0, "wild")
    assert _index(patterns, 1, "wild") is not _index(patterns, 0, "wild")


def test_a_long_list_is_indexed_once_and_a_new_list_anew():
    patterns = tuple(f"db{i}%.t_" for i in range(LONG_LIST)) + ("%.tx",)
    assert first_like(patterns, "db1x.t1") == "db1%.t_"
    assert first_like(patterns, "zz.tx") == "%.tx"
    assert first_like(patterns[:-1] + ("%.t%",), "zz.tx") == "%.t%"  # an equal-length list, other rules
    assert first_like(patterns, "zz.ty") is None


# ---------------------------------------------------------------- §2 case folding (simple Unicode case folding)

def test_fold_basic():
    assert fold("DB1", 0) == "DB1"
    assert fold("DB1", 1) == "db1"
    assert fold("DB1", 2) == "db1"
    assert fold("ÉTÉ", 1) == "été"


def test_fold_final_sigma_is_not_context_sensitive():
    # per-character simple lowercase (utf8mb3_tolower_ci) maps every Σ to σ, wherever it stands
    assert fold("ΑΣ", 1) == fold("ασ", 1)


def test_like_underscore_is_one_character_for_dotted_capital_i():
    # §3: with lctn != 0 `_` matches one character; the simple mapping keeps 'İ' one character ('i')
    assert like("db._", "db.İ", 1)


# ---------------------------------------------------------------- filter object basics (§1, P_S §3)

def test_filter_types_order_and_names():
    assert [t.value for t in TYPES] == [
        "REPLICATE_DO_DB", "REPLICATE_IGNORE_DB", "REPLICATE_DO_TABLE", "REPLICATE_IGNORE_TABLE",
        "REPLICATE_WILD_DO_TABLE", "REPLICATE_WILD_IGNORE_TABLE", "REPLICATE_REWRITE_DB"]
    assert T.WILD_DO_TABLE.option == "replicate-wild-do-table"
    assert T.from_name("replicate_do_db") is T.DO_DB
    assert {t for t in TYPES if t.is_table_rule} == TABLE_TYPES == {
        T.DO_TABLE, T.IGNORE_TABLE, T.WILD_DO_TABLE, T.WILD_IGNORE_TABLE}


def test_table_rules_on():
    f = Filters()
    assert not f.table_rules_on
    assert not f.configure(T.DO_DB, ("a",), "STARTUP_OPTIONS", 1).table_rules_on
    assert not f.configure(T.REWRITE_DB, (("a", "b"),), "STARTUP_OPTIONS", 1).table_rules_on
    for t in TABLE_TYPES:
        assert f.configure(t, ("a.b",), "STARTUP_OPTIONS", 1).table_rules_on
        assert not f.configure(t, (), "STARTUP_OPTIONS", 1).table_rules_on   # configured but empty


def test_configure_resets_counter_and_keeps_spelling():
    f = Filters().configure(T.DO_DB, ("Db1",), "STARTUP_OPTIONS", 5).add_counts({T.DO_DB: 3})
    assert f[T.DO_DB] == Slot(("Db1",), "STARTUP_OPTIONS", 5, 3)
    g = f.configure(T.DO_DB, ("Db1",), "CHANGE_REPLICATION_FILTER", 6)
    assert g[T.DO_DB].counter == 0 and g.values(T.DO_DB) == ("Db1",)
    assert [t for t, _ in g.rows()] == [T.DO_DB]
    assert Filters().rows() == []


def test_normalize_and_format():
    assert normalize_values(T.DO_TABLE, ("db2.b", "db1.a", "db1.a")) == ("db2.b", "db1.a")
    assert format_rule(T.DO_TABLE, ("db2.b", "db1.a")) == "db1.a,db2.b"
    assert format_rule(T.DO_TABLE, normalize_values(T.DO_TABLE, ("b.x", "B.y"))) == "B.y,b.x"
    assert normalize_values(T.IGNORE_TABLE, ("DB.T", "db.t"), 1) == ("DB.T",)
    assert normalize_values(T.IGNORE_TABLE, ("DB.T", "db.t"), 0) == ("DB.T", "db.t")
    assert normalize_values(T.DO_DB, ("a", "a")) == ("a", "a")          # lists keep duplicates
    assert format_rule(T.DO_DB, ("b", "a", "b")) == "b,a,b"
    assert format_rule(T.REWRITE_DB, (("dbA", "dbB"), ("dbC", "dbD"))) == "(dbA,dbB),(dbC,dbD)"
    assert format_rule(T.WILD_DO_TABLE, ()) == ""
