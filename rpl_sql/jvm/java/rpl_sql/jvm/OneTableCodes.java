package rpl_sql.jvm;

import java.util.Arrays;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A task's codes of one-table statements, the common shape, kept dense as RowCodeMemo keeps rows': each
 * name gets a small id (NameIds; dbs and table names apart, so a row is as long as the tables), a statement's
 * channel, command, default db, table db and updating flag are one "prefix" (a long, given an id of its own),
 * and its code is a byte in the prefix's row, at the table name's id. A few hundred names and prefixes stay in the core's cache, where a hash map of 108,000 statement
 * objects cost a cache miss per object it touched (the map, the key, each name's bytes: 3x the bare scan).
 */
final class OneTableCodes {
  /** get()'s answer for a statement not kept (then StatementMemo decides it and calls put). */
  static final int MISS = -2;
  private static final TaskPool<OneTableCodes> POOL = new TaskPool<>();
  private static final int CHANNEL_BITS = 10;
  private static final int COMMAND_BITS = 7;
  private static final int NAME_BITS = 15;
  private final NameIds channels = new NameIds((1 << CHANNEL_BITS) - 1);
  private final NameIds commands = new NameIds((1 << COMMAND_BITS) - 1);
  private final NameIds dbs = new NameIds((1 << NAME_BITS) - 1);
  private final NameIds tables = new NameIds((1 << NAME_BITS) - 1);  // apart from dbs: short rows stay cached
  private long[] prefixes = new long[64];  // prefix + 1, 0 empty
  private int[] prefixIds = new int[64];
  private int prefixCount;
  private byte[][] rows = new byte[16][];
  private long size;
  private UTF8String lastCommand;
  private int lastCommandId;
  private final long sizeMax;

  private OneTableCodes(long sizeMax) {
    this.sizeMax = sizeMax;
  }

  /**
   * The codes for this task: what the JVM's last task of the same memo (`id`: spec and key) learned, handed back
   * when this one ends (as RowCodeMemo hands on its rows' codes). Kept per task only, a task of a 10M-row scan
   * met a tenth of its rows for the first time and looked them up in the shared map: 0.3-0.5x the bare scan.
   */
  static OneTableCodes forTask(String id, long sizeMax) {
    return POOL.take(id, got -> got.sizeMax == sizeMax, () -> new OneTableCodes(sizeMax), mine -> { });
  }

  /** The code of the one-table statement, or MISS. */
  int get(Object channel, UTF8String cmd, UTF8String db, UTF8String tableDb, UTF8String name, byte updating) {
    long p = prefix(channel, cmd, db, tableDb, updating, false);
    int pid = p < 0 ? -1 : prefixId(p, false);
    int t = pid < 0 ? -1 : id(tables, name, false);
    byte[] row = t < 0 ? null : rows[pid];
    int e = row != null && t < row.length ? row[t] : 0;
    return e == 0 ? MISS : e - 2;
  }

  /** Keeps code `v` (-1 for NULL) of the statement, within the ids' bits and sizeMax bytes of rows. */
  void put(Object channel, UTF8String cmd, UTF8String db, UTF8String tableDb, UTF8String name, byte updating, int v) {
    long p = prefix(channel, cmd, db, tableDb, updating, true);
    int pid = p < 0 ? -1 : prefixId(p, true);
    int t = pid < 0 ? -1 : id(tables, name, true);
    if (t < 0) {
      return;
    }
    if (pid >= rows.length) {
      rows = Arrays.copyOf(rows, 2 * rows.length);
    }
    byte[] row = rows[pid];
    if (row == null || t >= row.length) {
      int n = Math.max(Integer.highestOneBit(t) * 2, 16);
      if (size + n - (row == null ? 0 : row.length) > sizeMax) {
        return;
      }
      size += n - (row == null ? 0 : row.length);
      row = rows[pid] = row == null ? new byte[n] : Arrays.copyOf(row, n);
    }
    row[t] = (byte) (v + 2);
  }

  /** channel | command + 1 | default db + 1 | table db + 1 | updating, or -1 where an id does not fit its bits. */
  private long prefix(Object channel, UTF8String cmd, UTF8String db, UTF8String tableDb, byte updating, boolean add) {
    int c = channel instanceof Integer ? (Integer) channel : id(channels, (UTF8String) channel, add);
    int k = cmd == null ? 0 : cmd == lastCommand ? lastCommandId : id(commands, cmd, add) + 1;
    if (k > 0) {  // a constant command is one object for every row
      lastCommand = cmd;
      lastCommandId = k;
    }
    int d = db == null ? 0 : id(dbs, db, add) + 1;
    int td = tableDb == null ? 0 : id(dbs, tableDb, add) + 1;
    if (c < 0 || c >= 1 << CHANNEL_BITS || k <= 0 && cmd != null || d <= 0 && db != null
        || td <= 0 && tableDb != null || d >= 1 << NAME_BITS || td >= 1 << NAME_BITS) {
      return -1;
    }
    return (((((long) c << COMMAND_BITS | k) << NAME_BITS | d) << NAME_BITS | td) << 2) | updating;
  }

  private static int id(NameIds ids, UTF8String s, boolean add) {
    int n = s.numBytes();
    long w0 = RowCodeMemo.first(s, n);
    long w1 = RowCodeMemo.last(s, n);
    return add ? ids.add(w0, w1, n, s.getBaseObject(), s.getBaseOffset())
        : ids.find(w0, w1, n, s.getBaseObject(), s.getBaseOffset());
  }

  /** The prefix's id (open addressing on the long), given one with `add` (-1 past 2^16 prefixes). */
  private int prefixId(long p, boolean add) {
    int i = slot(p);
    if (prefixes[i] != 0) {
      return prefixIds[i];
    }
    if (!add || prefixCount >= 1 << 16) {
      return -1;
    }
    prefixes[i] = p + 1;
    prefixIds[i] = prefixCount;
    if (++prefixCount * 2 > prefixes.length) {
      long[] oldKeys = prefixes;
      int[] oldIds = prefixIds;
      prefixes = new long[oldKeys.length * 2];
      prefixIds = new int[oldKeys.length * 2];
      for (int j = 0; j < oldKeys.length; j++) {
        if (oldKeys[j] != 0) {
          int at = slot(oldKeys[j] - 1);
          prefixes[at] = oldKeys[j];
          prefixIds[at] = oldIds[j];
        }
      }
    }
    return prefixCount - 1;
  }

  /** The slot holding prefix `p`, or the empty one where it goes. */
  private int slot(long p) {
    int mask = prefixes.length - 1;
    long h = (p + 1) * 0x9E3779B97F4A7C15L;
    int i = (int) (h ^ (h >>> 32)) & mask;
    while (prefixes[i] != 0 && prefixes[i] != p + 1) {
      i = (i + 1) & mask;
    }
    return i;
  }
}
