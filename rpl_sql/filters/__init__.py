"""The filter core: MySQL's replication filter rules, the reference evaluator (the one source of truth for
semantics), the server state and its lint. Pure: no Spark, Delta or I/O."""
