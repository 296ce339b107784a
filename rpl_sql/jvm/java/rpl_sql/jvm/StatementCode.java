package rpl_sql.jvm;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
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
 * empty command), by the memo from the first three and only for a statement it has not seen. A one-table
 * statement is looked up as a row is: by the row memo of its constant command, table db and flag
 * (OneTableStatement), or where those come from columns, of the ones each row has (StatementShapes).
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
    boolean asRows = !Boolean.getBoolean(NOT_AS_ROW_PROPERTY);
    OneTableStatement one = fields == null || fields.length != 1 || !asRows
        ? null : OneTableStatement.of(spec, key, args[1], fields[0], args[2].nullable());
    if (one != null) {
      return RowCode.lookup(ctx, ev, new Expression[] {args[0], args[2], fields[0][1]},
          new RowCodeMemo(spec, key, one), true, null);
    }
    // every argument's code first, where it runs for every row: a column is read where its first reference is
    // generated, and both the shapes' lookup and the statement memo below read them
    StringBuilder code = new StringBuilder();
    ExprCode[] a = new ExprCode[3];
    for (int i = 0; i < 3; i++) {  // where the key is not bound, the memo gets it computed instead of the raw three
      a[i] = args[key == null ? 4 + i : i].genCode(ctx);
      code.append(a[i].code()).append("\n");
    }
    ExprCode tables = null;
    ExprCode[][] f = null;
    if (fields == null) {
      tables = tables().genCode(ctx);
      code.append(tables.code()).append("\n");
    } else {
      f = new ExprCode[fields.length][3];
      for (int k = 0; k < f.length; k++) {
        for (int j = 0; j < 3; j++) {
          f[k][j] = fields[k][j].genCode(ctx);
          code.append(f[k][j].code()).append("\n");
        }
      }
    }
    code.append("int ").append(ev.value()).append(" = -1;\n");
    // the memo's arguments as objects, null for NULL: the first three, then the tables or each table's fields
    List<String> objects = new ArrayList<>();
    for (int i = 0; i < 3; i++) {
      boolean index = args[key == null ? 4 + i : i].dataType().equals(DataTypes.IntegerType);
      objects.add(object(a[i], index ? "Integer.valueOf(" + a[i].value() + ")" : a[i].value().toString()));
    }
    if (f == null) {
      objects.add(object(tables, tables.value().toString()));
    } else {
      for (ExprCode[] table : f) {
        for (int j = 0; j < 3; j++) {
          objects.add(object(table[j], j == 2 ? "Boolean.valueOf(" + table[j].value() + ")" : table[j].value().toString()));
        }
      }
    }
    String value = ev.value().toString();
    if (key != null && asRows && (f == null || f.length == 1)) {
      // the statement memo's code in a function of its own: the code a row runs stays small for the JIT
      String[] params = new String[objects.size()];
      StringBuilder decl = new StringBuilder();
      for (int i = 0; i < params.length; i++) {
        params[i] = "o" + i;
        decl.append(i == 0 ? "" : ", ").append("Object o").append(i);
      }
      String fn = ctx.freshName("rplStatementMemo");
      fn = ctx.addNewFunction(fn, "private int " + fn + "(" + decl + ") {\n  int v;\n"
          + memoCode(ctx, key, params, f != null, "v") + "  return v;\n}\n", false);
      code.append(shapesCode(ctx, key, a, tables, f, value,
          value + " = " + fn + "(" + String.join(", ", objects) + ");\n"));
    } else {
      code.append(memoCode(ctx, key, objects.toArray(new String[0]), f != null, value));
    }
    code.append("boolean ").append(ev.isNull()).append(" = ").append(value).append(" < 0;\n");
    return ev.copy(new CodeBlock(seq(code.toString()), seq()), ev.isNull(), ev.value());
  }

  /** `v`, the value of `e`, as an object: null where `e` is NULL. */
  private static String object(ExprCode e, String v) {
    return e.isNull() + " ? null : " + v;
  }

  /**
   * Code that hands a statement memo its arguments `o` (objects, null for NULL: the first three, then the tables,
   * or each table's db, name and flag where `inPlace`) and sets `value` to its code.
   */
  private String memoCode(CodegenContext ctx, Expression[] key, String[] o, boolean inPlace, String value) {
    StatementMemo memo = new StatementMemo(spec, key);
    String ref = ctx.addReferenceObj("rplStatements", memo, "java.util.function.IntUnaryOperator");
    String arr = ctx.addReferenceObj("rplStatementArgs", memo.arguments(), "Object[]");
    StringBuilder code = new StringBuilder();
    for (int i = 0; i < 3; i++) {
      code.append(arr).append("[").append(i).append("] = ").append(o[i]).append(";\n");
    }
    String t = inPlace ? tablesInPlace(ctx, Arrays.copyOfRange(o, 3, o.length), code) : o[3];
    code.append(arr).append("[3] = ").append(t).append(";\n")
        .append(value).append(" = ").append(ref).append(".applyAsInt(0);\n");
    return code.toString();
  }

  /**
   * Code that looks a one-table statement up in the row memo of its command, table db and flag
   * (StatementShapes) and sets `value` to its code, else runs `memo`: for a statement of other tables, a NULL
   * channel or command, or a shape the shapes do not take.
   */
  private String shapesCode(CodegenContext ctx, Expression[] key, ExprCode[] a, ExprCode tables, ExprCode[][] f,
      String value, String memo) {
    StatementShapes shapes = new StatementShapes(spec, key, args[2].nullable());
    String ref = ctx.addReferenceObj("rplShapes", shapes, "java.util.function.IntUnaryOperator");
    String memos = ctx.addReferenceObj("rplShapeMemos", shapes.memos(), "java.util.function.IntUnaryOperator[]");
    String scratches = ctx.addReferenceObj("rplShapeScratches", shapes.scratches(), "long[][]");
    String states = ctx.addReferenceObj("rplShapeStates", shapes.states(), "Object[][]");
    String shape = shapeFunction(ctx, ctx.addReferenceObj("rplShapeScratch", shapes.scratch(), "long[]"), ref,
        ctx.addReferenceObj("rplShapeState", shapes.state(), "Object[]"));
    String lookup = RowCode.lookupInMemoPassed(ctx);
    String s = ctx.freshName("shape");
    String tdb = ctx.freshName("tableDb");
    String name = ctx.freshName("tableName");
    String flag = ctx.freshName("updating");
    StringBuilder code = new StringBuilder();
    code.append("int ").append(s).append(" = -1;\n")
        .append("if (!").append(a[0].isNull()).append(" && !").append(a[1].isNull()).append(") {\n");
    if (f != null) {
      code.append("  {\n")
          .append("    UTF8String ").append(tdb).append(" = ").append(f[0][0].isNull()).append(" ? null : ")
          .append(f[0][0].value()).append(";\n")
          .append("    UTF8String ").append(name).append(" = ").append(f[0][1].isNull()).append(" ? null : ")
          .append(f[0][1].value()).append(";\n")
          .append("    int ").append(flag).append(" = ").append(f[0][2].isNull()).append(" ? 2 : ")
          .append(f[0][2].value()).append(" ? 1 : 0;\n");
    } else {
      String t = ctx.freshName("table");
      String v = tables.value().toString();
      code.append("  if (!").append(tables.isNull()).append(" && ").append(v).append(".numElements() == 1 && !")
          .append(v).append(".isNullAt(0)) {\n")
          .append("    InternalRow ").append(t).append(" = ").append(v).append(".getStruct(0, 3);\n")
          .append("    UTF8String ").append(tdb).append(" = ").append(t).append(".isNullAt(0) ? null : ")
          .append(t).append(".getUTF8String(0);\n")
          .append("    UTF8String ").append(name).append(" = ").append(t).append(".isNullAt(1) ? null : ")
          .append(t).append(".getUTF8String(1);\n")
          .append("    int ").append(flag).append(" = ").append(t).append(".isNullAt(2) ? 2 : ").append(t)
          .append(".getBoolean(2) ? 1 : 0;\n");
    }
    code.append("    ").append(s).append(" = ").append(shape).append("(").append(RowCode.parts(a[1].value().toString()))
        .append(", ").append(RowCode.parts(tdb, tdb + " == null", "-1")).append(", ").append(flag).append(");\n")
        .append("    if (").append(s).append(" >= 0) {\n")
        .append("      ").append(value).append(" = ").append(lookup).append("(").append(memos).append("[").append(s)
        .append("], ").append(scratches).append("[").append(s).append("], ")
        .append(states).append("[").append(s).append("], ")
        .append(RowCode.parts(a[0].value().toString())).append(", ").append(RowCode.parts(a[2], "0")).append(", ")
        .append(RowCode.parts(name, name + " == null", "-1")).append(");\n")
        .append("    }\n")
        .append("  }\n")
        .append("}\n")
        .append("if (").append(s).append(" < 0) {\n").append(memo).append("}\n");
    return code.toString();
  }

  /**
   * The generated function that answers a statement's shape's index: found in the shapes' state `st` where its
   * names pass no SHORT bytes (StatementShapes.state), else written into the shapes' scratch `w`
   * (StatementShapes has the layout) and answered by `ref`, with the names' bytes for a shape not known yet.
   */
  private static String shapeFunction(CodegenContext ctx, String w, String ref, String st) {
    String name = ctx.freshName("rplShape");
    String at = "Platform.LONG_ARRAY_OFFSET + " + StatementShapes.WORDS * 8;
    String copy = "    Platform.copyMemory(mb, mo, w, " + at + ", mn);\n"
        + "    if (dn > 0) {\n"
        + "      Platform.copyMemory(db, dbo, w, " + at + " + mn, dn);\n"
        + "    }\n";
    String id = NameIds.findFunction(ctx);
    String body = "private int " + name + "(Object mb, long mo, int mn, Object db, long dbo, int dn, int updating) {\n"
        + "  byte[] shapes = (byte[]) " + st + "[2];\n"
        + "  if (shapes != null && mn <= " + RowCodeMemo.SHORT + " && dn <= " + RowCodeMemo.SHORT + ") {\n"
        + RowCode.local("mb", "mo", "mn", "m0", "m1")
        + "    int c = " + id + "((long[]) " + st + "[0], m0, m1, mn);\n"
        + "    if (c >= 0) {\n"
        + RowCode.local("db", "dbo", "dn", "d0", "d1")
        + "      int d = dn < 0 ? 0 : " + id + "((long[]) " + st + "[1], d0, d1, dn) + 1;\n"
        + "      if (d > 0 || dn < 0) {\n"
        + "        int e = shapes[(c * " + (StatementShapes.DBS_MAX + 1) + " + d) * 3 + updating];\n"
        + "        if (e != 0) {\n"
        + "          return e - 2;\n"
        + "        }\n"
        + "      }\n"
        + "    }\n"
        + "  }\n"
        + "  if (mn + Math.max(dn, 0) > " + StatementShapes.NAME_BYTES + ") {\n"
        + "    return -1;\n"
        + "  }\n"
        + "  long[] w = " + w + ";\n"
        + RowCode.words("mb", "mo", "mn", 0)
        + "  if (dn < 0) {\n"
        + "    w[2] = 0L;\n"
        + "    w[3] = 0L;\n"
        + "  } else {\n"
        + RowCode.words("db", "dbo", "dn", 2)
        + "  }\n"
        + "  w[" + (StatementShapes.WORDS - 1) + "] = (long) mn << 32 | (long) (dn + 1) << 2 | updating;\n"
        + "  boolean copied = mn > " + RowCodeMemo.SHORT + " || dn > " + RowCodeMemo.SHORT + ";\n"
        + "  if (copied) {\n" + copy + "  }\n"
        + "  int s = " + ref + ".applyAsInt(0);\n"
        + "  if (s == " + StatementShapes.MISS + ") {\n"
        + "    if (!copied) {\n" + copy + "    }\n"
        + "    s = " + ref + ".applyAsInt(1);\n"
        + "  }\n"
        + "  return s;\n"
        + "}\n";
    return ctx.addNewFunction(name, body, false);
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
   * Code that writes each row's table fields (`fields`: objects, null for NULL, three a table) into one array of
   * rows made here, and that array's name: Spark's
   * own code for array(named_struct(...)) allocates both for every row, which cost about a fifth of a bare scan.
   */
  private static String tablesInPlace(CodegenContext ctx, String[] fields, StringBuilder code) {
    GenericInternalRow[] rows = new GenericInternalRow[fields.length / 3];
    for (int k = 0; k < rows.length; k++) {
      rows[k] = new GenericInternalRow(3);
      String r = ctx.addReferenceObj("rplTable", rows[k], GenericInternalRow.class.getName());
      for (int j = 0; j < 3; j++) {
        code.append(r).append(".update(").append(j).append(", ").append(fields[3 * k + j]).append(");\n");
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
