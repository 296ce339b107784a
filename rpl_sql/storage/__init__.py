"""The warehouse on disk: the state's Delta table and its history, the replica catalog, service status,
credentials, scratch space, Delta helpers and upkeep."""
