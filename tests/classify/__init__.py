"""Tests of rpl_sql/classify/."""
