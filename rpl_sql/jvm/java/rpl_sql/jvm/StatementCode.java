package rpl_sql.jvm;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeBlock;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;

/**
 * rpl_sql__jsc(channel key, command, folded default db, tables): a statement's whole code as a Catalyst
 * expression (StatementMemo.decide has the steps), where the compiled SQL walks the tables with higher-order
 * functions, which Spark interprets: 15-25x the bare scan for a one-table statement per row. The command
 * arrives upper-cased ('OTHER' for NULL or empty) and the default db folded, as the SQL computes them.
 */
public final class StatementCode extends SpecExpression {
  private static final long serialVersionUID = 1L;
  private final StatementMemo memo;

  public StatementCode(String spec, Expression[] args) {
    super(spec, args);
    this.memo = new StatementMemo(spec);
  }

  @Override
  public Object eval(InternalRow row) {
    Object[] a = memo.arguments();
    for (int i = 0; i < 4; i++) {
      a[i] = args[i].eval(row);
    }
    int v = memo.applyAsInt(0);
    return v < 0 ? null : v;
  }

  @Override
  public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
    String ref = ctx.addReferenceObj("rplStatements", memo, "java.util.function.IntUnaryOperator");
    String a = ctx.addReferenceObj("rplStatementArgs", memo.arguments(), "Object[]");
    StringBuilder code = new StringBuilder();
    for (int i = 0; i < 4; i++) {
      ExprCode e = args[i].genCode(ctx);
      String v = i == 0 && args[0].dataType().equals(DataTypes.IntegerType) ? "Integer.valueOf(" + e.value() + ")"
          : e.value().toString();
      code.append(e.code()).append("\n").append(a).append("[").append(i).append("] = ").append(e.isNull())
          .append(" ? null : ").append(v).append(";\n");
    }
    code.append("int ").append(ev.value()).append(" = ").append(ref).append(".applyAsInt(0);\n")
        .append("boolean ").append(ev.isNull()).append(" = ").append(ev.value()).append(" < 0;\n");
    return ev.copy(new CodeBlock(seq(code.toString()), seq()), ev.isNull(), ev.value());
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
