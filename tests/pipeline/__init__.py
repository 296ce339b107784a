"""Tests of rpl_sql/pipeline/."""
