"""A statement applied to the server state: the new state with its result set and warnings (`execute`),
start-up options, performance_schema rows, the applier's bookkeeping and a filter change's impact. Pure."""
