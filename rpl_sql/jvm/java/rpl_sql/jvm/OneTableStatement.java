package rpl_sql.jvm;

import java.util.Objects;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.BoundReference;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The statement code of a call whose command, one table's db and its updating flag are constants, as in
 * should_apply_statement(channel, 'INSERT', db, array(named_struct('db', NULL, 'name', t, 'updating', true))):
 * its answer depends on the raw channel, default db and table name alone, so a RowCodeMemo keeps it as it keeps
 * a row's code, at the cost of should_apply's lookup (a statement memo's one-table codes cost 0.3-0.5x a bare
 * scan more: a prefix's probe, a second db's id, the array's unpacking). Where they come from columns, each
 * (command, table db, flag) met gets one of these (StatementShapes).
 */
final class OneTableStatement implements RowCodeMemo.Decider {
  private static final long serialVersionUID = 1L;
  private final String spec;
  private final Expression[] key;
  private final UTF8String command;
  private final UTF8String tableDb;
  private final byte updating;
  private transient TableRules rules;
  private transient StatementMemo.Key probe;

  private OneTableStatement(String spec, Expression[] key, UTF8String command, UTF8String tableDb, byte updating) {
    this.spec = spec;
    this.key = key.clone();
    this.command = command;
    this.tableDb = tableDb;
    this.updating = updating;
  }

  /**
   * The decider for the call's raw (channel, command, default db) key expressions `key` and the table's db, name
   * and updating expressions `table`, or null where the command, the table's db or its flag is not a constant,
   * or the default db's key reads more than the default db or, where the default db can be NULL
   * (`nullableDb`), tells NULL from '' (generated code hands a NULL default db to the memo as '').
   */
  static OneTableStatement of(String spec, Expression[] bound, Expression command, Expression[] table,
      boolean nullableDb) {
    if (bound == null || !command.foldable() || !table[0].foldable() || !table[2].foldable()) {
      return null;
    }
    Object flag = table[2].eval(InternalRow.empty());
    return of(spec, bound, (UTF8String) command.eval(InternalRow.empty()),
        (UTF8String) table[0].eval(InternalRow.empty()), flag == null ? 2 : (Boolean) flag ? (byte) 1 : 0, nullableDb);
  }

  /**
   * The decider for the statements of command `cmd`, table db `tableDb` and flag `updating` (2: NULL), or null
   * as above. (An optimiser drops the SQL's coalesce(default_db, '') where the default db cannot be NULL.)
   */
  static OneTableStatement of(String spec, Expression[] bound, UTF8String cmd, UTF8String tableDb, byte updating,
      boolean nullableDb) {
    // KeyBinding binds any literal equal to the command's to the command: here it is that literal again
    Expression[] ref = {new BoundReference(1, DataTypes.StringType, true)};
    Expression[] lit = {Literal.create(cmd, DataTypes.StringType)};
    Expression[] key = new Expression[3];
    for (int i = 0; i < 3; i++) {
      key[i] = KeyBinding.replace(bound[i], ref, lit);
    }
    if (!readsOnly(key[2], 2)) {
      return null;
    }
    if (nullableDb && !Objects.equals(key[2].eval(new GenericInternalRow(new Object[3])),
        key[2].eval(new GenericInternalRow(new Object[] {null, null, UTF8String.EMPTY_UTF8})))) {
      return null;
    }
    return new OneTableStatement(spec, key, cmd, tableDb, updating);
  }

  /** True where every BoundReference in `e` is of ordinal `i`. */
  private static boolean readsOnly(Expression e, int i) {
    if (e instanceof BoundReference) {
      return ((BoundReference) e).ordinal() == i;
    }
    scala.collection.Iterator<Expression> it = e.children().iterator();
    while (it.hasNext()) {
      if (!readsOnly(it.next(), i)) {
        return false;
      }
    }
    return true;
  }

  @Override
  public int decide(UTF8String channel, UTF8String db, UTF8String table) {
    if (channel == null || table == null) {
      return -1;
    }
    if (rules == null) {
      rules = TableRules.of(spec);
      probe = new StatementMemo.Key();
    }
    GenericInternalRow raw = new GenericInternalRow(new Object[] {channel, command, db});
    probe.n = 1;
    probe.dbs[0] = tableDb;
    probe.names[0] = table;
    probe.updating[0] = updating;
    return StatementMemo.decide(rules, key[0].eval(raw), (UTF8String) key[1].eval(raw),
        (UTF8String) key[2].eval(raw), probe);
  }

  @Override
  public String id() {
    return "statement\u0000" + (command == null ? "\u0001" : "=" + command) + "\u0000"
        + (tableDb == null ? "\u0001" : "=" + tableDb) + "\u0000" + updating;
  }
}
