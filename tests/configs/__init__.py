"""Tests of rpl_sql/configs/."""
