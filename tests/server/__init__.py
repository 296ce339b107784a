"""Tests of rpl_sql/server/."""
