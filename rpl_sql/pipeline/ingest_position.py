"""Where each channel's ingest stands in the events table: its last seq (the app transaction
`rpl_sql.ingest.<channel>`) and the commit metadata that set it (binlog position, GTIDs)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from deltalake import DeltaTable

from rpl_sql.errors import RplSqlError
from rpl_sql.pipeline.events import events_path
from rpl_sql.pipeline.summary import ROLLUP
from rpl_sql.storage.delta import archive
from rpl_sql.storage.delta import commit as delta_commit
from rpl_sql.storage.delta.commit_info import Cut
from rpl_sql.storage.delta.log import check

META = "rpl_sql.ingest."                # commit metadata key prefix


class IngestError(RplSqlError):
    """The ingest cannot proceed; nothing was committed by the failing step."""



class SourceChangedError(IngestError):
    """Another server answers at the channel's source address (a new server_id or server_uuid) while the
    channel resumes by file and position: its positions mean nothing for what the channel landed."""

    code = 13117

    @classmethod
    def of(cls, channel: str, origin: dict, was: tuple[str, str], now: tuple[str, str]) -> "SourceChangedError":
        return cls(f"Fatal error: the source at {origin['source_host']}:{origin['source_port']} is another "
                   f"server (server_id {was[0]} -> {now[0]}" + (f", server_uuid {was[1]} -> {now[1]}"
                                                                  if was[1] or now[1] else "") +
                   f"): its binlog positions are not the ones channel '{channel}' landed. Point the "
                   "channel at the right server, or say where to read this one: CHANGE REPLICATION SOURCE "
                   "TO SOURCE_LOG_FILE=..., SOURCE_LOG_POS=... (or SOURCE_AUTO_POSITION = 1) FOR CHANNEL "
                   f"'{channel}'")


class ConcurrentIngestError(IngestError):
    """Another process is ingesting the same channel (or committed for it since this one started)."""



class SourceFilterConflictError(IngestError):
    """Events dropped at the source would be applied by the channel's current filters."""



def app_id(channel: str) -> str:
    """The channel's app transaction in the events table: its version is the last landed seq."""
    return delta_commit.app_id("ingest", channel)



@dataclass(frozen=True)
class ChannelPosition:
    """What the events table says about a channel: the last seq and the commit metadata that set it."""

    last_seq: int
    version: int | None            # events-table version of that commit (None: found from the data)
    metadata: dict[str, str]       # the ``rpl_sql.ingest.*`` keys, without the prefix

    @property
    def binlog(self) -> tuple[str, int] | None:
        f, p = self.metadata.get("binlog_file"), self.metadata.get("binlog_pos")
        return (f, int(p)) if f and p else None



def ingest_meta(info: dict[str, Any]) -> dict[str, str]:
    """The commit's ingest keys without the prefix, as text (a value the log reader left in its file, a
    `commit_info.Cut`, stays one: its text is copied out only if it is used)."""
    return {k[len(META):]: v if isinstance(v, Cut) else str(v) for k, v in info.items() if k.startswith(META)}



def channel_commits(dt: DeltaTable, channel: str, after_seq: int = 0,
                    history: Callable[[int | None], list[dict]] | None = None,
                    rollups: list[tuple[int, dict[str, str]]] | None = None) -> list[tuple[int, dict[str, str]]]:
    """(version, ingest metadata) of the channel's commits whose last seq is past `after_seq`, oldest first.

    Read newest first in growing windows of the log, until one reaches back to a commit at or before
    `after_seq` (or the log's start, the archived commits included): usually only the last few are read.
    `history`: how a caller reading several channels' windows of one version shares them (archive.history).
    `rollups`: where the compactions' rollups of the channel's commits in the same window go (the same pairs,
    their keys after summary.ROLLUP).
    """
    out: dict[int, dict[str, str]] = {}
    rolled: dict[int, dict[str, str]] = {}
    rollup_channel = ROLLUP + "channel"
    mine = (META + "channel", META + rollup_channel)  # the other channels' commits are passed over unread
    for limit in (16, 256, 4096, None):  # each commit's entry holds its summary: read few
        hist = history(limit) if history is not None else archive.history(dt, limit)
        reached = False
        for info in hist:
            if all(str(info.get(k)) != channel for k in mine):
                continue
            meta = ingest_meta(info)
            if meta.get(rollup_channel) == channel and rollups is not None:
                rolled[int(info["version"])] = {k[len(ROLLUP):]: v for k, v in meta.items() if k.startswith(ROLLUP)}
            if meta.get("channel") != channel or "last_seq" not in meta:
                continue
            if int(meta["last_seq"]) <= after_seq:
                reached = True
            else:
                out[int(info["version"])] = meta
        if reached or limit is None or len(hist) < limit:
            break
    if rollups is not None:
        rollups.extend(sorted(((v, m) for v, m in rolled.items() if int(m["last_seq"]) > after_seq),
                              key=lambda vm: int(vm[1]["last_seq"])))
    return sorted(out.items(), key=lambda vm: int(vm[1]["last_seq"]))



def open_table(path: str) -> DeltaTable | None:
    """The events table, its log checked first (a damaged log stops ingest with `rpl-sql repair`'s advice)."""
    check(path)
    return archive.open_existing(path)



def committed_position(warehouse: str, channel: str, dt: DeltaTable | None = None) -> ChannelPosition | None:
    """The channel's committed position, or None before its first ingest.

    The app transaction version is the truth for the last seq; the commit carrying that seq is looked up
    newest-first (channel_commits: usually among the last few commits). Should the log have been cleaned,
    the row with that seq gives the binlog position (every batch ends with a transaction's last event).
    """
    dt = dt if dt is not None else open_table(events_path(warehouse))
    if dt is None:
        return None
    last = dt.transaction_version(app_id(channel))
    if last is None:
        return None
    for version, meta in channel_commits(dt, channel, after_seq=last - 1):
        if meta["last_seq"] == str(last):
            return ChannelPosition(last, version, meta)
    row = _row_at_seq(dt, channel, last)
    if row is None:
        raise IngestError(f"channel {channel!r}: app transaction says seq {last}, but neither a commit nor a "
                          "row records it")
    meta = {"channel": channel, "last_seq": str(last), "source": row["source"] or ""}
    if row["source"] == "binlog" or row["source"] is None:
        meta.update(binlog_file=row["binlog_file"], binlog_pos=str(row["binlog_pos"]), gtid=row["gtid"] or "")
    return ChannelPosition(last, None, meta)



def _row_at_seq(dt: DeltaTable, channel: str, seq: int) -> dict | None:
    import pyarrow.dataset as ds

    chan = ds.field("channel").is_null() if channel == "" else ds.field("channel") == channel
    t = dt.to_pyarrow_dataset().to_table(filter=chan & (ds.field("seq") == seq), use_threads=False,  # store._read
                                         columns=["binlog_file", "binlog_pos", "gtid", "source"])
    rows = t.to_pylist()
    return rows[0] if rows else None

