"""Tests of rpl_sql/storage/."""
