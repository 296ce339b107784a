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
    String pre = ce.code() + "\n" + ke.code() + "\n" + te.code() + "\n"
        + "boolean " + ev.isNull() + " = true;\n"
        + "int " + ev.value() + " = -1;\n";
    RowCodeMemo m = new RowCodeMemo(spec);
    if (!c.dataType().equals(DataTypes.IntegerType)) {
      String ref = ctx.addReferenceObj("rplRowCode", m, "java.util.function.Function");
      String ch = ctx.freshName("channelMemo");
      String code = pre
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
    // By index: the names go to the memo's scratch as primitives, so Spark's strings stay in this method.
    String ref = ctx.addReferenceObj("rplRowCode", m, "java.util.function.IntUnaryOperator");
    String w = ctx.addReferenceObj("rplScratch", m.scratch(), "long[]");
    String kn = ctx.freshName("kn");
    String tn = ctx.freshName("tn");
    String chm = ctx.freshName("channelMemo");
    String at = "Platform.LONG_ARRAY_OFFSET + " + RowCodeMemo.WORDS * 8;
    String code = pre
        + "if (!" + ce.isNull() + " && !" + ke.isNull() + ") {\n"
        + "  int " + kn + " = " + ke.value() + ".numBytes();\n"
        + "  int " + tn + " = " + te.isNull() + " ? -1 : " + te.value() + ".numBytes();\n"
        + "  if ((long) " + kn + " + Math.max(" + tn + ", 0) > " + RowCodeMemo.NAME_BYTES + ") {\n"
        + "    Object " + chm + " = ((java.util.function.IntFunction) " + ref + ").apply(" + ce.value() + ");\n"
        + "    " + ev.value() + " = " + chm + " == null ? -1 : ((java.util.function.ToIntBiFunction) " + chm
        + ").applyAsInt(" + ke.value() + ", " + te.isNull() + " ? null : " + te.value() + ");\n"
        + "  } else {\n"
        + words(ctx, ke.value().toString(), kn, w, 0)
        + "    if (" + te.isNull() + ") {\n"
        + "      " + w + "[2] = 0L;\n"
        + "      " + w + "[3] = 0L;\n"
        + "    } else {\n"
        + words(ctx, te.value().toString(), tn, w, 2)
        + "    }\n"
        + "    " + w + "[4] = (long) " + kn + " << 32 | (" + tn + " & 0xFFFFFFFFL);\n"
        + "    if (" + kn + " > " + RowCodeMemo.SHORT + " || " + tn + " > " + RowCodeMemo.SHORT + ") {\n"
        + "      Platform.copyMemory(" + ke.value() + ".getBaseObject(), " + ke.value() + ".getBaseOffset(), " + w
        + ", " + at + ", " + kn + ");\n"
        + "      if (" + tn + " > 0) {\n"
        + "        Platform.copyMemory(" + te.value() + ".getBaseObject(), " + te.value() + ".getBaseOffset(), "
        + w + ", " + at + " + " + kn + ", " + tn + ");\n"
        + "      }\n"
        + "    }\n"
        + "    " + ev.value() + " = " + ref + ".applyAsInt(" + ce.value() + ");\n"
        + "  }\n"
        + "  " + ev.isNull() + " = " + ev.value() + " < 0;\n"
        + "}\n";
    return ev.copy(new CodeBlock(seq(code), seq()), ev.isNull(), ev.value());
  }

  /** Java that writes the words of string `s` (length in `n`) to w[i] and w[i + 1], as RowCodeMemo.first/last. */
  private static String words(CodegenContext ctx, String s, String n, String w, int i) {
    String b = s + ".getBaseObject()";
    String o = s + ".getBaseOffset()";
    String h = ctx.freshName("word");
    String j = ctx.freshName("j");
    return "    if (" + n + " >= 8) {\n"
        + "      " + w + "[" + i + "] = Platform.getLong(" + b + ", " + o + ");\n"
        + "      " + w + "[" + (i + 1) + "] = Platform.getLong(" + b + ", " + o + " + " + n + " - 8);\n"
        + "    } else {\n"
        + "      long " + h + " = 0L;\n"
        + "      if (" + n + " >= 4) {\n"
        + "        " + h + " = ((long) Platform.getInt(" + b + ", " + o + ") & 0xFFFFFFFFL) << 32"
        + " | ((long) Platform.getInt(" + b + ", " + o + " + " + n + " - 4) & 0xFFFFFFFFL);\n"
        + "      } else {\n"
        + "        for (int " + j + " = 0; " + j + " < " + n + "; " + j + "++) {\n"
        + "          " + h + " = " + h + " << 8 | (Platform.getByte(" + b + ", " + o + " + " + j + ") & 0xFF);\n"
        + "        }\n"
        + "      }\n"
        + "      " + w + "[" + i + "] = " + h + ";\n"
        + "      " + w + "[" + (i + 1) + "] = 0L;\n"
        + "    }\n";
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
