"""Tests of rpl_sql/filters/."""
