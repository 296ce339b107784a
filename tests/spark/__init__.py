"""Tests of rpl_sql/spark/."""
