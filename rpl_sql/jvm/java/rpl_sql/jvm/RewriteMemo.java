package rpl_sql.jvm;

import java.io.Serializable;
import java.util.Arrays;
import java.util.function.BiFunction;
import java.util.function.IntFunction;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * One task's rewrite_db results, memoised on the row's raw channel and db as Spark holds them (RewriteDb): each
 * name gets a small id (NameIds), and the result is an entry of the channel's row, at the db's id. On a miss
 * the raw names' key (the channel's index or canonical name, the folded db) is computed by the key's own
 * expressions, bound to the two names (KeyBinding), and the channel's rewrite decides. A copy is deserialised
 * per task, so this object is never used by two threads. Generated code sees it only through the JDK's
 * function interfaces, as RowCodeMemo.
 *
 * <p>apply(LOOKUP): the result for the names in scratch, or scratch itself for a miss. apply(DECIDE): the
 * result for the raw names in the key scratch, kept unless scratch is UNKEPT. apply(n >= 0): the key scratch,
 * with room for n bytes of names.
 */
public final class RewriteMemo implements IntFunction<Object>, BiFunction<Object, Object, Object>, Serializable {
  private static final long serialVersionUID = 1L;
  static final int LOOKUP = -1;
  static final int DECIDE = -2;
  /** Scratch longs before the name bytes: channel and db words (2 each), then their lengths. */
  static final int WORDS = 5;
  static final int KEY_WORDS = 2;
  /** Results a task keeps; past them, rows with new names are decided without being kept. */
  static final int KEPT_MAX = 1 << 20;
  private static final Object NONE = new Object();
  private final String spec;
  private final Expression[] key;
  private final long[] scratch = new long[WORDS + RowCodeMemo.NAME_BYTES / 8];
  private transient long[] keyScratch;
  private transient TableRules rules;
  private transient NameIds channels;
  private transient NameIds dbs;
  /** By channel id, db id: the result, NONE for NULL; null: not known. */
  private transient Object[][] results;
  private transient int kept;

  /** `key`: the key's two expressions over the raw names as BoundReferences 0 and 1, or null (apply(a, b) only). */
  public RewriteMemo(String spec, Expression[] key) {
    this.spec = spec;
    this.key = key == null ? null : key.clone();
    TableRules.of(spec);  // a bad spec fails here, on the driver
  }

  /** The array generated code writes a row's names into before it calls apply(LOOKUP). */
  public long[] scratch() {
    return scratch;
  }

  private void open() {
    rules = TableRules.of(spec);
    channels = new NameIds(1 << 16);
    dbs = new NameIds(RowCodeMemo.NAMES_MAX);
    results = new Object[4][];
  }

  @Override
  public Object apply(int what) {
    if (results == null) {
      open();
    }
    if (what >= 0) {
      int n = KEY_WORDS + (what + 7) / 8;
      if (keyScratch == null || keyScratch.length < n) {
        keyScratch = new long[Math.max(n, KEY_WORDS + 64)];
      }
      return keyScratch;
    }
    if (what == DECIDE) {
      return decideRaw();
    }
    long lens = scratch[WORDS - 1];
    if (lens == RowCodeMemo.UNKEPT) {
      return scratch;
    }
    long at = Platform.LONG_ARRAY_OFFSET + WORDS * 8;
    int cn = (int) (lens >>> 32);
    int c = channels.find(scratch[0], scratch[1], cn, scratch, at);
    int d = c < 0 ? -1 : dbs.find(scratch[2], scratch[3], (int) lens, scratch, at + cn);
    Object[] row = d >= 0 && c < results.length ? results[c] : null;
    Object v = row != null && d < row.length ? row[d] : null;
    return v == null ? scratch : v == NONE ? null : v;
  }

  /** The result for the key (channel index or canonical name, folded db) the generated code computed itself. */
  @Override
  public Object apply(Object channel, Object db) {
    if (rules == null) {
      open();
    }
    return decide(channel, (UTF8String) db);
  }

  private Object decideRaw() {
    long[] w = keyScratch;
    int cn = (int) w[0];
    int dn = (int) w[1];
    long at = Platform.LONG_ARRAY_OFFSET + KEY_WORDS * 8;
    GenericInternalRow names = new GenericInternalRow(new Object[] {
        UTF8String.fromBytes(bytes(w, at, cn)), UTF8String.fromBytes(bytes(w, at + cn, dn))});
    UTF8String v = decide(key[0].eval(names), (UTF8String) key[1].eval(names));
    if (scratch[WORDS - 1] != RowCodeMemo.UNKEPT && kept < KEPT_MAX) {
      keep(v, w, at, cn, dn);
    }
    return v;
  }

  private void keep(UTF8String v, long[] w, long at, int cn, int dn) {
    int c = channels.add(scratch[0], scratch[1], cn, w, at);
    int d = c < 0 ? -1 : dbs.add(scratch[2], scratch[3], dn, w, at + cn);
    if (d < 0) {
      return;
    }
    if (c >= results.length) {
      results = Arrays.copyOf(results, Math.max(c + 1, 2 * results.length));
    }
    Object[] row = results[c];
    if (row == null || d >= row.length) {
      row = results[c] = row == null ? new Object[Math.max(d + 1, 64)] : Arrays.copyOf(row, Math.max(d + 1, 2 * row.length));
    }
    row[d] = v == null ? NONE : v;
    kept++;
  }

  /** The channel's rewrite of the folded db: its configured target, else the db; null for an unknown channel. */
  private UTF8String decide(Object channel, UTF8String db) {
    TableRules.Channel ch = channel == null ? null : rules.channel(channel instanceof UTF8String ? channel.toString() : channel);
    if (ch == null || db == null) {
      return null;
    }
    String to = ch.outMap.get(db.toString());
    return to == null ? db.clone() : UTF8String.fromString(to);
  }

  private static byte[] bytes(long[] w, long at, int n) {
    byte[] b = new byte[n];
    Platform.copyMemory(w, at, b, Platform.BYTE_ARRAY_OFFSET, n);
    return b;
  }
}
