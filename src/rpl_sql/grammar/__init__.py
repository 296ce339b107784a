"""The Lark grammar of rpl_sql's replication statements, shipped as package data (rpl_sql.grammar)."""
