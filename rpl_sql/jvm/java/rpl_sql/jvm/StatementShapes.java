package rpl_sql.jvm;

import java.io.Serializable;
import java.util.Arrays;
import java.util.function.IntUnaryOperator;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * One-table statements whose command, table db or updating flag come from columns, as an events table holds
 * them: each distinct (command, table db, flag), a "shape", gets a RowCodeMemo of its own over (channel,
 * default db, table name) that decides as OneTableStatement does for a call of constant shape. A row then costs
 * its shape's lookup (the ids of two short names) and a row code's, where the statement memo's one-table codes
 * cost five names' ids and Spark's string objects (1.37-1.70x the bare scan and 4.7x its allocation, against
 * 1.10-1.30x and about the bare scan's by shape, in one run). A copy is deserialised per task, so this object is never
 * used by two threads; what its shapes learned, their memos included, goes to the JVM's next task of the same
 * spec and key (Learned).
 *
 * <p>Generated code writes the shape into scratch() (the command's and table db's words, as RowCodeMemo.first
 * and last, then their lengths and the flag, then their bytes where one passes SHORT) and calls applyAsInt(0);
 * on MISS it writes their bytes and calls applyAsInt(1). Either answers the shape's index in memos(),
 * scratches() and states(), or -1: the statement memo decides (a shape OneTableStatement does not take, or
 * past the shapes, commands or dbs kept).
 */
public final class StatementShapes implements IntUnaryOperator, Serializable {
  private static final long serialVersionUID = 1L;
  /** applyAsInt(0)'s answer for a shape not known yet. */
  static final int MISS = -2;
  static final int SHAPES_MAX = 64;
  static final int COMMANDS_MAX = 32;
  static final int DBS_MAX = 64;
  /**
   * Scratch longs before the names' bytes: command and table db words (2 each), then the lengths word: the
   * command's length << 32 | (the table db's length + 1, 0 for NULL) << 2 | the flag (0, 1, 2 for NULL).
   */
  static final int WORDS = 5;
  /** The bytes of a command and table db scratch holds; a longer shape is the statement memo's. */
  static final int NAME_BYTES = 512;
  private final String spec;
  private final Expression[] key;
  private final boolean nullableDb;
  private final long[] scratch = new long[WORDS + NAME_BYTES / 8];
  private final IntUnaryOperator[] memos = new IntUnaryOperator[SHAPES_MAX];
  private final long[][] scratches = new long[SHAPES_MAX][];
  private final Object[][] states = new Object[SHAPES_MAX][];
  /** The commands' and table dbs' slots (NameIds.slots) and the shapes, for generated code (see state()). */
  private final Object[] state = new Object[3];
  private transient boolean published;
  private transient boolean counting;
  /** Shapes' learned names, ids and memos between tasks, by spec and key (one pool id for all the shapes). */
  private static final TaskPool<Learned> POOL = new TaskPool<>();
  private transient Learned learned;

  /**
   * What a task's shapes learned, handed to the JVM's next task of the same spec and key when it ends: the
   * shapes' memos too (made unpooled), so a query of many commands takes one of TaskPool's ids, not one a shape.
   */
  static final class Learned {
    final NameIds commands = new NameIds(COMMANDS_MAX);
    final NameIds dbs = new NameIds(DBS_MAX);
    /** By command id, table db id + 1 (0: NULL), flag: the shape's index + 2, 1 for none, 0 not known yet. */
    final byte[] shapes = new byte[COMMANDS_MAX * (DBS_MAX + 1) * 3];
    final RowCodeMemo[] memos = new RowCodeMemo[SHAPES_MAX];
    int count;
  }

  /**
   * `key`: the raw (channel, command, default db) key expressions (KeyBinding); `nullableDb`: whether the default
   * db can be NULL; both as OneTableStatement.of takes them.
   */
  StatementShapes(String spec, Expression[] key, boolean nullableDb) {
    this.spec = spec;
    this.key = key.clone();
    this.nullableDb = nullableDb;
  }

  public long[] scratch() {
    return scratch;
  }

  /** Each shape's memo, by index; generated code looks a row up in the one applyAsInt names. */
  public IntUnaryOperator[] memos() {
    return memos;
  }

  /** Each shape's memo's scratch, by index. */
  public long[][] scratches() {
    return scratches;
  }

  /**
   * The commands' and table dbs' slots and the shapes by their ids (Learned.shapes), null until the task's
   * first row: generated code looks a shape whose names pass no SHORT bytes up itself, as applyAsInt does, and
   * calls this object for a shape they do not hold. Set again where a new shape's names may grow the slots.
   */
  public Object[] state() {
    return state;
  }

  private void publish() {
    if (published) {
      state[0] = learned.commands.slots();
      state[1] = learned.dbs.slots();
      state[2] = learned.shapes;
    }
  }

  /** Each shape's memo's state (RowCodeMemo.state), by index. */
  public Object[][] states() {
    return states;
  }

  /** 0: the index of the shape in scratch, or MISS; 1: the same, a new shape made from its bytes. */
  @Override
  public int applyAsInt(int what) {
    if (learned == null) {
      learned = POOL.take(spec + "\u0000" + Arrays.toString(key) + "\u0000" + nullableDb, got -> true, Learned::new,
          got -> { });
      for (int i = 0; i < learned.count; i++) {
        memos[i] = learned.memos[i];
        scratches[i] = learned.memos[i].scratch();
        states[i] = learned.memos[i].state();
      }
      published = !Boolean.getBoolean(RowCodeMemo.NOT_IN_GENERATED_CODE_PROPERTY);
      counting = Boolean.getBoolean(RowCodeMemo.COUNT_PROPERTY);
      publish();
    }
    if (counting && what == 0) {
      RowCodeMemo.countLookup();
    }
    Learned l = learned;
    long[] w = scratch;
    long lens = w[WORDS - 1];
    int cn = (int) (lens >>> 32);
    int dn = ((int) (lens >>> 2) & 0x3FFFFFFF) - 1;
    int updating = (int) lens & 3;
    long at = Platform.LONG_ARRAY_OFFSET + WORDS * 8;
    boolean add = what != 0;
    int c = add ? l.commands.add(w[0], w[1], cn, w, at) : l.commands.find(w[0], w[1], cn, w, at);
    int d = dn < 0 ? 0 : (add ? l.dbs.add(w[2], w[3], dn, w, at + cn) : l.dbs.find(w[2], w[3], dn, w, at + cn)) + 1;
    if (add) {
      publish();
    }
    if (c < 0 || d <= 0 && dn >= 0) {
      return add ? -1 : MISS;
    }
    int s = (c * (DBS_MAX + 1) + d) * 3 + updating;
    int e = l.shapes[s];
    if (e != 0 || !add) {
      return e - 2;  // MISS where e is 0
    }
    int v = shape(UTF8String.fromBytes(bytes(w, at, cn)), dn < 0 ? null : UTF8String.fromBytes(bytes(w, at + cn, dn)),
        (byte) updating);
    l.shapes[s] = (byte) (v + 2);
    return v;
  }

  /** The new shape's index, its memo made; -1 where OneTableStatement does not take it or SHAPES_MAX are made. */
  private int shape(UTF8String command, UTF8String tableDb, byte updating) {
    Learned l = learned;
    OneTableStatement d = l.count >= SHAPES_MAX ? null
        : OneTableStatement.of(spec, key, command, tableDb, updating, nullableDb);
    if (d == null) {
      return -1;
    }
    RowCodeMemo m = new RowCodeMemo(spec, key, d, false);
    l.memos[l.count] = m;
    memos[l.count] = m;
    scratches[l.count] = m.scratch();
    states[l.count] = m.state();
    return l.count++;
  }

  private static byte[] bytes(long[] w, long at, int n) {
    byte[] b = new byte[n];
    Platform.copyMemory(w, at, b, Platform.BYTE_ARRAY_OFFSET, n);
    return b;
  }
}
