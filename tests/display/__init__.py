"""Tests of rpl_sql/display/."""
