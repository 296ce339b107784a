package rpl_sql.jvm;

import java.util.Arrays;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeBlock;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * rpl_sql__jrw(channel, db, channel key, folded db): rewrite_db as a Catalyst expression. As RowCode does for a
 * row's code, the generated code hands the bytes of the raw channel and db to a per-task memo (RewriteMemo), and
 * only a pair it has not seen evaluates the key (the channel's index or canonical name, the folded db). NULL
 * for a NULL channel or db and for an unknown channel.
 */
public final class RewriteDb extends SpecExpression {
  private static final long serialVersionUID = 1L;
  private transient RewriteMemo memo;

  public RewriteDb(String spec, Expression[] args) {
    super(spec, args);
  }

  @Override
  public Object eval(InternalRow row) {
    if (args[0].eval(row) == null || args[1].eval(row) == null) {
      return null;
    }
    if (memo == null) {
      memo = new RewriteMemo(spec, null);
    }
    return memo.apply(args[2].eval(row), args[3].eval(row));
  }

  @Override
  public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
    ExprCode ce = args[0].genCode(ctx);
    ExprCode de = args[1].genCode(ctx);
    Expression[] key = KeyBinding.bind(Arrays.copyOfRange(args, 0, 2), Arrays.copyOfRange(args, 2, 4));
    RewriteMemo m = new RewriteMemo(spec, key);
    String ref = ctx.addReferenceObj("rplRewrite", m, "java.util.function.IntFunction");
    String code = ce.code() + "\n" + de.code() + "\n"
        + "boolean " + ev.isNull() + " = true;\n"
        + "UTF8String " + ev.value() + " = null;\n"
        + "if (!" + ce.isNull() + " && !" + de.isNull() + ") {\n";
    if (key != null) {
      String w = ctx.addReferenceObj("rplScratch", m.scratch(), "long[]");
      String mfn = ctx.freshName("rplRewriteMiss");
      String miss = ctx.addNewFunction(mfn, missFunction(mfn, ref), false);
      String fn = ctx.freshName("rplRewrite");
      String lookup = ctx.addNewFunction(fn, lookupFunction(fn, ref, w, miss), false);
      code += "  " + ev.value() + " = " + lookup + "(" + RowCode.parts(ce.value().toString()) + ", "
          + RowCode.parts(de.value().toString()) + ");\n";
    } else {  // the key computed here, every row: correct, and slower
      ExprCode ke = args[2].genCode(ctx);
      ExprCode fe = args[3].genCode(ctx);
      String boxed = args[2].dataType().equals(DataTypes.IntegerType) ? "Integer.valueOf(" + ke.value() + ")" : ke.value().toString();
      code += ke.code() + "\n" + fe.code() + "\n"
          + "  " + ev.value() + " = (UTF8String) ((java.util.function.BiFunction) " + ref + ").apply("
          + ke.isNull() + " ? null : " + boxed + ", " + fe.isNull() + " ? null : " + fe.value() + ");\n";
    }
    code += "  " + ev.isNull() + " = " + ev.value() + " == null;\n"
        + "}\n";
    return ev.copy(new CodeBlock(seq(code), seq()), ev.isNull(), ev.value());
  }

  private static final String PARAMS = "Object cb, long co, int cn, Object db, long dof, int dn";

  /** The generated function that writes the names' words (and long names' bytes) into scratch and looks them up. */
  private static String lookupFunction(String name, String ref, String w, String miss) {
    String at = "Platform.LONG_ARRAY_OFFSET + " + RewriteMemo.WORDS * 8;
    String missed = miss + "(cb, co, cn, db, dof, dn)";
    return "private UTF8String " + name + "(" + PARAMS + ") {\n"
        + "  long[] w = " + w + ";\n"
        + "  if ((long) cn + dn > " + RowCodeMemo.NAME_BYTES + ") {\n"
        + "    w[" + (RewriteMemo.WORDS - 1) + "] = " + RowCodeMemo.UNKEPT + "L;\n"
        + "    return " + missed + ";\n"
        + "  }\n"
        + RowCode.words("cb", "co", "cn", 0)
        + RowCode.words("db", "dof", "dn", 2)
        + "  w[" + (RewriteMemo.WORDS - 1) + "] = (long) cn << 32 | dn;\n"
        + "  if (cn > " + RowCodeMemo.SHORT + " || dn > " + RowCodeMemo.SHORT + ") {\n"
        + "    Platform.copyMemory(cb, co, w, " + at + ", cn);\n"
        + "    Platform.copyMemory(db, dof, w, " + at + " + cn, dn);\n"
        + "  }\n"
        + "  Object v = ((java.util.function.IntFunction) " + ref + ").apply(" + RewriteMemo.LOOKUP + ");\n"
        + "  return v == w ? " + missed + " : (UTF8String) v;\n"
        + "}\n";
  }

  /** The generated function that hands a missed pair's raw names (lengths, bytes) to the memo to decide. */
  private static String missFunction(String name, String ref) {
    String at = "Platform.LONG_ARRAY_OFFSET + " + RewriteMemo.KEY_WORDS * 8;
    return "private UTF8String " + name + "(" + PARAMS + ") {\n"
        + "  long[] ks = (long[]) ((java.util.function.IntFunction) " + ref + ").apply(cn + dn);\n"
        + "  ks[0] = cn;\n"
        + "  ks[1] = dn;\n"
        + "  Platform.copyMemory(cb, co, ks, " + at + ", cn);\n"
        + "  Platform.copyMemory(db, dof, ks, " + at + " + cn, dn);\n"
        + "  return (UTF8String) ((java.util.function.IntFunction) " + ref + ").apply(" + RewriteMemo.DECIDE + ");\n"
        + "}\n";
  }

  @Override
  public DataType dataType() {
    return DataTypes.StringType;
  }

  @Override
  public String prettyName() {
    return "rpl_sql__jrw";
  }

  @Override
  protected SpecExpression with(Expression[] a) {
    return new RewriteDb(spec, a);
  }
}
