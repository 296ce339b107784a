package rpl_sql.jvm;

import java.io.Serializable;
import java.util.Arrays;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.IntUnaryOperator;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Statement codes (StatementCode), memoised on the statement's arguments as Spark holds them: the raw channel,
 * command and default db (or, where the key's expressions cannot be bound to them, the channel key, command
 * and folded default db the SQL computed) and each table's db, name and updating flag. Generated code writes
 * the arguments into arguments() and calls applyAsInt; a copy is deserialised per task, so this object is
 * never used by two threads, but the decisions it keeps are the JVM's, by spec and key (a task of a 10M-row
 * scan meets most of its query's 108,000 statements: kept per task and bounded, they were decided again in
 * each, 4-9x the bare scan). On a miss the raw arguments' key is computed by the key's own expressions, bound
 * to them (KeyBinding), so the channel's CASE and the folds run once per distinct statement. The steps are
 * rpl_sql.compile's statement code (decide_statement's), the tables' names folded by the spec's table.
 */
public final class StatementMemo implements IntUnaryOperator, Serializable {
  private static final long serialVersionUID = 1L;
  /** Statements a JVM keeps per spec and key; past them, new ones are decided without being kept. */
  static final int KEPT_MAX = 1 << 19;
  private static final ConcurrentHashMap<String, ConcurrentHashMap<Key, Integer>> SHARED = new ConcurrentHashMap<>();
  private final String spec;
  private final Expression[] key;
  private final Object[] args = new Object[4];
  private transient TableRules rules;
  private transient ConcurrentHashMap<Key, Integer> seen;
  private transient Key probe;
  /** This task's one-table statements, dense (the shared map's objects cost a cache miss each), handed on. */
  private transient OneTableCodes oneTable;

  /**
   * `key`: the channel key's, command's and folded default db's expressions over the raw channel, command and
   * default db as BoundReferences 0, 1 and 2; null where arguments() holds those three already computed.
   */
  public StatementMemo(String spec, Expression[] key) {
    this.spec = spec;
    this.key = key == null ? null : key.clone();
    TableRules.of(spec);  // a bad spec fails here, on the driver
  }

  /** The array generated code writes a row's four arguments into before it calls applyAsInt. */
  public Object[] arguments() {
    return args;
  }

  /** The code of the statement in arguments(), or -1 for NULL. */
  @Override
  public int applyAsInt(int unused) {
    if (rules == null) {
      rules = TableRules.of(spec);
      if (SHARED.size() >= 16) {
        SHARED.clear();
      }
      String id = spec + "\u0000" + Arrays.toString(key);
      seen = SHARED.computeIfAbsent(id, x -> new ConcurrentHashMap<>());
      probe = new Key();
      oneTable = OneTableCodes.forTask(id, Long.getLong(RowCodeMemo.CODE_BYTES_PROPERTY, 32L << 20));
    }
    if (!probe.set(args) || probe.channel == null) {
      return -1;  // a NULL table or table name, or channel
    }
    boolean one = probe.n == 1;
    if (one) {
      int v = oneTable.get(probe.channel, probe.cmd, probe.db, probe.dbs[0], probe.names[0], probe.updating[0]);
      if (v != OneTableCodes.MISS) {
        return v;
      }
    }
    Integer hit = seen.get(probe);
    if (hit != null) {
      if (one) {
        oneTable.put(probe.channel, probe.cmd, probe.db, probe.dbs[0], probe.names[0], probe.updating[0], hit);
      }
      return hit;
    }
    int v;
    if (key == null) {
      v = decide(rules, probe.channel, probe.cmd, probe.db, probe);
    } else {
      GenericInternalRow raw = new GenericInternalRow(new Object[] {probe.channel, probe.cmd, probe.db});
      v = decide(rules, key[0].eval(raw), (UTF8String) key[1].eval(raw), (UTF8String) key[2].eval(raw), probe);
    }
    if (seen.size() < KEPT_MAX) {
      seen.put(probe.copy(), v);
    }
    if (one) {
      oneTable.put(probe.channel, probe.cmd, probe.db, probe.dbs[0], probe.names[0], probe.updating[0], v);
    }
    return v;
  }

  /** The statement code: NULL (-1), 1 transaction control, 2/3 database rules, 4-8, 19, table codes, or dc. */
  static int decide(TableRules rules, Object channel, UTF8String command, UTF8String folded, Key s) {
    Object c = channel instanceof UTF8String ? channel.toString() : channel;
    TableRules.Channel ch = c == null ? null : rules.channel(c);
    if (ch == null || command == null || folded == null) {
      return -1;
    }
    String cmd = command.toString();
    String d = folded.toString();
    int dc = ch.dbCode(d);
    if (rules.transactionControl.contains(cmd)) {
      return 1;
    }
    if (dc == 2 || dc == 3) {
      return dc;
    }
    String k = ch.keyMap.getOrDefault(d, d);
    boolean dbcmd = rules.databaseCommands.contains(cmd) && dc == 18;
    boolean wildDo = !ch.wdo.isEmpty();
    if (dbcmd && !ch.hasDbRules && (wildDo || !ch.wig.isEmpty())) {
      int w = ch.wildCode(k + ".", rules.bytes);
      if (w != 0 || wildDo) {
        return w == 12 ? 4 : w == 13 ? 5 : 6;
      }
    }
    int n = s.n;
    if (cmd.equals(rules.dropTrigger) && n == 0) {
      return 7;
    }
    if (ch.tableRules && n > 0) {
      if (rules.exempt.contains(cmd)) {
        return 8;
      }
      int acc = 9;
      boolean trigger = cmd.equals(rules.dropTrigger);
      for (int i = 0; i < (trigger ? 1 : n) && (acc < 10 || acc > 13); i++) {
        if (trigger || s.updating[i] == 1) {
          String db = s.dbs[i] == null ? k : rules.fold(s.dbs[i].toString());
          acc = ch.code(db + "." + rules.fold(s.names[i].toString()), rules.bytes);
        }
      }
      return acc;
    }
    if (dbcmd && !wildDo && !ch.wig.isEmpty() && !ch.hasDbRules) {
      return 19;
    }
    return dc;
  }

  /** A statement's arguments, compared by value; the probe holds Spark's objects, a kept copy its own. */
  static final class Key {
    Object channel;
    UTF8String cmd;
    UTF8String db;
    int n;  // tables, 0 for a NULL array
    UTF8String[] dbs = new UTF8String[4];
    UTF8String[] names = new UTF8String[4];
    byte[] updating = new byte[4];  // 0 false, 1 true, 2 NULL
    private int hash;
    private boolean hashed;

    /** The arguments from `a`; false where a table or its name is NULL (the statement's code is NULL). */
    boolean set(Object[] a) {
      channel = a[0];
      cmd = (UTF8String) a[1];
      db = (UTF8String) a[2];
      ArrayData ts = (ArrayData) a[3];
      n = ts == null ? 0 : ts.numElements();
      if (n > dbs.length) {
        dbs = Arrays.copyOf(dbs, n);
        names = Arrays.copyOf(names, n);
        updating = Arrays.copyOf(updating, n);
      }
      hashed = false;
      for (int i = 0; i < n; i++) {
        if (ts.isNullAt(i)) {
          return false;
        }
        InternalRow t = ts.getStruct(i, 3);
        if (t.isNullAt(1)) {
          return false;
        }
        dbs[i] = t.isNullAt(0) ? null : t.getUTF8String(0);
        names[i] = t.getUTF8String(1);
        updating[i] = t.isNullAt(2) ? 2 : t.getBoolean(2) ? (byte) 1 : 0;
      }
      return true;
    }

    /** Computed when the shared map is asked: most rows are answered by the one-table codes without it. */
    @Override
    public int hashCode() {
      if (!hashed) {
        long h = (channel instanceof UTF8String ? hash((UTF8String) channel) : Objects.hashCode(channel)) * 31
            + hash(cmd);
        h = h * 31 + hash(db);
        for (int i = 0; i < n; i++) {
          h = ((h * 31 + hash(dbs[i])) * 31 + hash(names[i])) * 31 + updating[i];
        }
        h = (h * 31 + n) * 0x9E3779B97F4A7C15L;
        hash = (int) (h ^ (h >>> 32));
        hashed = true;
      }
      return hash;
    }

    /**
     * A name's hash from its length and first and last eight bytes (RowCodeMemo.first/last), mixed as NameIds
     * places names: no loop, and names differing only in their last bytes still differ in the low bits.
     */
    private static long hash(UTF8String s) {
      if (s == null) {
        return 0x51ED27L;
      }
      int n = s.numBytes();
      return NameIds.mix(RowCodeMemo.first(s, n), RowCodeMemo.last(s, n), n);
    }

    Key copy() {
      Key k = new Key();
      k.channel = channel instanceof UTF8String ? ((UTF8String) channel).clone() : channel;
      k.cmd = cmd == null ? null : cmd.clone();
      k.db = db == null ? null : db.clone();
      k.n = n;
      k.dbs = new UTF8String[n];
      k.names = new UTF8String[n];
      k.updating = Arrays.copyOf(updating, n);
      for (int i = 0; i < n; i++) {
        k.dbs[i] = dbs[i] == null ? null : dbs[i].clone();
        k.names[i] = names[i].clone();
      }
      k.hash = hashCode();
      k.hashed = true;
      return k;
    }

    @Override
    public boolean equals(Object o) {
      if (!(o instanceof Key)) {
        return false;
      }
      Key k = (Key) o;
      if (hashCode() != k.hashCode() || n != k.n || !Objects.equals(channel, k.channel) || !Objects.equals(cmd, k.cmd)
          || !Objects.equals(db, k.db)) {
        return false;
      }
      for (int i = 0; i < n; i++) {
        if (updating[i] != k.updating[i] || !Objects.equals(dbs[i], k.dbs[i]) || !names[i].equals(k.names[i])) {
          return false;
        }
      }
      return true;
    }
  }
}
