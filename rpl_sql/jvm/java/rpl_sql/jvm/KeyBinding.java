package rpl_sql.jvm;

import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.catalyst.expressions.BoundReference;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.types.DataTypes;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A decision key's expressions (the channel's index or canonical name, folded names, as the compiled SQL
 * computes them) rebound to the raw names they are computed from, so that a memo can evaluate them itself on
 * a miss: the generated code then never computes a key, and no string of Spark's leaves it.
 */
final class KeyBinding {
  private KeyBinding() {
  }

  /**
   * Each of `key` over the raw names `raw` as BoundReferences 0, 1, ..., or null where one reads anything else
   * (an optimiser rewrite can, e.g. lower(upper(x)) to lower(x)): the caller then computes the key itself.
   */
  static Expression[] bind(Expression[] raw, Expression[] key) {
    Expression[] marks = new Expression[raw.length];  // no input has a millionth column
    Expression[] refs = new Expression[raw.length];
    for (int i = 0; i < raw.length; i++) {
      marks[i] = new BoundReference((1 << 20) + i, DataTypes.StringType, true);
      refs[i] = new BoundReference(i, DataTypes.StringType, true);
    }
    Expression[] out = new Expression[key.length];
    for (int i = 0; i < key.length; i++) {
      Expression marked = replace(key[i], raw, marks);
      if (!overNames(marked, marks)) {
        return null;
      }
      out[i] = replace(marked, marks, refs);
    }
    return out;
  }

  /** `e` with each subtree semantically equal to from[i] replaced by to[i]. */
  static Expression replace(Expression e, Expression[] from, Expression[] to) {
    for (int i = 0; i < to.length; i++) {
      if (e.semanticEquals(from[i])) {
        return to[i];
      }
    }
    List<Expression> ch = CollectionConverters.asJava(e.children());
    if (ch.isEmpty()) {
      return e;
    }
    List<Expression> out = new ArrayList<>();
    for (Expression x : ch) {
      out.add(replace(x, from, to));
    }
    return e.withNewChildren(CollectionConverters.asScala(out).toList());
  }

  /** True where `e` is deterministic and its leaves are literals and `marks`. */
  private static boolean overNames(Expression e, Expression[] marks) {
    for (Expression m : marks) {
      if (e.semanticEquals(m)) {
        return true;
      }
    }
    List<Expression> ch = CollectionConverters.asJava(e.children());
    if (ch.isEmpty()) {
      return e instanceof Literal;
    }
    if (!e.deterministic()) {
      return false;
    }
    for (Expression x : ch) {
      if (!overNames(x, marks)) {
        return false;
      }
    }
    return true;
  }
}
