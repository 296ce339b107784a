"""The applier: decide landed events per shape, write the applied events, then COUNTER, positions and GTIDs."""
from rpl_sql.server.applier_state import ApplyError, BatchRecord, applier_status, record_batch
from rpl_sql.server.gtid_set import GtidSet
from rpl_sql.pipeline.applier.job import apply
from rpl_sql.pipeline.applier.report import ApplyReport, ChannelReport, ApplyProgress
from rpl_sql.pipeline.applier.shapes import APPLIED_SCHEMA, app_id, derive_hits, not_running

__all__ = ["apply", "ApplyReport", "ChannelReport", "ApplyProgress", "ApplyError", "BatchRecord", "GtidSet",
           "record_batch", "applier_status", "derive_hits", "APPLIED_SCHEMA", "app_id", "not_running"]
