package rpl_sql.jvm;

import java.io.Serializable;
import java.util.Arrays;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.IntFunction;
import java.util.function.IntUnaryOperator;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.array.ByteArrayMethods;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * One task's row codes, memoised on the row's raw channel, db and table as Spark holds them, with no string
 * compared, no channel dispatched and no name folded: each name gets a small id (NameIds, one per column), and
 * the code is a byte in the (channel, db)'s row of codes, at the table's id. The ids' tables and the codes of a
 * few hundred dbs and tables fit in the core's cache, which one table of every (channel, db, table) did not:
 * over 108,000 of them, that cost 1.8x the bare scan against 1.2x over 18. On a miss the row's decision key
 * (the channel's index or canonical name, the folded db and table, as the SQL computes them) is decided by
 * the JVM's shared decisions (Shared), else TableRules, and kept within NAMES_MAX names a column and the bytes
 * of CODE_BYTES_PROPERTY. A copy is deserialised per task, so this object is never used by two threads
 * (Shared is). Generated code sees it only through the JDK's function interfaces: Spark's code generator need
 * not load this jar's classes.
 *
 * <p>Generated code looks a row whose names pass no SHORT bytes up itself, in this object's state() (the ids'
 * slots and the codes), and calls it only for the rows that state does not hold. For those it writes the row's
 * names into the scratch array (see fill()): each name's two words (its first and last eight bytes, see
 * first()), their lengths, and the bytes of all three where one passes 16 bytes. On a miss it writes the
 * row's raw names (lengths and bytes) into the key scratch, and this object computes the decision key from
 * them with the key's own expressions, bound to the three names; where they cannot be so bound, the
 * generated code computes the key and writes that instead (see fillKey()). Either way Spark's
 * string objects never leave the generated method, so the JIT need not allocate them (handed to this object
 * on the miss path, which does run, they were allocated for every row: 1.8 GB per 10M rows).
 */
public final class RowCodeMemo implements IntUnaryOperator, IntFunction<Object>, Serializable {
  private static final long serialVersionUID = 1L;
  private static final int SHARED_MAX = 1 << 20;
  /** Decisions shared by a JVM's tasks, by spec, channel key, db, table; a task's own memo misses here. */
  private static final ConcurrentHashMap<String, Shared> SHARED = new ConcurrentHashMap<>();
  /** Memos' learned names and codes between tasks, by spec and key (bounded as TaskPool says). */
  private static final TaskPool<Learned> POOL = new TaskPool<>();
  /** applyAsInt's answer for a row the memo does not hold: the caller then gives its decision key (apply). */
  static final int MISS = -2;
  /** Scratch longs before the name bytes: channel, db and table words (2 each), then lens(). */
  static final int WORDS = 7;
  /** The bytes of long names that scratch holds; longer rows are decided without the memo. */
  static final int NAME_BYTES = 8 << 10;
  /** Names up to this many bytes are their words; where one is longer, the row's bytes are compared too. */
  static final int SHORT = 16;
  /** scratch[WORDS - 1] for a row not to be memoised (its names pass NAME_BYTES). */
  static final long UNKEPT = -1L;
  /** The key scratch's longs before its bytes: the channel (its index, or its name's length), db and table lengths. */
  static final int KEY_WORDS = 3;
  /** The key scratch's channel, or a name's length, for NULL. */
  static final long NULL_KEY = Long.MIN_VALUE;
  /** The names of a column a task gives ids to (NameIds); past them, rows with new names are not kept. */
  static final int NAMES_MAX = 1 << 18;
  /**
   * The bytes of codes a task keeps (a (channel, db)'s row of codes has a byte per table id): 32 MB unless the
   * JVM's system property rpl_sql.rowcode.bytes says otherwise.
   */
  static final String CODE_BYTES_PROPERTY = "rpl_sql.rowcode.bytes";
  /** A JVM property that, set to true, makes tasks started after it look every row up (the bench's A/B). */
  public static final String NO_LAST_ROW_PROPERTY = "rpl_sql.rowcode.noLastRow";
  /**
   * A JVM property that, set to true, makes tasks started after it count the rows they hand to applyAsInt to
   * look up (lookups()): the rows generated code did not find itself (a test's check that it does).
   */
  public static final String COUNT_PROPERTY = "rpl_sql.rowcode.countLookups";
  private static final AtomicLong LOOKUPS = new AtomicLong();
  /** A JVM property that, set to true, makes tasks started after it hand every row to applyAsInt (the bench's A/B). */
  public static final String NOT_IN_GENERATED_CODE_PROPERTY = "rpl_sql.rowcode.notInGeneratedCode";
  private final String spec;
  private final Expression[] key;
  private final Decider decider;
  private final boolean pooled;
  private final long[] scratch = new long[WORDS + NAME_BYTES / 8];
  /** What generated code reads to look a row up itself: the three columns' slots and the codes (state()). */
  private final Object[] state = new Object[4];
  private transient long[] keyScratch;
  private transient TableRules rules;
  private transient Shared shared;
  private transient boolean counting;
  private transient boolean published;
  private transient NameIds channels;
  private transient NameIds dbs;
  private transient NameIds tables;
  /** By channel id, db id: the row's codes by table id + 1 (0: a NULL table), as code + 2; 0: not known. */
  private transient byte[][][] codes;
  private transient long size;  // bytes of codes
  private transient long sizeMax;
  /**
   * The last row found in the codes, as scratch held it (words, lengths, the bytes of names past SHORT), and its
   * code; MISS: none. A task's rows often repeat the row before (a transaction's row events share a table), and
   * such a row then looks no name up.
   */
  private transient long[] last;
  private transient int lastCode = MISS;
  /**
   * The last channel and db found (their words and lengths word, lens() >>> 21; -1: none) and their row of codes,
   * while keepPair: comparing and keeping cost 1-3 ns a row, so where fewer than one looked-up row in four has the
   * pair's channel and db (measured as the last row is), the pair is not kept until the next measure.
   */
  private transient boolean keepPair;
  private transient int pairHits;
  private transient long pair0;
  private transient long pair1;
  private transient long pair2;
  private transient long pair3;
  private transient long pairLens;
  private transient byte[] pairRow;
  /**
   * Whether a found row is kept as the last one. Keeping costs a copy for every row (3-4.5 ns against a lookup's
   * 35-40): where fewer than one row in ten repeats the row before (LAST_WINDOW rows looked up, against the
   * hits), rows are not kept for the next LAST_PAUSE looked-up rows, then measured again.
   */
  private transient boolean keepLast;
  private transient int lastHits;
  private transient int lookedUp;
  private transient int nextCheck;
  static final int LAST_WINDOW = 1 << 10;
  static final int LAST_PAUSE = 1 << 14;

  /**
   * Memoises rows' whole codes (TableRules.Channel.rowCode); `key`: the decision key's three expressions
   * over the raw names as BoundReferences 0, 1 and 2, or null where the generated code computes the key.
   */
  public RowCodeMemo(String spec, Expression[] key) {
    this(spec, key, null);
  }

  /** A memo of other codes of three names: `decider` decides a miss's raw names, `key` only tells memos apart. */
  RowCodeMemo(String spec, Expression[] key, Decider decider) {
    this(spec, key, decider, true);
  }

  /**
   * As above; `pooled` false: what it learns is not handed to the JVM's next task by this class, as where the
   * memo object itself is handed on (StatementShapes), which then must not share it with a memo of this pool.
   */
  RowCodeMemo(String spec, Expression[] key, Decider decider, boolean pooled) {
    this.spec = spec;
    this.key = key == null ? null : key.clone();
    this.decider = decider;
    this.pooled = pooled;
    TableRules.of(spec);  // a bad spec fails here, on the driver
  }

  /** The code of three raw names (channel, db, table; the table may be NULL) that a memo keeps in a row's place. */
  interface Decider extends Serializable {
    int decide(UTF8String channel, UTF8String db, UTF8String table);

    /** What tells this decider's codes apart from another's over the same spec and key. */
    String id();
  }

  private void open() {
    rules = TableRules.of(spec);
    if (SHARED.size() >= 16) {
      SHARED.clear();
    }
    shared = SHARED.computeIfAbsent(spec, x -> new Shared());
    sizeMax = Long.getLong(CODE_BYTES_PROPERTY, 32L << 20);
    long max = sizeMax;
    String id = spec + "\u0000" + Arrays.toString(key) + (decider == null ? "" : "\u0000" + decider.id());
    // not pooled: the memo itself is handed on; a key over the names alone: the same names, the same codes
    Learned from = key == null || !pooled
        ? new Learned(max)
        : POOL.take(id, got -> got.sizeMax == max, () -> new Learned(max),
            learned -> {
              learned.codes = codes;
              learned.size = size;
            });
    last = Boolean.getBoolean(NO_LAST_ROW_PROPERTY) ? null : new long[scratch.length];
    lastCode = MISS;
    pairLens = -1;
    keepPair = true;
    pairHits = 0;
    keepLast = last != null;
    counting = Boolean.getBoolean(COUNT_PROPERTY);
    published = !Boolean.getBoolean(NOT_IN_GENERATED_CODE_PROPERTY);
    nextCheck = LAST_WINDOW;
    channels = from.channels;
    dbs = from.dbs;
    tables = from.tables;
    codes = from.codes;
    size = from.size;
    publish();
  }

  /**
   * What a task's memo learned (names' ids and codes), handed on to the JVM's next task with the same spec and
   * key, one task at a time: a task of a 10M-row scan meets most names its query has, and deciding them again
   * in each task cost more than its lookups.
   */
  static final class Learned {
    final NameIds channels = new NameIds(1 << 16);
    final NameIds dbs = new NameIds(NAMES_MAX);
    final NameIds tables = new NameIds(NAMES_MAX);
    final long sizeMax;
    byte[][][] codes = new byte[4][][];
    long size;

    Learned(long sizeMax) {
      this.sizeMax = sizeMax;
    }
  }

  /**
   * The ids' slots of channels, dbs and tables (NameIds.slots) and the codes by their ids, all null until the
   * task's first row: generated code looks up a row whose names pass no SHORT bytes in them itself, as
   * applyAsInt does, and calls this object only for a row they do not hold. Set again wherever a miss keeps a
   * code, since that may grow them into new arrays. Handing the row to applyAsInt through scratch, and its
   * checks for the row before, cost about as much again as the lookup itself.
   */
  public Object[] state() {
    return state;
  }

  private void publish() {
    if (!published) {
      return;
    }
    state[0] = channels.slots();
    state[1] = dbs.slots();
    state[2] = tables.slots();
    state[3] = codes;
  }

  /**
   * The rows handed to applyAsInt to look up, here and in StatementShapes, by tasks that count them
   * (COUNT_PROPERTY), since the JVM started.
   */
  public static long lookups() {
    return LOOKUPS.get();
  }

  static void countLookup() {
    LOOKUPS.incrementAndGet();
  }

  /** The array generated code writes a row's names into before it calls applyAsInt. */
  public long[] scratch() {
    return scratch;
  }

  /** The lengths word: each name's length (a NULL table as -1) in 21 bits. */
  static long lens(int cn, int kn, int tn) {
    return (long) cn << 42 | (long) kn << 21 | (tn + 1);
  }

  /** What generated code does: the row's names into scratch, or UNKEPT where they pass its size. */
  void fill(UTF8String c, UTF8String k, UTF8String t) {
    int cn = c.numBytes();
    int kn = k.numBytes();
    int tn = t == null ? -1 : t.numBytes();
    long[] w = scratch;
    if ((long) cn + kn + Math.max(tn, 0) > NAME_BYTES) {
      w[WORDS - 1] = UNKEPT;
      return;
    }
    w[0] = first(c, cn);
    w[1] = last(c, cn);
    w[2] = first(k, kn);
    w[3] = last(k, kn);
    w[4] = t == null ? 0 : first(t, tn);
    w[5] = t == null ? 0 : last(t, tn);
    w[6] = lens(cn, kn, tn);
    if (cn > SHORT || kn > SHORT || tn > SHORT) {
      long at = Platform.LONG_ARRAY_OFFSET + WORDS * 8;
      c.writeToMemory(w, at);
      k.writeToMemory(w, at + cn);
      if (t != null) {
        t.writeToMemory(w, at + cn + kn);
      }
    }
  }

  /**
   * 0: the code of the row in scratch, or MISS. 1: the code of the decision key in the key scratch; 2: of the
   * raw names in the key scratch; either kept for the row in scratch unless that is UNKEPT. A code is >= 0, or
   * -1 for NULL.
   */
  @Override
  public int applyAsInt(int what) {
    if (codes == null) {
      open();
    }
    if (what != 0) {
      int v = what == 1 ? decideKey() : decideRaw();
      if (scratch[WORDS - 1] != UNKEPT) {
        keep(v);
        publish();
      }
      return v;
    }
    if (counting) {
      countLookup();
    }
    long lens = scratch[WORDS - 1];
    if (lens == UNKEPT) {
      return MISS;
    }
    if (lastCode != MISS && last[WORDS - 1] == lens && sameAsLast(lens)) {
      lastHits++;
      return lastCode;
    }
    if (++lookedUp == nextCheck) {
      measureLast();
    }
    long[] w = scratch;
    byte[] row;
    if (keepPair && w[0] == pair0 && w[1] == pair1 && w[2] == pair2 && w[3] == pair3 && lens >>> 21 == pairLens) {
      pairHits++;
      row = pairRow;
    } else {
      row = row(lens);
    }
    if (row == null) {
      return MISS;
    }
    int tn = (int) lens & 0x1FFFFF;  // + 1
    int t = tn == 0 ? 0
        : tables.find(w[4], w[5], tn - 1, w, Platform.LONG_ARRAY_OFFSET + WORDS * 8 + (lens >>> 42)
            + ((lens >>> 21) & 0x1FFFFF)) + 1;
    int e = (t > 0 || tn == 0) && t < row.length ? row[t] : 0;
    if (e == 0) {
      return MISS;
    }
    long[] l = last;
    if (keepLast) {
      int n = longNameBytes(lens);
      if (n == 0) {  // the common row, without arraycopy's call
        l[0] = w[0];
        l[1] = w[1];
        l[2] = w[2];
        l[3] = w[3];
        l[4] = w[4];
        l[5] = w[5];
        l[6] = lens;
      } else {
        System.arraycopy(w, 0, l, 0, WORDS + (n + 7) / 8);
      }
      lastCode = e - 2;
    }
    return e - 2;
  }

  /**
   * The row of codes of the channel and db in scratch (lengths word `lens`), null where one is not known; kept
   * as the pair's where both names are their words. The next row's channel and db are then compared with the
   * pair's words: in the events table's files (partitioned by channel and db) they are the same for most rows.
   */
  private byte[] row(long lens) {
    long[] w = scratch;
    int cn = (int) (lens >>> 42);
    int kn = (int) (lens >>> 21) & 0x1FFFFF;
    long at = Platform.LONG_ARRAY_OFFSET + WORDS * 8;
    int c = channels.find(w[0], w[1], cn, w, at);
    byte[][] byDb = c >= 0 && c < codes.length ? codes[c] : null;
    int k = byDb == null ? -1 : dbs.find(w[2], w[3], kn, w, at + cn);
    byte[] row = k >= 0 && k < byDb.length ? byDb[k] : null;
    if (keepPair && row != null && cn <= SHORT && kn <= SHORT) {
      pair0 = w[0];
      pair1 = w[1];
      pair2 = w[2];
      pair3 = w[3];
      pairLens = lens >>> 21;
      pairRow = row;
    }
    return row;
  }

  /** At the end of a window of looked-up rows: whether to keep the last row, and the pair, for the next window. */
  private void measureLast() {
    keepPair = !keepPair || pairHits * 4 >= lookedUp;  // a pause over: measure again
    pairHits = 0;
    if (last == null) {
      lookedUp = 0;
      nextCheck = LAST_PAUSE;
      return;
    }
    boolean keep = !keepLast || lastHits * 9 >= LAST_WINDOW;  // a pause over: measure again
    if (!keep) {
      lastCode = MISS;  // `last` is no longer the row before
    }
    keepLast = keep;
    lastHits = 0;
    lookedUp = 0;
    nextCheck = keep ? LAST_WINDOW : LAST_PAUSE;
  }

  /** The bytes of the row's names that scratch holds past WORDS: all of them where one passes SHORT, else 0. */
  private static int longNameBytes(long lens) {
    int cn = (int) (lens >>> 42);
    int kn = (int) (lens >>> 21) & 0x1FFFFF;
    int tn = ((int) lens & 0x1FFFFF) - 1;
    return cn > SHORT || kn > SHORT || tn > SHORT ? cn + kn + Math.max(tn, 0) : 0;
  }

  /** Whether scratch holds the last row, whose lengths `lens` equal. */
  private boolean sameAsLast(long lens) {
    long[] w = scratch;
    long[] l = last;
    if (w[0] != l[0] || w[1] != l[1] || w[2] != l[2] || w[3] != l[3] || w[4] != l[4] || w[5] != l[5]) {
      return false;
    }
    int n = longNameBytes(lens);
    long at = Platform.LONG_ARRAY_OFFSET + WORDS * 8;
    return n == 0 || ByteArrayMethods.arrayEquals(w, at, l, at, n);
  }

  /** The key scratch, with room for `bytes` bytes of names: generated code writes a missed row's key there. */
  @Override
  public Object apply(int bytes) {
    int n = KEY_WORDS + (bytes + 7) / 8;
    if (keyScratch == null || keyScratch.length < n) {
      keyScratch = new long[Math.max(n, KEY_WORDS + 64)];
    }
    return keyScratch;
  }

  /** What generated code does on a miss: the decision key into the key scratch (a NULL table as null). */
  void fillKey(Object channel, UTF8String k, UTF8String t) {
    UTF8String cs = channel instanceof UTF8String ? (UTF8String) channel : null;
    int cn = cs == null ? 0 : cs.numBytes();
    int kn = k == null ? 0 : k.numBytes();
    long[] w = (long[]) apply(cn + kn + (t == null ? 0 : t.numBytes()));
    w[0] = channel == null ? NULL_KEY : cs == null ? ((Integer) channel).longValue() : cn;
    w[1] = k == null ? NULL_KEY : kn;
    w[2] = t == null ? NULL_KEY : t.numBytes();
    long at = Platform.LONG_ARRAY_OFFSET + KEY_WORDS * 8;
    if (cs != null) {
      cs.writeToMemory(w, at);
    }
    if (k != null) {
      k.writeToMemory(w, at + cn);
    }
    if (t != null) {
      t.writeToMemory(w, at + cn + kn);
    }
  }

  /** The code of a row, as TableRules answers it; null for a NULL argument or an unknown channel. */
  public Integer code(UTF8String c, UTF8String k, UTF8String t, Object keyC, UTF8String keyK, UTF8String keyT) {
    if (c == null || k == null) {
      return null;
    }
    fill(c, k, t);
    int v = applyAsInt(0);
    if (v == MISS) {
      fillKey(keyC, keyK, keyT);
      v = applyAsInt(1);
    }
    return v < 0 ? null : v;
  }

  /** The decision of the key in the key scratch. */
  private int decideKey() {
    Object[] a = keyScratchNames(rules.byIndex);
    return decide(a[0] instanceof UTF8String ? a[0].toString() : a[0], (UTF8String) a[1], (UTF8String) a[2]);
  }

  /** The decision of the raw names in the key scratch, their key computed by the key's expressions. */
  private int decideRaw() {
    Object[] names = keyScratchNames(false);
    if (decider != null) {
      return decider.decide((UTF8String) names[0], (UTF8String) names[1], (UTF8String) names[2]);
    }
    GenericInternalRow row = new GenericInternalRow(names);
    Object c = key[0].eval(row);
    return decide(c instanceof UTF8String ? c.toString() : c, (UTF8String) key[1].eval(row),
        (UTF8String) key[2].eval(row));
  }

  /** The key scratch's three values: the first an Integer (index) or a string, the others strings; or null. */
  private Object[] keyScratchNames(boolean index) {
    long[] w = keyScratch;
    long at = Platform.LONG_ARRAY_OFFSET + KEY_WORDS * 8;
    Object[] out = new Object[3];
    for (int i = 0; i < 3; i++) {
      if (w[i] == NULL_KEY) {
        continue;
      }
      if (i == 0 && index) {
        out[0] = (int) w[0];
        continue;
      }
      int n = (int) w[i];
      out[i] = UTF8String.fromBytes(bytes(w, at, n));
      at += n;
    }
    return out;
  }

  private static byte[] bytes(long[] w, long at, int n) {
    byte[] b = new byte[n];
    Platform.copyMemory(w, at, b, Platform.BYTE_ARRAY_OFFSET, n);
    return b;
  }

  /**
   * The ids of the names in scratch, channel << 40 | db << 20 | table id + 1 (0 for a NULL table), new names
   * given new ids; -1 where one has none (past NAMES_MAX).
   */
  private long addIds() {
    long[] w = scratch;
    long lens = w[WORDS - 1];
    int cn = (int) (lens >>> 42);
    int kn = (int) (lens >>> 21) & 0x1FFFFF;
    int tn = (int) lens & 0x1FFFFF;  // + 1
    long at = Platform.LONG_ARRAY_OFFSET + WORDS * 8;
    int c = channels.add(w[0], w[1], cn, w, at);
    int k = dbs.add(w[2], w[3], kn, w, at + cn);
    int t = tn == 0 ? 0 : tables.add(w[4], w[5], tn - 1, w, at + cn + kn) + 1;
    return c < 0 || k < 0 || t <= 0 && tn != 0 ? -1 : (long) c << 40 | (long) k << 20 | t;
  }

  /** Keeps code `v` for the row in scratch, within NAMES_MAX names a column and sizeMax bytes of codes. */
  private void keep(int v) {
    pairLens = -1;  // the pair's row may be copied to a longer one
    long ids = addIds();
    if (ids < 0 || v + 2 > Byte.MAX_VALUE) {
      return;
    }
    int c = (int) (ids >>> 40);
    int k = (int) (ids >>> 20) & 0xFFFFF;
    int t = (int) ids & 0xFFFFF;
    if (c >= codes.length) {
      codes = Arrays.copyOf(codes, Math.max(c + 1, 2 * codes.length));
    }
    byte[][] byDb = codes[c];
    if (byDb == null || k >= byDb.length) {
      byDb = codes[c] = byDb == null ? new byte[Math.max(k + 1, 64)][] : Arrays.copyOf(byDb, Math.max(k + 1, 2 * byDb.length));
    }
    byte[] row = byDb[k];
    if (row == null || t >= row.length) {
      int n = Math.max(Integer.highestOneBit(t) * 2, 16);
      if (size + n - (row == null ? 0 : row.length) > sizeMax) {
        return;
      }
      size += n - (row == null ? 0 : row.length);
      row = byDb[k] = row == null ? new byte[n] : Arrays.copyOf(row, n);
    }
    row[t] = (byte) (v + 2);
  }

  /** A decision: the JVM's shared ones first (the tasks of a query meet the same names), else the rules. */
  private int decide(Object key, UTF8String k, UTF8String t) {
    TableRules.Channel ch = key == null ? null : rules.channel(key);
    if (ch == null || k == null) {
      return -1;
    }
    if (t == null) {
      int dc = ch.dbCode(k.toString());
      return dc == 2 || dc == 3 ? dc : -1;
    }
    ConcurrentHashMap<UTF8String, ConcurrentHashMap<UTF8String, Integer>> common =
        shared.byChannel.computeIfAbsent(key, x -> new ConcurrentHashMap<>());
    ConcurrentHashMap<UTF8String, Integer> byTable = common.get(k);
    Integer hit = byTable == null ? null : byTable.get(t);
    if (hit != null) {
      return hit;
    }
    int v = ch.rowCode(k.toString(), t.toString(), rules.bytes);
    if (shared.size.incrementAndGet() <= SHARED_MAX) {
      common.computeIfAbsent(k, x -> new ConcurrentHashMap<>()).put(t, v);  // made from scratch: not Spark's
    }
    return v;
  }

  /** The JVM-wide decisions of one spec, by channel key, db and table (strings made from the scratches). */
  static final class Shared {
    final ConcurrentHashMap<Object, ConcurrentHashMap<UTF8String, ConcurrentHashMap<UTF8String, Integer>>> byChannel =
        new ConcurrentHashMap<>();
    final AtomicInteger size = new AtomicInteger();
  }

  /** A name's first eight bytes (its first four and last four from 4 to 7 bytes; all of them below 4). */
  static long first(UTF8String s, int n) {
    Object base = s.getBaseObject();
    long off = s.getBaseOffset();
    if (n >= 8) {
      return Platform.getLong(base, off);
    }
    if (n >= 4) {
      return (Platform.getInt(base, off) & 0xFFFFFFFFL) << 32 | (Platform.getInt(base, off + n - 4) & 0xFFFFFFFFL);
    }
    long h = 0;
    for (int j = 0; j < n; j++) {
      h = h << 8 | (Platform.getByte(base, off + j) & 0xFF);
    }
    return h;
  }

  /** A name's last eight bytes, from 8 bytes on (0 below: first() holds them all). */
  static long last(UTF8String s, int n) {
    return n >= 8 ? Platform.getLong(s.getBaseObject(), s.getBaseOffset() + n - 8) : 0;
  }

}
