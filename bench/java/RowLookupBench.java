package rpl_sql.jvm;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.IntBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.Arrays;
import java.util.List;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.hash.Murmur3_x86_32;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * bench/bench_row_lookup.py's harness: one thread hands every row's three names to RowCodeMemo as the
 * generated code of rpl_sql__jrc does (RowCode.lookupFunction), and, in turn, to Spark's hash() of the same
 * names, without Spark's scan around them, whose noise hides a few nanoseconds. Names come from per-column
 * dictionaries and are copied for each row, as Spark's Parquet reader hands dictionary-encoded strings. A
 * miss is decided by a stand-in of the names' hash (codes' values do not change what a lookup costs).
 *
 * <p>Arguments: a file of the distinct names (one a line), a file of little-endian int32 name indexes (channel,
 * db, table for each row), the spec, rounds. Prints, per round, nanoseconds a row: copying the names, their
 * hash, their lookup.
 */
public final class RowLookupBench {
  private static byte[][] dict;
  private static int[] names;

  public static void main(String[] a) throws IOException {
    List<String> lines = Files.readAllLines(Paths.get(a[0]), StandardCharsets.UTF_8);
    dict = new byte[lines.size()][];
    for (int i = 0; i < dict.length; i++) {
      dict[i] = lines.get(i).getBytes(StandardCharsets.UTF_8);
    }
    IntBuffer ib = ByteBuffer.wrap(Files.readAllBytes(Paths.get(a[1]))).order(ByteOrder.LITTLE_ENDIAN).asIntBuffer();
    names = new int[ib.remaining()];
    ib.get(names);
    String spec = new String(Files.readAllBytes(Paths.get(a[2])), StandardCharsets.UTF_8);
    RowCodeMemo memo = new RowCodeMemo(spec, new Expression[0], new StandIn());
    long sink = 0;
    int rows = names.length / 3;
    for (int round = 0; round < Integer.parseInt(a[3]); round++) {
      long t0 = System.nanoTime();
      sink += copies();
      long t1 = System.nanoTime();
      sink += hashes();
      long t2 = System.nanoTime();
      sink += lookups(memo, memo.scratch(), memo.state());
      long t3 = System.nanoTime();
      System.out.printf("round %d: copy %.2f hash %.2f lookup %.2f (%d)%n", round, (t1 - t0) / (double) rows,
          (t2 - t1) / (double) rows, (t3 - t2) / (double) rows, sink & 1);
    }
  }

  /** The row's code's stand-in on a miss. */
  static final class StandIn implements RowCodeMemo.Decider {
    private static final long serialVersionUID = 1L;

    @Override
    public int decide(UTF8String c, UTF8String k, UTF8String t) {
      return Math.floorMod(c.hashCode() * 31 + k.hashCode() * 7 + (t == null ? 0 : t.hashCode()), 7);
    }

    @Override
    public String id() {
      return "stand-in";
    }
  }

  private static UTF8String name(int i) {
    byte[] b = dict[i];
    return UTF8String.fromBytes(Arrays.copyOf(b, b.length));
  }

  private static long copies() {
    long x = 0;
    for (int i = 0; i < names.length; i += 3) {
      x += name(names[i]).numBytes() + name(names[i + 1]).numBytes() + name(names[i + 2]).numBytes();
    }
    return x;
  }

  private static long hashes() {
    long x = 0;
    for (int i = 0; i < names.length; i += 3) {
      UTF8String c = name(names[i]);
      UTF8String k = name(names[i + 1]);
      UTF8String t = name(names[i + 2]);
      int h = Murmur3_x86_32.hashUnsafeBytes(c.getBaseObject(), c.getBaseOffset(), c.numBytes(), 42);
      h = Murmur3_x86_32.hashUnsafeBytes(k.getBaseObject(), k.getBaseOffset(), k.numBytes(), h);
      h = Murmur3_x86_32.hashUnsafeBytes(t.getBaseObject(), t.getBaseOffset(), t.numBytes(), h);
      x += h != 0 ? 1 : 0;
    }
    return x;
  }

  private static long lookups(RowCodeMemo m, long[] w, Object[] st) {
    long x = 0;
    for (int i = 0; i < names.length; i += 3) {
      UTF8String c = name(names[i]);
      UTF8String k = name(names[i + 1]);
      UTF8String t = name(names[i + 2]);
      x += lookup(m, w, st, c.getBaseObject(), c.getBaseOffset(), c.numBytes(), k.getBaseObject(), k.getBaseOffset(),
          k.numBytes(), t.getBaseObject(), t.getBaseOffset(), t.numBytes()) == 1 ? 1 : 0;
    }
    return x;
  }

  /** RowCode.words' Java: the words of the name at (b, o), `n` bytes, into w[i] and w[i + 1]. */
  private static void words(Object b, long o, int n, long[] w, int i) {
    w[i] = first(b, o, n);
    w[i + 1] = n >= 8 ? Platform.getLong(b, o + n - 8) : 0L;
  }

  /** RowCode.found's Java: a short name's slot in NameIds' slots, -1 where it has none. */
  private static int id(long[] s, long w0, long w1, int n) {
    int mask = (s.length >> 2) - 1;
    int i = NameIds.mix(w0, w1, n) & mask;
    while (true) {
      int b = i << 2;
      long info = s[b + 2];
      if (info == 0L) {
        return -1;
      }
      if (s[b] == w0 && s[b + 1] == w1 && (int) (info >>> 32) == n) {
        return (int) info - 1;
      }
      i = (i + 1) & mask;
    }
  }

  /** RowCode.local's Java: a name's first word (its second is last()'s). */
  private static long first(Object b, long o, int n) {
    long w = 0L;
    if (n >= 8) {
      w = Platform.getLong(b, o);
    } else if (n >= 4) {
      w = ((long) Platform.getInt(b, o) & 0xFFFFFFFFL) << 32 | ((long) Platform.getInt(b, o + n - 4) & 0xFFFFFFFFL);
    } else {
      for (int j = 0; j < n; j++) {
        w = w << 8 | (Platform.getByte(b, o + j) & 0xFF);
      }
    }
    return w;
  }

  /** RowCode.lookupFunction's Java for a non-NULL table: found() in the memo's state, else its scratch path. */
  private static int lookup(RowCodeMemo m, long[] w, Object[] st, Object cb, long co, int cn, Object kb, long ko,
      int kn, Object tb, long to, int tn) {
    byte[][][] codes = (byte[][][]) st[3];
    if (codes != null && cn <= RowCodeMemo.SHORT && kn <= RowCodeMemo.SHORT && tn <= RowCodeMemo.SHORT) {
      int c = id((long[]) st[0], first(cb, co, cn), cn >= 8 ? Platform.getLong(cb, co + cn - 8) : 0L, cn);
      byte[][] byDb = c >= 0 && c < codes.length ? codes[c] : null;
      if (byDb != null) {
        int k = id((long[]) st[1], first(kb, ko, kn), kn >= 8 ? Platform.getLong(kb, ko + kn - 8) : 0L, kn);
        byte[] row = k >= 0 && k < byDb.length ? byDb[k] : null;
        if (row != null) {
          int t = id((long[]) st[2], first(tb, to, tn), tn >= 8 ? Platform.getLong(tb, to + tn - 8) : 0L, tn) + 1;
          if (t > 0 && t < row.length && row[t] != 0) {
            return row[t] - 2;
          }
        }
      }
    }
    return scratchLookup(m, w, cb, co, cn, kb, ko, kn, tb, to, tn);
  }

  /** The rest of RowCode.lookupFunction's Java, with its miss function. */
  private static int scratchLookup(RowCodeMemo m, long[] w, Object cb, long co, int cn, Object kb, long ko, int kn,
      Object tb, long to, int tn) {
    if ((long) cn + kn + tn > RowCodeMemo.NAME_BYTES) {
      throw new IllegalArgumentException("names past the memo's scratch");
    }
    words(cb, co, cn, w, 0);
    words(kb, ko, kn, w, 2);
    words(tb, to, tn, w, 4);
    w[RowCodeMemo.WORDS - 1] = RowCodeMemo.lens(cn, kn, tn);
    long at = Platform.LONG_ARRAY_OFFSET + RowCodeMemo.WORDS * 8;
    if (cn > RowCodeMemo.SHORT || kn > RowCodeMemo.SHORT || tn > RowCodeMemo.SHORT) {
      Platform.copyMemory(cb, co, w, at, cn);
      Platform.copyMemory(kb, ko, w, at + cn, kn);
      Platform.copyMemory(tb, to, w, at + cn + kn, tn);
    }
    int v = m.applyAsInt(0);
    if (v != RowCodeMemo.MISS) {
      return v;
    }
    long[] ks = (long[]) m.apply(cn + kn + tn);
    ks[0] = cn;
    ks[1] = kn;
    ks[2] = tn;
    long kat = Platform.LONG_ARRAY_OFFSET + RowCodeMemo.KEY_WORDS * 8;
    Platform.copyMemory(cb, co, ks, kat, cn);
    Platform.copyMemory(kb, ko, ks, kat + cn, kn);
    Platform.copyMemory(tb, to, ks, kat + cn + kn, tn);
    return m.applyAsInt(2);
  }
}
