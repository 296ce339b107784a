"""Tests of rpl_sql/language/."""
