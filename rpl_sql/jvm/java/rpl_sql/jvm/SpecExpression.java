package rpl_sql.jvm;

import java.io.Serializable;
import java.util.Arrays;
import org.apache.spark.sql.catalyst.expressions.Expression;
import scala.collection.immutable.IndexedSeq;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A Catalyst expression that decides by a rules spec (TableRules) over its arguments: the tree plumbing
 * RowCode, RewriteDb and StatementCode share (children, copies, equality by spec and arguments). Nullable.
 */
public abstract class SpecExpression extends Expression implements Serializable {
  private static final long serialVersionUID = 1L;
  protected final String spec;
  protected final Expression[] args;

  protected SpecExpression(String spec, Expression[] args) {
    this.spec = spec;
    this.args = args.clone();
  }

  @SafeVarargs
  static <T> Seq<T> seq(T... xs) {
    return CollectionConverters.asScala(Arrays.asList(xs)).toList();
  }

  /** This expression over other arguments. */
  protected abstract SpecExpression with(Expression[] args);

  @Override
  public final Seq<Expression> children() {
    return seq(args);
  }

  @Override
  public final Expression withNewChildrenInternal(IndexedSeq<Expression> ch) {
    Expression[] a = new Expression[ch.size()];
    for (int i = 0; i < a.length; i++) {
      a[i] = ch.apply(i);
    }
    return with(a);
  }

  @Override
  public final boolean nullable() {
    return true;
  }

  @Override
  public final int productArity() {
    return 2;
  }

  @Override
  public final Object productElement(int n) {
    switch (n) {
      case 0: return spec;
      case 1: return children();
      default: throw new IndexOutOfBoundsException(String.valueOf(n));
    }
  }

  @Override
  public final boolean canEqual(Object o) {
    return o != null && o.getClass() == getClass();
  }

  @Override
  public final boolean equals(Object o) {
    return canEqual(o) && spec.equals(((SpecExpression) o).spec) && Arrays.equals(args, ((SpecExpression) o).args);
  }

  @Override
  public final int hashCode() {
    return (31 * spec.hashCode() + Arrays.hashCode(args)) * 31 + getClass().getName().hashCode();
  }
}
