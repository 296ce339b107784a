package rpl_sql.jvm;

import java.util.Arrays;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.array.ByteArrayMethods;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * One task's distinct names of one column (channels, dbs or tables), each given a small id in the order first
 * met: an open-addressing table of a name's two words (RowCodeMemo.first/last, the whole name up to SHORT
 * bytes) and its length; longer names also compare their bytes. A few hundred names fit in a few KB, so
 * looking one up stays in the core's cache where a table of every (channel, db, table) would not.
 */
final class NameIds {
  private final int max;
  private long[] slots = new long[4 << 6];  // w0, w1, length << 32 | id + 1, offset of a long name's bytes
  private int mask = (1 << 6) - 1;
  private int count;
  private byte[] bytes = new byte[1 << 10];
  private int end;

  /** Ids 0 to max - 1; past them, add() keeps no more names. */
  NameIds(int max) {
    this.max = max;
  }

  /** The id of the name of words (w0, w1) and `n` bytes, at (base, off) where n > SHORT; -1 if not known. */
  int find(long w0, long w1, int n, Object base, long off) {
    int i = mix(w0, w1, n) & mask;
    while (true) {
      int b = i << 2;
      long info = slots[b + 2];
      if (info == 0) {
        return -1;
      }
      if (slots[b] == w0 && slots[b + 1] == w1 && (int) (info >>> 32) == n
          && (n <= RowCodeMemo.SHORT || ByteArrayMethods.arrayEquals(base, off, bytes,
              Platform.BYTE_ARRAY_OFFSET + slots[b + 3], n))) {
        return (int) info - 1;
      }
      i = (i + 1) & mask;
    }
  }

  /**
   * The slots, four longs each (w0, w1, length << 32 | id + 1, offset of a long name's bytes), as many as a
   * power of two: what RowCode's generated code probes as find() does (a new array where add() grows them).
   */
  long[] slots() {
    return slots;
  }

  /** find(), else a new id for the name; -1 past `max` names. */
  int add(long w0, long w1, int n, Object base, long off) {
    int id = find(w0, w1, n, base, off);
    if (id >= 0 || count >= max) {
      return id;
    }
    long at = 0;
    if (n > RowCodeMemo.SHORT) {
      if ((long) end + n > Integer.MAX_VALUE - 8) {
        return -1;
      }
      if (end + n > bytes.length) {
        bytes = Arrays.copyOf(bytes, (int) Math.min(Integer.MAX_VALUE - 8, 2L * (end + n)));
      }
      Platform.copyMemory(base, off, bytes, Platform.BYTE_ARRAY_OFFSET + end, n);
      at = end;
      end += n;
    }
    id = count++;
    put(slots, mask, w0, w1, (long) n << 32 | (id + 1), at);
    if (count * 2 > mask) {
      long[] old = slots;
      mask = mask * 2 + 1;
      slots = new long[(mask + 1) * 4];
      for (int b = 0; b < old.length; b += 4) {
        if (old[b + 2] != 0) {
          put(slots, mask, old[b], old[b + 1], old[b + 2], old[b + 3]);
        }
      }
    }
    return id;
  }

  /** The slots a find() of each name looks at, all added first: how evenly mix() spreads them (tests). */
  static double meanProbes(String namesByLine) {
    String[] names = namesByLine.split("\n", -1);
    NameIds ids = new NameIds(names.length);
    UTF8String[] s = new UTF8String[names.length];
    for (int j = 0; j < names.length; j++) {
      s[j] = UTF8String.fromString(names[j]);
      int n = s[j].numBytes();
      ids.add(RowCodeMemo.first(s[j], n), RowCodeMemo.last(s[j], n), n, s[j].getBaseObject(), s[j].getBaseOffset());
    }
    long probes = 0;
    for (UTF8String x : s) {
      int n = x.numBytes();
      long w0 = RowCodeMemo.first(x, n);
      long w1 = RowCodeMemo.last(x, n);
      int i = mix(w0, w1, n) & ids.mask;
      for (probes++; ids.slots[i << 2] != w0 || ids.slots[(i << 2) + 1] != w1
          || (int) (ids.slots[(i << 2) + 2] >>> 32) != n; probes++) {
        i = (i + 1) & ids.mask;
      }
    }
    return (double) probes / names.length;
  }

  private static void put(long[] s, int mask, long w0, long w1, long info, long at) {
    int i = mix(w0, w1, (int) (info >>> 32)) & mask;
    while (s[(i << 2) + 2] != 0) {
      i = (i + 1) & mask;
    }
    int b = i << 2;
    s[b] = w0;
    s[b + 1] = w1;
    s[b + 2] = info;
    s[b + 3] = at;
  }

  /**
   * The name of a generated function (slots, w0, w1, n) that answers find() of a name of no more than SHORT
   * bytes in slots(), for generated code that looks names up itself (RowCode, StatementCode).
   */
  static String findFunction(CodegenContext ctx) {
    String fn = ctx.freshName("rplId");
    return ctx.addNewFunction(fn, "private int " + fn + "(long[] s, long w0, long w1, int n) {\n"
        + "  int mask = (s.length >> 2) - 1;\n"
        + "  long h = w0 ^ w1 * 0x9E3779B97F4A7C15L ^ n;\n"  // as mix()
        + "  h ^= h >>> 29;\n"
        + "  int i = (int) ((h * 0xC2B2AE3D27D4EB4FL) >>> 32) & mask;\n"
        + "  while (true) {\n"
        + "    int b = i << 2;\n"
        + "    long info = s[b + 2];\n"
        + "    if (info == 0L) {\n"
        + "      return -1;\n"
        + "    }\n"
        + "    if (s[b] == w0 && s[b + 1] == w1 && (int) (info >>> 32) == n) {\n"
        + "      return (int) info - 1;\n"
        + "    }\n"
        + "    i = (i + 1) & mask;\n"
        + "  }\n"
        + "}\n", false);
  }

  /**
   * A slot index from a name's words: the high bits fold down before the one multiply, whose high half is the
   * index. Names that differ only in their last bytes (t_0001, log_2024_07) differ in a word's top bits, which
   * a multiply alone carries only upward: without the fold, 400 names such as orders_0001 took 50 probes a lookup.
   */
  static int mix(long w0, long w1, int n) {
    long h = w0 ^ w1 * 0x9E3779B97F4A7C15L ^ n;  // as findFunction
    h ^= h >>> 29;
    return (int) ((h * 0xC2B2AE3D27D4EB4FL) >>> 32);
  }
}
