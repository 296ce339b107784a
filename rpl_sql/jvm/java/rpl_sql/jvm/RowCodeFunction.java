package rpl_sql.jvm;

import java.io.Serializable;
import org.apache.spark.sql.catalyst.expressions.Expression;
import scala.collection.immutable.Seq;
import scala.runtime.AbstractFunction1;

/** The function registry's builder of rpl_sql__jrc (RowCode) for one spec. */
public final class RowCodeFunction extends AbstractFunction1<Seq<Expression>, Expression> implements Serializable {
  private static final long serialVersionUID = 1L;
  private final String spec;

  public RowCodeFunction(String spec) {
    this.spec = spec;
    TableRules.of(spec);  // a bad spec fails at registration, not in a task
  }

  @Override
  public Expression apply(Seq<Expression> args) {
    if (args.size() != 6) {
      throw new IllegalArgumentException(
          "rpl_sql__jrc takes (channel, db, table, channel key, folded db, folded table), got " + args.size());
    }
    Expression[] a = new Expression[6];
    for (int i = 0; i < 6; i++) {
      a[i] = args.apply(i);
    }
    return new RowCode(spec, a);
  }
}
