package rpl_sql.jvm;

import java.io.Serializable;
import java.util.Arrays;
import java.util.HashMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Function;
import java.util.function.IntFunction;
import java.util.function.IntUnaryOperator;
import java.util.function.ToIntBiFunction;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.array.ByteArrayMethods;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * One task's row codes, memoised on Spark's own string bytes: the channel (an INT index or a name) gives a
 * per-channel memo, which answers a (db, table) from an open-addressing table; on a miss the JVM's shared
 * decisions (Shared), else TableRules decides; at most MEMO_MAX decisions are kept. A copy is deserialised
 * per task, so this object is never used by two threads (Shared is). Generated code sees it only through
 * the JDK's function interfaces: Spark's code generator need not load this jar's classes.
 *
 * <p>A channel given by index is asked through applyAsInt with the names in the scratch array (their words,
 * see first(), and the bytes of names past 16 bytes), which generated code fills in place: Spark's string
 * objects then never leave the generated method, so the JIT need not allocate them (about 100 bytes a row).
 */
public final class RowCodeMemo implements IntFunction<Object>, Function<Object, Object>, IntUnaryOperator,
    Serializable {
  private static final long serialVersionUID = 1L;
  private static final int MEMO_MAX = 1 << 18;
  private static final Object UNKNOWN = new Object();
  private static final int SHARED_MAX = 1 << 20;
  /** Decisions shared by a JVM's tasks, by spec, channel, db, table; a task's own memo misses here. */
  private static final ConcurrentHashMap<String, Shared> SHARED = new ConcurrentHashMap<>();
  /** Scratch longs before the name bytes: db words (2), table words (2), lengths (db << 32 | table, -1: NULL). */
  static final int WORDS = 5;
  /** The bytes of long names that scratch holds; longer pairs take the string path (Function). */
  static final int NAME_BYTES = 8 << 10;
  /** Names up to this many bytes are their words; longer ones also go by their bytes. */
  static final int SHORT = 16;
  private final String spec;
  private final long[] scratch = new long[WORDS + NAME_BYTES / 8];
  private transient TableRules rules;
  private transient Shared shared;
  private transient Object[] byIndex;  // PerChannel or UNKNOWN, by the channel's index
  private transient HashMap<UTF8String, Object> byName;
  private transient int size;

  /** Memoises rows' whole codes (TableRules.Channel.rowCode). */
  public RowCodeMemo(String spec) {
    this.spec = spec;
    TableRules.of(spec);  // a bad spec fails here, on the driver
  }

  private void open() {
    rules = TableRules.of(spec);
    if (SHARED.size() >= 16) {
      SHARED.clear();
    }
    shared = SHARED.computeIfAbsent(spec, x -> new Shared());
    byIndex = new Object[16];
    byName = new HashMap<>();
  }

  /** The memo of the channel with this index; null for an unknown channel. */
  @Override
  public Object apply(int channel) {
    if (rules == null) {
      open();
    }
    if (channel < 0 || channel >= byIndex.length) {
      return make(Integer.valueOf(channel));
    }
    Object m = byIndex[channel];
    if (m == null) {
      m = byIndex[channel] = orUnknown(make(Integer.valueOf(channel)));
    }
    return m == UNKNOWN ? null : m;
  }

  /** The memo of the channel of this name (a UTF8String) or index (an Integer); null for an unknown channel. */
  @Override
  public Object apply(Object channel) {
    if (channel instanceof Integer) {
      return apply(((Integer) channel).intValue());
    }
    if (rules == null) {
      open();
    }
    UTF8String name = (UTF8String) channel;
    Object m = byName.get(name);
    if (m == null) {
      m = orUnknown(make(name.toString()));
      byName.put(name.copy(), m);
    }
    return m == UNKNOWN ? null : m;
  }

  /** The array generated code writes a row's names into before it calls applyAsInt. */
  public long[] scratch() {
    return scratch;
  }

  /** The code of the names in scratch for the channel of this index; -1 for NULL or an unknown channel. */
  @Override
  public int applyAsInt(int channel) {
    PerChannel m = (PerChannel) apply(channel);
    return m == null ? -1 : m.lookup(scratch);
  }

  private PerChannel make(Object key) {
    TableRules.Channel ch = rules.channel(key);
    return ch == null ? null : new PerChannel(ch, shared.byChannel.computeIfAbsent(key, x -> new ConcurrentHashMap<>()));
  }

  /** The JVM-wide decisions of one spec, keyed by copies of Spark's strings: no conversion to look up. */
  static final class Shared {
    final ConcurrentHashMap<Object, ConcurrentHashMap<UTF8String, ConcurrentHashMap<UTF8String, Integer>>> byChannel =
        new ConcurrentHashMap<>();
    final AtomicInteger size = new AtomicInteger();
  }

  private static Object orUnknown(Object m) {
    return m == null ? UNKNOWN : m;
  }

  /** The code of a row, as TableRules answers it; null for a NULL argument or an unknown channel. */
  public Integer code(Object channel, UTF8String k, UTF8String t) {
    if (channel == null || k == null) {
      return null;
    }
    PerChannel m = (PerChannel) apply(channel);
    int v = m == null ? -1 : m.applyAsInt(k, t);
    return v < 0 ? null : v;
  }

  /**
   * One channel's decisions in an open-addressing table of longs. A slot holds each name as two words (its
   * first and last eight bytes, or four, or all of them) and its length: for a name of at most 16 bytes that
   * is the name itself, so a hit compares words and reads nothing else; longer names also compare their bytes,
   * kept in one array.
   */
  final class PerChannel implements ToIntBiFunction<Object, Object> {
    private static final int STRIDE = 6;  // db words (2), table words (2), lengths, offset of long names | code + 1
    private final TableRules.Channel ch;
    private final ConcurrentHashMap<UTF8String, ConcurrentHashMap<UTF8String, Integer>> common;
    private long[] slots = new long[STRIDE << 10];
    private int mask = (1 << 10) - 1;
    private int used;
    private byte[] names = new byte[1 << 12];
    private int end;

    PerChannel(TableRules.Channel ch, ConcurrentHashMap<UTF8String, ConcurrentHashMap<UTF8String, Integer>> common) {
      this.ch = ch;
      this.common = common;
    }

    /** The code, or -1 for NULL: a row without a table that the database rules do not decide. */
    @Override
    public int applyAsInt(Object db, Object table) {
      UTF8String k = (UTF8String) db;
      UTF8String t = (UTF8String) table;
      int kn = k.numBytes();
      int tn = t == null ? -1 : t.numBytes();
      if ((long) kn + Math.max(tn, 0) > NAME_BYTES) {
        return decide(k, t);  // past the scratch: not memoised
      }
      long[] w = scratch;
      w[0] = first(k, kn);
      w[1] = last(k, kn);
      w[2] = t == null ? 0 : first(t, tn);
      w[3] = t == null ? 0 : last(t, tn);
      w[4] = (long) kn << 32 | (tn & 0xFFFFFFFFL);
      if (kn > SHORT || tn > SHORT) {
        k.writeToMemory(w, Platform.LONG_ARRAY_OFFSET + WORDS * 8);
        if (t != null) {
          t.writeToMemory(w, Platform.LONG_ARRAY_OFFSET + WORDS * 8 + kn);
        }
      }
      return lookup(w);
    }

    /** The code of the names in `w` (scratch's layout), or -1 for NULL. */
    int lookup(long[] w) {
      long k0 = w[0];
      long k1 = w[1];
      long t0 = w[2];
      long t1 = w[3];
      long lens = w[4];
      int kn = (int) (lens >>> 32);
      int tn = (int) lens;
      if (tn < 0) {
        return decide(name(w, k0, k1, kn, 0), null);
      }
      int i = mix(k0, k1, t0, t1, lens) & mask;
      while (true) {
        int b = i * STRIDE;
        long info = slots[b + 5];
        if (info == 0) {
          return insert(i, name(w, k0, k1, kn, 0), name(w, t0, t1, tn, kn), k0, k1, t0, t1, lens);
        }
        if (slots[b] == k0 && slots[b + 2] == t0 && slots[b + 1] == k1 && slots[b + 3] == t1 && slots[b + 4] == lens
            && (kn <= SHORT || same(w, 0, kn, (int) (info >>> 32)))
            && (tn <= SHORT || same(w, kn, tn, (int) (info >>> 32) + kn))) {
          return (int) info - 1;
        }
        i = (i + 1) & mask;
      }
    }

    /** A name of scratch: rebuilt from its words up to 16 bytes, else its bytes at `at` past the words. */
    private UTF8String name(long[] w, long w0, long w1, int n, int at) {
      byte[] b = new byte[n];
      if (n > SHORT) {
        Platform.copyMemory(w, Platform.LONG_ARRAY_OFFSET + WORDS * 8 + at, b, Platform.BYTE_ARRAY_OFFSET, n);
      } else if (n >= 8) {
        Platform.putLong(b, Platform.BYTE_ARRAY_OFFSET, w0);
        Platform.putLong(b, Platform.BYTE_ARRAY_OFFSET + n - 8, w1);
      } else if (n >= 4) {
        Platform.putInt(b, Platform.BYTE_ARRAY_OFFSET, (int) (w0 >>> 32));
        Platform.putInt(b, Platform.BYTE_ARRAY_OFFSET + n - 4, (int) w0);
      } else {
        for (int j = 0; j < n; j++) {
          b[j] = (byte) (w0 >>> (8 * (n - 1 - j)));
        }
      }
      return UTF8String.fromBytes(b);
    }

    private boolean same(long[] w, int from, int n, int at) {
      return ByteArrayMethods.arrayEquals(w, Platform.LONG_ARRAY_OFFSET + WORDS * 8 + from, names,
          Platform.BYTE_ARRAY_OFFSET + at, n);
    }

    private int insert(int i, UTF8String k, UTF8String t, long k0, long k1, long t0, long t1, long lens) {
      int v = decide(k, t);
      int kn = k.numBytes();
      int tn = t.numBytes();
      int at = end;
      if (kn > SHORT || tn > SHORT) {
        long need = (long) end + kn + tn;
        if (size >= MEMO_MAX || need > Integer.MAX_VALUE - 8) {  // bounded: past it, decisions are not kept
          return v;
        }
        if (need > names.length) {
          names = Arrays.copyOf(names, (int) Math.min(Integer.MAX_VALUE - 8, 2 * need));
        }
        k.writeToMemory(names, Platform.BYTE_ARRAY_OFFSET + end);
        t.writeToMemory(names, Platform.BYTE_ARRAY_OFFSET + end + kn);
        end += kn + tn;
      } else if (size >= MEMO_MAX) {
        return v;
      }
      int b = i * STRIDE;
      slots[b] = k0;
      slots[b + 1] = k1;
      slots[b + 2] = t0;
      slots[b + 3] = t1;
      slots[b + 4] = lens;
      slots[b + 5] = (long) at << 32 | (v + 1);
      size++;
      if (++used * 2 > mask) {
        grow();
      }
      return v;
    }

    /** A miss: the JVM's shared decisions first (the tasks of a query meet the same names), else the rules. */
    private int decide(UTF8String k, UTF8String t) {
      if (t == null) {
        int dc = ch.dbCode(k.toString());
        return dc == 2 || dc == 3 ? dc : -1;
      }
      ConcurrentHashMap<UTF8String, Integer> byTable = common.get(k);
      Integer hit = byTable == null ? null : byTable.get(t);
      if (hit != null) {
        return hit;
      }
      int v = ch.rowCode(k.toString(), t.toString(), rules.bytes);
      if (shared.size.incrementAndGet() <= SHARED_MAX) {
        common.computeIfAbsent(k.copy(), x -> new ConcurrentHashMap<>()).put(t.copy(), v);
      }
      return v;
    }

    private void grow() {
      long[] old = slots;
      mask = mask * 2 + 1;
      slots = new long[(mask + 1) * STRIDE];
      for (int b = 0; b < old.length; b += STRIDE) {
        if (old[b + 5] != 0) {
          int i = mix(old[b], old[b + 1], old[b + 2], old[b + 3], old[b + 4]) & mask;
          while (slots[i * STRIDE + 5] != 0) {
            i = (i + 1) & mask;
          }
          System.arraycopy(old, b, slots, i * STRIDE, STRIDE);
        }
      }
    }
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

  private static int mix(long k0, long k1, long t0, long t1, long lens) {
    long h = (k0 * 0x9E3779B97F4A7C15L ^ k1) * 0xC2B2AE3D27D4EB4FL;
    h = (h ^ t0) * 0x9E3779B97F4A7C15L ^ t1;
    h = (h ^ lens) * 0xC2B2AE3D27D4EB4FL;
    return (int) (h ^ (h >>> 32));
  }
}
