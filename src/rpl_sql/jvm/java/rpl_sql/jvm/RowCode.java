package rpl_sql.jvm;

import java.io.Serializable;
import java.util.Arrays;
import java.util.Objects;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeBlock;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.unsafe.types.UTF8String;
import scala.collection.immutable.IndexedSeq;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * rpl_sql__jrc(channel, db, table) in Python sessions: a row's whole code (database rules, rewrite, table
 * rules) as a Catalyst expression, so that the generated code hands Spark's string bytes to a per-task
 * memo (RowCodeMemo), with no conversion to Java strings and no boxing of the channel as a UDF would have.
 */
public final class RowCode extends Expression implements Serializable {
  private static final long serialVersionUID = 1L;
  private final String spec;
  private final Expression c;
  private final Expression k;
  private final Expression t;
  private transient RowCodeMemo memo;

  /** A NULL table: the database rules' answer where they decide, else NULL. */
  public RowCode(String spec, Expression c, Expression k, Expression t) {
    this.spec = spec;
    this.c = c;
    this.k = k;
    this.t = t;
  }

  private RowCodeMemo memo() {
    if (memo == null) {
      memo = new RowCodeMemo(spec);
    }
    return memo;
  }

  @Override
  public Object eval(InternalRow row) {
    return memo().code(c.eval(row), (UTF8String) k.eval(row), (UTF8String) t.eval(row));
  }

  @Override
  public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
    ExprCode ce = c.genCode(ctx);
    ExprCode ke = k.genCode(ctx);
    ExprCode te = t.genCode(ctx);
    boolean byIndex = c.dataType().equals(DataTypes.IntegerType);
    String ref = ctx.addReferenceObj("rplRowCode", new RowCodeMemo(spec),
        byIndex ? "java.util.function.IntFunction" : "java.util.function.Function");
    String ch = ctx.freshName("channelMemo");
    String code = ce.code() + "\n" + ke.code() + "\n" + te.code() + "\n"
        + "boolean " + ev.isNull() + " = true;\n"
        + "int " + ev.value() + " = -1;\n"
        + "if (!" + ce.isNull() + " && !" + ke.isNull() + ") {\n"
        + "  java.util.function.ToIntBiFunction " + ch + " = (java.util.function.ToIntBiFunction) " + ref
        + ".apply(" + ce.value() + ");\n"
        + "  if (" + ch + " != null) {\n"
        + "    " + ev.value() + " = " + ch + ".applyAsInt(" + ke.value() + ", " + te.isNull() + " ? null : "
        + te.value() + ");\n"
        + "    " + ev.isNull() + " = " + ev.value() + " < 0;\n"
        + "  }\n"
        + "}\n";
    return ev.copy(new CodeBlock(seq(code), seq()), ev.isNull(), ev.value());
  }

  @SafeVarargs
  private static <T> Seq<T> seq(T... xs) {
    return CollectionConverters.asScala(Arrays.asList(xs)).toList();
  }

  @Override
  public Seq<Expression> children() {
    return seq(c, k, t);
  }

  @Override
  public Expression withNewChildrenInternal(IndexedSeq<Expression> ch) {
    return new RowCode(spec, ch.apply(0), ch.apply(1), ch.apply(2));
  }

  @Override
  public DataType dataType() {
    return DataTypes.IntegerType;
  }

  @Override
  public boolean nullable() {
    return true;
  }

  @Override
  public String prettyName() {
    return "rpl_sql__jrc";
  }

  @Override
  public int productArity() {
    return 4;
  }

  @Override
  public Object productElement(int n) {
    switch (n) {
      case 0: return spec;
      case 1: return c;
      case 2: return k;
      case 3: return t;
      default: throw new IndexOutOfBoundsException(String.valueOf(n));
    }
  }

  @Override
  public boolean canEqual(Object o) {
    return o instanceof RowCode;
  }

  @Override
  public boolean equals(Object o) {
    if (!(o instanceof RowCode)) {
      return false;
    }
    RowCode e = (RowCode) o;
    return spec.equals(e.spec) && c.equals(e.c) && k.equals(e.k) && t.equals(e.t);
  }

  @Override
  public int hashCode() {
    return Objects.hash(spec, c, k, t);
  }
}
