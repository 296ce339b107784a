package rpl_sql.jvm;

import java.util.Arrays;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Cast;
import org.apache.spark.sql.catalyst.expressions.CreateArray;
import org.apache.spark.sql.catalyst.expressions.CreateNamedStruct;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeBlock;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;

/**
 * rpl_sql__jsc(channel, command, default db, tables, channel key, upper-cased command, folded default db): a
 * statement's whole code as a Catalyst expression (StatementMemo.decide has the steps), where the compiled SQL
 * walks the tables with higher-order functions, which Spark interprets: 15-25x the bare scan for a one-table
 * statement per row. The last three arguments are computed as the SQL computes them ('OTHER' for a NULL or
 * empty command), by the memo from the first three and only for a statement it has not seen.
 */
public final class StatementCode extends SpecExpression {
  private static final long serialVersionUID = 1L;
  /** A JVM property that, set to true, makes the driver generate Spark's own array code (the bench's A/B). */
  public static final String NOT_IN_PLACE_PROPERTY = "rpl_sql.jvm.tablesNotInPlace";
  /** A JVM property that, set to true, keeps constant one-table calls in the statement memo (the bench's A/B). */
  public static final String NOT_AS_ROW_PROPERTY = "rpl_sql.jvm.statementsNotAsRows";

  public StatementCode(String spec, Expression[] args) {
    super(spec, args);
  }

  private transient StatementMemo interpreted;

  @Override
  public Object eval(InternalRow row) {
    if (interpreted == null) {
      interpreted = new StatementMemo(spec, null);
    }
    Object[] a = interpreted.arguments();
    for (int i = 0; i < 4; i++) {
      a[i] = (i == 3 ? tables() : args[4 + i]).eval(row);
    }
    int v = interpreted.applyAsInt(0);
    return v < 0 ? null : v;
  }

  /**
   * The tables argument, without the cast a SQL function's parameter adds where only nullability differs (an
   * array of named_struct(...)): the values are the same, so copying each row's array is work no answer needs.
   */
  private Expression tables() {
    Expression t = args[3];
    return t instanceof Cast && DataType.equalsIgnoreNullability(((Cast) t).child().dataType(), t.dataType())
        ? ((Cast) t).child() : t;
  }

  @Override
  public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
    Expression[] key = KeyBinding.bind(Arrays.copyOfRange(args, 0, 3), Arrays.copyOfRange(args, 4, 7));
    Expression[][] fields = Boolean.getBoolean(NOT_IN_PLACE_PROPERTY) ? null : fields(tables());
    OneTableStatement one = fields == null || fields.length != 1 || Boolean.getBoolean(NOT_AS_ROW_PROPERTY)
        ? null : OneTableStatement.of(spec, key, args[1], fields[0]);
    if (one != null) {
      return RowCode.lookup(ctx, ev, new Expression[] {args[0], args[2], fields[0][1]},
          new RowCodeMemo(spec, key, one), true, null);
    }
    StatementMemo memo = new StatementMemo(spec, key);
    String ref = ctx.addReferenceObj("rplStatements", memo, "java.util.function.IntUnaryOperator");
    String a = ctx.addReferenceObj("rplStatementArgs", memo.arguments(), "Object[]");
    StringBuilder code = new StringBuilder();
    for (int i = 0; i < 4; i++) {  // where the key is not bound, the memo gets it computed instead of the raw three
      if (i == 3 && fields != null) {
        String tables = tablesInPlace(ctx, fields, code);
        code.append(a).append("[3] = ").append(tables).append(";\n");
        continue;
      }
      Expression x = i == 3 ? tables() : args[key == null && i < 3 ? 4 + i : i];
      ExprCode e = x.genCode(ctx);
      String v = x.dataType().equals(DataTypes.IntegerType) ? "Integer.valueOf(" + e.value() + ")" : e.value().toString();
      code.append(e.code()).append("\n").append(a).append("[").append(i).append("] = ").append(e.isNull())
          .append(" ? null : ").append(v).append(";\n");
    }
    code.append("int ").append(ev.value()).append(" = ").append(ref).append(".applyAsInt(0);\n")
        .append("boolean ").append(ev.isNull()).append(" = ").append(ev.value()).append(" < 0;\n");
    return ev.copy(new CodeBlock(seq(code.toString()), seq()), ev.isNull(), ev.value());
  }

  /**
   * Each table's db, name and updating expressions where `t` is array(named_struct(...), ...) as written in
   * the call (the usual form), else null.
   */
  private static Expression[][] fields(Expression t) {
    if (!(t instanceof CreateArray)) {
      return null;
    }
    scala.collection.Seq<Expression> items = t.children();
    Expression[][] out = new Expression[items.size()][];
    for (int k = 0; k < out.length; k++) {
      Expression s = items.apply(k);
      if (!(s instanceof CreateNamedStruct) || s.children().size() != 6) {
        return null;
      }
      out[k] = new Expression[] {s.children().apply(1), s.children().apply(3), s.children().apply(5)};
    }
    return out;
  }

  /**
   * Code that writes each row's table fields into one array of rows made here, and that array's name: Spark's
   * own code for array(named_struct(...)) allocates both for every row, which cost about a fifth of a bare scan.
   */
  private static String tablesInPlace(CodegenContext ctx, Expression[][] fields, StringBuilder code) {
    GenericInternalRow[] rows = new GenericInternalRow[fields.length];
    for (int k = 0; k < rows.length; k++) {
      rows[k] = new GenericInternalRow(3);
      String r = ctx.addReferenceObj("rplTable", rows[k], GenericInternalRow.class.getName());
      for (int j = 0; j < 3; j++) {
        ExprCode e = fields[k][j].genCode(ctx);
        String v = j == 2 ? "Boolean.valueOf(" + e.value() + ")" : e.value().toString();
        code.append(e.code()).append("\n").append(r).append(".update(").append(j).append(", ").append(e.isNull())
            .append(" ? null : ").append(v).append(");\n");
      }
    }
    return ctx.addReferenceObj("rplTables", new GenericArrayData((Object[]) rows), GenericArrayData.class.getName());
  }

  @Override
  public DataType dataType() {
    return DataTypes.IntegerType;
  }

  @Override
  public String prettyName() {
    return "rpl_sql__jsc";
  }

  @Override
  protected SpecExpression with(Expression[] a) {
    return new StatementCode(spec, a);
  }
}
