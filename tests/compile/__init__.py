"""Tests of rpl_sql/compile/."""
