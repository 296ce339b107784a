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
 * rpl_sql__jrc(channel, db, table, channel key, folded db, folded table) in Python sessions and spark-sql: a
 * row's whole code (database rules, rewrite, table rules) as a Catalyst expression. The generated code hands
 * the bytes of the row's raw channel, db and table to a per-task memo (RowCodeMemo); only a row it has not
 * seen evaluates the last three arguments (the channel's index or canonical name and the folded names, as
 * the compiled SQL computes them), so a row costs one lookup: no string compared, no name folded, nothing
 * converted to a Java string or boxed.
 */
public final class RowCode extends SpecExpression {
  private static final long serialVersionUID = 1L;
  private transient RowCodeMemo memo;

  /** A NULL channel or db: NULL. A NULL table: the database rules' answer where they decide, else NULL. */
  public RowCode(String spec, Expression[] args) {
    super(spec, args);
  }

  private RowCodeMemo memo() {
    if (memo == null) {
      memo = new RowCodeMemo(spec, null);
    }
    return memo;
  }

  @Override
  public Object eval(InternalRow row) {
    UTF8String c = (UTF8String) args[0].eval(row);
    UTF8String k = (UTF8String) args[1].eval(row);
    if (c == null || k == null) {
      return null;
    }
    return memo().code(c, k, (UTF8String) args[2].eval(row), args[3].eval(row), (UTF8String) args[4].eval(row),
        (UTF8String) args[5].eval(row));
  }

  @Override
  public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
    Expression[] key = boundKey();
    return lookup(ctx, ev, new Expression[] {args[0], args[1], args[2]}, new RowCodeMemo(spec, key), false,
        key != null ? null : ref -> missed(ctx, ref));
  }

  /**
   * Code that looks the row's raw channel, db and table (`names`) up in `m` and, on a miss, has the memo decide
   * them (`missed` null: the memo's key is bound to the names) or writes the key `missed` computes first. A
   * NULL channel is NULL; so is a NULL db, unless `nullDbIsEmpty` (its answer is that of '').
   */
  static ExprCode lookup(CodegenContext ctx, ExprCode ev, Expression[] names, RowCodeMemo m, boolean nullDbIsEmpty,
      java.util.function.UnaryOperator<String> missed) {
    // the raw names' code first: a column is read where its first reference is generated, and the key's
    // code below, which reads the same columns, runs only on a miss
    ExprCode ce = names[0].genCode(ctx);
    ExprCode ke = names[1].genCode(ctx);
    ExprCode te = names[2].genCode(ctx);
    String ref = ctx.addReferenceObj("rplRowCode", m, "java.util.function.IntUnaryOperator");
    String w = ctx.addReferenceObj("rplScratch", m.scratch(), "long[]");
    String st = ctx.addReferenceObj("rplState", m.state(), "Object[]");
    // The row's work is in functions of the generated class that take the names' backing objects, offsets and
    // lengths: the method consuming a row stays small enough for the JIT to inline into the scan's loop, and
    // Spark's string objects, never passed on, are then not allocated at all.
    String args = parts(ce.value().toString()) + ", "
        + (nullDbIsEmpty ? parts(ke, "0") : parts(ke.value().toString())) + ", " + parts(te, "-1");
    String miss = null;
    if (missed == null) {  // the lookup function decides a miss itself: less code here, where every byte counts
      String mfn = ctx.freshName("rplMiss");
      miss = ctx.addNewFunction(mfn, missFunction(mfn, ref, false), false);
    }
    String fn = ctx.freshName("rplLookup");
    String lookup = ctx.addNewFunction(fn, lookupFunction(ctx, fn, ref, w, st, miss, false), false);
    String code = ce.code() + "\n" + ke.code() + "\n" + te.code() + "\n"
        + "boolean " + ev.isNull() + " = true;\n"
        + "int " + ev.value() + " = -1;\n"
        + "if (!" + ce.isNull() + (nullDbIsEmpty ? "" : " && !" + ke.isNull()) + ") {\n"
        + "  " + ev.value() + " = " + lookup + "(" + args + ");\n";
    if (missed != null) {
      code += "  if (" + ev.value() + " == " + RowCodeMemo.MISS + ") {\n"
          + missed.apply(ref)
          + "    " + ev.value() + " = " + ref + ".applyAsInt(1);\n"
          + "  }\n";
    }
    code += "  " + ev.isNull() + " = " + ev.value() + " < 0;\n"
        + "}\n";
    return ev.copy(new CodeBlock(seq(code), seq()), ev.isNull(), ev.value());
  }

  /** A nullable name's object, offset and length, with length `nullLength` where it is NULL. */
  static String parts(ExprCode e, String nullLength) {
    return parts(e.value().toString(), e.isNull().toString(), nullLength);
  }

  /** The object, offset and length of the string `s`, NULL where `n` is true, then of length `nullLength`. */
  static String parts(String s, String n, String nullLength) {
    return n + " ? null : " + s + ".getBaseObject(), " + n + " ? 0L : " + s + ".getBaseOffset(), "
        + n + " ? " + nullLength + " : " + s + ".numBytes()";
  }

  static String parts(String s) {
    return s + ".getBaseObject(), " + s + ".getBaseOffset(), " + s + ".numBytes()";
  }

  private static final String PARAMS = "Object cb, long co, int cn, Object kb, long ko, int kn, Object tb, long to, int tn";
  private static final String MEMO_PARAMS = "java.util.function.IntUnaryOperator m, long[] w, Object[] st, ";

  /**
   * The name of a generated function that looks a row up as the lookup function below does, in the memo,
   * scratch and state passed as its first three arguments (a memo chosen for each row, as StatementShapes
   * chooses one); that memo decides a miss.
   */
  static String lookupInMemoPassed(CodegenContext ctx) {
    String mfn = ctx.freshName("rplMiss");
    String miss = ctx.addNewFunction(mfn, missFunction(mfn, "m", true), false);
    String fn = ctx.freshName("rplLookup");
    return ctx.addNewFunction(fn, lookupFunction(ctx, fn, "m", "w", "st", miss, true), false);
  }

  /**
   * The generated function that looks a row up in the memo's state (RowCodeMemo.state) where its names pass
   * no SHORT bytes, else writes them into scratch (as RowCodeMemo.fill) and has the memo look them up; a miss
   * goes to the function `miss` if there is one, else returns MISS.
   */
  private static String lookupFunction(CodegenContext ctx, String name, String ref, String w, String st, String miss,
      boolean passed) {
    String at = "Platform.LONG_ARRAY_OFFSET + " + RowCodeMemo.WORDS * 8;
    String missed = miss == null ? String.valueOf(RowCodeMemo.MISS)
        : miss + "(" + (passed ? "m, " : "") + "cb, co, cn, kb, ko, kn, tb, to, tn)";
    return "private int " + name + "(" + (passed ? MEMO_PARAMS : "") + PARAMS + ") {\n"
        + (passed ? "" : "  long[] w = " + w + ";\n")
        + found(ctx, passed ? "st" : st)
        + "  if ((long) cn + kn + Math.max(tn, 0) > " + RowCodeMemo.NAME_BYTES + ") {\n"
        + "    w[" + (RowCodeMemo.WORDS - 1) + "] = " + RowCodeMemo.UNKEPT + "L;\n"
        + "    return " + missed + ";\n"
        + "  }\n"
        + words("cb", "co", "cn", 0)
        + words("kb", "ko", "kn", 2)
        + "  if (tn < 0) {\n"
        + "    w[4] = 0L;\n"
        + "    w[5] = 0L;\n"
        + "  } else {\n"
        + words("tb", "to", "tn", 4)
        + "  }\n"
        + "  w[" + (RowCodeMemo.WORDS - 1) + "] = (long) cn << 42 | (long) kn << 21 | (tn + 1);\n"
        + "  if (cn > " + RowCodeMemo.SHORT + " || kn > " + RowCodeMemo.SHORT + " || tn > " + RowCodeMemo.SHORT + ") {\n"
        + "    Platform.copyMemory(cb, co, w, " + at + ", cn);\n"
        + "    Platform.copyMemory(kb, ko, w, " + at + " + cn, kn);\n"
        + "    if (tn > 0) {\n"
        + "      Platform.copyMemory(tb, to, w, " + at + " + cn + kn, tn);\n"
        + "    }\n"
        + "  }\n"
        + "  int v = " + ref + ".applyAsInt(0);\n"
        + "  return v == " + RowCodeMemo.MISS + " ? " + missed + " : v;\n"
        + "}\n";
  }

  /**
   * Java that returns the code of a row whose names pass no SHORT bytes where the memo's state `st` holds it:
   * NameIds.find's probes over each name's slots and the (channel, db)'s row of codes, as applyAsInt reads them.
   */
  private static String found(CodegenContext ctx, String st) {
    String id = NameIds.findFunction(ctx);
    int shortest = RowCodeMemo.SHORT;
    return "  byte[][][] codes = (byte[][][]) " + st + "[3];\n"
        + "  if (codes != null && cn <= " + shortest + " && kn <= " + shortest + " && tn <= " + shortest + ") {\n"
        + local("cb", "co", "cn", "c0", "c1")
        + "    int c = " + id + "((long[]) " + st + "[0], c0, c1, cn);\n"
        + "    byte[][] byDb = c >= 0 && c < codes.length ? codes[c] : null;\n"
        + "    if (byDb != null) {\n"
        + local("kb", "ko", "kn", "k0", "k1")
        + "      int k = " + id + "((long[]) " + st + "[1], k0, k1, kn);\n"
        + "      byte[] row = k >= 0 && k < byDb.length ? byDb[k] : null;\n"
        + "      if (row != null) {\n"
        + local("tb", "to", "tn", "t0", "t1")
        + "        int t = tn < 0 ? 0 : " + id + "((long[]) " + st + "[2], t0, t1, tn) + 1;\n"
        + "        if ((t > 0 || tn < 0) && t < row.length && row[t] != 0) {\n"
        + "          return row[t] - 2;\n"
        + "        }\n"
        + "      }\n"
        + "    }\n"
        + "  }\n";
  }

  /**
   * Java that declares w0 and w1, the words of the name at (b, o), `n` bytes (both 0 where n < 0), as
   * RowCodeMemo.first/last.
   */
  static String local(String b, String o, String n, String w0, String w1) {
    return "    long " + w0 + " = 0L;\n"
        + "    long " + w1 + " = 0L;\n"
        + "    if (" + n + " >= 8) {\n"
        + "      " + w0 + " = Platform.getLong(" + b + ", " + o + ");\n"
        + "      " + w1 + " = Platform.getLong(" + b + ", " + o + " + " + n + " - 8);\n"
        + "    } else if (" + n + " >= 4) {\n"
        + "      " + w0 + " = ((long) Platform.getInt(" + b + ", " + o + ") & 0xFFFFFFFFL) << 32"
        + " | ((long) Platform.getInt(" + b + ", " + o + " + " + n + " - 4) & 0xFFFFFFFFL);\n"
        + "    } else {\n"
        + "      for (int j = 0; j < " + n + "; j++) {\n"
        + "        " + w0 + " = " + w0 + " << 8 | (Platform.getByte(" + b + ", " + o + " + j) & 0xFF);\n"
        + "      }\n"
        + "    }\n";
  }

  /** The generated function that hands a missed row's raw names to the memo (key scratch: lengths, bytes). */
  private static String missFunction(String name, String ref, boolean passed) {
    String at = "Platform.LONG_ARRAY_OFFSET + " + RowCodeMemo.KEY_WORDS * 8;
    return "private int " + name + "(" + (passed ? "java.util.function.IntUnaryOperator m, " : "") + PARAMS + ") {\n"
        + "  long[] ks = (long[]) ((java.util.function.IntFunction) " + ref + ").apply(cn + kn + Math.max(tn, 0));\n"
        + "  ks[0] = cn;\n"
        + "  ks[1] = kn;\n"
        + "  ks[2] = tn < 0 ? " + RowCodeMemo.NULL_KEY + "L : tn;\n"
        + "  Platform.copyMemory(cb, co, ks, " + at + ", cn);\n"
        + "  Platform.copyMemory(kb, ko, ks, " + at + " + cn, kn);\n"
        + "  if (tn > 0) {\n"
        + "    Platform.copyMemory(tb, to, ks, " + at + " + cn + kn, tn);\n"
        + "  }\n"
        + "  return " + ref + ".applyAsInt(2);\n"
        + "}\n";
  }

  static String copy(String s, String w, String at, String n) {
    return "      Platform.copyMemory(" + s + ".getBaseObject(), " + s + ".getBaseOffset(), " + w + ", " + at + ", " + n
        + ");\n";
  }

  /** Java that writes the words of the name at (b, o), `n` bytes, to w[i] and w[i + 1], as RowCodeMemo.first/last. */
  static String words(String b, String o, String n, int i) {
    return "  {\n"
        + local(b, o, n, "word0", "word1")
        + "    w[" + i + "] = word0;\n"
        + "    w[" + (i + 1) + "] = word1;\n"
        + "  }\n";
  }

  /** The key's expressions over the raw names (KeyBinding), or null: the generated code computes the key. */
  private Expression[] boundKey() {
    return KeyBinding.bind(Arrays.copyOfRange(args, 0, 3), Arrays.copyOfRange(args, 3, 6));
  }

  /**
   * Java that computes a missed row's decision key (the last three arguments) and writes it into the memo's key
   * scratch as RowCodeMemo.fillKey does: lengths and bytes, so that no string object is handed to the memo.
   */
  private String missed(CodegenContext ctx, String ref) {
    ExprCode[] e = new ExprCode[3];
    String[] n = new String[3];
    StringBuilder code = new StringBuilder();
    for (int i = 0; i < 3; i++) {
      e[i] = args[3 + i].genCode(ctx);
      code.append(e[i].code()).append("\n");
      n[i] = ctx.freshName("keyn");
    }
    boolean index = args[3].dataType().equals(DataTypes.IntegerType);
    String ks = ctx.freshName("keyScratch");
    String at = "Platform.LONG_ARRAY_OFFSET + " + RowCodeMemo.KEY_WORDS * 8;
    code.append("    int ").append(n[0]).append(" = ")
        .append(index ? "0" : e[0].isNull() + " ? 0 : " + e[0].value() + ".numBytes()").append(";\n");
    for (int i = 1; i < 3; i++) {
      code.append("    int ").append(n[i]).append(" = ").append(e[i].isNull()).append(" ? 0 : ")
          .append(e[i].value()).append(".numBytes();\n");
    }
    code.append("    long[] ").append(ks).append(" = (long[]) ((java.util.function.IntFunction) ").append(ref)
        .append(").apply(").append(n[0]).append(" + ").append(n[1]).append(" + ").append(n[2]).append(");\n");
    for (int i = 0; i < 3; i++) {
      String v = i == 0 && index ? "(long) " + e[0].value() : "(long) " + n[i];
      code.append("    ").append(ks).append("[").append(i).append("] = ").append(e[i].isNull()).append(" ? ")
          .append(RowCodeMemo.NULL_KEY).append("L : ").append(v).append(";\n");
    }
    String off = at;
    for (int i = index ? 1 : 0; i < 3; i++) {
      code.append("    if (!").append(e[i].isNull()).append(") {\n")
          .append(copy(e[i].value().toString(), ks, off, n[i]))
          .append("    }\n");
      off = off + " + " + n[i];
    }
    return code.toString();
  }

  @Override
  public DataType dataType() {
    return DataTypes.IntegerType;
  }

  @Override
  public String prettyName() {
    return "rpl_sql__jrc";
  }

  @Override
  protected SpecExpression with(Expression[] a) {
    return new RowCode(spec, a);
  }
}
