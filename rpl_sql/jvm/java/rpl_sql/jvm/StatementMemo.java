package rpl_sql.jvm;

import java.io.Serializable;
import java.util.Arrays;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.IntUnaryOperator;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Statement codes (StatementCode), memoised on the statement's arguments as Spark holds them: the channel key,
 * the command, the folded default db and each table's db, name and updating flag. Generated code writes the
 * arguments into arguments() and calls applyAsInt; a copy is deserialised per task, so this object is never
 * used by two threads, but the decisions it keeps are the JVM's, by spec (a task of a 10M-row scan meets
 * most of its query's 108,000 statements: kept per task and bounded, they were decided again in each, 4-9x
 * the bare scan). The steps are rpl_sql.compile's statement code (decide_statement's), with the names folded
 * by the spec's table (TableRules.fold).
 */
public final class StatementMemo implements IntUnaryOperator, Serializable {
  private static final long serialVersionUID = 1L;
  /** Statements a JVM keeps per spec; past them, new ones are decided without being kept. */
  static final int KEPT_MAX = 1 << 19;
  private static final ConcurrentHashMap<String, ConcurrentHashMap<Key, Integer>> SHARED = new ConcurrentHashMap<>();
  private final String spec;
  private final Object[] args = new Object[4];
  private transient TableRules rules;
  private transient ConcurrentHashMap<Key, Integer> seen;
  private transient Key probe;

  public StatementMemo(String spec) {
    this.spec = spec;
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
      seen = SHARED.computeIfAbsent(spec, x -> new ConcurrentHashMap<>());
      probe = new Key();
    }
    if (!probe.set(args)) {
      return -1;  // a NULL table or table name
    }
    Integer hit = seen.get(probe);
    if (hit != null) {
      return hit;
    }
    int v = decide(probe);
    if (seen.size() < KEPT_MAX) {
      seen.put(probe.copy(), v);
    }
    return v;
  }

  /** The statement code: NULL (-1), 1 transaction control, 2/3 database rules, 4-8, 19, table codes, or dc. */
  private int decide(Key s) {
    Object c = s.channel instanceof UTF8String ? s.channel.toString() : s.channel;
    TableRules.Channel ch = c == null ? null : rules.channel(c);
    if (ch == null || s.cmd == null || s.db == null) {
      return -1;
    }
    String cmd = s.cmd.toString();
    String d = s.db.toString();
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
      int h = Objects.hashCode(channel) * 31 + Objects.hashCode(cmd);
      h = h * 31 + Objects.hashCode(db);
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
        h = ((h * 31 + Objects.hashCode(dbs[i])) * 31 + names[i].hashCode()) * 31 + updating[i];
      }
      hash = h * 31 + n;
      return true;
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
      k.hash = hash;
      return k;
    }

    @Override
    public int hashCode() {
      return hash;
    }

    @Override
    public boolean equals(Object o) {
      if (!(o instanceof Key)) {
        return false;
      }
      Key k = (Key) o;
      if (hash != k.hash || n != k.n || !Objects.equals(channel, k.channel) || !Objects.equals(cmd, k.cmd)
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
