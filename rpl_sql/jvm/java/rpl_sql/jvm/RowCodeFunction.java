package rpl_sql.jvm;

import java.io.Serializable;
import org.apache.spark.sql.catalyst.expressions.Expression;
import scala.collection.immutable.Seq;
import scala.runtime.AbstractFunction1;

/**
 * The function registry's builder of one of the JVM's filter expressions for one spec, by kind: "row"
 * (rpl_sql__jrc, RowCode), "rewrite" (rpl_sql__jrw, RewriteDb), "statement" (rpl_sql__jsc, StatementCode).
 */
public final class RowCodeFunction extends AbstractFunction1<Seq<Expression>, Expression> implements Serializable {
  private static final long serialVersionUID = 1L;
  /** The kinds, in the order rpl_sql__jinstall takes their names. */
  static final String[] KINDS = {"row", "rewrite", "statement"};
  private final String spec;
  private final String kind;

  public RowCodeFunction(String spec, String kind) {
    if (!java.util.Arrays.asList(KINDS).contains(kind)) {
      throw new IllegalArgumentException("unknown kind " + kind + ": row, rewrite or statement");
    }
    this.spec = spec;
    this.kind = kind;
    TableRules.of(spec);  // a bad spec fails at registration, not in a task
  }

  @Override
  public Expression apply(Seq<Expression> args) {
    switch (kind) {
      case "row":
        return new RowCode(spec, take(args, 6, "channel, db, table, channel key, folded db, folded table"));
      case "rewrite":
        return new RewriteDb(spec, take(args, 4, "channel, db, channel key, folded db"));
      default:
        return new StatementCode(spec, take(args, 7, "channel, command, default db, tables, channel key, "
            + "upper-cased command, folded default db"));
    }
  }

  private static Expression[] take(Seq<Expression> args, int n, String what) {
    if (args.size() != n) {
      throw new IllegalArgumentException("takes (" + what + "), got " + args.size() + " arguments");
    }
    Expression[] a = new Expression[n];
    for (int i = 0; i < n; i++) {
      a[i] = args.apply(i);
    }
    return a;
  }
}
