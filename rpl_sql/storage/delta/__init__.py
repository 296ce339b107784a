"""Delta Lake I/O through delta-rs: one commit helper, the log check and repair, warehouse upkeep."""
