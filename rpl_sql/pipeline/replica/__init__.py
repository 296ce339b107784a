"""The replica tables: applied events made into typed Delta tables, one per replicated source table.

`columns` (the type vocabulary and its Arrow types), `ddl` (structure changes read with sqlglot), `catalog`
(which tables a channel's replica holds), `merge` (one table's row changes, one commit), `materialize`
(the walk through a channel's applied events).
"""
