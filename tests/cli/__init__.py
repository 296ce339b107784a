"""Tests of rpl_sql/cli/."""
