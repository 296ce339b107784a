package rpl_sql.jvm;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.math.BigDecimal;
import org.apache.spark.sql.catalyst.expressions.And;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.EqualNullSafe;
import org.apache.spark.sql.catalyst.expressions.EqualTo;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GreaterThan;
import org.apache.spark.sql.catalyst.expressions.GreaterThanOrEqual;
import org.apache.spark.sql.catalyst.expressions.In;
import org.apache.spark.sql.catalyst.expressions.InSet;
import org.apache.spark.sql.catalyst.expressions.IsNotNull;
import org.apache.spark.sql.catalyst.expressions.IsNull;
import org.apache.spark.sql.catalyst.expressions.LessThan;
import org.apache.spark.sql.catalyst.expressions.LessThanOrEqual;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.Or;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;

/**
 * Data skipping by a file's Delta statistics (numRecords, minValues, maxValues, nullCount): whether a file may
 * hold a row a filter keeps. Conservative: anything it does not understand may match. Bounds are used for
 * integer and decimal columns only, whose statistics are exact; strings (whose bounds writers may truncate)
 * and times (kept in milliseconds) are left to Parquet's row-group statistics.
 */
final class FileStats {
  private static final ObjectMapper JSON = new ObjectMapper();

  private final JsonNode min;
  private final JsonNode max;
  private final JsonNode nulls;
  private final long rows;

  private FileStats(JsonNode stats) {
    this.min = stats.path("minValues");
    this.max = stats.path("maxValues");
    this.nulls = stats.path("nullCount");
    this.rows = stats.has("numRecords") ? stats.get("numRecords").asLong() : -1;
  }

  /** Whether the file whose statistics are `stats` (JSON, or null) may hold a row `filter` keeps. */
  static boolean mayMatch(String stats, Expression filter) {
    if (stats == null) return true;
    try {
      return new FileStats(JSON.readTree(stats)).may(filter);
    } catch (Exception e) {
      return true;
    }
  }

  private boolean may(Expression e) {
    if (e instanceof And) return may(((And) e).left()) && may(((And) e).right());
    if (e instanceof Or) return may(((Or) e).left()) || may(((Or) e).right());
    if (e instanceof IsNull) {
      JsonNode n = column(nulls, ((IsNull) e).child());
      return n == null || n.asLong() > 0;
    }
    if (e instanceof IsNotNull) {
      JsonNode n = column(nulls, ((IsNotNull) e).child());
      return n == null || rows < 0 || n.asLong() < rows;
    }
    if (e instanceof In) {
      In in = (In) e;
      for (Expression v : scala.jdk.javaapi.CollectionConverters.asJava(in.list())) {
        if (!(v instanceof Literal) || compare(in.value(), (Literal) v, 0)) return true;
      }
      return false;
    }
    if (e instanceof InSet) {
      InSet in = (InSet) e;
      for (Object v : scala.jdk.javaapi.CollectionConverters.asJava(in.hset())) {
        if (v == null || compare(in.child(), Literal.create(v, in.child().dataType()), 0)) return true;
      }
      return false;
    }
    int op;
    Expression l, r;
    if (e instanceof EqualTo) { op = 0; l = ((EqualTo) e).left(); r = ((EqualTo) e).right(); }
    else if (e instanceof EqualNullSafe) { op = 0; l = ((EqualNullSafe) e).left(); r = ((EqualNullSafe) e).right(); }
    else if (e instanceof LessThan) { op = -2; l = ((LessThan) e).left(); r = ((LessThan) e).right(); }
    else if (e instanceof LessThanOrEqual) { op = -1; l = ((LessThanOrEqual) e).left(); r = ((LessThanOrEqual) e).right(); }
    else if (e instanceof GreaterThan) { op = 2; l = ((GreaterThan) e).left(); r = ((GreaterThan) e).right(); }
    else if (e instanceof GreaterThanOrEqual) { op = 1; l = ((GreaterThanOrEqual) e).left(); r = ((GreaterThanOrEqual) e).right(); }
    else return true;
    if (r instanceof Literal) return compare(l, (Literal) r, op);
    if (l instanceof Literal) return compare(r, (Literal) l, -op); // v op a  ==  a (-op) v
    return true;
  }

  /** Whether some value in [min, max] of column `a` stands in relation `op` to `lit` (0 =, -2 <, -1 <=, 2 >, 1 >=). */
  private boolean compare(Expression a, Literal lit, int op) {
    if (!(a instanceof Attribute) || lit.value() == null) return true;
    BigDecimal v = number(lit.value(), lit.dataType());
    JsonNode lo = column(min, a), hi = column(max, a);
    if (v == null || lo == null || hi == null || !lo.isNumber() || !hi.isNumber() || !exact(a.dataType())) return true;
    BigDecimal mn = lo.decimalValue(), mx = hi.decimalValue();
    switch (op) {
      case 0: return mn.compareTo(v) <= 0 && mx.compareTo(v) >= 0;
      case -2: return mn.compareTo(v) < 0;
      case -1: return mn.compareTo(v) <= 0;
      case 2: return mx.compareTo(v) > 0;
      case 1: return mx.compareTo(v) >= 0;
      default: return true;
    }
  }

  private static boolean exact(DataType t) {
    return t instanceof LongType || t instanceof IntegerType || t instanceof ShortType || t instanceof ByteType
        || t instanceof DecimalType;
  }

  private static BigDecimal number(Object v, DataType t) {
    if (v instanceof Decimal) return ((Decimal) v).toJavaBigDecimal();
    if (v instanceof Long || v instanceof Integer || v instanceof Short || v instanceof Byte)
      return BigDecimal.valueOf(((Number) v).longValue());
    return null;
  }

  private static JsonNode column(JsonNode values, Expression a) {
    if (!(a instanceof Attribute) || values == null || !values.isObject()) return null;
    String name = ((Attribute) a).name();
    JsonNode n = values.get(name);
    if (n != null) return n;
    for (java.util.Iterator<String> it = values.fieldNames(); it.hasNext(); ) {
      String k = it.next();
      if (k.equalsIgnoreCase(name)) return values.get(k);
    }
    return null;
  }
}
